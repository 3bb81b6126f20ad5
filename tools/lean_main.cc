// `shoal_lean launch ...` and `shoal_lean store ...`: the two subcommands of
// `shoal` that tests under asan and tsan need (see //tools:shoal_lean), built
// without the rest of the runtime.
#include <cstdio>
#include <cstring>

#include "tools/commands.h"

int main(int argc, char** argv) {
  if (argc >= 2 && std::strcmp(argv[1], "launch") == 0) {
    return shoal::cli::LaunchCommand(argc - 1, argv + 1);
  }
  if (argc >= 2 && std::strcmp(argv[1], "store") == 0) {
    return shoal::cli::StoreCommand(argc - 1, argv + 1);
  }
  std::fprintf(stderr,
               "usage: %s launch|store [flags] ... (only `shoal launch` and "
               "`shoal store` are built into this binary)\n",
               argc > 0 ? argv[0] : "shoal_lean");
  return 2;
}
