#include "collectives/gloo/gloo_admission.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <linux/filter.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <pwd.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/attributes.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "base/log.h"
#include "base/status_macros.h"
#include "collectives/gloo/gloo_connections.h"
#include "gloo/common/error.h"
#include "gloo/context.h"
#include "gloo/rendezvous/context.h"
#include "gloo/rendezvous/store.h"
#include "gloo/transport/device.h"
#include "gloo/transport/unbound_buffer.h"

namespace shoal::collectives {

namespace {

// How often the watcher reads the failure key, and the longest single wait
// for a key (between waits, a recorded failure ends the wait).
constexpr absl::Duration kWatchPoll = absl::Milliseconds(50);
constexpr absl::Duration kWaitSlice = absl::Milliseconds(100);

// A connection reached a listener before its filter: the mesh is made again
// (thrown from the store's set(), through gloo's connectFullMesh).
class Intruded : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A status to carry through gloo's frames (thrown from the store).
class StatusError : public std::runtime_error {
 public:
  explicit StatusError(absl::Status s)
      : std::runtime_error(s.ToString()), status(std::move(s)) {}
  absl::Status status;
};

std::chrono::milliseconds Millis(absl::Duration d) {
  return std::chrono::milliseconds(
      std::max<int64_t>(absl::ToInt64Milliseconds(d), 1));
}

// "ip:port" of a socket address.
std::string Endpoint(const sockaddr_storage& a) {
  std::optional<IpAddress> ip = IpAddress::Of(a);
  if (!ip.has_value()) return "?";
  const uint16_t port =
      a.ss_family == AF_INET
          ? ntohs(reinterpret_cast<const sockaddr_in*>(&a)->sin_port)
          : ntohs(reinterpret_cast<const sockaddr_in6*>(&a)->sin6_port);
  return ip->family == AF_INET6 ? absl::StrCat("[", ip->ToString(), "]:", port)
                                : absl::StrCat(ip->ToString(), ":", port);
}

uint16_t PortOf(const sockaddr_storage& a) {
  if (a.ss_family == AF_INET)
    return ntohs(reinterpret_cast<const sockaddr_in*>(&a)->sin_port);
  if (a.ss_family == AF_INET6)
    return ntohs(reinterpret_cast<const sockaddr_in6*>(&a)->sin6_port);
  return 0;
}

bool SameEndpoint(const sockaddr_storage& a, const sockaddr_storage& b) {
  return IpAddress::Of(a) == IpAddress::Of(b) && PortOf(a) == PortOf(b);
}

// Raw system calls on descriptors other threads own (gloo's): as
// gloo_connections.cc, so that ThreadSanitizer does not take the kernel's
// answer for shared memory.
int StatOf(int fd, struct stat* st) { return syscall(SYS_fstat, fd, st); }
int NameOf(int fd, sockaddr_storage* a) {
  socklen_t n = sizeof(*a);
  return syscall(SYS_getsockname, fd, a, &n);
}
bool Listening(int fd) {
  int on = 0;
  socklen_t n = sizeof(on);
  return syscall(SYS_getsockopt, fd, SOL_SOCKET, SO_ACCEPTCONN, &on, &n) == 0 &&
         on != 0;
}

// One row of /proc/net/tcp or tcp6.
struct TcpEntry {
  IpAddress local, remote;
  uint16_t local_port = 0, remote_port = 0;
  int state = 0;  // the kernel's TCP_* (1 established, 3 syn_recv, 10 listen)
  uid_t uid = 0;
};

// "0100007F:1F90": the address as the kernel prints it (each 32-bit word in
// this machine's byte order) and the port.
bool ParseHexEndpoint(absl::string_view text, int family, IpAddress* ip,
                      uint16_t* port) {
  const size_t colon = text.find(':');
  const size_t words = family == AF_INET ? 1 : 4;
  if (colon != words * 8) return false;
  ip->family = family;
  for (size_t w = 0; w < words; ++w) {
    uint32_t v = 0;
    if (!absl::SimpleHexAtoi(text.substr(w * 8, 8), &v)) return false;
    std::memcpy(ip->bytes.data() + 4 * w, &v, 4);
  }
  uint32_t p = 0;
  if (!absl::SimpleHexAtoi(text.substr(colon + 1), &p) || p > 65535)
    return false;
  *port = static_cast<uint16_t>(p);
  return true;
}

// This network namespace's TCP sockets (both tables).
std::vector<TcpEntry> ReadTcpTable() {
  std::vector<TcpEntry> out;
  for (const auto& [path, family] :
       {std::pair<const char*, int>{"/proc/net/tcp", AF_INET},
        std::pair<const char*, int>{"/proc/net/tcp6", AF_INET6}}) {
    std::ifstream in(path);
    std::string line;
    std::getline(in, line);  // the header
    while (std::getline(in, line)) {
      std::vector<absl::string_view> f =
          absl::StrSplit(line, ' ', absl::SkipEmpty());
      if (f.size() < 8) continue;
      TcpEntry e;
      uint32_t uid = 0;
      if (!ParseHexEndpoint(f[1], family, &e.local, &e.local_port) ||
          !ParseHexEndpoint(f[2], family, &e.remote, &e.remote_port) ||
          !absl::SimpleHexAtoi(f[3], &e.state) ||
          !absl::SimpleAtoi(f[7], &uid)) {
        continue;
      }
      e.uid = uid;
      out.push_back(e);
    }
  }
  return out;
}

bool Matches(const TcpEntry& e, const sockaddr_storage& local,
             const sockaddr_storage* remote) {
  if (IpAddress::Of(local) != e.local || PortOf(local) != e.local_port)
    return false;
  return remote == nullptr || (IpAddress::Of(*remote) == e.remote &&
                               PortOf(*remote) == e.remote_port);
}

std::string UserName(uid_t uid) {
  passwd pw;
  passwd* found = nullptr;
  char buf[1024];
  if (getpwuid_r(uid, &pw, buf, sizeof(buf), &found) == 0 && found != nullptr)
    return absl::StrCat("uid ", uid, " (", found->pw_name, ")");
  return absl::StrCat("uid ", uid);
}

// The connections a listener at `address` has that are not its own (a
// child in the handshake, queued or accepted), as "from ip:port" text.
std::string ConnectionsTo(const sockaddr_storage& address) {
  std::vector<std::string> from;
  for (const TcpEntry& e : ReadTcpTable()) {
    if (e.state == 10 || !Matches(e, address, nullptr)) continue;
    from.push_back(
        e.remote.family == AF_INET6
            ? absl::StrCat("[", e.remote.ToString(), "]:", e.remote_port)
            : absl::StrCat(e.remote.ToString(), ":", e.remote_port));
  }
  if (from.empty()) return "";
  return absl::StrCat(" (from ", absl::StrJoin(from, ", "), ")");
}

// The classic BPF program that returns the whole packet when its source
// address (read through the network header: a TCP socket's filter sees the
// packet from its TCP header on) is allowed, else 0 (dropped). Errors:
// InvalidArgument when a jump would not fit (too many addresses).
absl::StatusOr<std::vector<sock_filter>> FilterProgram(int family,
                                                       const SourceFilter& f) {
  std::vector<IpAddress> mine;
  for (const IpAddress& a : f.addresses) {
    if (a.family == family) mine.push_back(a);
  }
  if (family == AF_INET6 && f.loopback) {
    IpAddress one;
    one.family = AF_INET6;
    one.bytes[15] = 1;
    mine.push_back(one);
  }
  const uint32_t net = static_cast<uint32_t>(SKF_NET_OFF);
  auto word = [](const IpAddress& a, int w) {
    return (uint32_t{a.bytes[4 * w]} << 24) |
           (uint32_t{a.bytes[4 * w + 1]} << 16) |
           (uint32_t{a.bytes[4 * w + 2]} << 8) | a.bytes[4 * w + 3];
  };
  // Layout: the address tests, [the 127/8 test], "drop", "accept".
  const bool v4_loopback = family == AF_INET && f.loopback;
  const size_t tests = family == AF_INET
                           ? 1 + mine.size() + (v4_loopback ? 2 : 0)
                           : 8 * mine.size();
  const size_t accept = tests + 1;
  std::vector<sock_filter> p;
  auto to_accept = [&](size_t at) { return accept - (at + 1); };
  if (family == AF_INET) {
    p.push_back(BPF_STMT(BPF_LD | BPF_W | BPF_ABS, net + 12));
    for (const IpAddress& a : mine) {
      const size_t at = p.size();
      if (to_accept(at) > 255)
        return absl::InvalidArgumentError("too many addresses");
      p.push_back(BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, word(a, 0),
                           static_cast<uint8_t>(to_accept(at)), 0));
    }
    if (v4_loopback) {
      p.push_back(BPF_STMT(BPF_ALU | BPF_AND | BPF_K, 0xff000000u));
      const size_t at = p.size();
      p.push_back(BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 0x7f000000u,
                           static_cast<uint8_t>(to_accept(at)), 0));
    }
  } else {
    for (const IpAddress& a : mine) {
      const size_t block = p.size();
      for (int w = 0; w < 4; ++w) {
        p.push_back(BPF_STMT(BPF_LD | BPF_W | BPF_ABS, net + 8 + 4 * w));
        const size_t at = p.size();
        const size_t next = block + 8 - (at + 1);
        const size_t hit = w == 3 ? to_accept(at) : 0;
        if (hit > 255 || next > 255)
          return absl::InvalidArgumentError("too many addresses");
        p.push_back(BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, word(a, w),
                             static_cast<uint8_t>(hit),
                             static_cast<uint8_t>(next)));
      }
    }
  }
  p.push_back(BPF_STMT(BPF_RET | BPF_K, 0));
  p.push_back(BPF_STMT(BPF_RET | BPF_K, 0xffffffffu));
  return p;
}

