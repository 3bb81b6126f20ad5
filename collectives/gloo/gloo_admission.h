// GlooAdmission: only the job's ranks get onto a gloo communicator's TCP
// pairs.
//
// Debian's libgloo (0.0~git20220518) has no TLS transport, and its TCP pair
// listens on a socket of its own (bound to the device's address, a free
// port) from the moment the pair is made; which side of a pair listens is
// decided by comparing the two addresses. Gloo's event-loop thread accepts
// the first connection to reach that socket, with no handshake, and closes
// the listener: a process that connects before the peer does takes the
// peer's place (the peer's connect is then refused), and one that sends a
// crafted message can make gloo's thread throw and end the process.
// Gloo's pair header cannot be compiled against Debian's package (it lacks
// gloo/common/memory.h), so the pair is out of reach; its sockets are not.
// GlooAdmission adds, around gloo's own connectFullMesh:
//
//   1. Records: before any pair exists, each rank publishes through the
//      rendezvous (the job's KV store: only holders of the job secret read
//      it) where its connections come from (its node's addresses) and a
//      random token per peer, and reads every peer's record.
//   2. A filter at the kernel: when gloo hands the store its pairs'
//      addresses (they listen already; no peer can know the ports yet),
//      each listening socket is found among this process's descriptors by
//      its address, and a classic BPF socket filter (SO_ATTACH_FILTER) is
//      attached that passes only packets from the peer's node: a SYN from
//      anywhere else is dropped, so such a connection never completes. For
//      a peer on this node (same network namespace) the filter passes this
//      node's own addresses only: other hosts are kept out, local users are
//      not (step 3 is for them).
//   3. Nothing before the filter: a connection that reached a listener
//      before its filter (queued, or accepted by gloo already) cannot be a
//      peer's (no peer knows the port yet). The attempt is dropped before
//      the addresses are published and the mesh is made again on fresh
//      listeners, up to kAttempts times.
//   4. Checks after connecting: each pair's socket must come from the
//      peer's node; a connection from this node must belong to this
//      process's user (the uid column of /proc/net/tcp).
//   5. Tokens: over each pair, each side sends the token it published for
//      that peer and checks the one it receives against the peer's record.
//      Then each rank sends "ready" to every peer and waits for every
//      peer's, so that a rank whose check failed makes every rank's
//      creation fail. No user data moves before both rounds passed.
//
// A rank that fails records why under "<prefix>failed"; every rank watches
// that key while it connects (a thread polling it) and gives up at once,
// waking what it waits in (a pair's listener is shut down, a token wait is
// aborted): no rank waits out its timeout (gloo's wait for a pair's
// connection is five times the context's timeout) for a peer that gave up.
//
// What remains (docs/collectives.md, docs/security.md): a process that
// passes the filter (one on the peer's node, or for a pair within a node any
// process of that node) can still take a listener after the addresses are
// published, or crash the rank with a crafted message: it breaks the job's
// start, it never joins and never reads a byte of the job's data. The
// traffic after admission is not encrypted.
#ifndef SHOAL_COLLECTIVES_GLOO_GLOO_ADMISSION_H_
#define SHOAL_COLLECTIVES_GLOO_GLOO_ADMISSION_H_

#include <sys/socket.h>
#include <sys/types.h>

#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "base/mutex.h"
#include "collectives/rendezvous.h"

namespace gloo {
class Context;
namespace transport {
class Device;
class UnboundBuffer;
}  // namespace transport
}  // namespace gloo

namespace shoal::collectives {

// An IPv4 or IPv6 address.
struct IpAddress {
  int family = 0;                      // AF_INET or AF_INET6; 0: none
  std::array<uint8_t, 16> bytes = {};  // network order; IPv4 in the first 4

