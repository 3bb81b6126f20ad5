// Admission to gloo's pairs (gloo_admission.h) with real sockets: the kernel
// filter on a listener, a connection that got in before it, and strangers
// that reach a rank's listener before its peer does, with ranks as threads
// meeting through an InMemoryRendezvous that holds their pair addresses back
// while the stranger connects. Strangers from another machine, and the
// attack under `shoal launch` on two network namespaces, are in
// tests/security/gloo.
#include "collectives/gloo/gloo_admission.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "base/mutex.h"
#include "collectives/gloo/gloo_communicator.h"
#include "collectives/hierarchical/hierarchical_communicator.h"
#include "collectives/rendezvous/in_memory_rendezvous.h"
#include "gtest/gtest.h"

namespace shoal::collectives {
namespace {

// A listening socket on `ip` (a free port), as gloo makes one.
int Listen(const char* ip, sockaddr_storage* bound) {
  const bool v6 = std::strchr(ip, ':') != nullptr;
  const int fd = socket(v6 ? AF_INET6 : AF_INET, SOCK_STREAM, 0);
  sockaddr_storage a = {};
  if (v6) {
    auto* in6 = reinterpret_cast<sockaddr_in6*>(&a);
    in6->sin6_family = AF_INET6;
    inet_pton(AF_INET6, ip, &in6->sin6_addr);
  } else {
    auto* in = reinterpret_cast<sockaddr_in*>(&a);
    in->sin_family = AF_INET;
    inet_pton(AF_INET, ip, &in->sin_addr);
  }
  const socklen_t len = v6 ? sizeof(sockaddr_in6) : sizeof(sockaddr_in);
  if (bind(fd, reinterpret_cast<sockaddr*>(&a), len) != 0 ||
      listen(fd, 1) != 0) {
    close(fd);
    return -1;
  }
  socklen_t n = sizeof(*bound);
  getsockname(fd, reinterpret_cast<sockaddr*>(bound), &n);
  return fd;
}

// Starts a non-blocking connection to `to` from `from` (any port; empty:
// the kernel's choice). Returns the descriptor.
int StartConnect(const sockaddr_storage& to, const char* from = "") {
  const int fd = socket(to.ss_family, SOCK_STREAM | SOCK_NONBLOCK, 0);
  if (*from != '\0') {
    sockaddr_in a = {};
    a.sin_family = AF_INET;
    inet_pton(AF_INET, from, &a.sin_addr);
    bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  }
  connect(
      fd, reinterpret_cast<const sockaddr*>(&to),
      to.ss_family == AF_INET6 ? sizeof(sockaddr_in6) : sizeof(sockaddr_in));
  return fd;
}

// Whether the connection on `fd` completed within `wait`.
bool Completes(int fd, absl::Duration wait) {
  pollfd p = {fd, POLLOUT, 0};
  if (poll(&p, 1, static_cast<int>(absl::ToInt64Milliseconds(wait))) != 1)
    return false;
  int err = 0;
  socklen_t n = sizeof(err);
  getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &n);
  return err == 0;
}

SourceFilter Only(const char* ip) {
  SourceFilter f;
  f.addresses.push_back(*IpAddress::Parse(ip));
  return f;
}

TEST(GlooListenerTest, AFilteredListenerTakesOnlyItsPeersAddress) {
  sockaddr_storage at;
  const int l = Listen("127.0.0.1", &at);
  ASSERT_GE(l, 0);
  absl::StatusOr<GlooListener> admitted =
      GlooListener::Admit(at, Only("127.0.0.2"));
  ASSERT_TRUE(admitted.ok()) << admitted.status();
  // Another address's SYN is dropped: the connection never completes.
  const int stranger = StartConnect(at, "127.0.0.1");
  EXPECT_FALSE(Completes(stranger, absl::Milliseconds(1500)));
  pollfd p = {l, POLLIN, 0};
  EXPECT_EQ(poll(&p, 1, 0), 0) << "nothing may wait in the accept queue";
  const int peer = StartConnect(at, "127.0.0.2");
  EXPECT_TRUE(Completes(peer, absl::Seconds(5)));
  close(stranger);
  close(peer);
  close(l);
}

TEST(GlooListenerTest, LoopbackAndIpv6Filters) {
  sockaddr_storage at;
  const int l = Listen("::1", &at);
  if (l < 0) GTEST_SKIP() << "no IPv6 loopback here";
  SourceFilter other = Only("fd00::dead");
  absl::StatusOr<GlooListener> admitted = GlooListener::Admit(at, other);
  ASSERT_TRUE(admitted.ok()) << admitted.status();
  const int refused = StartConnect(at);
  EXPECT_FALSE(Completes(refused, absl::Milliseconds(1500)));
  close(refused);
  admitted->Close();
  // Loopback allowed (a peer on this node): ::1 gets in.
  other.loopback = true;
  sockaddr_storage at2;
  const int l2 = Listen("::1", &at2);
  admitted = GlooListener::Admit(at2, other);
  ASSERT_TRUE(admitted.ok()) << admitted.status();
  const int allowed = StartConnect(at2);
  EXPECT_TRUE(Completes(allowed, absl::Seconds(5)));
  close(allowed);
  close(l);
  close(l2);
}

TEST(GlooListenerTest, AConnectionQueuedBeforeTheFilterIsFound) {
  sockaddr_storage at;
  const int l = Listen("127.0.0.1", &at);
  ASSERT_GE(l, 0);
  const int early = StartConnect(at);
  ASSERT_TRUE(Completes(early, absl::Seconds(5)));
  absl::StatusOr<GlooListener> admitted =
      GlooListener::Admit(at, Only("127.0.0.2"));
  ASSERT_FALSE(admitted.ok());
  EXPECT_EQ(admitted.status().code(), absl::StatusCode::kAborted);
  EXPECT_TRUE(
      absl::StrContains(admitted.status().message(), "before its filter"))
      << admitted.status();
  EXPECT_TRUE(absl::StrContains(admitted.status().message(), "from 127.0.0.1:"))
      << admitted.status();
  close(early);
  close(l);
}

TEST(GlooListenerTest, AListenerGlooAcceptedOnIsFoundGone) {
  sockaddr_storage at;
  const int l = Listen("127.0.0.1", &at);
  ASSERT_GE(l, 0);
  const int early = StartConnect(at);
  ASSERT_TRUE(Completes(early, absl::Seconds(5)));
  // What gloo's thread does: accept, close the listener.
  const int taken = accept(l, nullptr, nullptr);
  close(l);
  absl::StatusOr<GlooListener> admitted =
      GlooListener::Admit(at, Only("127.0.0.2"));
  ASSERT_FALSE(admitted.ok());
  EXPECT_EQ(admitted.status().code(), absl::StatusCode::kAborted)
      << admitted.status();
  EXPECT_TRUE(absl::StrContains(admitted.status().message(), "is gone"))
      << admitted.status();
  close(taken);
  close(early);
}

// ---- strangers at a rank's listener
// ------------------------------------------

// An InMemoryRendezvous that, while holding, keeps each rank's gloo pair
// addresses ("__shoal/gloo/<name>/<rank>") from its peers until Release; it
// tracks the keys still set.
class HoldingRendezvous : public Rendezvous {
 public:
  explicit HoldingRendezvous(std::string prefix, int world)
      : prefix_(std::move(prefix)), world_(world) {}