// The first address `hostname` resolves to (as gloo's device resolves it).
std::optional<IpAddress> Resolve(const std::string& hostname) {
  if (std::optional<IpAddress> ip = IpAddress::Parse(hostname)) return ip;
  addrinfo hints = {};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (getaddrinfo(hostname.c_str(), nullptr, &hints, &res) != 0) return {};
  std::optional<IpAddress> out;
  for (addrinfo* r = res; r != nullptr && !out.has_value(); r = r->ai_next) {
    sockaddr_storage ss = {};
    std::memcpy(&ss, r->ai_addr, std::min<size_t>(r->ai_addrlen, sizeof(ss)));
    out = IpAddress::Of(ss);
  }
  freeaddrinfo(res);
  return out;
}

bool Contains(const std::vector<IpAddress>& v, const IpAddress& a) {
  return std::find(v.begin(), v.end(), a) != v.end();
}

// Equal in time whatever the bytes (a token is compared with what a
// stranger sent).
bool SameBytes(const uint8_t* a, const uint8_t* b, size_t n) {
  uint8_t diff = 0;
  for (size_t i = 0; i < n; ++i) diff |= a[i] ^ b[i];
  return diff == 0;
}

// The far end of the connection of `context`'s pair with `peer`.
std::string ConnectionFrom(gloo::Context& context, int peer) {
  const GlooConnections found = GlooConnections::Find(context, context.rank);
  for (const GlooConnections::Socket& c : found.sockets()) {
    if (c.peer == peer) return Endpoint(c.remote);
  }
  return "an address not found";
}

}  // namespace