  // Parses a numeric address ("10.0.0.1", "fe80::1"); nullopt otherwise.
  static std::optional<IpAddress> Parse(absl::string_view text);
  // The address of a sockaddr_in/sockaddr_in6; nullopt for other families.
  static std::optional<IpAddress> Of(const sockaddr_storage& a);
  std::string ToString() const;
  bool IsLoopback() const;  // 127.0.0.0/8, ::1
  bool operator==(const IpAddress& o) const {
    return family == o.family && bytes == o.bytes;
  }
  bool operator!=(const IpAddress& o) const { return !(*this == o); }
  bool operator<(const IpAddress& o) const {
    return family != o.family ? family < o.family : bytes < o.bytes;
  }
};

// Where a listener accepts packets from: these addresses, and with
// `loopback` any of 127.0.0.0/8 and ::1.
struct SourceFilter {
  std::vector<IpAddress> addresses;
  bool loopback = false;
  bool Allows(const IpAddress& a) const;
  std::string ToString() const;
};

// This machine's addresses as this process sees them (its network
// namespace's interfaces, loopback included). Errors: none (empty if
// getifaddrs fails).
std::vector<IpAddress> LocalAddresses();

// One pair's listening socket, found among this process's descriptors by its
// address and held through a duplicate descriptor of its own (so that a
// number gloo closes and the kernel reuses is never touched) until Close.
class GlooListener {
 public:
  // Finds the socket listening on `address`, attaches a filter that passes
  // only packets from `sources`, then checks that no connection reached it
  // before: none queued, and gloo still holds it (gloo closes a listener
  // once it accepted). Errors: Aborted when a connection got in before the
  // filter, or the listener is gone (then the ports must not be published);
  // Internal when the filter cannot be attached.
  static absl::StatusOr<GlooListener> Admit(const sockaddr_storage& address,
                                            const SourceFilter& sources);
  GlooListener() = default;
  GlooListener(GlooListener&& o) noexcept { *this = std::move(o); }
  GlooListener& operator=(GlooListener&& o) noexcept;
  ~GlooListener() { Close(); }

  // Shuts the listening socket down: gloo's thread then fails the pair's
  // wait for its connection (accept returns EINVAL).
  void Shutdown() const;
  // Closes this object's descriptor (gloo's own is gloo's).
  void Close();
  int fd() const { return dup_; }

 private:
  int dup_ = -1;
};

class GlooAdmission {
 public:
  // The admission messages' slots on a context's pairs (the tests speak
  // them), and a token's size.
  static constexpr uint64_t kTokenSlot = uint64_t{0x42} << 56;
  static constexpr uint64_t kReadySlot = kTokenSlot + 1;
  static constexpr size_t kTokenBytes = 16;
  // Meshes made (on fresh listeners) before giving up when connections keep
  // reaching the listeners before their filters.
  static constexpr int kAttempts = 5;

  // Rank `rank` of `world` of the communicator whose keys are under
  // `prefix` ("__shoal/gloo/<name>/"), listening on `hostname`.
  // `peer_names` as GlooCommOptions'. Starts the watcher thread (world > 1).
  // `rendezvous` must outlive this object; it is used from the watcher
  // thread too, one call at a time.
  GlooAdmission(Rendezvous& rendezvous, std::string prefix, int rank, int world,
                std::string hostname, absl::Duration timeout,
                std::map<std::string, std::string> peer_names);
  ~GlooAdmission();
  GlooAdmission(const GlooAdmission&) = delete;
  GlooAdmission& operator=(const GlooAdmission&) = delete;

  // Connects a full mesh of `device`'s pairs whose keys are under
  // "<prefix><tag>", admitting only the job's ranks (steps 1-5 above), and
  // deletes this rank's keys. Collective: every rank calls it with the same
  // tag. REQUIRES: no earlier Connect failed.
  // Errors (each also recorded for the other ranks): PermissionDenied (a
  // stranger was found in a peer's place; the message names the peer rank,
  // where it should be and where the connection comes from),
  // DeadlineExceeded (a rank did not come or prove itself in time),
  // Unavailable (gloo could not listen or connect), FailedPrecondition (a
  // peer's addresses are all this node's), and another rank's failure with
  // that rank named.
  absl::StatusOr<std::shared_ptr<gloo::Context>> Connect(
      const std::shared_ptr<gloo::transport::Device>& device,
      const std::string& tag);

  // Records that this rank's creation failed with `s`, for the other ranks'
  // watchers, unless it is another rank's failure this rank learned of.
  // Returns `s` (the other rank's reason where there was one).
  absl::Status Fail(absl::Status s);

 private:
  class Store;
  struct Record;

  // The watcher thread's body.
  void Watch() ABSL_LOCKS_EXCLUDED(mu_);
  // Wakes the waits of the current step (mu_ held).
  void WakeWaits() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The failure another rank recorded, if the watcher saw one.
  absl::Status PeerFailure() ABSL_LOCKS_EXCLUDED(mu_);
  // Reads the failure record now: another rank's failure, or OK.
  absl::Status RecordedFailure() ABSL_LOCKS_EXCLUDED(rendezvous_mu_);
  // PeerFailure, else RecordedFailure: for this rank's own failure, which
  // may follow from another rank's that the watcher has not seen yet (a
  // refused connect, a reset).
  absl::Status AnyPeerFailure() ABSL_LOCKS_EXCLUDED(mu_, rendezvous_mu_);

