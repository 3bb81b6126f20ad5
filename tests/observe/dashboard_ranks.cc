// A launched job for the dashboard's browser test: every rank all_reduces
// 1024 floats each 100 ms until the file named by argv[1] exists (or a
// minute passes), so that its ranks and collectives show while it runs.
#include <unistd.h>

#include <cstdio>
#include <vector>

#include "absl/time/clock.h"
#include "collectives/communicator.h"
#include "launch/job.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: dashboard_ranks STOP_FILE\n");
    return 2;
  }
  auto job = shoal::launch::Init();
  if (!job.ok()) {
    std::fprintf(stderr, "init: %s\n", job.status().ToString().c_str());
    return 3;
  }
  auto comm = shoal::collectives::Communicator::Create(**job);
  if (!comm.ok()) {
    std::fprintf(stderr, "communicator: %s\n",
                 comm.status().ToString().c_str());
    return 4;
  }
  std::vector<float> x(1024, 1.0f);
  const absl::Time end = absl::Now() + absl::Minutes(1);
  // Every rank decides to stop at the same call: rank 0 sees the file and
  // tells the others through the reduction's last element.
  for (;;) {
    x.back() = ((*comm)->rank() == 0 && access(argv[1], F_OK) == 0) ||
                       absl::Now() > end
                   ? 1.0f
                   : 0.0f;
    absl::Status s = (*comm)->AllReduce(
        x.data(), x.data(), static_cast<int64_t>(x.size()), shoal::DType::kF32,
        shoal::collectives::ReduceOp::kMax);
    if (!s.ok()) {
      std::fprintf(stderr, "all_reduce: %s\n", s.ToString().c_str());
      return 5;
    }
    if (x.back() != 0.0f) break;
    absl::SleepFor(absl::Milliseconds(100));
  }
  std::printf("rank %d done\n", (*comm)->rank());
  return 0;
}