// The buffers go first: each one's destructor waits until gloo's device
// thread no longer uses it (and so its memory). After a round given up, that
// thread may be writing into them until then; its wait is on atomics in
// libgloo, which ThreadSanitizer does not see (tools/tsan.supp names this
// function).
ABSL_ATTRIBUTE_NOINLINE void GlooAdmission::FreeRoundAfterGloo(
    RoundBuffers& buffers) {
  buffers.recv.clear();
  buffers.send.reset();
  std::vector<uint8_t>().swap(buffers.recv_storage);
  std::vector<uint8_t>().swap(buffers.send_storage);
}

GlooAdmission::RoundBuffers::~RoundBuffers() { FreeRoundAfterGloo(*this); }

// ---- addresses -------------------------------------------------------------

std::optional<IpAddress> IpAddress::Parse(absl::string_view text) {
  std::string s(text);
  if (!s.empty() && s.front() == '[' && s.back() == ']')
    s = s.substr(1, s.size() - 2);
  IpAddress a;
  if (inet_pton(AF_INET, s.c_str(), a.bytes.data()) == 1) {
    a.family = AF_INET;
    return a;
  }
  if (inet_pton(AF_INET6, s.c_str(), a.bytes.data()) == 1) {
    a.family = AF_INET6;
    return a;
  }
  return std::nullopt;
}

std::optional<IpAddress> IpAddress::Of(const sockaddr_storage& s) {
  IpAddress a;
  if (s.ss_family == AF_INET) {
    a.family = AF_INET;
    std::memcpy(a.bytes.data(),
                &reinterpret_cast<const sockaddr_in*>(&s)->sin_addr, 4);
    return a;
  }
  if (s.ss_family == AF_INET6) {
    a.family = AF_INET6;
    std::memcpy(a.bytes.data(),
                &reinterpret_cast<const sockaddr_in6*>(&s)->sin6_addr, 16);
    return a;
  }
  return std::nullopt;
}

std::string IpAddress::ToString() const {
  char text[INET6_ADDRSTRLEN] = {};
  if (family == 0 ||
      inet_ntop(family, bytes.data(), text, sizeof(text)) == nullptr) {
    return "?";
  }
  return text;
}

bool IpAddress::IsLoopback() const {
  if (family == AF_INET) return bytes[0] == 127;
  if (family != AF_INET6) return false;
  for (int i = 0; i < 15; ++i) {
    if (bytes[i] != 0) return false;
  }
  return bytes[15] == 1;
}

bool SourceFilter::Allows(const IpAddress& a) const {
  return (loopback && a.IsLoopback()) || Contains(addresses, a);
}

std::string SourceFilter::ToString() const {
  std::vector<std::string> parts;
  for (const IpAddress& a : addresses) parts.push_back(a.ToString());
  if (loopback) parts.push_back("loopback");
  return absl::StrJoin(parts, ", ");
}

std::vector<IpAddress> LocalAddresses() {
  std::vector<IpAddress> out;
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return out;
  for (ifaddrs* i = list; i != nullptr; i = i->ifa_next) {
    if (i->ifa_addr == nullptr) continue;
    const int family = i->ifa_addr->sa_family;
    if (family != AF_INET && family != AF_INET6) continue;
    sockaddr_storage ss = {};
    std::memcpy(&ss, i->ifa_addr,
                family == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6));
    std::optional<IpAddress> a = IpAddress::Of(ss);
    if (a.has_value() && !Contains(out, *a)) out.push_back(*a);
  }
  freeifaddrs(list);
  std::sort(out.begin(), out.end());
  return out;
}

// ---- listeners -------------------------------------------------------------

GlooListener& GlooListener::operator=(GlooListener&& o) noexcept {
  if (this != &o) {
    Close();
    dup_ = o.dup_;
    o.dup_ = -1;
  }
  return *this;
}

void GlooListener::Shutdown() const {
  if (dup_ >= 0) shutdown(dup_, SHUT_RDWR);
}

void GlooListener::Close() {
  if (dup_ >= 0) close(dup_);
  dup_ = -1;
}

