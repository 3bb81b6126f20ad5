// A program for `shoal launch` tests and the W4 benchmark. Modes:
//   barrier            Init, one barrier, exit 0 (the W4 workload)
//   env                print RANK LOCAL_RANK WORLD_SIZE ... one per line,
//   prefixed keys               every rank sets key rank/<r>, barrier, reads
//   all, checks fail RANK CODE     that rank writes two stderr lines and exits
//   CODE (others sleep) fail-once RANK CODE fails like `fail` only on the first
//   run (restart count 0) sleep SECONDS      sleep (for kill tests), printing
//   its pid first crash RANK         that rank dies of SIGSEGV; the others
//   sleep
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "launch/job.h"

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "barrier";
  if (mode == "env") {
    for (const char* name :
         {"RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK",
          "MASTER_ADDR", "MASTER_PORT", "SHOAL_STORE_ENDPOINT",
          "SHOAL_KV_ENDPOINT", "SHOAL_RESTART_COUNT", "SHOAL_JOB_ID",
          "SHOAL_NNODES", "OMP_NUM_THREADS", "CUDA_VISIBLE_DEVICES"}) {
      const char* v = std::getenv(name);
      std::printf("env %s=%s\n", name, v ? v : "<unset>");
    }
    return 0;
  }
  if (mode == "sleep") {
    double s = argc > 2 ? std::atof(argv[2]) : 60;
    std::printf("pid %d\n", getpid());
    std::fflush(stdout);
    absl::SleepFor(absl::Seconds(s));
    return 0;
  }
  auto job = shoal::launch::Init();
  if (!job.ok()) {
    std::fprintf(stderr, "init: %s\n", job.status().ToString().c_str());
    return 3;
  }
  shoal::launch::Job& j = **job;
  if (mode == "barrier") {
    absl::Status s = j.Barrier(absl::Seconds(30));
    if (!s.ok()) {
      std::fprintf(stderr, "barrier: %s\n", s.ToString().c_str());
      return 4;
    }
    return 0;
  }
  if (mode == "keys") {
    if (!j.kv()
             .Set(absl::StrCat("rank/", j.rank()),
                  absl::StrCat("hello from ", j.rank()))
             .ok())
      return 5;
    if (!j.Barrier(absl::Seconds(30)).ok()) return 6;
    for (int r = 0; r < j.world_size(); ++r) {
      auto v = j.kv().Get(absl::StrCat("rank/", r));
      if (!v.ok() || *v != absl::StrCat("hello from ", r)) {
        std::fprintf(stderr, "rank %d: key of rank %d wrong\n", j.rank(), r);
        return 7;
      }
    }
    auto n = j.kv().Add("counter", 1);
    if (!n.ok() || !j.Barrier(absl::Seconds(30)).ok()) return 8;
    auto total = j.kv().Get("counter");
    if (!total.ok() || *total != absl::StrCat(j.world_size())) return 9;
    std::printf("rank %d of %d ok\n", j.rank(), j.world_size());
    return 0;
  }
  if (mode == "crash" && argc > 2) {
    int rank = 0;
    (void)absl::SimpleAtoi(argv[2], &rank);
    if (j.rank() == rank) {
      std::fprintf(stderr, "rank %d: about to crash\n", j.rank());
      std::fflush(stderr);
      raise(SIGSEGV);
    }
    absl::SleepFor(absl::Seconds(60));
    return 0;
  }
  if ((mode == "fail" || mode == "fail-once") && argc > 3) {
    int rank = 0, code = 1;
    (void)absl::SimpleAtoi(argv[2], &rank);
    (void)absl::SimpleAtoi(argv[3], &code);
    const bool fail_now = mode == "fail" || j.restart_count() == 0;
    std::printf("rank %d running (restart %d)\n", j.rank(), j.restart_count());
    std::fflush(stdout);
    // Every rank has printed before one fails, so a test can look for each
    // rank's line however the ranks are scheduled.
    if (!j.Barrier(absl::Seconds(30)).ok()) return 6;
    if (j.rank() == rank && fail_now) {
      std::fprintf(stderr, "rank %d: something went wrong\n", j.rank());
      std::fprintf(stderr, "rank %d: giving up with %d\n", j.rank(), code);
      return code;
    }
    if (fail_now) absl::SleepFor(absl::Seconds(60));  // stopped by the launcher
    return 0;
  }
  std::fprintf(stderr, "unknown mode %s\n", mode.c_str());
  return 2;
}