  // The rendezvous, one call at a time (this thread and the watcher's).
  absl::Status Set(const std::string& key, absl::string_view value)
      ABSL_LOCKS_EXCLUDED(rendezvous_mu_);
  // Waits for `key` until `deadline`, in short waits between which another
  // rank's failure ends it.
  absl::StatusOr<std::string> Get(const std::string& key, absl::Time deadline)
      ABSL_LOCKS_EXCLUDED(rendezvous_mu_);
  void Delete(const std::string& key) ABSL_LOCKS_EXCLUDED(rendezvous_mu_);

  // Step 1: publishes this rank's record for `keys` and reads the peers'.
  absl::StatusOr<std::vector<Record>> ExchangeRecords(const std::string& keys);
  // The source filter of each peer's listener.
  absl::StatusOr<std::vector<SourceFilter>> Filters(
      const std::vector<Record>& records) const;
  // Steps 2-3, from the store's set() of this rank's addresses (gloo's
  // thread of the caller): finds, filters and checks every listener.
  // Throws gloo::IoException, or a retry marker when a connection got in
  // before a filter.
  void AdmitListeners(const std::vector<char>& addresses,
                      const std::vector<SourceFilter>& filters)
      ABSL_LOCKS_EXCLUDED(mu_);
  void CloseListeners() ABSL_LOCKS_EXCLUDED(mu_);
  // Step 4.
  absl::Status CheckPeers(gloo::Context& context,
                          const std::vector<SourceFilter>& filters,
                          const std::vector<Record>& records) const;
  // A round's messages and gloo's unbound buffers over them, freed by
  // FreeRoundAfterGloo on every way out of the round.
  struct RoundBuffers {
    RoundBuffers() = default;
    RoundBuffers(const RoundBuffers&) = delete;
    RoundBuffers& operator=(const RoundBuffers&) = delete;
    ~RoundBuffers();
    std::vector<uint8_t> send_storage;
    std::vector<uint8_t> recv_storage;
    std::unique_ptr<gloo::transport::UnboundBuffer> send;
    std::vector<std::unique_ptr<gloo::transport::UnboundBuffer>> recv;
  };
  static void FreeRoundAfterGloo(RoundBuffers& buffers);
  // Step 5: a round of `bytes`-byte messages to and from every peer on
  // `slot` (this rank's message to peer p at p·bytes of `out`); each
  // received one goes to `check(peer, bytes)`.
  absl::Status Round(
      gloo::Context& context, uint64_t slot, const std::vector<uint8_t>& out,
      size_t bytes,
      const std::function<absl::Status(int, const uint8_t*)>& check,
      const std::string& what) ABSL_LOCKS_EXCLUDED(mu_);

  // "rank p (at ADDRESS — node 1 (ranks 2, 3))" for messages.
  std::string Peer(int p, const std::vector<Record>& records) const;
  // A status for an exception gloo threw while connecting.
  absl::Status FromGloo(const std::string& message) const;

  Rendezvous& rendezvous_;
  const std::string prefix_;
  const int rank_;
  const int world_;
  const std::string hostname_;
  const absl::Duration timeout_;
  const std::map<std::string, std::string> peer_names_;
  // This node's addresses (read once).
  const std::vector<IpAddress> local_;

  Mutex rendezvous_mu_;

  Mutex mu_;
  CondVar watch_cv_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  // Another rank's failure, seen by the watcher.
  absl::Status peer_failure_ ABSL_GUARDED_BY(mu_);
  // This rank recorded a failure of its own already.
  bool recorded_ ABSL_GUARDED_BY(mu_) = false;
  // What the current step waits in, for the watcher to wake: the current
  // mesh's listeners and the current round's buffers.
  std::vector<GlooListener> listeners_ ABSL_GUARDED_BY(mu_);
  std::vector<gloo::transport::UnboundBuffer*> waiting_ ABSL_GUARDED_BY(mu_);
  std::thread watcher_;
};

}  // namespace shoal::collectives

#endif  // SHOAL_COLLECTIVES_GLOO_GLOO_ADMISSION_H_
