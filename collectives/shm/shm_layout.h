// The shared-memory collectives' segment (internal to the shm communicator):
//
//   [CollHeader]
//   [RankControl × world]           step counters, doorbells, call descriptors
//   [P2pBox × world²]               send/recv sequence counters per ordered
//   pair [slot × 2 parities × world]     each rank's chunk buffers (slot_bytes
//   each) [p2p buffer × 2 × world²]       (ChunkHeader + p2p_bytes) per pair,
//   double
//
// Who writes what: a rank writes only its own RankControl and its own slots,
// and (as a sender) the `sent` counter and buffers of its outgoing boxes, (as
// a receiver) the `acked` counter of its incoming ones. Everyone reads
// everything. Rank 0 initialises the segment before publishing its name.
#ifndef SHOAL_COLLECTIVES_SHM_SHM_LAYOUT_H_
#define SHOAL_COLLECTIVES_SHM_SHM_LAYOUT_H_

#include <atomic>
#include <cstdint>

#include "shm/futex.h"
#include "shm/layout.h"
#include "shm/segment.h"

namespace shoal::collectives {

inline constexpr uint64_t kCollMagic = 0x4c4c4f434c414f48ULL;  // "HOALCOLL"
// 2: RankControl::code; 3: RankControl::cpu.
inline constexpr uint32_t kCollLayoutVersion = 3;
inline constexpr int kMaxCollRanks = 64;

enum class CallKind : uint32_t {
  kAllReduce = 1,
  kBroadcast,
  kReduce,
  kAllGather,
  kReduceScatter,
  kAllToAll,
  kBarrier,
  kSend,
  kRecv,
};

const char* CallKindName(CallKind k);

// What a rank says it is doing, so that every rank can check the others.
struct CallDesc {
  uint64_t seq;
  uint32_t kind;
  uint32_t dtype;
  int64_t count;
  int32_t root;
  uint32_t op;
};

struct alignas(64) RankControl {
  std::atomic<uint64_t> step;  // sync points passed; on its own cache line
  // The CPU the rank's collective thread ran on when it last arrived at a
  // sync point (written just before `step`, so a waiter reads it with the
  // line it polls anyway).
  std::atomic<int32_t> cpu;
  char pad0[52];
  shm::Doorbell
      bell;  // rung by anyone who advanced something this rank waits on
  std::atomic<uint32_t> aborted;
  int32_t pid;
  uint64_t start_ticks;
  CallDesc desc[2];  // by call parity
  // Why this rank gave up: the absl::StatusCode and message of its failure
  // (both set before `aborted`), which the others pass on.
  uint32_t code;
  char reason[200];
};

struct alignas(64) P2pBox {
  std::atomic<uint64_t> sent;  // chunks written by the sender
  char pad0[56];
  std::atomic<uint64_t> acked;  // chunks consumed by the receiver
  char pad1[56];
};

struct ChunkHeader {
  uint64_t message_bytes;
  uint64_t chunk_bytes;
};

struct CollHeader {
  shm::SegmentPrefix prefix;
  uint32_t world;
  uint32_t reserved;
  uint64_t slot_bytes;
  uint64_t p2p_bytes;
  uint64_t controls_offset;
  uint64_t boxes_offset;
  uint64_t data_offset;
  uint64_t p2p_offset;
};

}  // namespace shoal::collectives

#endif  // SHOAL_COLLECTIVES_SHM_SHM_LAYOUT_H_
