// `shoal`: the command-line entry point. Dispatches to a subcommand.
#include <cstdio>
#include <cstring>

#include "tools/commands.h"
#include "tools/version.h"

namespace {

struct Command {
  const char* name;
  int (*run)(int, char**);
  const char* summary;
};

constexpr Command kCommands[] = {
    {"info", shoal::cli::InfoCommand,
     "what this build and machine offer (CUDA, NCCL, GPUs, /dev/shm)"},
    {"launch", shoal::cli::LaunchCommand,
     "run an SPMD job (like torchrun / mpirun)"},
    {"start", shoal::cli::StartCommand,
     "start a node: store, workers, coordinator"},
    {"submit", shoal::cli::SubmitCommand,
     "run a task on a node and print its outputs"},
    {"status", shoal::cli::StatusCommand,
     "show a node's workers, tasks and store"},
    {"stop", shoal::cli::StopCommand, "stop a node"},
    {"timeline", shoal::cli::TimelineCommand,
     "a node's or job's last seconds as a trace (Perfetto)"},
    {"top", shoal::cli::TopCommand,
     "a live view of a node's workers, tasks and store"},
    {"dashboard", shoal::cli::DashboardCommand,
     "a page of a node's workers, task stream and store (browser)"},
    {"store", shoal::cli::StoreCommand,
     "run a node's shared-memory tensor store in the foreground"},
    {"bench", shoal::cli::BenchCommand, "benchmarks: `shoal bench store` (W1)"},
};

void Usage(FILE* out) {
  std::fprintf(out,
               "usage: shoal <command> [flags]   (shoal <command> --help)\n"
               "       shoal --version\n\n");
  for (const Command& c : kCommands)
    std::fprintf(out, "  %-10s %s\n", c.name, c.summary);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    Usage(stderr);
    return 2;
  }
  if (std::strcmp(argv[1], "--help") == 0 ||
      std::strcmp(argv[1], "help") == 0 || std::strcmp(argv[1], "-h") == 0) {
    Usage(stdout);
    return 0;
  }
  if (std::strcmp(argv[1], "--version") == 0 ||
      std::strcmp(argv[1], "version") == 0) {
    std::printf("shoal %s\n", shoal::cli::kVersion);
    return 0;
  }
  for (const Command& c : kCommands) {
    if (std::strcmp(argv[1], c.name) == 0) return c.run(argc - 1, argv + 1);
  }
  // Not listed: exec'd by the coordinator only.
  if (std::strcmp(argv[1], "worker") == 0)
    return shoal::cli::WorkerCommand(argc - 1, argv + 1);
  std::fprintf(stderr, "shoal: unknown command '%s'\n\n", argv[1]);
  Usage(stderr);
  return 2;
}
