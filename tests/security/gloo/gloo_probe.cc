// A rank of a `shoal launch` job for the gloo attack tests. Modes:
//   flat          a GlooCommunicator of every rank ("probe"), listening on
//                 GlooListenAddress(), meeting through the job's KV store;
//                 with PROBE_DELAY_MS this rank waits that long before it
//                 reads each peer's gloo pair addresses (so its peers'
//                 listeners stay open that long: the window a stranger
//                 races for, made wide)
//   communicator  the job's Communicator (the production path: hierarchical
//                 across nodes, flat gloo beside it)
// Then an all_reduce (sum of rank + 1 over 4096 floats), checked. Prints
// "rank R pid P" at start, then "rank R: <mode> ok after N ms" or
// "rank R: <mode> failed after N ms: <status>", and exits 0 either way (so
// that its launcher does not stop the other node's ranks before they print
// their own outcome); 2 when it cannot run.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "collectives/communicator.h"
#include "collectives/gloo/gloo_communicator.h"
#include "collectives/hierarchical/hierarchical_communicator.h"
#include "collectives/rendezvous/kv_rendezvous.h"
#include "launch/job.h"

namespace {

using shoal::DType;
using shoal::collectives::ReduceOp;

// The job's KV store, reads of gloo's pair addresses delayed.
class DelayedRendezvous : public shoal::collectives::Rendezvous {
 public:
  DelayedRendezvous(shoal::launch::KvClient& kv, absl::Duration delay)
      : inner_(kv), delay_(delay) {}
  absl::Status Set(absl::string_view key, absl::string_view value) override {
    return inner_.Set(key, value);
  }
  absl::StatusOr<std::string> Get(absl::string_view key,
                                  absl::Duration timeout) override {
    constexpr absl::string_view kAddresses = "__shoal/gloo/probe/";
    int rank = -1;
    if (absl::StartsWith(key, kAddresses) &&
        absl::SimpleAtoi(key.substr(kAddresses.size()), &rank)) {
      absl::SleepFor(delay_);
    }
    return inner_.Get(key, timeout);
  }
  absl::Status Delete(absl::string_view key) override {
    return inner_.Delete(key);
  }
  absl::Status Barrier(absl::string_view name, int world,
                       absl::Duration timeout) override {
    return inner_.Barrier(name, world, timeout);
  }

 private:
  shoal::collectives::KvRendezvous inner_;
  const absl::Duration delay_;
};

int Run(const std::string& mode) {
  auto job = shoal::launch::Init();
  if (!job.ok()) {
    std::fprintf(stderr, "init: %s\n", job.status().ToString().c_str());
    return 2;
  }
  const int rank = (*job)->rank(), world = (*job)->world_size();
  std::printf("rank %d pid %d\n", rank, getpid());
  std::fflush(stdout);
  const absl::Time t0 = absl::Now();
  std::vector<float> x(4096, static_cast<float>(rank + 1)), out(4096);
  absl::Status s;
  if (mode == "flat") {
    int64_t delay_ms = 0;
    const char* d = std::getenv("PROBE_DELAY_MS");
    if (d != nullptr) (void)absl::SimpleAtoi(d, &delay_ms);
    DelayedRendezvous rendezvous((*job)->kv(), absl::Milliseconds(delay_ms));
    shoal::collectives::GlooCommOptions o;
    o.hostname = shoal::collectives::GlooListenAddress();
    o.timeout = absl::Seconds(20);
    auto comm = shoal::collectives::GlooCommunicator::Create(
        rendezvous, "probe", rank, world, o);
    s = comm.status();
    if (s.ok()) {
      s = (*comm)->AllReduce(x.data(), out.data(), 4096, DType::kF32,
                             ReduceOp::kSum, absl::Seconds(20));
    }
  } else if (mode == "communicator") {
    shoal::collectives::CommunicatorOptions o;
    o.timeout = absl::Seconds(20);
    auto comm = shoal::collectives::Communicator::Create(**job, o);
    s = comm.status();
    if (s.ok()) {
      s = (*comm)->AllReduce(x.data(), out.data(), 4096, DType::kF32,
                             ReduceOp::kSum);
    }
  } else {
    std::fprintf(stderr, "unknown mode %s\n", mode.c_str());
    return 2;
  }
  const float want = world * (world + 1) / 2.0f;
  if (s.ok() && (out[0] != want || out[4095] != want)) {
    s = absl::InternalError(
        absl::StrCat("wrong sum ", out[0], ", expected ", want));
  }
  const long long ms = absl::ToInt64Milliseconds(absl::Now() - t0);
  if (s.ok()) {
    std::printf("rank %d: %s ok after %lld ms\n", rank, mode.c_str(), ms);
  } else {
    std::printf("rank %d: %s failed after %lld ms: %s\n", rank, mode.c_str(),
                ms, s.ToString().c_str());
  }
  std::fflush(stdout);
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return Run(argc > 1 ? argv[1] : "flat"); }
