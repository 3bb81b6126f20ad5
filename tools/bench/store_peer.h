// The W1 peer: Python's multiprocessing.shared_memory with numpy, measured by
// a small script this binary runs with Debian's python3, in the same run and
// on the same sizes as shoal's store.
#ifndef SHOAL_TOOLS_BENCH_STORE_PEER_H_
#define SHOAL_TOOLS_BENCH_STORE_PEER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace shoal::bench {

struct PeerRow {
  uint64_t size = 0;
  double put_gbps = 0;  // SharedMemory(create) + copy into it
  double attach_us =
      0;  // SharedMemory(name) + np.ndarray view, in another process
  double read_gbps = 0;  // summing the view in that process
  int wrong = 0;
};

// Runs the peer. Errors: FailedPrecondition when python3 with numpy is absent.
absl::StatusOr<std::vector<PeerRow>> RunSharedMemoryPeer(
    const std::vector<uint64_t>& sizes, int warmup, int iters);

std::string PeerTable(const std::vector<PeerRow>& rows);
std::string PeerJson(const PeerRow& row);

}  // namespace shoal::bench

#endif  // SHOAL_TOOLS_BENCH_STORE_PEER_H_
