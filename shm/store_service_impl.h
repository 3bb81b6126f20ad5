// Internal to shm/: the store service's state and handlers, split across
// store_service.cc (setup, event loop, dispatch) and store_handlers.cc (the
// verbs, the table operations and client bookkeeping).
#ifndef SHOAL_SHM_STORE_SERVICE_IMPL_H_
#define SHOAL_SHM_STORE_SERVICE_IMPL_H_

#include <sys/types.h>
#include <unistd.h>

#include <atomic>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/time/time.h"
#include "base/event_fd.h"
#include "base/mutex.h"
#include "ipc/messages.h"
#include "ipc/router.h"
#include "ipc/socket.h"
#include "shm/allocator.h"
#include "shm/layout.h"
#include "shm/object_table.h"
#include "shm/prefaulter.h"
#include "shm/robust_lock.h"
#include "shm/segment.h"
#include "shm/spill_folder.h"
#include "shm/spill_io.h"
#include "shm/store_accounts.h"
#include "shm/store_service.h"

namespace shoal::shm {

class StoreService::Impl {
 public:
  static absl::StatusOr<std::unique_ptr<Impl>> Create(StoreOptions options);
  ~Impl();

  absl::Status Run();
  void Stop() { stop_.Signal(); }

  const std::string& endpoint() const { return endpoint_; }
  const std::string& segment_name() const { return segment_->name(); }
  uint64_t segment_bytes() const { return segment_->size(); }
  // StoreService::Stats: from any thread. What it reads besides the table
  // (under the segment lock) is atomic or guarded by arenas_mu_.
  absl::StatusOr<ipc::StoreStats> Stats() const;

 private:
  struct Client {
    std::string routing_id;
    pid_t pid = 0;
    int pidfd = -1;
    uint64_t session = 0;
    std::string name;
  };
  struct PendingGet {
    std::string routing_id;
    uint64_t request_id = 0;
    uint32_t slot = 0;
    std::vector<ipc::ObjectInfo> results;  // in request order
    size_t missing = 0;
    // Of the missing, objects being read back from disk: the reply waits
    // for them whatever the deadline.
    size_t restores = 0;
    std::optional<absl::Time> deadline;  // none: wait forever
  };
  // What a handler sends back: a reply, or nothing (a Get that waits, a
  // Create that waits for room, hints).
  using Reply = std::optional<ipc::Message>;
  // A request waiting for spilled objects' files to be written out (their
  // arena blocks are freed then): a Create, or a read-back (of `entry`,
  // while it has `generation`).
  struct RoomWaiter {
    bool create = false;
    std::string routing_id;
    uint64_t request_id = 0;
    uint32_t slot = 0;
    uint64_t session = 0;
    ipc::CreateRequest request;
    uint32_t entry = 0;
    uint32_t generation = 0;
    ObjectId id;
  };

  explicit Impl(StoreOptions options) : options_(std::move(options)) {}

  // Construction steps (Create). The segment: created, formatted for
  // `layout` and published; then the socket, bound to the endpoint.
  absl::Status CreateSegment(const std::string& name, const Layout& layout);
  absl::Status BindSocket();
  // The spill folder, unless spilling is off (spill_objects.cc).
  absl::Status MakeSpillFolder();

  // Socket plumbing.
  void DrainSocket();
  void Send(const std::string& routing_id, uint64_t request_id,
            ipc::Message body) {
    ipc::SendReply(socket_, routing_id, request_id, std::move(body));
  }

