// Internal to the frontend: who its clients are (principals), what each has
// there (sessions), and the table that finds them by connection or by id
// (coordinator/frontend.h has the concepts).
#ifndef SHOAL_COORDINATOR_FRONTEND_SESSIONS_H_
#define SHOAL_COORDINATOR_FRONTEND_SESSIONS_H_

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/time/time.h"
#include "ipc/messages.h"
#include "ipc/object_id.h"
#include "ipc/session_seq.h"

namespace shoal::coordinator {

// Where a request came from: the socket, the client's routing id there and
// the connection's descriptor in libzmq (ZMQ_SRCFD).
struct Route {
  bool tcp = false;
  std::string routing_id;
  int fd = -1;
};

// A client's identity, and what it holds across its sessions (quotas).
struct Principal {
  // "owner" (ipc://, or the owner's key), "k:<CURVE key>", "a:<address>".
  std::string key;
  bool owner = false;           // the node's owner
  uint64_t tasks = 0;           // remote tasks not forgotten
  uint64_t finished = 0;        // of those, finished (results held)
  uint64_t held_bytes = 0;      // store bytes of finished results and outputs
  uint64_t waits = 0;           // pending waits
  uint64_t wait_ids = 0;        // task ids named by its pending waits
  uint64_t parked = 0;          // requests parked
  uint64_t parked_bytes = 0;    // their encoded size
  uint32_t account = 0;         // its store account (0: none made yet)
  std::set<uint64_t> sessions;  // serials
};

// A reply on its way to a session's client: its bytes (shared with libzmq
// while it writes them), and for a resumable session its number.
struct OutMessage {
  uint64_t seq = 0;
  std::shared_ptr<const std::string> payload;
};

// Bytes libzmq still holds for a session (decremented on its I/O thread
// when it has written or dropped a reply).
struct ZmqBytes {
  std::atomic<int64_t> queued{0};
};

// A request read from a client and not served yet: parked while its
// session is over its reply budget, or waiting for its turn
// (coordinator/frontend_admission.cc). Its body is decoded when it is
// served.
struct Request {
  uint64_t id = 0;                   // the request id
  std::string frame;                 // as it came
  std::optional<ipc::Message> body;  // decoded already (else from frame)
  uint64_t cost = 0;                 // Frontend::RequestCost
  uint64_t bytes() const { return frame.size(); }
};

struct Session {
  uint64_t serial = 0;  // the frontend's key for it
  uint64_t id = 0;      // resumable: the id its welcome gave; 0: legacy
  Principal* principal = nullptr;
  uint32_t minor = 0;  // the client's protocol minor (its last request's)
  // The client process, when its hello said it runs on this machine: the
  // session ends at once if its connection closes and it has exited.
  pid_t local_pid = 0;
  uint64_t local_start_ticks = 0;  // its start time (ProcessStartTicks)
  Route route;
  bool attached = true;  // its connection is open (as far as we know)
  absl::Time detached_at;
  absl::flat_hash_set<uint64_t> tasks;  // its remote tasks
  uint64_t unfinished = 0;              // of those, not finished yet
  // Output objects of results it took with release (and objects it put):
  // held for it until it releases them, remote_result_ttl, or its end.
  std::map<ObjectId, std::pair<uint64_t, absl::Time>> outputs;
  std::set<uint64_t> waits;  // serials of its pending waits
  std::deque<Request> parked;
  // Its deficit in the round robin over parked requests: the cost it may
  // still be served this round (frontend_admission.cc).
  uint64_t credit = 0;
  // Replies: `out` holds, in order, what libzmq has not taken yet (from
  // `unsent` on) and, for a resumable session, what the client has not
  // acknowledged (before `unsent`). out_bytes counts `out`.
  std::deque<OutMessage> out;
  size_t unsent = 0;
  uint64_t out_bytes = 0;
  std::shared_ptr<ZmqBytes> zmq = std::make_shared<ZmqBytes>();
  uint64_t next_seq = 1;
  // A resumable session of a 1.5 client: the request ids that arrived, so
  // that a request sent again after a reconnect is served once.
  ipc::SessionSeq requests;
  // Finished pushed tasks whose results wait for room in the budget, by
  // submit request: (request id, task id), in completion order.
  std::deque<std::pair<uint64_t, uint64_t>> ready;
  // One-task pushed submits whose SubmitReply is held (ids_with_result).
  std::vector<std::pair<uint64_t, uint64_t>> held_ids;  // (request, task)
  // Live actors that end with it (Frontend::ActorStarted / ActorEnded).
  uint32_t actors = 0;
  bool ended = false;

  bool resumable() const { return id != 0; }
  // Bytes counted against the reply budget.
  uint64_t outstanding() const {
    const int64_t q = zmq->queued.load(std::memory_order_relaxed);
    return resumable() ? out_bytes : out_bytes + static_cast<uint64_t>(q);
  }
};

// Principals and sessions, and the ways to find them. Owns them; ending a
// session's work (tasks, waits) is the frontend's, which then calls Remove.
class SessionTable {
 public:
  // The principal of `key`, made on first use.
  Principal& PrincipalOf(const std::string& key, bool owner);
  // A legacy session by route (made on first use). REQUIRES: `p` is ours.
  // `fresh` tells whether it was made now.
  Session& LegacySession(Principal& p, const Route& route, bool* fresh);
  // A new resumable session of `p` on `route`, with a fresh random id.
  Session& NewResumable(Principal& p, const Route& route);
  // A resumable session by id, if `p` has it.
  Session* Resumable(const Principal& p, uint64_t id);
  Session* BySerial(uint64_t serial);
  // The sessions last seen on connection (tcp, fd).
  std::vector<Session*> OnConnection(bool tcp, int fd);
  // Moves a session to `route` (a request came on another connection).
  void Reroute(Session& s, const Route& route);
  // Forgets the connection's mapping for `s` (its connection closed).
  void Unroute(Session& s);
  // Forgets a session (its work already ended); a principal with no
  // session and nothing held is forgotten too. Returns the store account of
  // a principal it forgot (the caller removes it), else 0.
  uint32_t Remove(Session& s);

  std::map<uint64_t, std::unique_ptr<Session>>& all() { return sessions_; }
  size_t sessions() const { return sessions_.size(); }
  size_t principals() const { return principals_.size(); }

 private:
  static std::string RouteKey(const Route& r) {
    return std::string(r.tcp ? "t" : "l") + r.routing_id;
  }
  std::map<std::string, std::unique_ptr<Principal>> principals_;
  std::map<uint64_t, std::unique_ptr<Session>> sessions_;  // by serial
  // Legacy sessions by principal key + route key.
  std::map<std::pair<std::string, std::string>, uint64_t> legacy_;
  // Resumable sessions by principal key + id.
  std::map<std::pair<std::string, uint64_t>, uint64_t> resumable_;
  // Connections (tcp, fd) → sessions last seen on them.
  std::map<std::pair<bool, int>, std::set<uint64_t>> by_fd_;
  uint64_t next_serial_ = 1;
};

}  // namespace shoal::coordinator

#endif  // SHOAL_COORDINATOR_FRONTEND_SESSIONS_H_