absl::StatusOr<GlooListener> GlooListener::Admit(
    const sockaddr_storage& address, const SourceFilter& sources) {
  // The listener among this process's descriptors.
  int fd = -1;
  ino_t inode = 0;
  {
    std::unique_ptr<DIR, int (*)(DIR*)> dir(opendir("/proc/self/fd"), closedir);
    if (dir == nullptr) return absl::InternalError("cannot list /proc/self/fd");
    while (dirent* e = readdir(dir.get())) {
      char* end = nullptr;
      const long n = std::strtol(e->d_name, &end, 10);
      if (end == e->d_name || *end != '\0') continue;
      struct stat st;
      sockaddr_storage a = {};
      if (StatOf(static_cast<int>(n), &st) != 0 || !S_ISSOCK(st.st_mode) ||
          NameOf(static_cast<int>(n), &a) != 0 || !SameEndpoint(a, address) ||
          !Listening(static_cast<int>(n))) {
        continue;
      }
      fd = static_cast<int>(n);
      inode = st.st_ino;
      break;
    }
  }
  const std::string where = Endpoint(address);
  if (fd < 0) {
    return absl::AbortedError(absl::StrCat(
        "the listener at ", where,
        " is gone: gloo accepted a connection on it before its filter",
        ConnectionsTo(address)));
  }
  // A descriptor of our own: gloo may close its number at any time.
  GlooListener l;
  l.dup_ = static_cast<int>(syscall(SYS_fcntl, fd, F_DUPFD_CLOEXEC, 0));
  struct stat st;
  sockaddr_storage a = {};
  if (l.dup_ < 0 || StatOf(l.dup_, &st) != 0 || st.st_ino != inode ||
      NameOf(l.dup_, &a) != 0 || !SameEndpoint(a, address) ||
      !Listening(l.dup_)) {
    return absl::AbortedError(absl::StrCat(
        "the listener at ", where,
        " closed while it was being found: gloo accepted a connection on it "
        "before its filter",
        ConnectionsTo(address)));
  }
  SHOAL_ASSIGN_OR_RETURN(std::vector<sock_filter> code,
                         FilterProgram(address.ss_family, sources));
  sock_fprog prog = {static_cast<unsigned short>(code.size()), code.data()};
  if (setsockopt(l.dup_, SOL_SOCKET, SO_ATTACH_FILTER, &prog, sizeof(prog)) !=
      0) {
    return SHOAL_ERRNO(
        absl::StrCat("SO_ATTACH_FILTER on the listener at ", where));
  }
  // Anything that got in before the filter: queued, or taken by gloo (which
  // closes its listener once it accepted).
  pollfd p = {l.dup_, POLLIN, 0};
  if (poll(&p, 1, 0) > 0 && (p.revents & POLLIN) != 0) {
    return absl::AbortedError(
        absl::StrCat("a connection reached the listener at ", where,
                     " before its filter", ConnectionsTo(address)));
  }
  if (StatOf(fd, &st) != 0 || st.st_ino != inode) {
    return absl::AbortedError(
        absl::StrCat("gloo accepted a connection on the listener at ", where,
                     " before its filter", ConnectionsTo(address)));
  }
  return l;
}

// ---- the store gloo meets through ------------------------------------------

struct GlooAdmission::Record {
  std::optional<IpAddress> listen;  // where the rank listens
  std::vector<IpAddress> from;      // its node's addresses
  std::vector<std::string> tokens;  // per peer rank ("" for itself)

  std::string Encode() const {
    std::vector<std::string> f, t;
    for (const IpAddress& a : from) f.push_back(a.ToString());
    for (const std::string& k : tokens)
      t.push_back(k.empty() ? "-" : absl::BytesToHexString(k));
    return absl::StrCat("listen ", listen ? listen->ToString() : "-", "\nfrom ",
                        absl::StrJoin(f, " "), "\ntokens ",
                        absl::StrJoin(t, " "), "\n");
  }
  static std::optional<Record> Decode(absl::string_view text, int world) {
    Record r;
    bool has_tokens = false;
    for (absl::string_view line : absl::StrSplit(text, '\n')) {
      std::vector<std::string> w = absl::StrSplit(line, ' ', absl::SkipEmpty());
      if (w.empty()) continue;
      if (w[0] == "listen" && w.size() == 2) {
        r.listen = IpAddress::Parse(w[1]);
      } else if (w[0] == "from") {
        for (size_t i = 1; i < w.size(); ++i) {
          std::optional<IpAddress> a = IpAddress::Parse(w[i]);
          if (!a.has_value()) return std::nullopt;
          r.from.push_back(*a);
        }
      } else if (w[0] == "tokens") {
        if (static_cast<int>(w.size()) != world + 1) return std::nullopt;
        for (size_t i = 1; i < w.size(); ++i) {
          if (w[i] == "-") {
            r.tokens.emplace_back();
            continue;
          }
          if (w[i].size() != 2 * kTokenBytes) return std::nullopt;
          r.tokens.push_back(absl::HexStringToBytes(w[i]));
        }
        has_tokens = true;
      }
    }
    if (!has_tokens) return std::nullopt;
    return r;
  }
};

// gloo's Store over the rendezvous, its keys under "<prefix><tag>". With
// `filters`, the set() of this rank's pair addresses admits the listeners
// first (AdmitListeners). Failures are thrown (gloo expects exceptions):
// StatusError, or Intruded.
class GlooAdmission::Store : public gloo::rendezvous::Store {
 public:
  Store(GlooAdmission* a, std::string keys,
        const std::vector<SourceFilter>* filters)
      : a_(a), keys_(std::move(keys)), filters_(filters) {}

  void set(const std::string& key, const std::vector<char>& data) override {
    if (filters_ != nullptr && key == std::to_string(a_->rank_)) {
      a_->AdmitListeners(data, *filters_);
    }
    Check(a_->Set(keys_ + key, absl::string_view(data.data(), data.size())));
  }
  std::vector<char> get(const std::string& key) override {
    absl::StatusOr<std::string> v =
        a_->Get(keys_ + key, absl::Now() + a_->timeout_);
    Check(v.status());
    return std::vector<char>(v->begin(), v->end());
  }
  void wait(const std::vector<std::string>& keys) override {
    wait(keys, Millis(a_->timeout_));
  }
  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override {
    const absl::Time deadline =
        absl::Now() + absl::Milliseconds(timeout.count());
    for (const std::string& key : keys) {
      Check(a_->Get(keys_ + key, deadline).status());
    }
  }

