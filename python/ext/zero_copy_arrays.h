// ZeroCopyArrays: large array allocations placed in the node's store, passed
// to tasks by reference with copy-on-write snapshot semantics.
//
// The numpy memory handler (numpy_alloc.cc) asks Allocate for every
// allocation; one at least `threshold` bytes long becomes an unsealed store
// object this client created, and the array's memory is a page-aligned range
// inside it. When a task takes the array (pickle's out-of-band buffer),
// Snapshot seals the object and re-maps this process's pages of the range
// copy-on-write: the store's bytes (what the worker reads, in place) never
// change again, while this process keeps writing its array into private
// pages. The object lives while the allocation or any task's reference holds
// it. See docs/values.md "Zero-copy arrays".
//
// Every method is thread-safe and makes no Python calls (numpy may call the
// handler without the GIL, from any thread).
#ifndef SHOAL_PYTHON_EXT_ZERO_COPY_ARRAYS_H_
#define SHOAL_PYTHON_EXT_ZERO_COPY_ARRAYS_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "base/mutex.h"
#include "ipc/object_id.h"
#include "shm/store_client.h"

namespace shoal::pyext {

// The store connection allocations are made through.
struct ArrayStore {
  std::shared_ptr<void> keep;  // keeps `client` (and its mapping) alive
  shm::StoreClient* client = nullptr;
  // Set by the owner when the store service is known gone (may be null).
  const std::atomic<bool>* service_gone = nullptr;
  // True while no requests should be sent at all (the interpreter exiting;
  // may be null).
  bool (*quiet)() = nullptr;
  // Set here when a request found the service unreachable: later frees
  // release locally only instead of each waiting out the RPC timeout.
  std::atomic<bool> unreachable{false};

  // Whether requests to the service can still be answered.
  bool Reachable() const;
  // Notes a request's status (Unavailable / DeadlineExceeded: unreachable).
  void Saw(const absl::Status& s);
};

// A sealed store object this process created for an allocation: it holds the
// creator's reference, and on destruction releases it and deletes the object
// (freed once no process holds it any more).
class SealedArrayObject {
 public:
  SealedArrayObject(std::shared_ptr<ArrayStore> store, const ObjectId& id)
      : store_(std::move(store)), id_(id) {}
  ~SealedArrayObject();
  SealedArrayObject(const SealedArrayObject&) = delete;
  SealedArrayObject& operator=(const SealedArrayObject&) = delete;

  const ObjectId& id() const { return id_; }
  const std::shared_ptr<ArrayStore>& store() const { return store_; }

 private:
  std::shared_ptr<ArrayStore> store_;
  ObjectId id_;
};

class ZeroCopyArrays {
 public:
  ZeroCopyArrays() = default;
  ZeroCopyArrays(const ZeroCopyArrays&) = delete;
  ZeroCopyArrays& operator=(const ZeroCopyArrays&) = delete;

  // The store new allocations of at least `threshold_bytes` go to (null:
  // none, every allocation is the caller's malloc). Live allocations keep
  // the store they were made in.
  void SetStore(std::shared_ptr<ArrayStore> store, uint64_t threshold_bytes)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Clears the store if it is `store` (a client disconnecting).
  void ClearStore(const ArrayStore* store) ABSL_LOCKS_EXCLUDED(mu_);

  // `bytes` of memory inside a new store object, page-aligned, or nullptr
  // (below the threshold, no store, or the store refused: full, gone): the
  // caller then uses malloc.
  void* Allocate(size_t bytes) ABSL_LOCKS_EXCLUDED(mu_);

  // Whether [p, p + bytes) lies wholly inside one live allocation of this
  // process (what SnapshotOf would pass by reference, unless written since).
  bool Contains(const void* p, size_t bytes) const ABSL_LOCKS_EXCLUDED(mu_);

  // The requested size of the allocation at `p`, or 0 when `p` is not one
  // of this object's (the caller's malloc made it).
  size_t RequestedSize(const void* p) const ABSL_LOCKS_EXCLUDED(mu_);

  // Frees the allocation at `p`: an unsealed object is kept as a spare for
  // the next allocation of the same span (up to kMaxSpares objects and
  // kMaxSpareBytes: numpy's temporaries, e.g. `a + b` in a loop, then cost no
  // store request and find their pages already mapped) or else aborted; a
  // sealed one's range is shared again and the allocation's hold dropped
  // (the object lives on while tasks hold it). Returns false when `p` is not
  // one of this object's (the caller then frees it).
  bool Free(void* p) ABSL_LOCKS_EXCLUDED(mu_);

