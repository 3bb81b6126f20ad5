// Frontend: the node's door for clients that do not use the task table
// themselves — remote clients over TCP (CURVE) and owner processes on the
// ipc:// socket (docs/protocol.md, docs/security.md). It owns the two
// frontend sockets and everything a client has there: its principal (who it
// is, for ownership and quotas), its sessions (tasks, held outputs, waits,
// pushed results, replies not yet acknowledged), and the connections' guard.
// It submits remote clients' tasks through the coordinator's own slot in the
// task table, as their proxy.
//
// Who is who:
// - A *principal* is a client's identity: its CURVE public key over TCP, the
//   Unix user on the ipc:// socket (the node's owner: file permissions admit
//   no one else), the peer address on an --insecure socket. Quotas count per
//   principal, whatever connections or sessions it spreads its work over.
// - A *session* holds a client's work. A legacy session (a client that said
//   no resumable hello) is its connection's routing id and ends when the
//   connection closes. A resumable session (1.4) has an id from its welcome,
//   numbers its replies, keeps each until the client acknowledges it, and
//   outlives a closed connection for `resume_grace`: the client's next
//   request, on any connection, resumes it and gets every unacknowledged
//   reply again (the client drops duplicates by number).
//
// Back-pressure, not loss: a session whose replies outstanding (not yet
// written to the kernel, or for a resumable session not yet acknowledged)
// exceed max_reply_bytes_per_client has its requests parked and its finished
// tasks' results left in the task table until it reads; nothing is dropped.
// A principal whose parked requests exceed max_parked_* breaks the protocol
// (a client keeps a window): that connection is closed, its parked requests
// discarded, and a resumable session survives it.
//
// Single-threaded: every method runs on the coordinator's event loop.
#ifndef SHOAL_COORDINATOR_FRONTEND_H_
#define SHOAL_COORDINATOR_FRONTEND_H_

#include <sys/types.h>

#include <array>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "coordinator/actor_directory.h"
#include "coordinator/coordinator.h"
#include "coordinator/frontend_sessions.h"
#include "ipc/connection_guard.h"
#include "ipc/curve.h"
#include "ipc/messages.h"
#include "ipc/socket.h"
#include "shm/store_client.h"
#include "tasks/task_table.h"

namespace shoal::coordinator {

// What the frontend asks of the rest of the node. Implemented by the
// coordinator.
class FrontendHost {
 public:
  virtual ~FrontendHost() = default;

  // A hello's shared-memory fast path for a process of the owner on this
  // machine: a task-table slot for `pid`, watched until it exits; fills
  // `welcome`'s local fields. False when it cannot be given (the client is
  // then served remotely).
  virtual bool AdmitLocalClient(pid_t pid, ipc::ClientWelcome* welcome) = 0;
  // `shoal status`; with `tasks_by_name` also the runs by task function
  // (the metrics endpoint's). `fresh_store`: the store's figures read now,
  // else up to CoordinatorOptions::status_store_refresh old.
  virtual ipc::NodeStatus Status(bool tasks_by_name, bool fresh_store) = 0;
  // A Stop request of the owner: the node stops after replying.
  virtual void RequestStop() = 0;
  // Functions the workers reported (empty until the first worker's hello).
  virtual const std::set<std::string>& Functions() const = 0;

  // Actors (docs/actors.md). Errors as their requests' (docs/protocol.md).
  virtual absl::StatusOr<ipc::ActorCreateReply> CreateActor(
      const ActorCreator& creator, const ipc::ActorCreateRequest& m) = 0;
  virtual absl::Status KillActor(const ActorCreator& caller,
                                 uint32_t actor) = 0;
  // Whether `principal` may call actor `actor` (it made it). Errors:
  // PermissionDenied naming the actor.
  virtual absl::Status MayCallActor(const std::string& principal,
                                    uint32_t actor) const = 0;
  // A session ended: the actors it owns end with it.
  virtual void EndActorsOfSession(uint64_t session) = 0;
};

class Frontend {
 public:
  // Sockets are made by Start. REQUIRES: every pointer outlives the
  // frontend; `table`'s slot `own_client` is the frontend's.
  Frontend(const CoordinatorOptions& options, std::string job_dir,
           tasks::TaskTable* table, uint32_t own_client,
           shm::StoreClient* store, std::string store_endpoint,
           FrontendHost* host);
  ~Frontend();
  Frontend(const Frontend&) = delete;
  Frontend& operator=(const Frontend&) = delete;

