#include "collectives/shm/shm_test_support.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <memory>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "collectives/reduce/reduce_kernels.h"
#include "collectives/rendezvous/in_memory_rendezvous.h"

namespace shoal::collectives::testing {

ShmCommOptions SmallSlots() {
  ShmCommOptions o;
  o.slot_bytes = 4096;
  o.p2p_bytes = 4096;
  o.one_step_bytes = 1024;
  o.stream_bytes = 6144;
  o.timeout = absl::Seconds(30);
  return o;
}

std::vector<absl::Status> RunRanks(
    int world, const ShmCommOptions& options,
    const std::function<void(ShmCommunicator&)>& body,
    const std::vector<int>& skip_create) {
  // Segment names include the pid: within one process the name must differ
  // per communicator (a live owner's segment cannot be created twice).
  static std::atomic<int> next{0};
  const std::string name = absl::StrCat("t", next.fetch_add(1));
  InMemoryRendezvous rendezvous;
  std::vector<absl::Status> created(world);
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    if (std::find(skip_create.begin(), skip_create.end(), r) !=
        skip_create.end()) {
      continue;
    }
    threads.emplace_back([&, r] {
      auto comm = ShmCommunicator::Create(rendezvous, "inproc", name, r, world,
                                          options);
      created[r] = comm.status();
      if (comm.ok()) body(**comm);
    });
  }
  for (std::thread& t : threads) t.join();
  return created;
}

std::vector<int64_t> Counts(DType t) {
  const ShmCommOptions o = SmallSlots();
  const int64_t e = static_cast<int64_t>(DTypeSize(t));
  const int64_t one_step = static_cast<int64_t>(o.one_step_bytes) / e;
  const int64_t slot = static_cast<int64_t>(o.slot_bytes) / e;
  return {0, 1, 7, one_step, one_step + 1, slot, slot + 1, 2 * slot + 3};
}

std::string CheckReduced(DType t, ReduceOp op, int world,
                         const std::vector<uint8_t>& out, int64_t count,
                         int64_t shift) {
  for (int64_t i = 0; i < count; ++i) {
    const double got = LoadElement(t, out.data(), i);
    const double want = Expected(t, op, world, i + shift);
    if (got != want) {
      return absl::StrCat("[", i, "] got ", got, " want ", want);
    }
  }
  return "";
}

}  // namespace shoal::collectives::testing
