// StoreClient: a process's connection to its node's shared-memory tensor store.
//
//   auto client = StoreClient::Connect({.endpoint = ...});
//   ObjectId id = ObjectId::Random();
//   (*client)->Put(id, TensorMeta::Contiguous(DType::kF32, {1024}), data);
//   auto view = (*client)->Get(id);          // zero-copy, read-only
//   ... use view->data ...
//   (*client)->Release(id);
//
// Get and Release of sealed objects, and Seal, run locally against the shared
// table (no round trip to the service), so a get costs well under a
// microsecond; Create, Abort, Delete and waiting Gets are requests to the
// store service.
// Every reference this client takes is recorded in the segment, so if this
// process dies the service releases them. Thread-safe.
#ifndef SHOAL_SHM_STORE_CLIENT_H_
#define SHOAL_SHM_STORE_CLIENT_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "gpu/cuda_ipc.h"
#include "ipc/messages.h"
#include "ipc/object_id.h"
#include "ipc/tensor_meta.h"

namespace shoal::shm {

struct StoreClientOptions {
  // The store service's endpoint. Default "": $SHOAL_STORE_ENDPOINT.
  std::string endpoint;
  // A name for status and logs. Default "": "pid <pid>".
  std::string name;
  // Longest wait for a reply from the service. Default 30 s.
  absl::Duration rpc_timeout = absl::Seconds(30);
  // Longest wait for the shared table lock. Default 10 s.
  absl::Duration lock_timeout = absl::Seconds(10);
  // Objects at least this large get this process's page tables filled at
  // Create, so writing them does not fault per 4 KiB page. Default 256 KiB.
  uint64_t populate_threshold_bytes = uint64_t{256} << 10;
  // Device objects: the CUDA calls (default null: the real ones, made at the
  // first device object, so CPU-only clients never initialise CUDA; tests
  // pass a fake).
  std::shared_ptr<gpu::CudaIpc> cuda;
};

// A sealed object this client holds a reference to. The bytes stay valid and
// unchanged until the matching Release. For a device object (meta.device is
// cuda:k, k as this process numbers its GPUs) `data` is a device pointer.
struct ObjectBuffer {
  ObjectId id;
  const uint8_t* data = nullptr;
  uint64_t nbytes = 0;
  TensorMeta meta;
};

// An object this client is creating: write `data`, then Seal or Abort.
struct MutableObjectBuffer {
  ObjectId id;
  uint8_t* data = nullptr;
  uint64_t nbytes = 0;
  TensorMeta meta;
};

using StoreStats = ipc::StoreStats;

// How Create places an object.
struct CreateOptions {
  // The store account the object is charged to (its reserved bytes: its size
  // rounded up to 64 bytes, 256 on a GPU), from Create until it is freed
  // (deleted and unreferenced, evicted, or aborted, by its creator or because
  // its creator died), whoever holds it meanwhile: Transfer does not move
  // the charge. An account has a byte limit (SetAccountLimit); a Create
  // that would take it over fails. Default 0: no account, no limit.
  uint32_t account = 0;
};

// Whether `s` is a Create refused because its account would exceed its limit
// (ResourceExhausted, as the store words it), rather than a full store.
bool IsAccountLimitError(const absl::Status& s);

class StoreClient {
 public:
  // Connects and maps the segment.
  // Errors: InvalidArgument (no endpoint given or in the environment),
  // Unavailable / DeadlineExceeded (no store answering), ResourceExhausted
  // (the store's client limit), FailedPrecondition (segment problems).
  static absl::StatusOr<std::unique_ptr<StoreClient>> Connect(
      const StoreClientOptions& options = {});

  // Disconnects; the service releases every reference still held and aborts
  // every object still being created.
  ~StoreClient();
  StoreClient(const StoreClient&) = delete;
  StoreClient& operator=(const StoreClient&) = delete;