  // Request handlers. `slot` is the sender's client slot.
  Reply Dispatch(const std::string& routing_id, const ipc::RequestPeer& peer,
                 uint64_t request_id, const ipc::Message& body);
  // Registers the client. Its pid and uid come from the kernel (SO_PEERCRED
  // of its connection, read by ZeroMQ when it accepted it: `peer`'s
  // credentials), never from the message or from a descriptor number: the
  // store watches that process and releases its references when it exits.
  // Errors: PermissionDenied (another user, or no credentials to be had),
  // AlreadyExists, ResourceExhausted (all client slots taken).
  Reply OnConnect(const std::string& routing_id, const ipc::RequestPeer& peer,
                  const ipc::StoreConnectRequest& m);
  Reply OnDisconnect(uint32_t slot);
  // Creates the object, or, when the arena has room only once spills in
  // flight are done, parks the request (at the front of the waiters with
  // `front`) and returns nothing (store_moves.cc).
  Reply OnCreate(const std::string& routing_id, uint64_t request_id,
                 uint32_t slot, const ipc::CreateRequest& m,
                 bool front = false);
  void OnSealed(const ipc::SealedNotice& m);
  Reply OnAbort(uint32_t slot, const ipc::AbortRequest& m);
  Reply OnGet(const std::string& routing_id, uint64_t request_id, uint32_t slot,
              const ipc::GetRequest& m);
  Reply OnRelease(uint32_t slot, const ipc::ReleaseRequest& m);
  Reply OnDelete(const ipc::DeleteRequest& m);
  Reply OnContains(const ipc::ContainsRequest& m);
  Reply OnStats();
  // Stats' parts, each taking the segment lock: the object table's counts
  // (a block of entries at a time), and the arena's use, the clients and
  // their gets.
  absl::Status CountObjects(ipc::StoreStats* st) const;
  absl::Status CountClients(ipc::StoreStats* st) const;
  void OnReclaimHint(const ipc::ReclaimHint& m);
  // Sets an account's limit, or reads it. Errors: InvalidArgument (account
  // 0), NotFound (reading an account that does not exist).
  Reply OnAccount(const ipc::StoreAccountRequest& m);

  // Whether `bytes` more may be charged to `account` (StoreAccounts::
  // CheckCharge). Before refusing, releases the clients whose processes
  // exited and looks again: a crashed task's unsealed outputs stay charged
  // until the service sees its worker's pidfd, and the task's retry must
  // not be refused for them. REQUIRES: the segment lock is NOT held.
  absl::Status CheckAccount(uint32_t account, uint64_t bytes);
  // Releases every client whose process has exited (a pidfd poll that does
  // not wait). Returns how many. REQUIRES: the segment lock is NOT held.
  size_t ReleaseExitedClients();

  // Table operations; REQUIRE the segment lock.
  // The entry of object `id`. Errors: NotFound ("no object <hex>").
  absl::StatusOr<uint32_t> FindEntry(const ObjectId& id);
  absl::StatusOr<uint32_t> TakeFreeEntry();
  // Allocates `bytes` in the arena, evicting, then starting spills when it
  // is full. Errors: SpillWait (IsSpillWait: room comes once spills in
  // flight are done), ResourceExhausted (none will come).
  absl::StatusOr<uint64_t> AllocateWithEviction(uint64_t bytes);
  // AllocateWithEviction that waits for the spills it needs, with the lock
  // held: only for the rare growth of a reference table.
  absl::StatusOr<uint64_t> AllocateNow(uint64_t bytes);
  // Evicts sealed, unreferenced objects in LRU order until `bytes` fit (and
  // an entry is free). Returns how many were evicted.
  size_t Evict(uint64_t bytes);
  void FreeEntry(uint32_t e);
  void ReclaimDeletePending();
  // Spilling (spill_objects.cc); REQUIRE the segment lock. The file I/O
  // runs on spill_io_'s thread, without the lock: entries in flight carry
  // kFlagMoving, FinishMoves completes them.
  // Starts writing out sealed objects that are held but mapped by no
  // process, least recently used first, until the bytes in flight cover
  // `bytes` and a batch (kSpillBatch). Returns the bytes started.
  uint64_t StartSpill(uint64_t bytes);
  // Starts reading spilled entry `e` back into a new arena block (evicting,
  // or, when it must wait for spills, parking a RoomWaiter: at the front
  // with `front`). OK when the read is in flight (or already was). Errors:
  // SpillWait, ResourceExhausted (no room), the quota's.
  absl::Status StartRestore(uint32_t e, bool retry = false, bool front = false);
  // Finishes the moves whose I/O is done: written-out objects leave the
  // arena (unless a process mapped them meanwhile: then the file goes),
  // read-back ones are sealed at their new offset (restored_) or failed
  // (restore_failed_); blocks of entries freed meanwhile are freed.
  void FinishMoves();
  void FinishOut(const SpillMove& m, bool orphan);
  void FinishIn(const SpillMove& m, bool orphan);
  // After moves are done (lock NOT held): finishes them, answers the Gets
  // of restored objects, retries the RoomWaiters (store_moves.cc).
  void OnMovesDone();
  void RetryRoomWaiters();
  // Fails every Get waiting for `id` to be read back.
  void FailRestoreWaiters(const ObjectId& id, const absl::Status& why);
  // Frees spilled objects nobody references, least recently used first,
  // until `bytes` more fit in the spill quota and, with `need_entry`, an
  // entry is free. Returns how many were freed.
  size_t DropSpilled(uint64_t bytes, bool need_entry);
  // What the spill folder holds, for error messages ("" when off).
  std::string SpillSummary() const;
  // Device objects (device_objects.cc).
  Reply CreateDeviceObject(uint32_t slot, const ipc::CreateRequest& m);
  // The arena of the GPU with this UUID, made on first use. Errors:
  // FailedPrecondition (no CUDA, or this process does not see that GPU).
  absl::StatusOr<DeviceArena*> ArenaFor(const gpu::GpuUuid& uuid);
  // Allocates in `arena`, evicting its unreferenced sealed objects in LRU
  // order when it is full. Takes the segment lock only to evict.
  absl::StatusOr<DeviceArena::Block> AllocateDevice(DeviceArena& arena,
                                                    uint64_t bytes);
  // Evicts one unreferenced sealed device object (of `arena`, or of any GPU
  // when null), least recently used first. REQUIRES the segment lock.
  bool EvictOneDevice(const DeviceArena* arena);