  absl::Status Set(absl::string_view key, absl::string_view value) override {
    int rank = -1;
    if (absl::StartsWith(key, prefix_) &&
        absl::SimpleAtoi(key.substr(prefix_.size()), &rank)) {
      MutexLock lock(&mu_);
      addresses_[rank] = std::string(value);
      changed_.SignalAll();
      while (holding_) changed_.Wait(&mu_);
    }
    {
      MutexLock lock(&mu_);
      if (absl::StartsWith(key, prefix_)) live_.insert(std::string(key));
    }
    return inner_.Set(key, value);
  }
  absl::StatusOr<std::string> Get(absl::string_view key,
                                  absl::Duration timeout) override {
    return inner_.Get(key, timeout);
  }
  absl::Status Delete(absl::string_view key) override {
    {
      MutexLock lock(&mu_);
      live_.erase(std::string(key));
    }
    return inner_.Delete(key);
  }
  absl::Status Barrier(absl::string_view name, int world,
                       absl::Duration timeout) override {
    return inner_.Barrier(name, world, timeout);
  }

  // Waits until every rank's pair addresses are held; returns the address
  // of the listener of the pair of ranks 0 and 1 (gloo's rule: the smaller
  // address listens, ports compared as stored, in network order) and which
  // rank it belongs to.
  std::pair<sockaddr_storage, int> ListenerOfRanks01() {
    std::map<int, std::string> addresses;
    {
      MutexLock lock(&mu_);
      while (static_cast<int>(addresses_.size()) < world_) changed_.Wait(&mu_);
      addresses = addresses_;
    }
    auto entry = [&](int rank, int peer) {
      const std::string& v = addresses[rank];
      const size_t size = v.size() / (world_ - 1);
      const int j = peer < rank ? peer : peer - 1;
      sockaddr_storage ss = {};
      std::memcpy(&ss, v.data() + j * size, sizeof(ss));
      return ss;
    };
    const sockaddr_storage a = entry(0, 1), b = entry(1, 0);
    const auto* sa = reinterpret_cast<const sockaddr_in*>(&a);
    const auto* sb = reinterpret_cast<const sockaddr_in*>(&b);
    int rv = std::memcmp(&sa->sin_addr, &sb->sin_addr, sizeof(in_addr));
    if (rv == 0) rv = sa->sin_port - sb->sin_port;
    return rv < 0 ? std::make_pair(a, 0) : std::make_pair(b, 1);
  }
  void Hold() {
    MutexLock lock(&mu_);
    holding_ = true;
  }
  void Release() {
    MutexLock lock(&mu_);
    holding_ = false;
    changed_.SignalAll();
  }
  std::set<std::string> Live() {
    MutexLock lock(&mu_);
    return live_;
  }

