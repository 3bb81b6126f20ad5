// Internal to coordinator/: the coordinator's state, split across
// coordinator.cc (start-up, exits, timeouts), event_loop.cc (the event loop)
// and frontend*.cc (the requests clients and workers send).
#ifndef SHOAL_COORDINATOR_COORDINATOR_IMPL_H_
#define SHOAL_COORDINATOR_COORDINATOR_IMPL_H_

#include <poll.h>
#include <sys/types.h>
#include <zmq.h>

#include <atomic>
#include <deque>
#include <list>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "base/event_fd.h"
#include "coordinator/coordinator.h"
#include "coordinator/janitor.h"
#include "coordinator/supervisor.h"
#include "ipc/connection_guard.h"
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
  const std::string& tcp_endpoint() const { return tcp_endpoint_; }
  const std::string& store_endpoint() const { return store_endpoint_; }

 private:
  // Who sent a request: the socket it came on (the owner-only ipc:// socket,
  // or TCP with CURVE), its routing id there and, over TCP, its CURVE public
  // key. Requests are answered on the same socket; ownership of tasks and
  // actors is by key() (frontend_auth.cc).
  struct Peer {
    bool tcp = false;
    std::string routing_id;
    std::string user_id;  // the client's CURVE public key (Z85); "" on ipc
    bool owner = false;   // the node's owner: ipc://, or the owner's key
    int fd = -1;          // its connection's descriptor in ZeroMQ (ZMQ_SRCFD)
    std::string key() const {
      return absl::StrCat(tcp ? "t" : "l", user_id, "/", routing_id);
    }
  };
  // Bytes of replies ZeroMQ still holds for a peer; decremented by ZeroMQ's
  // I/O thread when it is done with a reply (frontend_flow.cc).
  struct ReplyBytes {
    std::atomic<int64_t> queued{0};
  };
  // Per-peer accounting: quotas and reply back-pressure.
  struct PeerState {
    Peer peer;
    std::shared_ptr<ReplyBytes> replies = std::make_shared<ReplyBytes>();
    std::deque<std::pair<uint64_t, ipc::Message>> parked;  // over budget
    std::optional<absl::Time> over_since;     // when it went over its budget
    std::set<uint64_t> tasks;                 // its tasks in remote_tasks_
    std::map<uint64_t, uint64_t> held_bytes;  // store bytes of its results
    uint64_t held_total = 0;                  // the sum of held_bytes
    // Charges (or re-charges) task `id`'s result bytes; no entry for 0.
    void Hold(uint64_t id, uint64_t bytes) {
      Unhold(id);
      if (bytes == 0) return;
      held_bytes[id] = bytes;
      held_total += bytes;
    }
    void Unhold(uint64_t id) {
      auto it = held_bytes.find(id);
      if (it == held_bytes.end()) return;
      held_total -= it->second;
      held_bytes.erase(it);
    }
    // Outputs of results it took with release: held for it until it
    // releases them (DeleteRequest), remote_result_ttl, or it is dropped.
    std::map<ObjectId, std::pair<uint64_t, absl::Time>> outputs;
    std::set<uint32_t> actors;  // actors it created
    bool dropped = false;
    // Encoded replies that found its ZeroMQ queue full (EAGAIN), sent in
    // order when the socket is writable again (FlushUnsent); counted in
    // replies->queued. One over its reply budget since unsent_since for
    // slow_client_grace is dropped.
    std::deque<std::string> unsent;
    std::optional<absl::Time> unsent_since;
  };
  // A client on this machine that uses the task table directly.
  struct LocalClient {
    pid_t pid = 0;
    int pidfd = -1;
    std::string routing_id;
  };
  // A task submitted through the frontend (owned by our own task client).
  struct RemoteTask {
    std::string peer;  // Peer::key()
    absl::Time submitted;
  };
  // A WaitRequest not answered yet (frontend_watch.cc). Its unfinished
  // tasks are in watched_; `done` counts its tasks seen finished.
  struct PendingWait {
    Peer peer;
    uint64_t request_id = 0;
    ipc::WaitRequest request;
    size_t done = 0;
    size_t want = 0;
    std::optional<std::multimap<absl::Time, uint64_t>::iterator> deadline;
  };
  // A submit whose results are pushed (SubmitRequest.push): its peer and the
  // request id its WaitReplies carry.
  struct PushTarget {
    Peer peer;
    uint64_t request_id = 0;
  };
  // Who wants to hear of one unfinished task of ours: a push, pending waits.
  struct TaskWatch {
    std::shared_ptr<const PushTarget> push;
    std::vector<uint64_t> waits;  // keys of waits_
    // Its outputs count against its peer's store-bytes quota once it
    // finishes, collected or not (every remote task that is not pushed).
    bool quota = false;
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
    std::string creator;    // Peer::key() of the client that created it
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

  // The event loop's parts (event_loop.cc), all on the loop's thread.
  // PollSet::items' fixed entries, in this order; then workers' and local
  // clients' pidfds.
  enum PollItem : size_t {
    kFrontendItem = 0,  // frontend_ (ZeroMQ)
    kBackendItem,       // backend_ (ZeroMQ)
    kStopItem,          // stop_
    kCompletionItem,    // completion_
    kTcpFrontendItem,   // tcp_frontend_ (ZeroMQ)
    kEventsItem,        // frontend_events_ (ZeroMQ)
    kTcpEventsItem,     // tcp_frontend_events_ (ZeroMQ)
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
  absl::Time NextWake(absl::Time now, absl::Time next_tick, bool parked) const;
  // Spins briefly after a pushed submit, arms the completion eventfd and
  // polls until `wake`. Returns whether a completion was seen before polling.
  // A completion seen skips the poll (its revents stay 0) unless the last
  // call skipped it too: a zmq_poll of the loop's ~10 sockets and fds costs
  // several µs (a syscall for it, and ZeroMQ's per-socket command checks),
  // a pushed sync task's whole budget is tens, and every other iteration
  // still polls, so no socket waits behind completions.
  absl::StatusOr<bool> PollOnce(PollSet* ps, absl::Time now, absl::Time wake);
  // zmq_poll's job for the loop, in one poll(2): each ZeroMQ socket by its
  // descriptor (ZMQ_FD), whose ZMQ_EVENTS is read only when it signalled or
  // when the loop touched the socket since the last read (touched_). zmq_poll
  // reads ZMQ_EVENTS of every socket twice per call (each a getpid and a
  // poll syscall inside ZeroMQ): ~20 syscalls per wake-up for 5 sockets.
  // Sets items' revents; returns how many have some, or -1 (errno).
  int Poll(PollSet* ps, long timeout_ms);
  // Marks poll item `item` (a ZeroMQ socket) as touched: the loop sent or
  // received on it. Its descriptor is edge-triggered and may stay quiet
  // after that while the socket is ready, so Poll reads its ZMQ_EVENTS
  // before it sleeps. REQUIRES: called after every send or receive on
  // the loop's sockets (SendReply, the Drain* functions).
  void MarkTouched(PollItem item) { touched_ |= 1u << item; }
  void ServeReady(const PollSet& ps, bool completed, absl::Time* next_tick);
  // The watcher thread's body (gather_mode_).
  void RunWatcher();
  // Hands completions to the watcher (`gather`) or takes them back.
  void SetGatherMode(bool gather) {
    // SHOAL_COORDINATOR_DIRECT_WAKE=0 (for A/B runs): the watcher always,
    // gathering only from kGatherAbove on, as before workers woke the loop.
    const uint32_t mode = !direct_wake_ ? (gather ? 1 : 3) : gather ? 1 : 0;
    if (gather_mode_.load() == mode) return;
    gather_mode_.store(mode);
    gather_mode_.notify_one();
  }
  absl::Status ConfigureCurve(ipc::Socket& frontend);
  // The owner's client key pair in the job folder, created if missing.
  absl::StatusOr<ipc::CurveKeyPair> OwnerClientKeys();

  // Event loop pieces.
  // Reads requests from one frontend socket (with each one's CURVE user id)
  // and serves them, parking those of a peer over its reply budget.
  void DrainFrontend(bool tcp);
  // Serves, sends or parks one request of `peer`.
  void Dispatch(const Peer& peer, uint64_t request_id, ipc::Message body);
  // Sends a reply without blocking, counting its bytes against the peer.
  void Reply(const Peer& peer, uint64_t request_id, ipc::Message body);
  // Sends one counted reply to `state`'s peer; false (payload untouched)
  // if its queue is full. A peer that is gone loses it (uncounted).
  bool SendReply(PeerState& state, std::string& payload);
  // Sends kept replies while peers' queues take them; drops a peer that
  // read nothing over its budget for slow_client_grace. Whether any went.
  bool FlushUnsent(absl::Time now);
  // Forgets a peer's kept replies (a drop, a disconnect).
  void DropUnsent(PeerState& state);
  // Serves parked requests of peers back under budget; drops peers that
  // stayed over it longer than options_.slow_client_grace.
  void ServeParked(absl::Time now);
  // Ends a peer's session: its tasks and actors are released.
  void DropPeer(PeerState& state, const std::string& why);
  // Frees what a peer holds (DropPeer without the warning).
  void EndSession(PeerState& state);
  // Watches a frontend socket's disconnects (frontend_sessions.cc).
  absl::Status MonitorFrontend(bool tcp);
  // Reads disconnect events: a closed connection ends the session of every
  // peer that came on it (its tasks and outputs are freed at once).
  void DrainFrontendEvents(bool tcp);
  PeerState& StateOf(const Peer& peer);
  // A peer's release of an output it took (DeleteRequest on the frontend).
  // Errors: NotFound (not one of its outputs).
  ipc::Message OnReleaseOutput(const Peer& peer, const ObjectId& id);
  // Frees peers' taken outputs older than remote_result_ttl.
  void ExpireOutputs(absl::Time now);
  // Forgets a remote task (remote_tasks_ and its peer's accounting).
  void ForgetTask(uint64_t id);
  // Lets go of remote task `id` for good: a finished one's outputs are
  // released, an unfinished one is released in the table; then ForgetTask.
  void DropTask(uint64_t id);
  void DrainBackend();
  // Finds the watched tasks that finished since the last call (the ring
  // count of our task client says how many to look for) and answers their
  // pushes and waits. REQUIRES: called when completion_ fired.
  void OnCompletions();
  // Sends the held SubmitReplies (held_ids_), but for the tasks in
  // `answered`, whose pushed results (naming their ids) go next instead.
  void SendHeldIds(const std::set<uint64_t>& answered);
  // Answers waits whose deadline passed; returns the next deadline.
  std::optional<absl::Time> ExpireWaits(absl::Time now);
  // Registers a wait for its unfinished tasks; answers nothing.
  void AddWait(PendingWait wait);
  // Answers wait `serial` with what finished so far and forgets it.
  void FinishWait(uint64_t serial);
  // Watches `id` for `push` (nullptr: a wait's, `serial`).
  void Watch(uint64_t id, std::shared_ptr<const PushTarget> push,
             uint64_t serial);
  // Removes wait `serial` from its tasks' watches.
  void Unwatch(const PendingWait& wait, uint64_t serial);
  // A finished remote task nobody has collected: its outputs' bytes are
  // charged to its peer (PeerState::held_bytes) until it collects them.
  void CountUncollected(uint64_t id);
  // Takes a finished task's result for its peer (with release: forgets the
  // task and holds its output objects for the peer).
  ipc::TaskResult TakeFor(PeerState& state, uint64_t id, bool release);
  // Answers waits that lost a task to a release or a drop.
  void AnswerOrphanedWaits();
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
  void ExpireRemoteResults(absl::Time now);

  // Requests (frontend.cc).
  std::optional<ipc::Message> Handle(const Peer& peer, uint64_t request_id,
                                     const ipc::Message& body);
  ipc::Message OnHello(const Peer& peer, const ipc::ClientHello& m);
  // With m.push: no reply (nullopt) unless it fails; results are pushed.
  std::optional<ipc::Message> OnSubmit(const Peer& peer, uint64_t request_id,
                                       const ipc::SubmitRequest& m);
  // Whether `peer` may run `function` (allow-list, actor ownership).
  // Errors: PermissionDenied naming the module or actor.
  absl::Status CheckFunction(const Peer& peer, const std::string& function);
  // Whether `peer` may queue `count` more tasks (quotas).
  // Errors: ResourceExhausted naming the limit.
  absl::Status CheckQuota(PeerState& state, size_t count);
  std::optional<ipc::Message> OnWait(const Peer& peer, uint64_t request_id,
                                     const ipc::WaitRequest& m);
  ipc::Message OnCancel(const Peer& peer, const ipc::CancelRequest& m);
  ipc::Message OnReleaseTasks(const Peer& peer,
                              const ipc::ReleaseTasksRequest& m);
  ipc::Message OnFetch(const ipc::FetchObjectRequest& m);
  ipc::Message OnStatus();

  // Actors (actors.cc).
  ipc::Message OnActorCreate(const Peer& peer,
                             const ipc::ActorCreateRequest& m);
  ipc::Message OnActorKill(const Peer& peer, const ipc::ActorKillRequest& m);
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
  std::optional<ipc::Message> TryWait(const Peer& peer,
                                      const ipc::WaitRequest& m, bool force);
  absl::Status CheckOwner(const Peer& peer, uint64_t id) const;
  // Task `id`'s result (taken with `release`); its output objects that the
  // coordinator's store client created (handed over by the worker's
  // Transfer) and that no result showed before are noted as made by the
  // task's peer (produced_by_).
  ipc::TaskResult ResultOf(uint64_t id, bool release);
  // Lets go of output objects of peer `peer`'s (Peer::key()) results: an
  // object its own task made is released and deleted; the node's owner
  // deletes any other; for anyone else, an object its task passed along
  // (an argument returned unchanged) is left alone: the result brought no
  // reference of its own, and holding an object's id gives read access only.
  void ReleaseOutputs(const std::string& peer,
                      const std::vector<Value>& outputs);

  CoordinatorOptions options_;
  std::string job_dir_;
  // Removes the node's segments if this process dies without doing so.
  std::unique_ptr<Janitor> janitor_;
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
  // 1 from kGatherAbove watched tasks on: the watcher thread turns the bell
  // into completion_, letting completions gather for kGatherFor between
  // signals; 0 below: the loop arms completion_ for the workers to write
  // and the watcher parks; 2: stopping; 3: the watcher, signalling each
  // completion at once (coordinator.cc).
  std::atomic<uint32_t> gather_mode_{0};
  bool direct_wake_ = true;
  static constexpr size_t kGatherAbove = 16;
  static constexpr absl::Duration kGatherFor = absl::Microseconds(50);
  // Set by a pushed submit while at most kSpinWatchedAtMost tasks are
  // watched: the event loop spins up to spin_for_ on the ring count.
  bool spin_for_push_ = false;
  // Poll items (bit per PollItem) touched since their last ZMQ_EVENTS read;
  // all at first.
  uint32_t touched_ = ~0u;
  uint64_t spin_task_ = 0;  // that submit's task, when it was one
  // The spin polls with a pause while that task runs on another CPU
  // (TaskTable::RunsOnAnotherCpu), else yields; SHOAL_COORDINATOR_BUSY_SPIN=0
  // always yields (A/B runs).
  bool busy_spin_ = true;
  static constexpr size_t kSpinWatchedAtMost = 4;
  // The SubmitReplies of one-task pushed submits with ids_with_result (1.3),
  // held until the next round of completions or held_until_: a task that
  // finishes meanwhile is answered by its result alone (which names its id),
  // one message instead of two, the other ids go before any result
  // (OnCompletions). Held at most kHoldIdsFor, rounded up to the poll's
  // millisecond.
  struct HeldIds {
    Peer peer;
    uint64_t request_id = 0;
    uint64_t task_id = 0;
  };
  std::vector<HeldIds> held_ids_;
  absl::Time held_until_ = absl::InfiniteFuture();
  static constexpr absl::Duration kHoldIdsFor = absl::Microseconds(50);
  // Default 30 µs; SHOAL_COORDINATOR_SPIN_US sets it (0: no spin; A/B runs).
  absl::Duration spin_for_ = absl::Microseconds(30);

  std::unique_ptr<Supervisor> supervisor_;
  std::vector<int32_t> worker_slot_;  // task-table slot per worker, -1 if none
  std::vector<std::string> worker_gpus_;

  ipc::Socket frontend_;      // ipc:// in the job folder: the owner only
  ipc::Socket tcp_frontend_;  // TCP, CURVE unless --insecure
  ipc::Socket backend_;
  // Disconnect events of frontend_ and tcp_frontend_ (socket monitors), and
  // the peers on each connection: (tcp, descriptor) → Peer::key()s.
  ipc::Socket frontend_events_;
  ipc::Socket tcp_frontend_events_;
  std::map<std::pair<bool, int>, std::set<std::string>> peers_by_fd_;
  // Bounds tcp_frontend_'s connections (caps, hold-off, silent ones closed).
  ipc::ConnectionGuard connections_{options_.connection_limits};
  std::string frontend_endpoint_;
  std::string tcp_endpoint_;
  std::string owner_public_key_;  // the owner's CURVE client key
  std::string owner_key_file_;
  std::string backend_endpoint_;
  std::string server_public_key_;
  std::unique_ptr<ipc::ZapAuthenticator> zap_;
  EventFd stop_;
  bool stop_requested_ = false;

  std::map<uint32_t, LocalClient> local_clients_;  // by task client slot
  std::map<uint64_t, RemoteTask> remote_tasks_;
  // Output objects remote tasks made → the peer (Peer::key()) whose task it
  // was: only that peer's release deletes them (ResultOf, ReleaseOutputs).
  std::map<ObjectId, std::string> produced_by_;
  std::map<std::string, PeerState> peers_;  // by Peer::key()
  size_t unsent_peers_ = 0;  // peers with kept replies (PeerState::unsent)
  // A POLLOUT that moved nothing: ROUTER is writable when any peer is, so
  // until a flush moves something, kept replies are retried each 1 ms.
  bool pollout_stalled_ = false;
  std::map<uint64_t, PendingWait> waits_;  // by serial
  uint64_t next_wait_ = 1;
  std::multimap<absl::Time, uint64_t> wait_deadlines_;  // → waits_ serial
  std::vector<uint64_t> orphaned_waits_;  // waits whose task was forgotten
  // Unfinished tasks someone waits for, and the order they were watched in
  // (completions come roughly in that order; stale ids are skipped).
  std::unordered_map<uint64_t, TaskWatch> watched_;
  std::deque<uint64_t> watch_order_;
  uint32_t rings_seen_ = 0;  // our task client's ring count, last looked at
  std::map<uint64_t, Expiring> expiring_;
  // Functions the workers reported (empty until the first hello): remote
  // submissions of anything else are refused up front.
  std::set<std::string> functions_;
  std::vector<std::string> node_gpus_;  // the node's GPUs (for actors)
  std::map<uint32_t, Actor> actors_;    // by actor id
  std::map<uint32_t, uint32_t> actor_of_worker_;  // supervisor id → actor
  // Nested tasks (blocked_workers.cc): pool workers whose task waits for
  // tasks, and the temporary workers started for them (supervisor ids).
  std::set<uint32_t> blocked_workers_;
  std::vector<uint32_t> temporary_workers_;
  uint32_t next_actor_ = 1;
};

}  // namespace shoal::coordinator

#endif  // SHOAL_COORDINATOR_COORDINATOR_IMPL_H_