  // Fills `info` for sealed entry `e` and takes a reference for `slot`.
  // Errors: RestoreWait (IsRestoreWait: `e` is spilled; its read-back is
  // started, WakeWaiters answers), StartRestore's, AddRef's.
  absl::Status Reference(uint32_t slot, uint32_t e, ipc::ObjectInfo* info);

  // Client reference tables (ref_tables.cc); REQUIRE the segment lock.
  // Takes a reference to `e` for `slot`, growing its table when it has no
  // room (ObjectTable::AddRef's errors otherwise).
  absl::Status AddRef(uint32_t slot, uint32_t e, ObjectTable::RefKind kind);
  // Moves client `slot`'s references into a table at least twice as large,
  // allocated in the arena (evicting or spilling for it), unless the table
  // has more than `seen` buckets already. Errors: ResourceExhausted (the
  // table is as large as it gets, or the arena has no room).
  absl::Status GrowRefs(uint32_t slot, uint32_t seen);
  // Empties `slot` (ObjectTable::ClearSlot) and frees its table's arena
  // block, if it moved there.
  void ResetSlot(uint32_t slot);
  // A client found another's table full (StoreClient::Transfer). Errors:
  // FailedPrecondition (no such client), GrowRefs's.
  Reply OnRefRoom(const ipc::StoreRefRoomRequest& m);

  // Clients and waiters.
  void ReleaseClient(uint32_t slot, absl::string_view why);
  // Statuses of waiting: AllocateWithEviction's SpillWait, Reference's
  // RestoreWait, and the result a Get shows meanwhile for an object being
  // read back (RestorePending).
  static absl::Status SpillWait();
  static bool IsSpillWait(const absl::Status& s);
  static absl::Status RestoreWait();
  static bool IsRestoreWait(const absl::Status& s);
  static absl::Status RestorePending(const ObjectId& id);
  static bool IsRestorePending(const absl::Status& s);
  void WakeWaiters(const ObjectId& id, uint32_t e);
  void ExpireWaiters(absl::Time now);
  void Sweep();

  absl::StatusOr<LockGuard> Lock() const {
    return LockGuard::Acquire(segment_->base(), &table_->header()->lock,
                              options_.lock_timeout);
  }

