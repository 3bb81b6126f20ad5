// Internal to coordinator/: the coordinator's state, split across
// coordinator.cc (start-up, exits, timeouts), event_loop.cc (the event loop)
// and blocked_workers.cc. It wires together the jobs that own their state:
// the Frontend (what clients send, coordinator/frontend.h; the coordinator is
// its FrontendHost), the Supervisor (worker processes), the ActorDirectory
// (actors) and the Janitor (segments left by a crash).
#ifndef SHOAL_COORDINATOR_COORDINATOR_IMPL_H_
#define SHOAL_COORDINATOR_COORDINATOR_IMPL_H_

#include <poll.h>
#include <sys/types.h>
#include <zmq.h>

#include <atomic>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "base/event_fd.h"
#include "coordinator/actor_directory.h"
#include "coordinator/coordinator.h"
#include "coordinator/frontend.h"
#include "coordinator/janitor.h"
#include "coordinator/supervisor.h"
#include "ipc/messages.h"
#include "ipc/socket.h"
#include "observe/task_stats.h"
#include "shm/store_client.h"
#include "shm/store_service.h"
#include "tasks/task_table.h"

namespace shoal::coordinator {

class Coordinator::Impl : public FrontendHost, public ActorDirectory::Host {
 public:
  explicit Impl(CoordinatorOptions options) : options_(std::move(options)) {}
  ~Impl() override;

  absl::Status Init();
  absl::Status Run();
  void Stop();

  const std::string& job_id() const { return options_.job_id; }
  const std::string& frontend_endpoint() const {
    return frontend_->ipc_endpoint();
  }
  const std::string& tcp_endpoint() const { return frontend_->tcp_endpoint(); }
  const std::string& store_endpoint() const { return store_endpoint_; }

  // FrontendHost.
  bool AdmitLocalClient(pid_t pid, ipc::ClientWelcome* welcome) override;
  ipc::NodeStatus Status(bool tasks_by_name, bool fresh_store) override;
  void RequestStop() override { stop_requested_ = true; }
  const std::set<std::string>& Functions() const override { return functions_; }
  absl::StatusOr<ipc::ActorCreateReply> CreateActor(
      const ActorCreator& creator, const ipc::ActorCreateRequest& m) override;
  absl::Status KillActor(const ActorCreator& caller, uint32_t actor) override;
  absl::Status MayCallActor(const std::string& principal,
                            uint32_t actor) const override;
  void EndActorsOfSession(uint64_t session) override;

  // ActorDirectory::Host.
  uint32_t ReserveWorker() override;
  void CountSessionActor(uint64_t session, int delta) override;

 private:
  // A client on this machine that uses the task table directly.
  struct LocalClient {
    pid_t pid = 0;
    int pidfd = -1;
  };
  struct Expiring {
    uint32_t worker;
    absl::Time kill_at;
  };
  // Start-up pieces.
  absl::Status StartStore();
  absl::Status StartTaskTable();
  absl::Status StartSockets();
  absl::Status StartWorkers();

  // The event loop's parts (event_loop.cc), all on the loop's thread.
  // PollSet::items' fixed entries, in this order; then workers' and local
  // clients' pidfds.
  enum PollItem : size_t {
    kFrontendItem = 0,  // the frontend's ipc:// socket (ZeroMQ)
    kBackendItem,       // backend_ (ZeroMQ)
    kStopItem,          // stop_
    kCompletionItem,    // completion_
    kTcpFrontendItem,   // the frontend's TCP socket (ZeroMQ)
    kEventsItem,        // the ipc:// socket's monitor (ZeroMQ)
    kTcpEventsItem,     // the TCP socket's monitor (ZeroMQ)
    kFixedItems,
  };
  struct PollSet {
    std::vector<zmq_pollitem_t> items;  // fixed sockets/fds first, see Fill
    std::vector<pollfd> pollfds;        // what Poll passes to poll(2)
    std::vector<int> fds;               // workers' pidfds
    std::vector<uint32_t> who;          // the worker of each of fds
    std::vector<uint32_t> client_ids;   // local clients, from clients_at on
    size_t workers_at = 0;
    size_t clients_at = 0;
    // The last PollOnce served a completion without polling the sockets;
    // the next one polls them whatever it finds.
    bool skipped_poll = false;
  };
  void FillPollSet(PollSet* ps);
  // When the loop must wake at the latest with nothing ready.
  absl::Time NextWake(absl::Time now, absl::Time next_tick) const;
  // Spins briefly after a pushed submit, arms the completion eventfd and
  // polls until `wake`. Returns whether a completion was seen before polling.
  // A completion seen skips the poll (its revents stay 0) unless the last
  // call skipped it too: a poll of the loop's ~10 sockets and fds costs
  // several µs, a pushed sync task's whole budget is tens, and every other
  // iteration still polls, so no socket waits behind completions.
  absl::StatusOr<bool> PollOnce(PollSet* ps, absl::Time now, absl::Time wake);
  // zmq_poll's job for the loop, in one poll(2): each ZeroMQ socket by its
  // descriptor (ZMQ_FD), whose ZMQ_EVENTS is read only when it signalled or
  // when the loop touched the socket since the last read (touched_). zmq_poll
  // reads ZMQ_EVENTS of every socket twice per call (each a getpid and a
  // poll syscall inside ZeroMQ). Sets items' revents; returns how many have
  // some, or -1 (errno).
  int Poll(PollSet* ps, long timeout_ms);
  void ServeReady(const PollSet& ps, bool completed, absl::Time* next_tick);
  // Marks poll item `item` (a ZeroMQ socket) as touched: the loop sent or
  // received on it. Its descriptor is edge-triggered and may stay quiet
  // after that while the socket is ready, so Poll reads its ZMQ_EVENTS
  // before it sleeps. REQUIRES: called after every send or receive on the
  // loop's sockets (DrainBackend; the frontend's via MarkFrontendTouched).
  void MarkTouched(PollItem item) { touched_ |= 1u << item; }
  void MarkFrontendTouched() {
    const uint32_t t = frontend_->TakeTouched();
    if (t & Frontend::kTouchedIpc) MarkTouched(kFrontendItem);
    if (t & Frontend::kTouchedTcp) MarkTouched(kTcpFrontendItem);
    if (t & Frontend::kTouchedIpcEvents) MarkTouched(kEventsItem);
    if (t & Frontend::kTouchedTcpEvents) MarkTouched(kTcpEventsItem);
  }
  // The watcher thread's body (gather_mode_).
  void RunWatcher();
  // Hands completions to the watcher (`gather`) or takes them back.
  void SetGatherMode(bool gather) {
    const uint32_t mode = gather ? 1 : 0;
    if (gather_mode_.load() == mode) return;
    gather_mode_.store(mode);
    gather_mode_.notify_one();
  }