  // Binds the ipc:// socket in the job folder and the TCP one (CURVE unless
  // --insecure), with their monitors. Errors: bad keys or --client-keys, a
  // non-loopback bind without keys, socket failures.
  absl::Status Start();
  // Stops the monitors, then closes the sockets.
  void Close();

  // The sockets the event loop polls.
  void* ipc_socket() const { return ipc_.raw(); }
  void* tcp_socket() const { return tcp_.raw(); }
  void* ipc_events() const { return ipc_events_.raw(); }
  void* tcp_events() const { return tcp_events_.raw(); }

  const std::string& ipc_endpoint() const { return ipc_endpoint_; }
  const std::string& tcp_endpoint() const { return tcp_endpoint_; }
  const std::string& server_public_key() const { return server_public_key_; }
  const std::string& owner_key_file() const { return owner_key_file_; }

  // Starts a turn of the event loop (frontend_admission.cc): chooses its
  // shape (kLoneTurn or kSharedTurn); requests may take its budget from
  // `now`.
  void BeginTurn(absl::Time now);
  // Reads requests from one socket and serves or parks them, until none is
  // left, kRequestsPerDrain were read, or the turn's time is spent.
  void DrainRequests(bool tcp);
  // Reads one socket's monitor events (connections opened and closed).
  void DrainEvents(bool tcp);
  // An actor that ends with session `serial` started, or ended.
  void ActorStarted(uint64_t serial);
  void ActorEnded(uint64_t serial);
  // Our task client's doorbell rang: answers the pushes and waits of tasks
  // that finished, at most the turn shape's `finished`. REQUIRES: called when
  // the completion eventfd fired or completions_owed().
  void OnCompletions();
  // Whether the last OnCompletions left finished tasks for the next turn.
  bool completions_owed() const { return completions_owed_ > 0; }
  // Sends what is due: replies kept for full queues, results of sessions
  // back under budget, parked requests. `writable`: a socket said POLLOUT.
  void Pump(absl::Time now, bool writable);
  // Periodic work: wait deadlines, held ids, expired results and outputs,
  // detached sessions past their grace, silent connections.
  void Tick(absl::Time now);
  // Whether the sockets should be polled for POLLOUT (replies wait for
  // room).
  bool WantsWritable() const { return unsent_sessions_ > 0 && !stalled_; }
  // What it served since it started, and its peers now (the metrics
  // endpoint's shoal_frontend_* families).
  ipc::FrontendStats Stats() const;
  // When the loop must run at the latest with nothing ready.
  absl::Time NextWake(absl::Time now) const;

  // Which of the sockets (kTouched* bits) the frontend sent or received on
  // since the last call: their descriptors are edge-triggered and may stay
  // quiet while a socket is ready, so the loop reads their ZMQ_EVENTS.
  static constexpr uint32_t kTouchedIpc = 1, kTouchedTcp = 2,
                            kTouchedIpcEvents = 4, kTouchedTcpEvents = 8;
  uint32_t TakeTouched() {
    const uint32_t t = touched_;
    touched_ = 0;
    return t;
  }

  // The event loop's spin after a pushed submit (coordinator/event_loop.cc):
  // whether to spin, and the task to watch while spinning (0: none). Reset
  // by the call.
  bool TakeSpinRequest(uint64_t* task);
  // Our task client's ring count as of the last OnCompletions.
  uint32_t rings_seen() const { return rings_seen_; }
  // Unfinished remote tasks (the loop gathers completions in a watcher
  // thread from kGatherAbove on).
  size_t watched() const { return unfinished_; }