 private:
  const std::string prefix_;
  const int world_;
  InMemoryRendezvous inner_;
  Mutex mu_;
  CondVar changed_;
  bool holding_ ABSL_GUARDED_BY(mu_) = false;
  std::map<int, std::string> addresses_ ABSL_GUARDED_BY(mu_);
  std::set<std::string> live_ ABSL_GUARDED_BY(mu_);
};

struct Outcome {
  std::vector<absl::Status> status;
  absl::Duration took;
};

// Creates a gloo communicator of `world` ranks (threads, 127.0.0.1) through
// `rendezvous`; `during` runs on the test's thread meanwhile (it may hold
// and release the pair addresses). Then runs an all_reduce on each rank
// whose creation succeeded and checks it.
Outcome CreateAll(HoldingRendezvous& rendezvous, const std::string& name,
                  int world, const std::function<void()>& during,
                  bool sync_exchange = false) {
  Outcome o;
  o.status.resize(world);
  const absl::Time start = absl::Now();
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      GlooCommOptions go;
      go.hostname = "127.0.0.1";
      go.timeout = absl::Seconds(30);
      go.sync_exchange = sync_exchange;
      auto comm = GlooCommunicator::Create(rendezvous, name, r, world, go);
      if (!comm.ok()) {
        o.status[r] = comm.status();
        return;
      }
      std::vector<float> in(1000, static_cast<float>(r + 1)), out(1000);
      o.status[r] = (*comm)->AllReduce(in.data(), out.data(), 1000, DType::kF32,
                                       ReduceOp::kSum, absl::Seconds(30));
      const float want = world * (world + 1) / 2.0f;
      if (o.status[r].ok() && (out[0] != want || out[999] != want)) {
        o.status[r] = absl::InternalError(
            absl::StrCat("wrong sum ", out[0], " (expected ", want, ")"));
      }
    });
  }
  during();
  for (std::thread& t : threads) t.join();
  o.took = absl::Now() - start;
  return o;
}

