// The shared-memory segment's layout: plain structs that live in /dev/shm and
// are mapped by the store service and every client on the node.
//
//   [SegmentHeader, 4 KiB]
//   [ObjectEntry × max_objects]        object table
//   [uint32 × index_buckets]           open-addressed id → entry index
//   [ClientSlot × max_clients]         references each client holds (a
//                                      table that may move into the arena)
//   [arena]                            object data, 64-byte aligned
//
// Who writes what (see docs/architecture.md, "Crash-safe shared memory"):
// - The store service alone allocates, frees, inserts into and removes from the
//   table and index, and changes object states.
// - Clients change only reference counts, LRU stamps, their own ClientSlot,
//   the state of an object they created (kCreated → kSealed) and the creator
//   of a sealed object they created (handed on by Transfer), always under
//   `SegmentHeader::lock` and through the undo Journal, so a client dying
//   mid-update is rolled back by whoever takes the lock next.
// - Clients write object bytes only into objects they created and have not
//   sealed.
#ifndef SHOAL_SHM_LAYOUT_H_
#define SHOAL_SHM_LAYOUT_H_

#include <pthread.h>

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "ipc/object_id.h"
#include "ipc/tensor_meta.h"

namespace shoal::shm {

inline constexpr uint64_t kSegmentMagic = 0x5254534c414f4853ULL;  // "SHOALSTR"
// 2: CudaLocation::device_uuid; 3: spilled objects, mapped references;
// 4: kMaxUndoRecords 40; 5: a client's reference table grows into the arena
// (ClientSlotHeader::refs_offset, refs_buckets); 6: a client's get counts
// (ClientSlotHeader::gets, get_bytes).
inline constexpr uint32_t kLayoutVersion = 6;
inline constexpr size_t kPageSize = 4096;
inline constexpr size_t kDataAlignment = 64;  // one cache line; AVX-512 width

enum class ObjectState : uint32_t {
  kFree = 0,     // slot unused
  kCreated = 1,  // allocated, being written by its creator
  kSealed = 2,   // immutable, readable by everyone
  // Sealed, with its bytes in a file of the service's spill folder instead
  // of the arena (`offset` is meaningless): a Get asks the service, which
  // reads it back into the arena and makes it kSealed again.
  kSpilled = 3,
};

// Whether an entry in `state` (ObjectEntry::state) is sealed: in the arena
// or spilled.
inline bool IsSealed(uint32_t state) {
  return state == static_cast<uint32_t>(ObjectState::kSealed) ||
         state == static_cast<uint32_t>(ObjectState::kSpilled);
}

// ObjectEntry::flags
inline constexpr uint32_t kFlagDeletePending = 1u << 0;
// The entry's bytes are moving between the arena and the spill folder,
// written and read by the service's spill thread without the lock. A
// kSealed entry is being written out: its bytes stay in the arena and
// readable, and a client that maps it meanwhile keeps it there (the service
// then drops the file). A kSpilled one is being read back into a block only
// the service knows of until it is done: Gets of it wait at the service.
// Set and cleared by the service, under the lock.
inline constexpr uint32_t kFlagMoving = 1u << 1;

// Where a CUDA object's memory lives (filled by the GPU store, later).
// Written by the store service at Create, before the creator hears of the
// object; immutable afterwards.
struct CudaLocation {
  uint8_t mem_handle[64];    // cudaIpcMemHandle_t of the allocation base
  uint8_t event_handle[64];  // cudaIpcEventHandle_t recorded after writes
  uint64_t base_offset;      // offset of the object inside that allocation
  uint64_t pool_bytes;       // size of the allocation behind mem_handle
  uint8_t device_uuid[16];   // the GPU, as every process names it
  uint8_t has_event;
  uint8_t reserved[7];
};

struct ObjectEntry {
  ObjectId id;
  uint32_t state;       // ObjectState
  uint32_t generation;  // bumped each time the slot is reused
  uint32_t refcount;    // sum of all clients' counts for this entry
  uint32_t flags;
  // Client slot of the creator + 1; 0 if none. Set by the service at
  // Create; the creator of a sealed object hands it on with a reference
  // (StoreClient::Transfer, a client's journaled write).
  uint32_t creator_plus1;
  // Clients that hold a mapped reference (RefBucket with kRefMapped): only
  // an object no process maps (mappers == 0) may be spilled.
  uint32_t mappers;
  uint64_t offset;       // data offset from the segment base
  uint64_t nbytes;       // data size
  uint64_t alloc_bytes;  // bytes reserved in the arena (≥ nbytes)
  uint64_t lru_stamp;    // time-stamp counter at the last get/release
  // Tensor metadata.
  uint8_t dtype;
  uint8_t rank;
  uint8_t device_type;
  uint8_t has_strides;
  int32_t device_index;
  int64_t shape[kMaxRank];
  int64_t strides[kMaxRank];
  CudaLocation cuda;
};

// One reference-count record in a client's slot. Keyed by entry index + 1
// (0 = never used). A bucket whose count dropped to 0 keeps its key and may be
// reused for another entry (see object_table.cc for the probing rules).
// `count`'s top bit (kRefMapped) says the client has mapped the object (it
// created it, or took a reference by Get, and so may hold a pointer into
// it); references handed over by Transfer alone leave it clear. It is
// cleared with the last reference.
struct RefBucket {
  uint32_t entry_plus1;
  uint32_t count;
};

inline constexpr uint32_t kRefMapped = 1u << 31;
// SegmentHeader::live_refs: the client's reference table moved.
inline constexpr uint32_t kLiveRefsMoved = 1u << 31;
inline constexpr uint32_t kRefCountMask = kRefMapped - 1;

// A client slot: this header, then the client's first reference table
// (SegmentHeader::refs_per_client buckets). When the client holds more
// distinct objects than half its table, the service moves its references
// into a table twice as large in the arena (refs_offset, refs_buckets), up
// to room for every object of the store; ClearSlot brings it back here.
struct ClientSlotHeader {
  uint32_t in_use;
  int32_t pid;
  uint64_t session;
  // Where the table moved (read only with kLiveRefsMoved set in live_refs):
  // from the segment base, and its buckets (a power of two).
  uint64_t refs_offset;
  uint32_t refs_buckets;
  uint32_t reserved;
  char name[16];
  // Objects this client read with gets, and their bytes. Only the client
  // writes them (relaxed atomic adds: its threads may get at once); the
  // service reads them for its stats, and folds them into its own totals
  // when it releases the slot.
  uint64_t gets;
  uint64_t get_bytes;
};
static_assert(sizeof(ClientSlotHeader) == 64);

// One write to undo if a client dies holding the lock.
struct UndoRecord {
  uint64_t offset;  // from the segment base
  uint64_t old_value;
  uint32_t size;  // 4 or 8
  uint32_t reserved;
};

// The most distinct fields one step of a locked operation may write (an
// operation that would write more aborts the process rather than leave a
// rollback incomplete). Sized with room above the task table's largest step,
// a submit that makes a resource class and writes its payload in chunks.
inline constexpr int kMaxUndoRecords = 40;

// The most clients a store can serve; their live-reference counters sit in the
// header page, so a get touches one page fewer.
inline constexpr uint32_t kMaxClientsLimit = 512;

// The undo log of the operation in flight under a RobustLock.
struct Journal {
  std::atomic<uint32_t> active;
  std::atomic<uint32_t> count;
  int32_t pid;  // who wrote it, for the repair message
  uint32_t reserved;
  UndoRecord records[kMaxUndoRecords];
};

// A robust, process-shared mutex with the undo journal of the operation its
// holder is in the middle of (robust_lock.h has the operations).
struct RobustLock {
  pthread_mutex_t mutex;
  int32_t owner_pid;  // diagnostic: who holds it
  uint32_t reserved;
  uint64_t repairs;  // times a dead holder's operation was rolled back
  Journal journal;
};

// The start of every shoal segment (the store's and the task table's): who
// owns it and whether it is usable. The owner writes `magic` last, after
// initialising everything else, and sets `closed` at a clean shutdown.
struct SegmentPrefix {
  uint64_t magic;
  uint32_t layout_version;
  uint32_t header_bytes;
  uint64_t segment_bytes;
  int32_t owner_pid;
  uint32_t reserved0;
  uint64_t owner_start_ticks;  // /proc/<pid>/stat field 22: guards pid reuse
  char job_id[64];
  std::atomic<uint32_t> ready;
  std::atomic<uint32_t> closed;
};

struct SegmentHeader {
  SegmentPrefix prefix;

