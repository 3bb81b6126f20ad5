// Test support for the in-process ShmCommunicator tests: ranks as threads of
// the test process meeting through one InMemoryRendezvous, and the test data
// with the reference results every rank checks against.
//
// Why threads are enough: a ShmCommunicator touches its peers only through
// the shared segment (each rank maps it itself, as a process would) and the
// rendezvous, so threads run exactly the production code path. What threads
// cannot show — a peer process dying — stays in tests/collectives.
#ifndef SHOAL_COLLECTIVES_SHM_SHM_TEST_SUPPORT_H_
#define SHOAL_COLLECTIVES_SHM_SHM_TEST_SUPPORT_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "collectives/reduce_op.h"
#include "collectives/reference_data.h"
#include "collectives/shm/shm_communicator.h"
#include "ipc/tensor_meta.h"

namespace shoal::collectives::testing {

// Small slots, so that a few thousand elements cross every chunking path:
// 4 KiB slots and point-to-point buffers, one step up to 1 KiB, streaming
// stores from 6 KiB; a 30 s timeout, so a broken test fails rather than hangs.
ShmCommOptions SmallSlots();

// Creates a communicator of `world` ranks, one thread each, and runs
// `body(comm)` on every rank's thread; returns when all are done, with every
// rank's Create status (rank order). Each call uses a fresh communicator name.
// `skip_create` (optional): ranks that do not call Create (they run nothing),
// to test a rank that never arrives.
std::vector<absl::Status> RunRanks(
    int world, const ShmCommOptions& options,
    const std::function<void(ShmCommunicator&)>& body,
    const std::vector<int>& skip_create = {});

// Element counts that cross every path with SmallSlots for an element size:
// empty, tiny, either side of the one-step threshold, a whole slot, and
// several chunks.
std::vector<int64_t> Counts(DType dtype);

// "" if out[0, count) matches Expected(dtype, op, world, i + shift);
// otherwise a description of the first mismatch.
std::string CheckReduced(DType dtype, ReduceOp op, int world,
                         const std::vector<uint8_t>& out, int64_t count,
                         int64_t shift = 0);

}  // namespace shoal::collectives::testing

#endif  // SHOAL_COLLECTIVES_SHM_SHM_TEST_SUPPORT_H_