std::string Name() {
  static int serial = 0;
  return absl::StrCat("adm", getpid(), "-", serial++);
}

// Reads gloo's frames from `fd` (each a 6-word preamble, then the payload
// of a send) until `until` says stop or the connection ends. Returns the
// payload bytes it read.
size_t ReadFrames(int fd, absl::Duration limit,
                  const std::function<bool(const uint64_t*)>& until) {
  size_t payload = 0;
  const absl::Time deadline = absl::Now() + limit;
  while (absl::Now() < deadline) {
    uint64_t pre[6];
    size_t got = 0;
    while (got < sizeof(pre) && absl::Now() < deadline) {
      pollfd p = {fd, POLLIN, 0};
      if (poll(&p, 1, 100) != 1) continue;
      const ssize_t n =
          recv(fd, reinterpret_cast<char*>(pre) + got, sizeof(pre) - got, 0);
      if (n <= 0) return payload;
      got += n;
    }
    if (got < sizeof(pre)) return payload;
    // SEND_BUFFER (0) and SEND_UNBOUND_BUFFER (1) carry `length` bytes.
    if (pre[1] <= 1) {
      std::vector<char> data(pre[4]);
      size_t have = 0;
      while (have < data.size()) {
        const ssize_t n = recv(fd, data.data() + have, data.size() - have, 0);
        if (n <= 0) return payload + have;
        have += n;
      }
      payload += have;
    }
    if (until(pre)) return payload;
  }
  return payload;
}

TEST(GlooAdmissionTest, AStrangerWithAWrongTokenFailsEveryRankAtOnce) {
  const std::string name = Name();
  HoldingRendezvous rendezvous(absl::StrCat("__shoal/gloo/", name, "/"), 2);
  rendezvous.Hold();
  int listener_rank = -1;
  size_t stolen = 0;
  std::thread stranger;
  Outcome o = CreateAll(rendezvous, name, 2, [&] {
    auto [at, rank] = rendezvous.ListenerOfRanks01();
    listener_rank = rank;
    // Same machine, same user: past the filter and the owner check; only
    // the token tells it apart.
    const int fd = StartConnect(at);
    ASSERT_TRUE(Completes(fd, absl::Seconds(5)));
    rendezvous.Release();
    stranger = std::thread([fd, &stolen] {
      // Answers the rank's ready-to-receive for the token with a wrong one.
      stolen = ReadFrames(fd, absl::Seconds(20), [fd](const uint64_t* pre) {
        if (pre[1] != 3 || pre[2] != GlooAdmission::kTokenSlot) return false;
        uint64_t send[6] = {48 + GlooAdmission::kTokenBytes, 1,
                            GlooAdmission::kTokenSlot,       0,
                            GlooAdmission::kTokenBytes,      0};
        char wrong[GlooAdmission::kTokenBytes];
        std::memset(wrong, 0xab, sizeof(wrong));
        (void)!write(fd, send, sizeof(send));
        (void)!write(fd, wrong, sizeof(wrong));
        return false;  // reads on until the rank closes
      });
      close(fd);
    });
  });
  stranger.join();
  const int other = 1 - listener_rank;
  const absl::Status& said = o.status[listener_rank];
  // The listener names the wrong token, unless the news that the rank it
  // waited for gave up (its connect was refused: the stranger had taken its
  // place) reached it before the stranger's token did; which comes first is
  // a race, as for the silent stranger below.
  if (said.code() == absl::StatusCode::kPermissionDenied) {
    EXPECT_TRUE(absl::StrContains(
        said.message(),
        absl::StrCat("a process that does not hold the job's secret is "
                     "connected in place of rank ",
                     other)))
        << said;
    EXPECT_TRUE(absl::StrContains(said.message(),
                                  "sent a token that rank did not publish"))
        << said;
  } else {
    EXPECT_EQ(said.code(), absl::StatusCode::kUnavailable) << said;
    EXPECT_TRUE(absl::StrContains(
        said.message(), absl::StrCat("rank ", other, " gave up connecting")))
        << said;
  }
  EXPECT_FALSE(o.status[other].ok());
  EXPECT_LT(o.took, absl::Seconds(10)) << "a rank waited out its timeout";
  EXPECT_EQ(stolen, 0u) << "the stranger read data";
}