  // A task takes [data, data + bytes): where its bytes are in the store.
  struct Snapshot {
    std::shared_ptr<SealedArrayObject> object;
    shm::ObjectBuffer buffer;  // the whole object
    uint64_t offset = 0;       // of `data` in the object
  };
  // The snapshot of a range wholly inside one allocation: the first call
  // seals the object and makes this process's range copy-on-write; later
  // calls return the same object while this process has not written the
  // range since (its private pages, /proc/self/pagemap). nullopt when the
  // range is not inside an allocation, or was written after sealing (the
  // caller copies it, as any other array). Errors: the store's (Seal), or
  // Internal (the re-map failed; the object is then left unsealed).
  absl::StatusOr<std::optional<Snapshot>> SnapshotOf(const void* data,
                                                     size_t bytes)
      ABSL_LOCKS_EXCLUDED(mu_);

  struct Stats {
    uint64_t live = 0;           // allocations in the store now
    uint64_t live_bytes = 0;     // their requested bytes
    uint64_t sealed = 0;         // of them, sealed (taken by a task)
    uint64_t placed = 0;         // allocations ever placed in the store
    uint64_t refused = 0;        // above the threshold but left to malloc
    uint64_t reused = 0;         // snapshots that reused a sealed object
    uint64_t written = 0;        // snapshots refused: written since sealing
    uint64_t spares = 0;         // freed unsealed objects kept for reuse now
    uint64_t spares_reused = 0;  // allocations served by a spare
  };

  static constexpr size_t kMaxSpares = 8;
  static constexpr uint64_t kMaxSpareBytes = uint64_t{64} << 20;
  Stats stats() const ABSL_LOCKS_EXCLUDED(mu_);

  // fork(): around the fork, the registry is locked (Prepare) and unlocked
  // (Parent, or Child after its work). In the child every live allocation
  // becomes private anonymous memory at the same address (a copy), so that
  // neither process sees the other's writes, and no store request is ever
  // made for it (the child does not own the parent's store connection).
  void PrepareFork() ABSL_NO_THREAD_SAFETY_ANALYSIS;
  void ParentAfterFork() ABSL_NO_THREAD_SAFETY_ANALYSIS;
  void ChildAfterFork() ABSL_NO_THREAD_SAFETY_ANALYSIS;

 private:
  struct Allocation {
    uint8_t* addr = nullptr;
    size_t requested = 0;
    uint64_t span = 0;  // whole pages from addr
    ObjectId id;
    uint8_t* object_data = nullptr;
    uint64_t object_bytes = 0;
    std::shared_ptr<ArrayStore> store;
    std::shared_ptr<SealedArrayObject> sealed;  // once a task took it
    bool forked = false;                        // a forked child's private copy
  };

  // The allocation whose requested range holds [p, p + bytes), or nullptr.
  Allocation* FindLocked(const void* p, size_t bytes)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  const Allocation* FindLocked(const void* p, size_t bytes) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return const_cast<ZeroCopyArrays*>(this)->FindLocked(p, bytes);
  }
  absl::Status SealLocked(Allocation& a) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  static void Release(Allocation a);
  // Keeps `a` (unsealed, of the current store) as a spare if there is room;
  // returns whether it did (else the caller releases it).
  bool KeepSpareLocked(Allocation& a) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Takes every spare out (to abort outside the lock).
  std::vector<Allocation> TakeSparesLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  mutable Mutex mu_;
  std::shared_ptr<ArrayStore> store_ ABSL_GUARDED_BY(mu_);
  uint64_t threshold_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<uintptr_t, Allocation> allocations_ ABSL_GUARDED_BY(mu_);
  Stats stats_ ABSL_GUARDED_BY(mu_);
  // Freed unsealed objects by span, each still this process's to reuse.
  std::multimap<uint64_t, Allocation> spares_ ABSL_GUARDED_BY(mu_);
  uint64_t spare_bytes_ ABSL_GUARDED_BY(mu_) = 0;
};

// Whether any of the whole pages [addr, addr + bytes) of a MAP_PRIVATE file
// mapping was written by this process (an anonymous or swapped page in
// /proc/self/pagemap). Errors: Internal (pagemap unreadable).
absl::StatusOr<bool> PagesWrittenPrivately(const uint8_t* addr, uint64_t bytes);

}  // namespace shoal::pyext

#endif  // SHOAL_PYTHON_EXT_ZERO_COPY_ARRAYS_H_