  StoreOptions options_;
  std::string endpoint_;
  std::string socket_path_;  // for ipc:// endpoints, removed at exit
  std::unique_ptr<Segment> segment_;
  std::unique_ptr<ObjectTable> table_;
  std::unique_ptr<ArenaAllocator> allocator_;
  std::unique_ptr<Prefaulter> prefaulter_;
  ipc::Socket socket_;
  EventFd stop_;

  std::vector<uint32_t> free_entries_;
  std::map<uint32_t, Client> clients_;                  // by slot
  absl::flat_hash_map<std::string, uint32_t> slot_of_;  // routing id → slot
  uint64_t next_session_ = 1;
  std::map<uint64_t, PendingGet> pending_;                        // by key
  absl::flat_hash_map<ObjectId, std::vector<uint64_t>> waiting_;  // id → keys
  uint64_t next_pending_ = 1;
  // The counters Stats reads: written by the service's thread only, read
  // from any thread.
  std::atomic<uint64_t> evictions_{0};
  std::atomic<uint64_t> evicted_bytes_{0};
  // Objects created, and their bytes.
  std::atomic<uint64_t> creates_{0};
  std::atomic<uint64_t> created_bytes_{0};
  // The gets of released clients' slots (ClientSlotHeader::gets, get_bytes),
  // so that the totals never go back. Changed with the segment lock held,
  // together with the slot they come from.
  std::atomic<uint64_t> departed_gets_{0};
  std::atomic<uint64_t> departed_get_bytes_{0};
  uint64_t last_reclaim_hint_ = 0;
  // Each account's limit and charged bytes, and each charged entry's account.
  StoreAccounts accounts_;
  // Client reference tables moved into the arena: slot → (offset, bytes).
  absl::flat_hash_map<uint32_t, std::pair<uint64_t, uint64_t>> ref_tables_;

  // Spilled objects' files (null: spilling off), the last failure to spill
  // (named in a full store's error), the entries being read back or
  // waiting to be (never dropped meanwhile), and counters for the log.
  std::unique_ptr<SpillFolder> spill_;
  absl::Status last_spill_error_;
  absl::flat_hash_set<uint32_t> restoring_;
  // The spill thread; moves in flight (sequence → entry, kOrphan once the
  // entry was freed: the finisher frees the block and the file), each
  // moving entry's sequence, and the arena bytes being written out.
  static constexpr uint32_t kOrphan = ~uint32_t{0};
  std::unique_ptr<SpillIo> spill_io_;
  absl::flat_hash_map<uint64_t, uint32_t> in_flight_;
  absl::flat_hash_map<uint32_t, uint64_t> moving_;
  uint64_t spilling_bytes_ = 0;
  std::deque<RoomWaiter> room_waiters_;
  // Finished moves whose Gets are still to be answered (OnMovesDone).
  std::vector<std::pair<ObjectId, uint32_t>> restored_;
  std::vector<std::pair<ObjectId, absl::Status>> restore_failed_;
  // Moves finished since OnMovesDone last ran (a handler's FinishMoves
  // takes them too): the loop runs it, so waiters are retried.
  bool moves_finished_ = false;
  std::atomic<uint64_t> spills_{0};
  std::atomic<uint64_t> spilled_bytes_{0};
  std::atomic<uint64_t> restores_{0};
  std::atomic<uint64_t> restored_bytes_{0};

  // Device objects.
  std::shared_ptr<gpu::CudaIpc> cuda_;
  std::optional<gpu::DeviceMap> devices_;
  // Made by the service's thread (ArenaFor), listed by Stats from any.
  mutable Mutex arenas_mu_;
  std::map<gpu::GpuUuid, std::unique_ptr<DeviceArena>> arenas_
      ABSL_GUARDED_BY(arenas_mu_);
  struct DeviceBlock {
    DeviceArena* arena;
    DeviceArena::Block block;
  };
  absl::flat_hash_map<uint32_t, DeviceBlock> device_blocks_;  // by entry
};

}  // namespace shoal::shm

#endif  // SHOAL_SHM_STORE_SERVICE_IMPL_H_
