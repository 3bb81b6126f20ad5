// Failures of collectives across nodes, under `shoal launch --nnodes 2`.
// Modes:
//   kill-rank R [OP]  rank R SIGKILLs itself; the others' OP (all_reduce,
//                 or broadcast, all_gather, reduce_scatter, all_to_all) must
//                 fail (Unavailable) well within their 30 s timeout, and say
//                 why
//   loop          every rank all_reduces in a loop, printing "looping" once;
//                 the test kills a whole node; the survivors print how their
//                 all_reduce failed
//   backend       prints which host backend a 1 MiB all_reduce took and its
//                 result's check (the automatic choice across nodes)
// Each rank prints "rank R: <mode> after <ms> ms: <status>".
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "collectives/communicator.h"
#include "launch/job.h"

namespace {

using shoal::DType;
using shoal::collectives::ReduceOp;

void Report(int rank, const std::string& mode, absl::Time t0,
            const absl::Status& s) {
  std::printf(
      "rank %d: %s after %lld ms: %s\n", rank, mode.c_str(),
      static_cast<long long>(absl::ToInt64Milliseconds(absl::Now() - t0)),
      s.ToString().c_str());
  std::fflush(stdout);
}

// One call of `op` on `x` (and a scratch buffer for the gathers); an
// unknown op is InvalidArgument.
absl::Status RunOp(shoal::collectives::Communicator& c, const std::string& op,
                   std::vector<float>& x, std::vector<float>& all) {
  const int64_t n = static_cast<int64_t>(x.size());
  const int64_t per = n / c.size();
  if (op == "all_reduce") {
    return c.AllReduce(x.data(), x.data(), n, DType::kF32, ReduceOp::kSum);
  }
  if (op == "broadcast") {
    return c.Broadcast(x.data(), x.data(), n, DType::kF32, 0);
  }
  if (op == "all_gather") {
    return c.AllGather(x.data(), all.data(), n, DType::kF32);
  }
  if (op == "reduce_scatter") {
    return c.ReduceScatter(x.data(), all.data(), per, DType::kF32,
                           ReduceOp::kSum);
  }
  if (op == "all_to_all") {
    return c.AllToAll(x.data(), all.data(), per, DType::kF32);
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown op '", op, "'"));
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  // Outlive the launcher's stop, to report how the collective failed.
  signal(SIGTERM, SIG_IGN);
  auto job = shoal::launch::Init();
  if (!job.ok()) {
    std::fprintf(stderr, "init: %s\n", job.status().ToString().c_str());
    return 3;
  }
  shoal::collectives::CommunicatorOptions o;
  o.timeout = absl::Seconds(30);
  auto comm = shoal::collectives::Communicator::Create(**job, o);
  if (!comm.ok()) {
    std::fprintf(stderr, "communicator: %s\n",
                 comm.status().ToString().c_str());
    return 4;
  }
  shoal::collectives::Communicator& c = **comm;
  const int rank = c.rank();
  // 4 MiB: above the hierarchical backend's small-message bound (1 MiB on
  // 2 nodes), so an all_reduce takes every step (shm and gloo columns).
  std::vector<float> x(1 << 20, 1.0f);
  if (mode == "kill-rank") {
    int victim = 0;
    if (argc < 3 || !absl::SimpleAtoi(argv[2], &victim)) return 2;
    absl::Status s = c.Barrier();
    if (!s.ok()) {
      // The victim dies as it leaves the barrier: a rank still inside it
      // (its node's watcher sees the death) fails there, which is as good.
      Report(rank, "kill-rank", absl::Now(), s);
      return 0;
    }
    const std::string op = argc > 3 ? argv[3] : "all_reduce";
    std::vector<float> all(x.size() * c.size());
    if (rank == victim) raise(SIGKILL);
    const absl::Time t0 = absl::Now();
    // Large enough for every step (shm and gloo) to need the victim.
    for (int i = 0; i < 50 && s.ok(); ++i) s = RunOp(c, op, x, all);
    Report(rank, "kill-rank", t0, s);
    return 0;
  }
  if (mode == "loop") {
    absl::Status s;
    absl::Time t0 = absl::Now();
    for (int i = 0; s.ok(); ++i) {
      t0 = absl::Now();
      s = c.AllReduce(x.data(), x.data(), x.size(), DType::kF32,
                      ReduceOp::kMax);
      if (i == 2) {
        std::printf("rank %d looping\n", rank);
        std::fflush(stdout);
      }
    }
    Report(rank, "loop", t0, s);
    return 0;
  }
  if (mode == "backend") {
    const absl::Time t0 = absl::Now();
    std::vector<float> y(x.size());
    absl::Status s =
        c.AllReduce(x.data(), y.data(), x.size(), DType::kF32, ReduceOp::kSum);
    const bool right = s.ok() && y[0] == c.size() && y.back() == c.size();
    Report(rank, right ? "backend ok" : "backend WRONG", t0, s);
    return right ? 0 : 1;
  }
  std::fprintf(stderr, "unknown mode '%s'\n", mode.c_str());
  return 2;
}
