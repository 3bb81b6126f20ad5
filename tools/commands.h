// The `shoal` subcommands. Each takes the arguments after its name (argv[0] is
// the subcommand's own name) and returns the process exit code.
#ifndef SHOAL_TOOLS_COMMANDS_H_
#define SHOAL_TOOLS_COMMANDS_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "tools/cli/args.h"

namespace shoal::cli {

int DashboardCommand(int argc, char** argv);
int InfoCommand(int argc, char** argv);
int LaunchCommand(int argc, char** argv);
int StartCommand(int argc, char** argv);
int StatusCommand(int argc, char** argv);
int StopCommand(int argc, char** argv);
int TimelineCommand(int argc, char** argv);
int TopCommand(int argc, char** argv);
int SubmitCommand(int argc, char** argv);
int WorkerCommand(int argc, char** argv);
int StoreCommand(int argc, char** argv);
int BenchCommand(int argc, char** argv);

// --spill-dir and --spill-bytes of the commands that run a store (`shoal
// store`, `shoal start`): shm::StoreOptions::spill_dir and spill_bytes.
struct SpillFlags {
  std::string& dir;
  std::string& bytes;  // "auto" (the store's default), 0 (off), or a size
};
SpillFlags AddSpillFlags(ArgParser& p);
// The flags' values as StoreOptions takes them. Errors: InvalidArgument (a
// size that does not parse).
absl::Status ReadSpillFlags(const SpillFlags& flags, std::string* dir,
                            uint64_t* bytes);

}  // namespace shoal::cli

#endif  // SHOAL_TOOLS_COMMANDS_H_