  // Creates an unsealed object and returns its writable buffer. This client
  // holds one reference (released by Abort, or by Release after Seal). With
  // an account (options.account), the object is charged to it.
  // Errors: AlreadyExists, InvalidArgument (bad meta), ResourceExhausted (no
  // room even after evicting everything evictable; names requested and free
  // bytes; or, IsAccountLimitError, the account would go over its limit:
  // names the account, its limit and what it holds, and nothing was
  // allocated or evicted), FailedPrecondition (a device this store does not
  // hold; an account that does not exist).
  absl::StatusOr<MutableObjectBuffer> Create(const ObjectId& id,
                                             const TensorMeta& meta,
                                             const CreateOptions& options = {});
  absl::StatusOr<MutableObjectBuffer> CreateBytes(
      const ObjectId& id, uint64_t nbytes, const CreateOptions& options = {}) {
    return Create(id, TensorMeta::Bytes(static_cast<int64_t>(nbytes)), options);
  }

  // Makes a created object immutable and visible to every Get. For a device
  // object it first records the object's event on `cuda_stream` (the stream
  // the producer wrote on; nullptr: the legacy default stream), so that
  // consumers' work waits for those writes.
  // Errors: NotFound, FailedPrecondition (already sealed), PermissionDenied
  // (not the creator), the CUDA error of recording.
  absl::Status Seal(const ObjectId& id, void* cuda_stream = nullptr);

  // Frees an object this client created and has not sealed.
  // Errors: NotFound, FailedPrecondition (sealed), PermissionDenied.
  absl::Status Abort(const ObjectId& id);

  // Create + copy + Seal. The caller holds one reference afterwards. `data`
  // is host memory; for a device object it is copied through pinned staging
  // buffers.
  absl::Status Put(const ObjectId& id, const TensorMeta& meta, const void* data,
                   const CreateOptions& options = {});

  // A read-only, zero-copy view of a sealed object; takes one reference.
  // Waits up to `timeout` for an object not yet sealed (or not yet created).
  // Errors: NotFound (absent and timeout 0, or being deleted),
  // DeadlineExceeded (not sealed in time), ResourceExhausted (this client
  // holds as many distinct objects as the store's object table takes, or
  // its reference table cannot grow: the arena is full), Unavailable (the
  // store is gone). A client's reference table grows as it needs (the
  // service moves it into the arena, twice as large each time).
  absl::StatusOr<ObjectBuffer> Get(
      const ObjectId& id, absl::Duration timeout = absl::ZeroDuration());
  // For a device object: also makes `cuda_stream` (nullptr: the legacy
  // default stream) wait for the producer's writes, and remembers it: the
  // reference is dropped, at Release, only once the work queued there by
  // then has finished. The first Get into a chunk of device memory maps it
  // (about 1 ms); later ones, while this process holds a reference into it,
  // do not. Errors: as above, and FailedPrecondition (this process does not
  // see the object's GPU), the CUDA error of mapping it.
  absl::StatusOr<ObjectBuffer> Get(const ObjectId& id, absl::Duration timeout,
                                   void* cuda_stream);
  // Batch form: one result per id, in order, waiting once for all.
  std::vector<absl::StatusOr<ObjectBuffer>> Get(absl::Span<const ObjectId> ids,
                                                absl::Duration timeout);

  // Drops one reference taken by Get, Create or Put. For a device object the
  // drop is deferred until the work this process queued on the object's
  // stream has finished (collected by later calls, and when the client
  // closes); the chunk is unmapped when this process's last reference into it
  // goes.
  // Errors: NotFound (no such object), FailedPrecondition (none held).
  absl::Status Release(const ObjectId& id);

  // Copies an object's bytes into host memory `dst` (`nbytes` must be its
  // size): Get + copy (through pinned staging for a device object) + Release.
  // Errors: Get's, InvalidArgument (size mismatch).
  absl::Status CopyToHost(const ObjectId& id, void* dst, uint64_t nbytes,
                          absl::Duration timeout = absl::ZeroDuration());