  void DrainBackend();
  void OnLocalClientExit(uint32_t client);
  void OnWorkerExit(uint32_t worker, const std::string& how);
  // A pool worker's heartbeat said whether a task of it waits for tasks:
  // starts a temporary worker per blocked one when queued work waits for a
  // worker (blocked_workers.cc).
  void OnWorkerBlocked(uint32_t worker, bool blocked);
  // Whether `shoal status` lists this worker (not a temporary one that
  // exited; blocked_workers.cc).
  bool ListedInStatus(const ipc::WorkerStatus& w) const;
  void CheckTimeouts(absl::Time now);

  CoordinatorOptions options_;
  std::string job_dir_;
  // Removes the node's segments if this process dies without doing so.
  std::unique_ptr<Janitor> janitor_;
  absl::Time started_ = absl::Now();
  // The store's figures of the last status and when they were read
  // (Status: CoordinatorOptions::status_store_refresh).
  std::optional<shm::StoreStats> store_stats_;
  absl::Time store_stats_at_ = absl::InfinitePast();

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
  // 1 from kGatherAbove unfinished remote tasks on: the watcher thread turns
  // the bell into completion_, letting completions gather for kGatherFor
  // between signals; 0 below: the loop arms completion_ for the workers to
  // write and the watcher parks; 2: stopping.
  std::atomic<uint32_t> gather_mode_{0};
  static constexpr size_t kGatherAbove = 16;
  static constexpr absl::Duration kGatherFor = absl::Microseconds(50);
  // Poll items (bit per PollItem) touched since their last ZMQ_EVENTS read;
  // all at first. Every iteration that serves a socket marks it.
  uint32_t touched_ = ~0u;
  // The spin after a pushed submit (Frontend::TakeSpinRequest): up to
  // spin_for_ on the ring count, polling with a pause while that task runs
  // on another CPU (TaskTable::RunsOnAnotherCpu), else yielding.
  absl::Duration spin_for_ = absl::Microseconds(30);

  std::unique_ptr<Supervisor> supervisor_;
  std::vector<int32_t> worker_slot_;  // task-table slot per worker, -1 if none
  std::vector<std::string> worker_gpus_;

  std::unique_ptr<Frontend> frontend_;
  ipc::Socket backend_;
  std::string backend_endpoint_;
  EventFd stop_;
  bool stop_requested_ = false;

  std::map<uint32_t, LocalClient> local_clients_;  // by task client slot
  std::map<uint64_t, Expiring> expiring_;
  // Functions the workers reported (empty until the first hello): remote
  // submissions of anything else are refused up front.
  std::set<std::string> functions_;
  // The workers' runs by task function, from their heartbeats.
  observe::TaskStatsSum task_stats_;
  std::vector<std::string> node_gpus_;  // the node's GPUs (for actors)
  std::unique_ptr<ActorDirectory> actors_;
  // Nested tasks (blocked_workers.cc): pool workers whose task waits for
  // tasks, and the temporary workers started for them (supervisor ids).
  std::set<uint32_t> blocked_workers_;
  std::vector<uint32_t> temporary_workers_;
};

}  // namespace shoal::coordinator

#endif  // SHOAL_COORDINATOR_COORDINATOR_IMPL_H_
