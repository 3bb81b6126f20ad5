// Client: submits tasks to a shoal node and collects their results; also the
// node's store (Put/Get) for processes on the same machine.
//
//   auto client = shoal::coordinator::Client::Connect();     // finds the node
//   auto task = (*client)->Submit({.function = "add", .args = {int64_t{2},
//   int64_t{3}}}); auto result = (*client)->Wait(*task, absl::Seconds(10));  //
//   outputs: {5}
//
// On the node's own machine the client talks to workers through the task
// table in shared memory (no process in between: tens of microseconds per
// task); from elsewhere it goes through the coordinator's frontend over TCP.
// Results belong to the client that submitted them; they are freed when it
// releases them (Wait with release, or Release) or disconnects. Output tensors
// larger than 64 KiB arrive as store objects this client holds: read them with
// store()->Get (local) or Fetch (remote), and ReleaseOutputs when done.
// Thread-compatible: use one Client per thread, or lock around it.
#ifndef SHOAL_COORDINATOR_CLIENT_H_
#define SHOAL_COORDINATOR_CLIENT_H_

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "ipc/messages.h"
#include "shm/store_client.h"

namespace shoal::coordinator {

struct ClientOptions {
  // The coordinator's frontend: tcp://host:port (CURVE: on this machine the
  // owner's keys are found through the discovery file), or its ipc:// socket.
  // Default "":
  // $SHOAL_COORDINATOR, else the discovery file of `job_id`, $SHOAL_JOB_ID or
  // the node started last on this machine.
  std::string endpoint;
  std::string job_id;
  // A name for logs. Default: "pid <pid>".
  std::string name;
  // Use the frontend even on the node's machine. Default false.
  bool force_remote = false;
  // Longest wait for a reply from the coordinator. Default 30 s.
  absl::Duration rpc_timeout = absl::Seconds(30);
  // CURVE (for a frontend off loopback): the server's public key (default:
  // the discovery file's, or $SHOAL_SERVER_KEY) and this client's key-pair
  // file (default $SHOAL_CLIENT_KEY_FILE).
  std::string server_key;
  std::string client_key_file;
  // A local client waiting for results spins this long before it sleeps.
  // Default 100 µs. It yields the CPU between polls, except, for the first
  // `busy_spin` (default 10 µs), while it waits for one task that a worker
  // runs on another CPU: on a machine with fewer CPUs than busy threads (an
  // idle worker spins for work too), a yield hands this CPU to such a worker
  // for a round of its own, and a result that lands meanwhile waits for it.
  // $SHOAL_CLIENT_BUSY_SPIN_US overrides `busy_spin` (0: always yield).
  absl::Duration spin = absl::Microseconds(100);
  absl::Duration busy_spin = absl::Microseconds(10);
  // Remote clients: most SubmitAsync tasks in flight (sent, result not yet
  // arrived). Default 1024.
  size_t window = 1024;
  // Remote SubmitAsync coalescing (nodes of protocol 1.2): most tasks per
  // SubmitRequest (1: one message per task), and the age at which the next
  // SubmitAsync sends a batch it finds. A batch also leaves when full, when
  // the window fills, and on Await, Flush, TaskId and Cancel; with no call
  // after the last SubmitAsync it waits for one (call Flush).
  size_t max_batch = 64;
  absl::Duration flush_after = absl::Microseconds(50);
};

struct TaskRef {
  uint64_t id = 0;
};

// A task sent by SubmitAsync; Await gives its result once.
// Its task id: TaskId (remote: known once the batch it went in is sent and
// the node answered with its ids).
struct PendingTask {
  uint64_t handle = 0;  // remote: the pipeline's handle; local: task id
};

class Client {
 public:
  // Most tasks per message on the remote path (Submit and Wait split larger
  // lists).
  static constexpr size_t kMaxBatch = 4096;

  // Errors: NotFound (no node to find), Unavailable (no answer),
  // FailedPrecondition (protocol or CURVE mismatch).
  static absl::StatusOr<std::unique_ptr<Client>> Connect(
      ClientOptions options = {});
  // Disconnects: every task and output this client still owns is freed.
  ~Client();

  bool local() const;
  // Whether the node admitted this client as its owner (its ipc socket, or
  // the owner's key): only the owner may send a Python search path.
  bool owner() const;
  const std::string& job_id() const;
  // The node's store (local clients only; nullptr otherwise).
  shm::StoreClient* store();

  // Queues tasks. Arguments over 64 KiB (tensors, bytes) are put in the store
  // first (local clients) and passed by reference.
  // Errors: InvalidArgument (a request no worker can satisfy, bad names),
  // ResourceExhausted (too many tasks in flight), Unavailable.
  absl::StatusOr<TaskRef> Submit(ipc::TaskSpec task);
  absl::StatusOr<std::vector<TaskRef>> Submit(std::vector<ipc::TaskSpec> tasks);