 private:
  static void Check(const absl::Status& s) {
    if (!s.ok()) throw StatusError(s);
  }

  GlooAdmission* const a_;
  const std::string keys_;
  const std::vector<SourceFilter>* const filters_;
};

// ---- GlooAdmission ---------------------------------------------------------

GlooAdmission::GlooAdmission(Rendezvous& rendezvous, std::string prefix,
                             int rank, int world, std::string hostname,
                             absl::Duration timeout,
                             std::map<std::string, std::string> peer_names)
    : rendezvous_(rendezvous),
      prefix_(std::move(prefix)),
      rank_(rank),
      world_(world),
      hostname_(std::move(hostname)),
      timeout_(timeout),
      peer_names_(std::move(peer_names)),
      local_(LocalAddresses()) {
  if (world_ > 1) watcher_ = std::thread([this] { Watch(); });
}

GlooAdmission::~GlooAdmission() {
  {
    MutexLock lock(&mu_);
    stop_ = true;
    watch_cv_.SignalAll();
  }
  if (watcher_.joinable()) watcher_.join();
  CloseListeners();
}

absl::Status GlooAdmission::Set(const std::string& key,
                                absl::string_view value) {
  MutexLock lock(&rendezvous_mu_);
  return rendezvous_.Set(key, value);
}

absl::StatusOr<std::string> GlooAdmission::Get(const std::string& key,
                                               absl::Time deadline) {
  while (true) {
    SHOAL_RETURN_IF_ERROR(PeerFailure());
    const absl::Duration slice =
        std::clamp(deadline - absl::Now(), absl::ZeroDuration(), kWaitSlice);
    absl::StatusOr<std::string> v;
    {
      MutexLock lock(&rendezvous_mu_);
      v = rendezvous_.Get(key, slice);
    }
    if (v.ok() || (v.status().code() != absl::StatusCode::kDeadlineExceeded &&
                   v.status().code() != absl::StatusCode::kNotFound)) {
      return v;
    }
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError(absl::StrCat(
          "'", key, "' was not set within ", absl::FormatDuration(timeout_)));
    }
  }
}

void GlooAdmission::Delete(const std::string& key) {
  MutexLock lock(&rendezvous_mu_);
  rendezvous_.Delete(key).IgnoreError();
}

// The failure record: "<code>\n<rank>\n<message>".
absl::Status GlooAdmission::Fail(absl::Status s) {
  if (s.ok()) return s;
  {
    MutexLock lock(&mu_);
    if (recorded_ || world_ == 1) return s;
    recorded_ = true;
  }
  Set(prefix_ + "failed",
      absl::StrCat(static_cast<int>(s.code()), "\n", rank_, "\n", s.message()))
      .IgnoreError();
  return s;
}

absl::Status GlooAdmission::PeerFailure() {
  MutexLock lock(&mu_);
  return peer_failure_;
}

void GlooAdmission::Watch() {
  while (true) {
    {
      MutexLock lock(&mu_);
      if (!stop_) watch_cv_.WaitWithDeadline(&mu_, absl::Now() + kWatchPoll);
      if (stop_) return;
      if (!peer_failure_.ok()) {
        // Waits that started since are woken too.
        WakeWaits();
        continue;
      }
    }
    absl::Status seen = RecordedFailure();
    if (seen.ok()) continue;
    MutexLock lock(&mu_);
    if (peer_failure_.ok()) peer_failure_ = seen;
    WakeWaits();
  }
}

absl::Status GlooAdmission::AnyPeerFailure() {
  absl::Status peer = PeerFailure();
  return peer.ok() ? RecordedFailure() : peer;
}

absl::Status GlooAdmission::RecordedFailure() {
  absl::StatusOr<std::string> v;
  {
    MutexLock lock(&rendezvous_mu_);
    v = rendezvous_.Get(prefix_ + "failed", absl::ZeroDuration());
  }
  if (!v.ok()) return absl::OkStatus();
  std::vector<std::string> parts = absl::StrSplit(*v, absl::MaxSplits('\n', 2));
  int code = 0, who = -1;
  if (parts.size() != 3 || !absl::SimpleAtoi(parts[0], &code) ||
      !absl::SimpleAtoi(parts[1], &who) || who == rank_) {
    return absl::OkStatus();
  }
  if (code <= 0 || code > static_cast<int>(absl::StatusCode::kUnauthenticated))
    code = static_cast<int>(absl::StatusCode::kUnavailable);
  return absl::Status(
      static_cast<absl::StatusCode>(code),
      absl::StrCat("rank ", who, " gave up connecting: ", parts[2]));
}

void GlooAdmission::WakeWaits() {
  for (const GlooListener& l : listeners_) l.Shutdown();
  for (gloo::transport::UnboundBuffer* b : waiting_) {
    b->abortWaitRecv();
    b->abortWaitSend();
  }
}

void GlooAdmission::CloseListeners() {
  MutexLock lock(&mu_);
  listeners_.clear();
}