  // Hands one of this client's references to another connected client (by
  // its store slot), atomically: a worker gives a task's output object to the
  // client that submitted the task. When this client is the creator of the
  // (sealed) object, creatorship goes with the reference: the receiver is
  // the object's creator from then on (Created). A reference this client got
  // by Get goes as a reference only. Errors: NotFound, FailedPrecondition
  // (none held, or the target slot is not connected), ResourceExhausted (the
  // target holds as many objects as it may, or its reference table cannot
  // grow). A target whose reference table is full has the service grow it
  // (one request), then the transfer is tried again.
  absl::Status Transfer(const ObjectId& id, uint32_t to_client_slot);

  // Whether this client is the object's recorded creator: it created it, or
  // its creator handed it over with Transfer. (Creators are recorded by
  // client slot: a slot's objects keep naming it after its client
  // disconnected, and so name the next client given that slot.)
  // Errors: NotFound.
  absl::StatusOr<bool> Created(const ObjectId& id);

  // Deletes a sealed object; its memory is freed when the last reference is
  // released. Any client may delete any object: the store's clients are all
  // processes of the node's user. Who else may have an object deleted is
  // decided above the store (the coordinator's frontend deletes for a remote
  // client only outputs of its own tasks: docs/security.md).
  // Errors: NotFound, FailedPrecondition (not sealed).
  absl::Status Delete(const ObjectId& id);

  // Release, then Delete, without waiting for the store service: the object
  // is marked deleted in the table and this client's reference dropped;
  // when that was the last reference, the service is told to free it (a
  // message without a reply). A device object takes Release and Delete.
  // Errors: NotFound, FailedPrecondition (not sealed, or none held).
  absl::Status ReleaseAndDelete(const ObjectId& id);

  // Whether a sealed, not-deleted object with this id is in the store.
  absl::StatusOr<bool> Contains(const ObjectId& id);

  // The store's counters (capacity, used, objects, evictions, ...).
  absl::StatusOr<StoreStats> Stats();

  // Store accounts (CreateOptions::account). The store service keeps each
  // account's limit and charged bytes in its private memory, as it keeps its
  // allocator: clients change them only through these requests and Create,
  // and a client that dies cannot leave them wrong. Any client of the store
  // may set any account's limit (the store's clients are all processes of
  // the node's user); who is given which account is decided above the store.

  // Sets `account`'s limit to `limit_bytes`, creating the account. A limit
  // below what the account holds refuses its creates until enough of it is
  // freed. Limit 0 removes the account once it holds no object (at once if
  // it holds none; until then every create with it is refused); for an
  // account that does not exist it does nothing.
  // Errors: InvalidArgument (account 0).
  absl::Status SetAccountLimit(uint32_t account, uint64_t limit_bytes);

  // The bytes charged to `account`: the reserved bytes of its live objects.
  // Errors: InvalidArgument (account 0), NotFound (no such account).
  absl::StatusOr<uint64_t> AccountUsage(uint32_t account);

  // Re-maps whole pages of this process's view of the segment in place
  // (Segment::Remap): copy_on_write true makes [data, data + bytes) private
  // copy-on-write (this process may keep writing there; the store's bytes
  // and every other process's view stay as they are), false shares it again.
  // For zero-copy arrays (python/ext/numpy_alloc.h): the caller owns the
  // object under the range. REQUIRES: data and bytes page-aligned.
  // Errors: InvalidArgument (unaligned, or not inside the segment), Internal.
  absl::Status RemapLocally(const uint8_t* data, uint64_t bytes,
                            bool copy_on_write);

  // True once the store service marked the segment closed (it shut down):
  // requests would only wait out their timeout.
  bool closed() const;

  // The segment this client mapped, and where an object's bytes would be
  // (for tests asserting zero-copy).
  const uint8_t* segment_base() const;
  uint32_t client_slot() const;

  class Impl;

 private:
  explicit StoreClient(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace shoal::shm

#endif  // SHOAL_SHM_STORE_CLIENT_H_
