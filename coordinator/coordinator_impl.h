// Internal to coordinator/: the coordinator's state, split across
// coordinator.cc (start-up, event loop, shutdown) and frontend.cc (the
// requests clients and workers send).
#ifndef SHOAL_COORDINATOR_COORDINATOR_IMPL_H_
#define SHOAL_COORDINATOR_COORDINATOR_IMPL_H_

#include <sys/types.h>

#include <atomic>
#include <list>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/time/time.h"
#include "base/event_fd.h"
#include "coordinator/coordinator.h"
#include "coordinator/supervisor.h"
#include "ipc/curve.h"
#include "ipc/messages.h"
#include "ipc/socket.h"
#include "shm/store_client.h"
#include "shm/store_service.h"
#include "tasks/task_table.h"

namespace shoal::coordinator {

class Coordinator::Impl {
 public:
  explicit Impl(CoordinatorOptions options) : options_(std::move(options)) {}
  ~Impl();

  absl::Status Init();
  absl::Status Run();
  void Stop();

  const std::string& job_id() const { return options_.job_id; }
  const std::string& frontend_endpoint() const { return frontend_endpoint_; }
  const std::string& store_endpoint() const { return store_endpoint_; }

 private:
  // A client on this machine that uses the task table directly.
  struct LocalClient {
    pid_t pid = 0;
    int pidfd = -1;
    std::string routing_id;
  };
  // A task submitted through the frontend (owned by our own task client).
  struct RemoteTask {
    std::string routing_id;
    absl::Time submitted;
  };
  struct PendingWait {
    std::string routing_id;
    uint64_t request_id = 0;
    ipc::WaitRequest request;
    std::optional<absl::Time> deadline;
  };
  struct Expiring {
    uint32_t worker;
    absl::Time kill_at;
  };
  // An actor: a worker process of its own whose class in the task table
  // holds its calls (actors.cc, docs/actors.md).
  struct Actor {
    uint32_t id = 0;
    uint32_t worker = 0;  // the supervisor's id of its process
    std::string name;
    std::string init_function;
    std::string python_path;
    ObjectId init_object;  // the constructor's argument, held by us
    uint64_t init_bytes = 0;
    pid_t owner = 0;        // 0: detached (lives until killed or node stop)
    std::vector<int> gpus;  // the node's logical GPUs it holds
    std::optional<uint64_t> init_task;  // the constructor call in flight
    bool ended = false;
    std::string end_message;  // why it ended, for the call it was running
  };

  // Start-up pieces.
  absl::Status StartStore();
  absl::Status StartTaskTable();
  absl::Status StartSockets();
  absl::Status StartWorkers();
  absl::Status ConfigureCurve(ipc::Socket& frontend);

  // Event loop pieces.
  void DrainFrontend();
  void DrainBackend();
  void OnCompletions();
  void OnLocalClientExit(uint32_t client);
  void OnWorkerExit(uint32_t worker, const std::string& how);
  void CheckTimeouts(absl::Time now);
  void ExpireRemoteResults(absl::Time now);

  // Requests (frontend.cc).
  std::optional<ipc::Message> Handle(const std::string& routing_id,
                                     uint64_t request_id,
                                     const ipc::Message& body);
  ipc::Message OnHello(const std::string& routing_id,
                       const ipc::ClientHello& m);
  ipc::Message OnSubmit(const std::string& routing_id,
                        const ipc::SubmitRequest& m);
  std::optional<ipc::Message> OnWait(const std::string& routing_id,
                                     uint64_t request_id,
                                     const ipc::WaitRequest& m);
  ipc::Message OnCancel(const std::string& routing_id,
                        const ipc::CancelRequest& m);
  ipc::Message OnReleaseTasks(const std::string& routing_id,
                              const ipc::ReleaseTasksRequest& m);
  ipc::Message OnFetch(const ipc::FetchObjectRequest& m);
  ipc::Message OnStatus();

  // Actors (actors.cc).
  ipc::Message OnActorCreate(const ipc::ActorCreateRequest& m);
  ipc::Message OnActorKill(const ipc::ActorKillRequest& m);
  absl::StatusOr<std::vector<int>> PickActorGpus(uint32_t count) const;
  // The before_start hook of an actor's worker: its table slot, and its
  // constructor call queued first in its class.
  absl::StatusOr<std::map<std::string, std::string>> BeforeActorStart(
      Actor& a, uint32_t worker);
  void OnActorWorkerExit(Actor& a, const std::string& how);
  // Constructor calls that finished: a failed one ends its actor.
  void CheckActorInits();
  // Ends an actor: fails its queued calls with `why`, kills its process,
  // drops its constructor argument.
  void EndActor(Actor& a, const std::string& why);
  void EndActorsOwnedBy(pid_t pid);
  // Tries to answer a wait now; returns the reply if it is satisfied (or
  // `force`, at its deadline).
  std::optional<ipc::Message> TryWait(const std::string& routing_id,
                                      const ipc::WaitRequest& m, bool force);
  absl::Status CheckOwner(const std::string& routing_id, uint64_t id) const;
  ipc::TaskResult ResultOf(uint64_t id, bool release);
  void ReleaseOutputs(const std::vector<Value>& outputs);

  CoordinatorOptions options_;
  std::string job_dir_;
  absl::Time started_ = absl::Now();

  std::unique_ptr<shm::StoreService> store_;
  std::thread store_thread_;
  std::string store_endpoint_;
  std::unique_ptr<shm::StoreClient>
      store_client_;  // for remote clients' objects

  std::unique_ptr<tasks::TaskTable> table_;
  uint32_t own_client_ = 0;  // the task client remote submissions go through
  std::thread watcher_;      // turns completions of our tasks into an eventfd
  std::atomic<bool> watcher_stop_{false};
  EventFd completion_;

  std::unique_ptr<Supervisor> supervisor_;
  std::vector<int32_t> worker_slot_;  // task-table slot per worker, -1 if none
  std::vector<std::string> worker_gpus_;

  ipc::Socket frontend_;
  ipc::Socket backend_;
  std::string frontend_endpoint_;
  std::string backend_endpoint_;
  std::string server_public_key_;
  std::unique_ptr<ipc::ZapAuthenticator> zap_;
  EventFd stop_;
  bool stop_requested_ = false;

  std::map<uint32_t, LocalClient> local_clients_;  // by task client slot
  std::map<uint64_t, RemoteTask> remote_tasks_;
  std::list<PendingWait> waits_;
  std::map<uint64_t, Expiring> expiring_;
  // Functions the workers reported (empty until the first hello): remote
  // submissions of anything else are refused up front.
  std::set<std::string> functions_;
  std::vector<std::string> node_gpus_;  // the node's GPUs (for actors)
  std::map<uint32_t, Actor> actors_;    // by actor id
  std::map<uint32_t, uint32_t> actor_of_worker_;  // supervisor id → actor
  uint32_t next_actor_ = 1;
};

}  // namespace shoal::coordinator

#endif  // SHOAL_COORDINATOR_COORDINATOR_IMPL_H_