std::string GlooAdmission::Peer(int p,
                                const std::vector<Record>& records) const {
  std::string out = absl::StrCat("rank ", p);
  if (p < static_cast<int>(records.size()) && records[p].listen.has_value()) {
    const std::string at = records[p].listen->ToString();
    absl::StrAppend(&out, " (at ", at);
    auto name = peer_names_.find(at);
    if (name != peer_names_.end()) absl::StrAppend(&out, " — ", name->second);
    absl::StrAppend(&out, ")");
  }
  return out;
}

absl::Status GlooAdmission::FromGloo(const std::string& message) const {
  const bool late = absl::StrContains(message, "Timed out") ||
                    absl::StrContains(message, "timeout") ||
                    absl::StrContains(message, "DEADLINE_EXCEEDED");
  if (late) return absl::DeadlineExceededError(message);
  if (absl::StrContains(message, "Connection refused")) {
    return absl::UnavailableError(absl::StrCat(
        message,
        " (the peer's listener was closed: another process connected to it "
        "first, or the peer gave up)"));
  }
  return absl::UnavailableError(message);
}

absl::StatusOr<std::vector<GlooAdmission::Record>>
GlooAdmission::ExchangeRecords(const std::string& keys) {
  Record mine;
  mine.listen = Resolve(hostname_);
  mine.from = local_;
  mine.tokens.resize(world_);
  for (int p = 0; p < world_; ++p) {
    if (p == rank_) continue;
    std::string t(kTokenBytes, '\0');
    if (getrandom(t.data(), t.size(), 0) != static_cast<ssize_t>(t.size()))
      return SHOAL_ERRNO("getrandom");
    mine.tokens[p] = std::move(t);
  }
  SHOAL_RETURN_IF_ERROR(
      Set(absl::StrCat(keys, "admission/", rank_), mine.Encode()));
  std::vector<Record> records(world_);
  records[rank_] = std::move(mine);
  const absl::Time deadline = absl::Now() + timeout_;
  for (int p = 0; p < world_; ++p) {
    if (p == rank_) continue;
    absl::StatusOr<std::string> text =
        Get(absl::StrCat(keys, "admission/", p), deadline);
    if (!text.ok()) {
      if (text.status().code() != absl::StatusCode::kDeadlineExceeded)
        return text.status();
      return absl::DeadlineExceededError(absl::StrCat(
          "rank ", p, " did not come within ", absl::FormatDuration(timeout_)));
    }
    std::optional<Record> r = Record::Decode(*text, world_);
    if (!r.has_value() || r->tokens[rank_].size() != kTokenBytes) {
      return absl::InvalidArgumentError(
          absl::StrCat("rank ", p, "'s admission record is malformed"));
    }
    records[p] = std::move(*r);
  }
  return records;
}

absl::StatusOr<std::vector<SourceFilter>> GlooAdmission::Filters(
    const std::vector<Record>& records) const {
  std::vector<SourceFilter> filters(world_);
  for (int p = 0; p < world_; ++p) {
    if (p == rank_) continue;
    const Record& r = records[p];
    const bool on_this_node =
        r.listen.has_value() &&
        (r.listen->IsLoopback() || Contains(local_, *r.listen));
    SourceFilter& f = filters[p];
    if (on_this_node) {
      // Its connections come from this node's own addresses.
      f.addresses = local_;
      f.loopback = true;
      continue;
    }
    std::vector<IpAddress> from = r.from;
    if (r.listen.has_value()) from.push_back(*r.listen);
    for (const IpAddress& a : from) {
      if (!a.IsLoopback() && !Contains(local_, a) && !Contains(f.addresses, a))
        f.addresses.push_back(a);
    }
    if (f.addresses.empty()) {
      return absl::FailedPreconditionError(absl::StrCat(
          Peer(p, records), " is on another node, but its addresses (",
          SourceFilter{from, false}.ToString(),
          ") are loopback or this node's own: its connections could not be "
          "told from this node's"));
    }
  }
  return filters;
}

void GlooAdmission::AdmitListeners(const std::vector<char>& addresses,
                                   const std::vector<SourceFilter>& filters) {
  // gloo's record: one address per peer, in rank order without this rank,
  // each its sockaddr_storage followed by gloo's sequence number.
  const size_t peers = static_cast<size_t>(world_ - 1);
  const size_t entry = addresses.size() / peers;
  if (addresses.size() % peers != 0 || entry < sizeof(sockaddr_storage)) {
    throw StatusError(absl::InternalError(
        absl::StrCat("gloo's address record has ", addresses.size(),
                     " bytes for ", peers, " peers")));
  }
  for (size_t j = 0; j < peers; ++j) {
    const int p = static_cast<int>(j) < rank_ ? static_cast<int>(j)
                                              : static_cast<int>(j) + 1;
    sockaddr_storage ss = {};
    std::memcpy(&ss, addresses.data() + j * entry, sizeof(ss));
    const SourceFilter& f = filters[p];
    const bool any =
        f.loopback || std::any_of(f.addresses.begin(), f.addresses.end(),
                                  [&](const IpAddress& a) {
                                    return a.family == ss.ss_family;
                                  });
    if (!any) {
      throw StatusError(absl::FailedPreconditionError(absl::StrCat(
          "rank ", p, " has no address of the family this rank listens on (",
          Endpoint(ss), "; its addresses: ", f.ToString(), ")")));
    }
    absl::StatusOr<GlooListener> l = GlooListener::Admit(ss, f);
    if (!l.ok()) {
      if (l.status().code() == absl::StatusCode::kAborted) {
        throw Intruded(absl::StrCat("the listener for rank ", p, ": ",
                                    l.status().message()));
      }
      throw StatusError(l.status());
    }
    MutexLock lock(&mu_);
    listeners_.push_back(std::move(*l));
  }
  // The watcher may have seen a failure before these listeners were there.
  MutexLock lock(&mu_);
  if (!peer_failure_.ok()) throw StatusError(peer_failure_);
}