TEST(GlooAdmissionTest, ASilentStrangerFailsEveryRankAtOnce) {
  const std::string name = Name();
  HoldingRendezvous rendezvous(absl::StrCat("__shoal/gloo/", name, "/"), 3);
  rendezvous.Hold();
  int listener_rank = -1;
  int fd = -1;
  Outcome o = CreateAll(rendezvous, name, 3, [&] {
    auto [at, rank] = rendezvous.ListenerOfRanks01();
    listener_rank = rank;
    fd = StartConnect(at);
    ASSERT_TRUE(Completes(fd, absl::Seconds(5)));
    rendezvous.Release();
  });
  size_t stolen = ReadFrames(fd, absl::Milliseconds(100),
                             [](const uint64_t*) { return false; });
  close(fd);
  for (int r = 0; r < 3; ++r) {
    EXPECT_FALSE(o.status[r].ok()) << "rank " << r;
  }
  // The listener names the silent connection, unless the news that the
  // rank it waited for gave up (its connection was reset: the stranger had
  // taken its place) reached it first; which comes first is a race.
  const std::string said(o.status[listener_rank].message());
  EXPECT_TRUE(
      absl::StrContains(
          said, absl::StrCat("rank ", 1 - listener_rank,
                             "'s token had not come on the connection from "
                             "127.0.0.1:")) ||
      absl::StrContains(said, absl::StrCat("rank ", 1 - listener_rank,
                                           " gave up connecting")))
      << o.status[listener_rank];
  EXPECT_LT(o.took, absl::Seconds(10)) << "a rank waited out its timeout";
  EXPECT_EQ(stolen, 0u);
}

// Whether a child of this process can become uid 65534.
bool CanBecomeNobody() {
  const pid_t child = fork();
  if (child == 0) {
    _exit(syscall(SYS_setresgid, 65534, 65534, 65534) == 0 &&
                  syscall(SYS_setresuid, 65534, 65534, 65534) == 0
              ? 0
              : 1);
  }
  int wstatus = 0;
  return child > 0 && waitpid(child, &wstatus, 0) == child &&
         WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0;
}

TEST(GlooAdmissionTest, AnotherUsersConnectionIsRefusedByItsOwner) {
  if (geteuid() != 0 || !CanBecomeNobody())
    GTEST_SKIP() << "needs root (and uid 65534) to connect as another user";
  const std::string name = Name();
  HoldingRendezvous rendezvous(absl::StrCat("__shoal/gloo/", name, "/"), 2);
  rendezvous.Hold();
  int listener_rank = -1;
  pid_t child = -1;
  int hold[2] = {-1, -1};
  Outcome o = CreateAll(rendezvous, name, 2, [&] {
    auto [at, rank] = rendezvous.ListenerOfRanks01();
    listener_rank = rank;
    int ready[2];
    ASSERT_EQ(pipe(ready), 0);
    ASSERT_EQ(pipe(hold), 0);
    child = fork();
    if (child == 0) {
      close(hold[1]);
      // uid 65534 makes the socket: the kernel records its owner.
      if (syscall(SYS_setresgid, 65534, 65534, 65534) != 0 ||
          syscall(SYS_setresuid, 65534, 65534, 65534) != 0) {
        _exit(2);
      }
      const int fd = socket(at.ss_family, SOCK_STREAM, 0);
      if (connect(fd, reinterpret_cast<const sockaddr*>(&at),
                  sizeof(sockaddr_in)) != 0) {
        _exit(3);
      }
      char c = 1;
      (void)!write(ready[1], &c, 1);
      (void)!read(hold[0], &c, 1);
      _exit(0);
    }
    close(ready[1]);
    char c = 0;
    const ssize_t got = read(ready[0], &c, 1);
    close(ready[0]);
    rendezvous.Release();
    ASSERT_EQ(got, 1) << "the child could not connect";
  });
  close(hold[1]);
  close(hold[0]);
  int wstatus = 0;
  waitpid(child, &wstatus, 0);
  ASSERT_EQ(o.status[listener_rank].code(), absl::StatusCode::kPermissionDenied)
      << o.status[listener_rank];
  EXPECT_TRUE(absl::StrContains(o.status[listener_rank].message(),
                                "is a socket of uid 65534"))
      << o.status[listener_rank];
  EXPECT_FALSE(o.status[1 - listener_rank].ok());
  EXPECT_LT(o.took, absl::Seconds(10)) << "a rank waited out its timeout";
}