 private:
  // A task submitted through the frontend, until it is forgotten.
  struct RemoteTask {
    uint64_t session = 0;         // serial
    bool done = false;            // OnCompletions saw it finish
    absl::Time finished;          // then (its result expires from it)
    uint64_t held_bytes = 0;      // its outputs' bytes, charged once done
    uint64_t push_request = 0;    // pushed: its submit's request id
    std::vector<uint64_t> waits;  // serials of pending waits naming it
  };
  // A WaitRequest not answered yet.
  struct PendingWait {
    uint64_t session = 0;
    uint64_t request_id = 0;
    ipc::WaitRequest request;
    size_t done = 0;
    size_t want = 0;
    std::optional<std::multimap<absl::Time, uint64_t>::iterator> deadline;
  };

  // ---- sockets and requests (frontend.cc)
  absl::Status ConfigureCurve();
  absl::StatusOr<ipc::CurveKeyPair> OwnerClientKeys();
  absl::Status Monitor(bool tcp);
  // Finds or makes the request's session; nullptr when it is answered
  // already (a reset session, a refused one).
  Session* SessionFor(const Route& route, Principal& who,
                      const ipc::EnvelopeHead& e, bool* moved);
  // The head of a request read, or nullopt when it is answered already
  // with what is wrong with it; `decoded` is set when reading the head took
  // decoding the whole frame.
  std::optional<ipc::EnvelopeHead> ReadHead(
      void* socket, const std::string& routing_id, const std::string& frame,
      std::optional<ipc::Message>* decoded);
  // Tells a 1.5 client whose session moved connection which of its requests
  // arrived (an unnumbered SessionAck whose ack is the request id below
  // which all did): it sends the rest again.
  void SendRequestAck(Session& s);
  // Request ids arrived above a gap a session's client never fills before
  // the frontend gives the gap up (ipc::SessionSeq::SkipGap).
  static constexpr size_t kMaxRequestGap = 4096;
  // ---- admission (frontend_admission.cc)
  // Serves one request of `s` now, or parks it behind others (its session
  // is over its reply budget, or it is heavy and others wait).
  void Dispatch(Session& s, Request r);
  // Serves one request (decoding its body if it is not yet) and queues its
  // reply.
  void Serve(Session& s, Request& r);
  // What a request weighs in admission: a unit per task it submits, waits
  // for, releases or cancels (`items`, at least 1), and one per
  // kBytesPerCost of its frame.
  static uint64_t RequestCost(uint64_t items, uint64_t bytes);
  // The items of a decoded body, as ipc::EnvelopeHead counts them.
  static uint64_t ItemsOf(const ipc::Message& body);
  // Whether the turn's time for requests (its shape's budget) is spent.
  bool TurnSpent() const;
  // Whether a heavy request read now waits its turn (is parked): once the
  // turn's time is spent, or kSoloTurnBudget for a lone sender.
  bool HeavyWaits() const;
  // A request of `s` was read in this turn. The turn's first sender is a
  // lone sender when it has all the frontend's work (AloneWithWork): there
  // is no one to be fair to, and a client pipelining batches lost a sixth
  // of its rate to having them parked. A request of another session ends
  // that at once.
  void NoteSender(const Session& s);
  // Whether no other session has tasks unfinished, requests parked or
  // replies waiting to be sent.
  bool AloneWithWork(const Session& s) const;
  // Whether `p` may park one more request of `bytes`.
  bool FitsParked(const Principal& p, uint64_t bytes) const;
  // Serves all of `s`'s parked requests, in order.
  void ServeAllParked(Session& s);
  // Serves `s`'s parked requests while its credit covers them, until
  // `until`; whether the time is spent.
  bool ServeSessionParked(Session& s, absl::Time until);
  // Requests weighing at most this are served when read, unless their
  // session has requests parked.
  static constexpr uint64_t kLightCost = 8;
  // Credit a session with parked requests earns per round.
  static constexpr uint64_t kQuantum = 64;
  static constexpr uint64_t kBytesPerCost = 64 << 10;
  // What a turn of the event loop may do: `budget`, the time reading and
  // serving requests may take and the time parked requests get after that
  // at least; `min_reads`, the requests read even when that time is spent;
  // `finished`, the finished tasks OnCompletions answers.
  struct TurnShape {
    absl::Duration budget;
    int min_reads;
    size_t finished;
  };
  // A turn shared by clients (SharedTurn: tasks of several flows in flight,
  // or several sessions with requests parked or replies unsent) is short, so
  // that a light request read in the next turn waits behind little of the
  // others' work; a lone client's turns are long, so that its pushes and
  // reads go in batches (a shared turn's shape cost a lone pushing client a
  // fifth of its rate).
  static constexpr TurnShape kLoneTurn{absl::Microseconds(500), 64, 256};
  static constexpr TurnShape kSharedTurn{absl::Microseconds(150), 16, 64};
  // Whether the next turn is shared.
  bool SharedTurn() const;
  // The time a lone sender's heavy requests are served as read in a turn
  // (about sixteen batches of 64 tasks: a full window of a pipelining
  // client).
  static constexpr absl::Duration kSoloTurnBudget = absl::Milliseconds(5);
  // Serves one request; nullopt when its answer comes later (pushes, waits).
  std::optional<ipc::Message> Handle(Session& s, uint64_t request_id,
                                     const ipc::Message& body);
  // Closes a connection that broke the protocol (shutdown of libzmq's
  // descriptor; libzmq then ends it as if the peer had).
  void CloseConnection(const Route& route, const std::string& why);