absl::Status GlooAdmission::CheckPeers(
    gloo::Context& context, const std::vector<SourceFilter>& filters,
    const std::vector<Record>& records) const {
  const GlooConnections found = GlooConnections::Find(context, rank_);
  std::vector<bool> seen(world_, false);
  std::optional<std::vector<TcpEntry>> table;
  for (const GlooConnections::Socket& s : found.sockets()) {
    seen[s.peer] = true;
    const std::optional<IpAddress> from = IpAddress::Of(s.remote);
    const SourceFilter& f = filters[s.peer];
    if (!from.has_value() || !f.Allows(*from)) {
      return absl::PermissionDeniedError(absl::StrCat(
          "a process that does not hold the job's secret is connected in "
          "place of ",
          Peer(s.peer, records), ": its connection comes from ",
          Endpoint(s.remote), ", not from that rank's node (", f.ToString(),
          ")"));
    }
    if (!f.loopback) continue;
    // From this node: the other end must be a socket of this user.
    if (!table.has_value()) table = ReadTcpTable();
    std::optional<uid_t> theirs, ours;
    for (const TcpEntry& e : *table) {
      if (Matches(e, s.remote, &s.local)) theirs = e.uid;
      if (Matches(e, s.local, &s.remote)) ours = e.uid;
    }
    if (!ours.has_value()) ours = geteuid();
    if (theirs.has_value() && *theirs != *ours) {
      return absl::PermissionDeniedError(absl::StrCat(
          "a process that does not hold the job's secret is connected in "
          "place of ",
          Peer(s.peer, records), ": its connection, from ", Endpoint(s.remote),
          ", is a socket of ", UserName(*theirs), ", not of this job's user (",
          UserName(*ours), ")"));
    }
  }
  for (int p = 0; p < world_; ++p) {
    if (p != rank_ && !seen[p]) {
      return absl::UnavailableError(absl::StrCat(
          "the connection to ", Peer(p, records),
          " closed before it could be checked (it was reset: another process "
          "may have taken that rank's listener first, or the rank gave up)"));
    }
  }
  return absl::OkStatus();
}

absl::Status GlooAdmission::Round(
    gloo::Context& context, uint64_t slot, const std::vector<uint8_t>& out,
    size_t bytes, const std::function<absl::Status(int, const uint8_t*)>& check,
    const std::string& what) {
  RoundBuffers buffers;
  buffers.send_storage = out;
  buffers.recv_storage.assign(bytes * world_, 0);
  uint8_t* const recv_storage = buffers.recv_storage.data();
  buffers.send = context.createUnboundBuffer(buffers.send_storage.data(),
                                             buffers.send_storage.size());
  gloo::transport::UnboundBuffer* const send = buffers.send.get();
  std::vector<std::unique_ptr<gloo::transport::UnboundBuffer>>& recv =
      buffers.recv;
  recv.resize(world_);
  for (int p = 0; p < world_; ++p) {
    if (p == rank_) continue;
    recv[p] = context.createUnboundBuffer(recv_storage + p * bytes, bytes);
  }
  {
    MutexLock lock(&mu_);
    waiting_.push_back(send);
    for (auto& r : recv) {
      if (r != nullptr) waiting_.push_back(r.get());
    }
    // A failure seen before these waits existed.
    if (!peer_failure_.ok()) WakeWaits();
  }
  const absl::Time deadline = absl::Now() + timeout_;
  absl::Status s;
  int waiting_for = -1;
  try {
    for (int p = 0; p < world_; ++p) {
      if (p == rank_) continue;
      recv[p]->recv(p, slot, 0, bytes);
      send->send(p, slot, p * bytes, bytes);
    }
    for (int p = 0; p < world_ && s.ok(); ++p) {
      if (p == rank_) continue;
      waiting_for = p;
      if (!recv[p]->waitRecv(Millis(deadline - absl::Now()))) {
        s = absl::AbortedError(absl::StrCat(
            "rank ", p, "'s ", what, " had not come on the connection from ",
            ConnectionFrom(context, p)));
        break;
      }
      s = check(p, recv_storage + p * bytes);
    }
    for (int i = 1; i < world_ && s.ok(); ++i) {
      waiting_for = -1;
      if (!send->waitSend(Millis(deadline - absl::Now())))
        s = absl::AbortedError(
            absl::StrCat("this rank's ", what, "s were not all sent"));
    }
  } catch (const std::exception& e) {
    const std::string message = e.what();
    if (absl::StrContains(message, "Timed out")) {
      s = absl::DeadlineExceededError(absl::StrCat(
          waiting_for >= 0 ? absl::StrCat("rank ", waiting_for) : "a peer",
          " did not send its ", what, " within ",
          absl::FormatDuration(timeout_), " (", message, ")"));
    } else {
      s = absl::UnavailableError(absl::StrCat(
          "lost the connection to ",
          waiting_for >= 0 ? absl::StrCat("rank ", waiting_for) : "a peer",
          " while exchanging ", what, "s (", message, ")"));
    }
  }
  {
    MutexLock lock(&mu_);
    waiting_.clear();
  }
  return s;
}