TEST(GlooAdmissionTest, AdmittedRanksLeaveNoKeys) {
  const std::string name = Name();
  HoldingRendezvous rendezvous(absl::StrCat("__shoal/gloo/", name, "/"), 3);
  Outcome o = CreateAll(
      rendezvous, name, 3, [] {}, /*sync_exchange=*/true);
  for (int r = 0; r < 3; ++r) EXPECT_TRUE(o.status[r].ok()) << o.status[r];
  EXPECT_TRUE(rendezvous.Live().empty())
      << "left: " << *rendezvous.Live().begin();
}

// A rank listens on the address of its route toward MASTER_ADDR, which
// `shoal launch` sets to --coordinator's host: a host name resolves.
TEST(GlooListenAddressTest, AHeadNamedByHostNameIsResolved) {
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  addrinfo hints = {};
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* found = nullptr;
  if (getaddrinfo(host, nullptr, &hints, &found) != 0)
    GTEST_SKIP() << "this host's name does not resolve";
  sockaddr_storage ss = {};
  std::memcpy(&ss, found->ai_addr, found->ai_addrlen);
  freeaddrinfo(found);
  const std::optional<IpAddress> ip = IpAddress::Of(ss);
  ASSERT_TRUE(ip.has_value());
  if (ip->IsLoopback()) GTEST_SKIP() << "this host's name is loopback";
  unsetenv("SHOAL_GLOO_HOSTNAME");
  setenv("MASTER_ADDR", host, 1);
  // The route to one of this machine's own addresses starts there.
  EXPECT_EQ(GlooListenAddress(), ip->ToString()) << "MASTER_ADDR=" << host;
  setenv("MASTER_ADDR", "127.0.0.1", 1);
  EXPECT_EQ(GlooListenAddress(), "127.0.0.1");
  setenv("SHOAL_GLOO_HOSTNAME", "10.1.2.3", 1);
  EXPECT_EQ(GlooListenAddress(), "10.1.2.3");
  unsetenv("SHOAL_GLOO_HOSTNAME");
  unsetenv("MASTER_ADDR");
}

TEST(GlooListenAddressTest, AnIpv6HeadIsRouted) {
  int tried = 0;
  for (const IpAddress& a : LocalAddresses()) {
    // Link-local addresses need a scope; loopback is the fallback itself.
    if (a.family != AF_INET6 || a.IsLoopback() ||
        (a.bytes[0] == 0xfe && (a.bytes[1] & 0xc0) == 0x80)) {
      continue;
    }
    ++tried;
    setenv("MASTER_ADDR", a.ToString().c_str(), 1);
    EXPECT_EQ(GlooListenAddress(), a.ToString());
  }
  unsetenv("MASTER_ADDR");
  if (tried == 0) GTEST_SKIP() << "no global IPv6 address here";
}

}  // namespace
}  // namespace shoal::collectives
