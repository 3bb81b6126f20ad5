// ObjectTable: the operations on the segment's object table, id index and
// client slots. A view over a mapped segment; it owns nothing.
//
// Every method REQUIRES the segment lock (header()->lock, via LockGuard)
// to be held. Methods
// marked "service only" change allocation state and must be called only by
// the store service. Methods taking a JournaledWriter* write through it when it
// is non-null (clients) so a crash mid-operation is rolled back.
#ifndef SHOAL_SHM_OBJECT_TABLE_H_
#define SHOAL_SHM_OBJECT_TABLE_H_

#include <algorithm>
#include <cstdint>
#include <optional>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "ipc/object_id.h"
#include "ipc/tensor_meta.h"
#include "shm/layout.h"
#include "shm/robust_lock.h"

namespace shoal::shm {

// Computes the layout for the given parameters, or InvalidArgument if the
// segment is too small to hold the table and a useful arena (≥ 1 MiB).
absl::StatusOr<Layout> ComputeLayout(const LayoutParams& params);

class ObjectTable {
 public:
  // Probes at most this many buckets of a client's reference table.
  static constexpr uint32_t kMaxRefProbes = 64;

  explicit ObjectTable(uint8_t* base)
      : base_(base), header_(reinterpret_cast<SegmentHeader*>(base)) {}

  // Writes the header fields describing `layout`. Service only, on a fresh
  // (all-zero) segment, whose zeros are the empty table, index and slots.
  void Format(const Layout& layout);

  uint8_t* base() const { return base_; }
  SegmentHeader* header() const { return header_; }
  ObjectEntry* entry(uint32_t i) const {
    return reinterpret_cast<ObjectEntry*>(base_ + header_->table_offset) + i;
  }
  ClientSlotHeader* slot(uint32_t s) const {
    return reinterpret_cast<ClientSlotHeader*>(base_ + header_->clients_offset +
                                               s * header_->client_slot_bytes);
  }
  // Client `s`'s reference table: in its slot, or where the service moved
  // it (MoveRefs), of RefBuckets(s) buckets.
  RefBucket* refs(uint32_t s) const {
    if (header_->live_refs[s] & kLiveRefsMoved)
      return reinterpret_cast<RefBucket*>(base_ + slot(s)->refs_offset);
    return reinterpret_cast<RefBucket*>(reinterpret_cast<uint8_t*>(slot(s)) +
                                        sizeof(ClientSlotHeader));
  }
  uint32_t RefBuckets(uint32_t s) const {
    return (header_->live_refs[s] & kLiveRefsMoved) ? slot(s)->refs_buckets
                                                    : header_->refs_per_client;
  }
  // The most buckets a client's table grows to: twice the object table, so
  // that a client may hold every object of the store.
  uint32_t MaxRefBuckets() const {
    return std::max(header_->refs_per_client,
                    NextPowerOfTwo(2 * header_->max_objects));
  }

  // The entry index holding `id`, if any (in any state).
  std::optional<uint32_t> Find(const ObjectId& id) const;

  // Puts `id` into the index at free entry `e` (state kCreated, generation
  // bumped). Service only. REQUIRES: `id` is not in the index; `e` is free.
  void Insert(const ObjectId& id, uint32_t e);

  // Removes entry `e` from the index and marks it free. Service only.
  void Remove(uint32_t e);

  // Copies `meta` into entry `e`.
  void SetMeta(uint32_t e, const TensorMeta& meta);
  // Reads entry `e`'s metadata.
  TensorMeta GetMeta(uint32_t e) const;

  // How a reference is taken: kMapped when the client gets a pointer into
  // the object (Create, Get), kHeld when it only keeps the object alive
  // (Transfer's receiver). A client's references to an entry are mapped
  // from its first mapped one until it drops the last.
  enum class RefKind { kMapped, kHeld };

  // Takes one reference to entry `e` for client slot `s` and stamps its LRU
  // time. Errors: ResourceExhausted when the client's table has no room for
  // another distinct object (it holds half its buckets, or the probe window
  // is full); IsRefRoomError tells whether a larger table (the service's
  // MoveRefs) would make room.
  absl::Status AddRef(uint32_t s, uint32_t e, RefKind kind,
                      JournaledWriter* journal);
  // Whether AddRef's error `s` asks for a larger reference table.
  static bool IsRefRoomError(const absl::Status& s);

  // Moves client `s`'s references into the table of `buckets` buckets (a
  // power of two) at `offset` from the segment base, which it zeroes first,
  // and makes it the client's. Returns false, changing nothing the client
  // sees, when some reference would land beyond the probe window (a larger
  // table is needed). Service only.
  bool MoveRefs(uint32_t s, uint64_t offset, uint32_t buckets);

  // Drops one of client `s`'s references to entry `e`. Returns the entry's new
  // reference count. Errors: FailedPrecondition when `s` holds none.
  absl::StatusOr<uint32_t> DropRef(uint32_t s, uint32_t e,
                                   JournaledWriter* journal);

  // References client `s` holds on entry `e`.
  uint32_t HeldBy(uint32_t s, uint32_t e) const;
  // Whether client `s` has mapped entry `e` (holds a mapped reference).
  bool MappedBy(uint32_t s, uint32_t e) const;

  // Distinct entries client `s` holds.
  uint32_t LiveRefs(uint32_t s) const {
    return header_->live_refs[s] & ~kLiveRefsMoved;
  }

  // Calls fn(entry, count, mapped) for every entry client `s` holds.
  template <typename Fn>
  void ForEachRef(uint32_t s, Fn fn) const {
    RefBucket* b = refs(s);
    const uint32_t n = RefBuckets(s);
    for (uint32_t i = 0; i < n; ++i) {
      const uint32_t count = b[i].count & kRefCountMask;
      if (b[i].entry_plus1 != 0 && count > 0)
        fn(b[i].entry_plus1 - 1, count, (b[i].count & kRefMapped) != 0);
    }
  }

  // Empties client slot `s` (its references must already be accounted for)
  // and gives it back its own table (the service frees a moved one).
  // Service only.
  void ClearSlot(uint32_t s);

 private:
  uint32_t* index() const {
    return reinterpret_cast<uint32_t*>(base_ + header_->index_offset);
  }
  // The bucket of client `s` keyed by `e`, or nullptr.
  RefBucket* FindRef(uint32_t s, uint32_t e) const;
  // AddRef's error when client `s`'s table has no room.
  absl::Status RefRoomError(uint32_t s) const;
  void Stamp(uint32_t e);

  uint8_t* base_;
  SegmentHeader* header_;
};

}  // namespace shoal::shm

#endif  // SHOAL_SHM_OBJECT_TABLE_H_
