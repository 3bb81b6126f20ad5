// The `shoal` subcommands. Each takes the arguments after its name (argv[0] is
// the subcommand's own name) and returns the process exit code.
#ifndef SHOAL_TOOLS_COMMANDS_H_
#define SHOAL_TOOLS_COMMANDS_H_

namespace shoal::cli {

int InfoCommand(int argc, char** argv);
int LaunchCommand(int argc, char** argv);
int StartCommand(int argc, char** argv);
int StatusCommand(int argc, char** argv);
int StopCommand(int argc, char** argv);
int TopCommand(int argc, char** argv);
int SubmitCommand(int argc, char** argv);
int WorkerCommand(int argc, char** argv);
int StoreCommand(int argc, char** argv);
int BenchCommand(int argc, char** argv);

}  // namespace shoal::cli

#endif  // SHOAL_TOOLS_COMMANDS_H_