absl::StatusOr<std::shared_ptr<gloo::Context>> GlooAdmission::Connect(
    const std::shared_ptr<gloo::transport::Device>& device,
    const std::string& tag) {
  const std::string keys = prefix_ + tag;
  std::shared_ptr<gloo::transport::Device> dev = device;
  std::shared_ptr<gloo::rendezvous::Context> context;
  if (world_ == 1) {
    context = std::make_shared<gloo::rendezvous::Context>(rank_, world_);
    context->setTimeout(Millis(timeout_));
    Store store(this, keys, nullptr);
    try {
      context->connectFullMesh(store, dev);
    } catch (const StatusError& e) {
      return e.status;
    } catch (const std::exception& e) {
      return FromGloo(e.what());
    }
    Delete(keys + "0");
    Delete(keys + "rank_0");
    return context;
  }
  absl::StatusOr<std::vector<Record>> records = ExchangeRecords(keys);
  if (!records.ok()) {
    if (absl::Status peer = AnyPeerFailure(); !peer.ok()) return peer;
    return Fail(records.status());
  }
  absl::StatusOr<std::vector<SourceFilter>> filters = Filters(*records);
  if (!filters.ok()) return Fail(filters.status());

  // Steps 2-3: a mesh whose listeners nothing reached before their filters.
  bool connected = false;
  std::string intruded;
  for (int attempt = 1; attempt <= kAttempts && !connected; ++attempt) {
    context = std::make_shared<gloo::rendezvous::Context>(rank_, world_);
    context->setTimeout(Millis(timeout_));
    Store store(this, keys, &*filters);
    try {
      context->connectFullMesh(store, dev);
      connected = true;
    } catch (const Intruded& e) {
      intruded = e.what();
      if (attempt < kAttempts) {
        SHOAL_LOG(WARNING,
                  "gloo '%s' rank %d: %s; making its listeners again "
                  "(attempt %d of %d)",
                  prefix_, rank_, intruded, attempt + 1, kAttempts);
      }
    } catch (const StatusError& e) {
      CloseListeners();
      if (absl::Status peer = AnyPeerFailure(); !peer.ok()) return peer;
      return Fail(e.status);
    } catch (const std::exception& e) {
      CloseListeners();
      if (absl::Status peer = AnyPeerFailure(); !peer.ok()) return peer;
      return Fail(FromGloo(e.what()));
    }
    CloseListeners();
  }
  if (!connected) {
    return Fail(absl::PermissionDeniedError(absl::StrCat(
        "connections reached this rank's gloo listeners before their addresses "
        "were published, ",
        kAttempts,
        " times in a row (another process is racing for them; the last: ",
        intruded, ")")));
  }
  // Step 4.
  if (absl::Status s = CheckPeers(*context, *filters, *records); !s.ok())
    return Fail(s);
  // Step 5: tokens, then "ready".
  const Record& mine = (*records)[rank_];
  std::vector<uint8_t> tokens(world_ * kTokenBytes, 0);
  for (int p = 0; p < world_; ++p) {
    if (p != rank_)
      std::memcpy(tokens.data() + p * kTokenBytes, mine.tokens[p].data(),
                  kTokenBytes);
  }
  const std::vector<Record>& all = *records;
  absl::Status s = Round(
      *context, kTokenSlot, tokens, kTokenBytes,
      [&](int p, const uint8_t* got) {
        const std::string& want = all[p].tokens[rank_];
        if (SameBytes(got, reinterpret_cast<const uint8_t*>(want.data()),
                      kTokenBytes)) {
          return absl::OkStatus();
        }
        const std::string from = ConnectionFrom(*context, p);
        return absl::PermissionDeniedError(absl::StrCat(
            "a process that does not hold the job's secret is connected in "
            "place of ",
            Peer(p, all), ": its connection, from ", from,
            ", sent a token that rank did not publish"));
      },
      "token");
  if (s.ok()) {
    s = Round(
        *context, kReadySlot, std::vector<uint8_t>(world_, 1), 1,
        [](int, const uint8_t* got) {
          return *got == 1 ? absl::OkStatus()
                           : absl::InternalError("a malformed ready message");
        },
        "ready message");
  }
  if (!s.ok()) {
    // A stranger found here is this rank's own finding; otherwise a rank
    // that gave up recorded why before it closed its connections.
    if (s.code() != absl::StatusCode::kPermissionDenied) {
      absl::Status peer = AnyPeerFailure();
      if (!peer.ok() && s.code() == absl::StatusCode::kAborted) {
        return absl::Status(
            peer.code(), absl::StrCat(peer.message(), "; here, ", s.message()));
      }
      if (!peer.ok()) return peer;
    }
    return Fail(s);
  }
  // Admitted: the filters' work is done (an established connection takes
  // only its own peer's packets).
  const GlooConnections admitted = GlooConnections::Find(*context, rank_);
  for (const GlooConnections::Socket& c : admitted.sockets()) {
    if (!GlooConnections::Same(c)) continue;
    int unused = 0;
    syscall(SYS_setsockopt, c.fd, SOL_SOCKET, SO_DETACH_FILTER, &unused,
            sizeof(unused));
  }
  // Every peer read these keys before it connected.
  Delete(absl::StrCat(keys, rank_));
  Delete(absl::StrCat(keys, "rank_", rank_));
  Delete(absl::StrCat(keys, "admission/", rank_));
  return context;
}

}  // namespace shoal::collectives