  // ---- the requests (frontend_requests.cc)
  ipc::Message OnHello(Session& s, const ipc::ClientHello& m);
  std::optional<ipc::Message> OnSubmit(Session& s, uint64_t request_id,
                                       const ipc::SubmitRequest& m);
  std::optional<ipc::Message> OnWait(Session& s, uint64_t request_id,
                                     const ipc::WaitRequest& m);
  ipc::Message OnCancel(Session& s, const ipc::CancelRequest& m);
  ipc::Message OnReleaseTasks(Session& s, const ipc::ReleaseTasksRequest& m);
  ipc::Message OnFetch(const ipc::FetchObjectRequest& m);
  ipc::Message OnPut(Session& s, const ipc::PutObjectRequest& m);
  ipc::Message OnReleaseOutput(Session& s, const ObjectId& id);
  ipc::Message OnActorCreate(Session& s, const ipc::ActorCreateRequest& m);
  ipc::Message OnActorKill(Session& s, const ipc::ActorKillRequest& m);
  // Whether `s` may run `function` (allow-list, python_path, actors).
  // Errors: PermissionDenied naming the module, the field or the actor.
  absl::Status CheckTask(const Session& s, const ipc::TaskSpec& t) const;
  // Whether `p` may queue `count` more tasks. Errors: ResourceExhausted
  // naming the limit.
  absl::Status CheckQuota(const Principal& p, size_t count) const;
  // Errors: NotFound (unknown, or another session's: the same answer).
  absl::Status CheckOwner(const Session& s, uint64_t id) const;
  // `p`'s store account (made on first use, its limit
  // max_store_bytes_per_client): the account its tasks' outputs and its
  // puts are charged to. Errors: those of StoreClient::SetAccountLimit.
  absl::StatusOr<uint32_t> AccountOf(Principal& p);
  // Forgets `s` (SessionTable::Remove), and the store account of a
  // principal forgotten with it.
  void RemoveSession(Session& s);

  // ---- results (frontend_results.cc)
  // Task `id`'s result, taken with `release`; notes the outputs its task
  // made (produced_by_).
  ipc::TaskResult ResultOf(uint64_t id, bool release);
  // Takes a finished task's result for its session (with release: forgets
  // the task and holds its output objects for the session).
  ipc::TaskResult TakeFor(Session& s, uint64_t id, bool release);
  // A finished task nobody collected: its outputs' bytes are charged to its
  // principal until collected.
  void CountFinished(uint64_t id);
  // Lets go of outputs of `principal`'s results (see frontend_results.cc).
  void ReleaseOutputs(const Principal& p, const std::vector<Value>& outputs);
  // Forgets a remote task (its session's and principal's accounting).
  void ForgetTask(uint64_t id);
  // Lets go of remote task `id` for good: a finished one's outputs are
  // released, an unfinished one is released in the table; then ForgetTask.
  void DropTask(uint64_t id);
  // Frees outputs held past remote_result_ttl, and results never collected.
  void ExpireResults(absl::Time now);