  // Sends one task without waiting for the node (remote: one message, its
  // result pushed back when it finishes: a sync task is one round trip;
  // local: the task table). At most options.window tasks are in flight; on
  // a full window SubmitAsync reads arriving results until one is back (up
  // to rpc_timeout, then ResourceExhausted). Results are held here until
  // Await. Errors: ResourceExhausted, InvalidArgument, Unavailable; a refused
  // submit (bad function, quota) shows at Await.
  absl::StatusOr<PendingTask> SubmitAsync(ipc::TaskSpec task);
  // The result of `task` (released), waiting up to `timeout`.
  // Errors: DeadlineExceeded (not finished; `task` stays good), NotFound
  // (unknown or already awaited), the submit's refusal, Unavailable.
  absl::StatusOr<ipc::TaskResult> Await(PendingTask task,
                                        absl::Duration timeout);
  // Waits until `min_done` of `tasks` finished (0: all) or `timeout` passes,
  // and returns each finished one with its result (released; its handle is
  // then spent), in the order given; a refused submit's error is its
  // result. Errors: NotFound (an unknown or spent task; none is taken),
  // Unavailable.
  absl::StatusOr<
      std::vector<std::pair<PendingTask, absl::StatusOr<ipc::TaskResult>>>>
  AwaitSome(absl::Span<const PendingTask> tasks, size_t min_done,
            absl::Duration timeout);
  // Sends the remote SubmitAsync tasks still batched here (a no-op locally).
  // Errors: Unavailable, InvalidArgument (then those tasks fail at Await).
  absl::Status Flush();
  // The node's task id of `task` (remote: sends its batch and waits up to
  // rpc_timeout for the ids). Errors: NotFound (unknown or awaited),
  // FailedPrecondition (a node of protocol 1.1), DeadlineExceeded, the
  // submit's refusal, Unavailable.
  absl::StatusOr<uint64_t> TaskId(PendingTask task);
  // Cancels a SubmitAsync task before its result: it completes as Cancelled
  // (queued) or its function sees cancelled() (running); Await still gives
  // its result. OK if it already finished. Errors: as TaskId, NotFound.
  absl::Status Cancel(PendingTask task);

  // Waits until `min_done` of `tasks` finished (0: all of them) or `timeout`
  // passes, and returns the results of those finished, in the order given.
  // With `release`, their table entries are freed (a task is then unknown).
  // Errors: NotFound (an unknown or released task), Unavailable.
  absl::StatusOr<std::vector<ipc::TaskResult>> Wait(
      absl::Span<const TaskRef> tasks, absl::Duration timeout,
      size_t min_done = 0, bool release = true);
  // One task: its result, or DeadlineExceeded if it did not finish in time.
  absl::StatusOr<ipc::TaskResult> Wait(TaskRef task, absl::Duration timeout,
                                       bool release = true);

  // Cancels a queued task (it completes as Cancelled) or a running one (its
  // function sees cancelled()). Errors: NotFound.
  absl::Status Cancel(TaskRef task);
  // Frees a task (cancelling it if it has not finished). Errors: NotFound.
  absl::Status Release(TaskRef task);
  // Releases the store objects among a result's outputs.
  void ReleaseOutputs(const ipc::TaskResult& result);
  // Copies a store object's bytes (for remote clients). Errors: NotFound.
  absl::StatusOr<TensorValue> Fetch(const ObjectId& id);

  // Makes an actor on the node (docs/actors.md): a worker process of its own
  // that first runs `request.init_function` on `request.init`, then the calls
  // submitted as ActorCall(function, id). Owned by this process unless
  // detached. Errors: FailedPrecondition (not local and not detached),
  // ResourceExhausted (GPUs, actors), InvalidArgument, Unavailable.
  absl::StatusOr<ipc::ActorCreateReply> CreateActor(
      ipc::ActorCreateRequest request);
  // Ends an actor: its process is killed, queued and later calls fail with
  // Unavailable ("actor <id> ... has ended"). Errors: NotFound.
  absl::Status KillActor(uint32_t actor_id);

  // The node's workers, queue and store; with `tasks_by_name` also its runs
  // by task function (NodeStatus.tasks_by_name).
  absl::StatusOr<ipc::NodeStatus> Status(bool tasks_by_name = false);
  // Asks the coordinator to shut the node down.
  absl::Status StopNode();

  class Impl;

 private:
  explicit Client(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace shoal::coordinator

#endif  // SHOAL_COORDINATOR_CLIENT_H_
