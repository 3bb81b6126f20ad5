// The stranger of the gloo attack tests: another local user who races a
// job's ranks for their gloo pair listeners.
//
//   gloo_stranger TABLE IP OWNER_UID AS_UID SECONDS [speak]
//
// Opens TABLE (/proc/net/tcp, or /proc/<pid>/net/tcp for another network
// namespace's table) and, if run as root, becomes AS_UID. For SECONDS it
// rereads the table and connects at once to every new listening socket bound
// to IP (the job's gloo listeners; the KV service listens on 0.0.0.0) owned
// by OWNER_UID, keeps each connection, and reads what comes. With `speak`,
// it answers a rank's ready-to-receive for the admission token with a token
// of its own (gloo's framing), as a stranger who knows gloo would. Prints
// one line:
//   stranger attempts=A completed=C refused=R pending=P filtered=F bytes=B
// where pending connections never completed, filtered ones went unanswered
// for 0.9 s or more (a filter dropped their SYN; they may be refused later,
// once the listener closed), refused ones were reset, and bytes counts the
// payload of the data frames the ranks sent it.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <map>
#include <set>
#include <string>
#include <vector>

namespace {

constexpr uint64_t kTokenSlot = uint64_t{0x42} << 56;  // GlooAdmission's
constexpr size_t kTokenBytes = 16;

double Now() {
  timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec / 1e9;
}

struct Conn {
  int fd = -1;
  double started = 0;
  // Unanswered for at least 0.9 s: the listener dropped its SYN (the kernel
  // sends it again after 1 s).
  bool filtered = false;
  bool completed = false, refused = false, closed = false;
  std::vector<uint8_t> in;  // bytes not yet parsed into frames
};

// The LISTEN rows of a /proc/net/tcp text bound to `ip` and owned by `uid`:
// their ports.
std::vector<int> Listeners(const std::string& table, uint32_t ip, long uid) {
  std::vector<int> ports;
  size_t at = table.find('\n');
  while (at != std::string::npos && at + 1 < table.size()) {
    const size_t end = table.find('\n', at + 1);
    const std::string line = table.substr(at + 1, end - at - 1);
    at = end;
    char local[64], remote[64];
    unsigned state = 0;
    long owner = -1;
    if (std::sscanf(line.c_str(), "%*d: %63s %63s %x %*s %*s %*s %ld", local,
                    remote, &state, &owner) != 4 ||
        state != 0x0A || owner != uid) {
      continue;
    }
    unsigned addr = 0, port = 0;
    if (std::sscanf(local, "%8x:%x", &addr, &port) != 2 || addr != ip) continue;
    ports.push_back(static_cast<int>(port));
  }
  return ports;
}

// Reads what `c` has and answers a token request (with `speak`). Returns
// the payload bytes of data frames read.
size_t Drain(Conn& c, bool speak) {
  size_t payload = 0;
  uint8_t buf[4096];
  while (true) {
    const ssize_t n = recv(c.fd, buf, sizeof(buf), MSG_DONTWAIT);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK)) {
      c.closed = true;
      break;
    }
    if (n < 0) break;
    c.in.insert(c.in.end(), buf, buf + n);
  }
  // Frames: a preamble of six words {nbytes, opcode, slot, offset, length,
  // roffset}; opcodes 0 and 1 carry `length` bytes of data.
  while (c.in.size() >= 48) {
    uint64_t pre[6];
    std::memcpy(pre, c.in.data(), 48);
    const size_t data = pre[1] <= 1 ? pre[4] : 0;
    if (c.in.size() < 48 + data) break;
    payload += data;
    c.in.erase(c.in.begin(), c.in.begin() + 48 + data);
    if (speak && pre[1] == 3 && pre[2] == kTokenSlot) {
      uint64_t frame[6] = {48 + kTokenBytes, 1, kTokenSlot, 0, kTokenBytes, 0};
      uint8_t token[kTokenBytes];
      std::memset(token, 0x5a, sizeof(token));
      (void)!send(c.fd, frame, sizeof(frame), MSG_NOSIGNAL);
      (void)!send(c.fd, token, sizeof(token), MSG_NOSIGNAL);
    }
  }
  return payload;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 6) {
    std::fprintf(stderr,
                 "usage: gloo_stranger TABLE IP OWNER_UID AS_UID SECONDS "
                 "[speak]\n");
    return 2;
  }
  const int table_fd = open(argv[1], O_RDONLY | O_CLOEXEC);
  in_addr ip = {};
  if (table_fd < 0 || inet_pton(AF_INET, argv[2], &ip) != 1) {
    std::fprintf(stderr, "cannot open %s or parse %s\n", argv[1], argv[2]);
    return 2;
  }
  const long owner = std::atol(argv[3]);
  const long as = std::atol(argv[4]);
  const double seconds = std::atof(argv[5]);
  const bool speak = argc > 6 && std::string(argv[6]) == "speak";
  if (geteuid() == 0 && as != 0) {
    if (syscall(SYS_setresgid, as, as, as) != 0 ||
        syscall(SYS_setresuid, as, as, as) != 0) {
      std::perror("setresuid");
      return 2;
    }
  }
  std::set<int> seen;
  std::vector<Conn> conns;
  size_t bytes = 0;
  const double t0 = Now();
  std::string table;
  while (Now() - t0 < seconds) {
    usleep(200);
    // The table, read again from its start.
    table.clear();
    char buf[65536];
    ssize_t n;
    while ((n = pread(table_fd, buf, sizeof(buf), table.size())) > 0)
      table.append(buf, n);
    for (int port : Listeners(table, ip.s_addr, owner)) {
      if (!seen.insert(port).second) continue;
      Conn c;
      c.fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
      sockaddr_in to = {};
      to.sin_family = AF_INET;
      to.sin_addr = ip;
      to.sin_port = htons(static_cast<uint16_t>(port));
      connect(c.fd, reinterpret_cast<sockaddr*>(&to), sizeof(to));
      c.started = Now();
      conns.push_back(std::move(c));
    }
    for (Conn& c : conns) {
      if (c.refused || c.closed) continue;
      if (!c.completed) {
        pollfd p = {c.fd, POLLOUT, 0};
        if (poll(&p, 1, 0) != 1) {
          if (Now() - c.started >= 0.9) c.filtered = true;
          continue;
        }
        int err = 0;
        socklen_t len = sizeof(err);
        getsockopt(c.fd, SOL_SOCKET, SO_ERROR, &err, &len);
        if (err != 0) {
          c.refused = true;
          continue;
        }
        c.completed = true;
      }
      bytes += Drain(c, speak);
    }
  }
  int completed = 0, refused = 0, pending = 0, filtered = 0;
  for (const Conn& c : conns) {
    filtered += c.filtered;
    completed += c.completed;
    refused += c.refused;
    pending += !c.completed && !c.refused;
  }
  std::printf(
      "stranger attempts=%zu completed=%d refused=%d pending=%d "
      "filtered=%d bytes=%zu\n",
      conns.size(), completed, refused, pending, filtered, bytes);
  return 0;
}