  // ---- waits and pushes (frontend_watch.cc)
  void AddWait(Session& s, PendingWait wait);
  // Answers wait `serial` with what finished so far and forgets it.
  void FinishWait(uint64_t serial);
  // Forgets wait `serial` without answering (its session ended).
  void DropWait(uint64_t serial);
  std::optional<ipc::Message> TryWait(Session& s, const ipc::WaitRequest& m,
                                      bool force);
  void ExpireWaits(absl::Time now);
  // Moves finished tasks among the first `look_ahead` unfinished ones of
  // `order` to `finished`, until `finished` holds `most`, dropping finished
  // and forgotten ids it passes.
  void CollectFinished(std::deque<uint64_t>& order, size_t look_ahead,
                       size_t most, std::vector<uint64_t>* finished);
  // Marks `finished` done: answers their waits, pushes their results.
  void MarkFinished(const std::vector<uint64_t>& finished);
  // Every flow walked whole (Sweep, after completions_missed_).
  void FindMissedCompletions();
  // Sends held SubmitReplies, but for the tasks in `answered`.
  void SendHeldIds(Session& s, const std::set<uint64_t>& answered);
  void SendAllHeldIds();
  // Pushes results of `s` that wait for room, while it is under budget.
  void PushReady(Session& s);

  // ---- replies (frontend_outbox.cc)
  // Queues a reply for `s`'s client and sends what its queue takes.
  void Reply(Session& s, uint64_t request_id, ipc::Message body);
  // Answers a request that reached no session (undecodable, refused, a
  // reset session) with `status`: uncounted in any session, dropped if the
  // client's queue is full.
  void SendRefusal(void* socket, const std::string& routing_id,
                   uint64_t request_id, const absl::Status& status);
  void CountError(absl::StatusCode code) {
    const size_t c = static_cast<size_t>(code);
    ++errors_[c < errors_.size() ? c : errors_.size() - 1];
  }
  // Sends `s`'s unsent replies while libzmq takes them. Whether any went.
  bool Flush(Session& s);
  // The client has every reply up to `ack`: they are let go.
  void Acknowledge(Session& s, uint64_t ack);
  // Everything unacknowledged goes again (the session moved connection).
  void Resend(Session& s);
  bool OverBudget(const Session& s) const {
    return s.outstanding() > options_.max_reply_bytes_per_client;
  }
  // Parks a request of `s`; false (and the connection closed) when its
  // principal is over its parked limits.
  bool Park(Session& s, Request r);
  // Takes `s`'s first parked request.
  Request Unpark(Session& s);
  // Serves parked requests, round robin over their sessions (those not over
  // their reply budget), for the rest of the turn or the turn shape's
  // budget, whichever is longer.
  void ServeParked();

  // ---- session ends (frontend.cc)
  // The session's connection closed: a resumable one waits for its client;
  // a legacy one ends.
  void Detach(Session& s, absl::Time now);
  // Whether `s` is a client of this machine whose process has exited.
  static bool LocalClientExited(const Session& s);
  // Every kSweepPeriod (Tick): expires results, closes silent connections,
  // finds sessions past their grace or of exited local clients (ended by
  // EndExpiring), and forgets idle connection sessions.
  void Sweep(absl::Time now);
  static constexpr absl::Duration kSweepPeriod = absl::Milliseconds(100);
  // Ends sessions Sweep found past their grace, one at least and more while
  // the turn has time.
  void EndExpiring();
  // Ends a session: its waits, tasks, outputs and actors are freed.
  void EndSession(Session& s, const std::string& why);

  const CoordinatorOptions& options_;
  const std::string job_dir_;
  const std::string store_endpoint_;
  tasks::TaskTable* const table_;
  const uint32_t own_client_;
  shm::StoreClient* const store_;
  FrontendHost* const host_;

