// `shoal bench <workload>`: dispatch to the benchmark harnesses.
#include <cstdio>
#include <cstring>

#include "tools/commands.h"

namespace shoal::bench {
int StoreBench(int argc, char** argv);
int StoreBenchRole(int argc, char** argv);
int TasksBench(int argc, char** argv);
int LaunchBench(int argc, char** argv);
int LaunchProbe();
int CollectiveBench(int argc, char** argv);
int PythonBench(int argc, char** argv);
int TorchBench(int argc, char** argv);
}  // namespace shoal::bench

namespace shoal::cli {

int BenchCommand(int argc, char** argv) {
  const char* usage =
      "usage: shoal bench <workload> [flags]\n\n"
      "  store      W1: put/get of a float32 tensor across processes\n"
      "  tasks      W2: no-op task throughput and latency, 1 client, 2 "
      "workers\n"
      "  collective W3: all_reduce (and the other collectives) in the style of "
      "nccl-tests,\n"
      "             beside Open MPI and gloo\n"
      "  launch     W4: launch N processes that init, pass a barrier, exit\n"
      "  python     the Python client: tasks beside multiprocessing.Pool, "
      "put/get\n"
      "             beside multiprocessing.shared_memory\n"
      "  torch      torch.distributed: all_reduce and a DDP step with backend "
      "\"shoal\"\n"
      "             beside \"gloo\"\n"
      "  dataloader shoal.data.DataLoader beside torch's DataLoader\n";
  if (argc < 2 || std::strcmp(argv[1], "--help") == 0) {
    std::fputs(usage, argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  if (std::strcmp(argv[1], "store") == 0)
    return bench::StoreBench(argc - 1, argv + 1);
  if (std::strcmp(argv[1], "store-role") == 0)
    return bench::StoreBenchRole(argc - 1, argv + 1);
  if (std::strcmp(argv[1], "tasks") == 0)
    return bench::TasksBench(argc - 1, argv + 1);
  if (std::strcmp(argv[1], "collective") == 0)
    return bench::CollectiveBench(argc - 1, argv + 1);
  if (std::strcmp(argv[1], "launch") == 0)
    return bench::LaunchBench(argc - 1, argv + 1);
  if (std::strcmp(argv[1], "launch-probe") == 0) return bench::LaunchProbe();
  if (std::strcmp(argv[1], "python") == 0)
    return bench::PythonBench(argc - 1, argv + 1);
  if (std::strcmp(argv[1], "torch") == 0)
    return bench::TorchBench(argc - 1, argv + 1);
  // python -m shoal_bench dataloader [flags]
  if (std::strcmp(argv[1], "dataloader") == 0)
    return bench::PythonBench(argc, argv);
  std::fprintf(stderr, "shoal bench: unknown workload '%s'\n\n%s", argv[1],
               usage);
  return 2;
}

}  // namespace shoal::cli