  uint32_t max_objects;
  uint32_t index_buckets;  // power of two
  uint32_t max_clients;
  uint32_t refs_per_client;  // buckets of a slot's own table; power of two
  uint64_t table_offset;
  uint64_t index_offset;
  uint64_t clients_offset;
  uint64_t client_slot_bytes;
  uint64_t arena_offset;
  uint64_t arena_bytes;

  // Guards the table, the index, every ClientSlot and `live_refs`.
  alignas(64) RobustLock lock;
  uint64_t reserved2;
  // Bumped by a client that drops the last reference of a delete-pending
  // object, so the service's sweep knows there is something to reclaim.
  std::atomic<uint64_t> reclaim_hint;
  // Per client slot: buckets of its reference table with count > 0, and
  // kLiveRefsMoved when the table moved into the arena (its place is in the
  // ClientSlotHeader then): a get reads only this page to find a table that
  // did not move.
  uint32_t live_refs[kMaxClientsLimit];
};

static_assert(sizeof(SegmentHeader) <= kPageSize);
static_assert(std::atomic<uint32_t>::is_always_lock_free);
static_assert(std::atomic<uint64_t>::is_always_lock_free);

// Sizes of a segment's parts, derived from the options and the total size.
struct LayoutParams {
  uint64_t segment_bytes = 0;
  uint32_t max_objects = 0;
  uint32_t max_clients = 0;
  uint32_t refs_per_client = 0;  // rounded up to a power of two
};

struct Layout {
  uint32_t max_objects;
  uint32_t index_buckets;
  uint32_t max_clients;
  uint32_t refs_per_client;
  uint64_t table_offset;
  uint64_t index_offset;
  uint64_t clients_offset;
  uint64_t client_slot_bytes;
  uint64_t arena_offset;
  uint64_t arena_bytes;
};

inline uint64_t AlignUp(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

inline uint32_t NextPowerOfTwo(uint32_t v) {
  uint32_t p = 1;
  while (p < v) p <<= 1;
  return p;
}

}  // namespace shoal::shm

#endif  // SHOAL_SHM_LAYOUT_H_