  ipc::Socket ipc_;
  ipc::Socket tcp_;
  ipc::Socket ipc_events_;
  ipc::Socket tcp_events_;
  std::string ipc_endpoint_;
  std::string tcp_endpoint_;
  std::string server_public_key_;
  std::string owner_key_file_;
  std::string owner_public_key_;
  std::unique_ptr<ipc::ZapAuthenticator> zap_;
  ipc::ConnectionGuard guard_;
  std::string boot_id_;

  SessionTable sessions_;
  uint32_t next_account_ = 1;  // store accounts handed to principals
  absl::Time next_sweep_ = absl::InfinitePast();     // Sweep's next run
  absl::flat_hash_map<uint64_t, RemoteTask> tasks_;  // by task id
  // Unfinished tasks by flow (their principal's store account, the flow the
  // task table's fair queue serves them by), each flow's in the order they
  // were submitted: a flow's tasks finish roughly in that order. Finished
  // and forgotten ids are dropped as walks pass them.
  std::map<uint32_t, std::deque<uint64_t>> watch_order_;
  // OnCompletions found fewer finished tasks than its doorbell rang for
  // (an actor's constructor, or one finished behind more than its look-ahead
  // of its flow's unfinished tasks): the next Sweep walks every flow whole.
  bool completions_missed_ = false;
  // Finished tasks the doorbell rang for that OnCompletions left to the next
  // turn, and the flow its next walk starts at.
  uint64_t completions_owed_ = 0;
  uint32_t next_flow_ = 0;
  size_t unfinished_ = 0;
  uint32_t rings_seen_ = 0;
  uint32_t touched_ = ~0u;
  std::map<uint64_t, PendingWait> waits_;  // by serial
  uint64_t next_wait_ = 1;
  std::multimap<absl::Time, uint64_t> wait_deadlines_;
  std::vector<uint64_t> orphaned_waits_;  // waits that lost a task
  // Output objects remote tasks made → the principal whose task made them:
  // only its release deletes them (ReleaseOutputs).
  std::map<ObjectId, std::string> produced_by_;
  // Sessions with held ids, and when the earliest must go.
  std::set<uint64_t> holding_ids_;
  absl::Time held_until_ = absl::InfiniteFuture();
  // Sessions with unsent replies, results waiting for budget, parked
  // requests (serials): Pump looks only at these.
  std::set<uint64_t> unsent_;
  size_t unsent_sessions_ = 0;
  // Stats(): requests read and their bytes, reply bytes queued, and the
  // requests answered with an error, by status code (the last entry: codes
  // above UNAUTHENTICATED).
  uint64_t requests_ = 0;
  uint64_t request_bytes_ = 0;
  uint64_t parked_requests_ = 0;  // ever parked (FrontendStats)
  uint64_t shared_turns_ = 0;     // turns of kSharedTurn's shape (ditto)
  uint64_t reply_bytes_ = 0;
  std::array<uint64_t, 18> errors_{};
  std::set<uint64_t> waiting_budget_;
  std::set<uint64_t> parked_;
  std::vector<uint64_t> expiring_;  // sessions to end (EndExpiring)
  uint64_t next_parked_ = 0;        // ServeParked goes on after this serial
  // Parked requests wait for a turn only (not for their clients to read):
  // the loop does not sleep.
  bool parked_waiting_ = false;
  TurnShape turn_ = kLoneTurn;                  // BeginTurn
  absl::Time turn_end_ = absl::InfinitePast();  // BeginTurn
  absl::Time solo_end_ = absl::InfinitePast();  // BeginTurn
  // The serial of the turn's one sender (0: none yet; UINT64_MAX: several),
  // and whether it has all the work (NoteSender).
  uint64_t turn_sender_ = 0;
  bool solo_ = false;
  // A POLLOUT that moved nothing: ROUTER is writable when any peer is, so
  // until a flush moves something, kept replies are retried each 1 ms.
  bool stalled_ = false;
  // The loop's spin after a pushed submit (TakeSpinRequest).
  bool spin_ = false;
  uint64_t spin_task_ = 0;
};

}  // namespace shoal::coordinator

#endif  // SHOAL_COORDINATOR_FRONTEND_H_
