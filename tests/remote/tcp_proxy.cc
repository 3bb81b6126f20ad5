#include "tests/remote/tcp_proxy.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace shoal::remote {
namespace {

void SetNonBlocking(int fd) {
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
}

// Closes with a reset (linger 0), as a broken path shows it to both ends.
void Reset(int fd) {
  struct linger l = {1, 0};
  setsockopt(fd, SOL_SOCKET, SO_LINGER, &l, sizeof(l));
  close(fd);
}

struct Pair {
  int fd[2] = {-1, -1};  // 0: the client's side, 1: the node's
  std::string
      pending[2];  // bytes read from fd[i], not yet written to the other
  bool dead = false;
};

// Moves bytes from p.fd[from] to p.fd[1 - from]. False when the pair ended.
bool Pump(Pair& p, int from, short revents_from, short revents_to) {
  const int to = 1 - from;
  std::string& buf = p.pending[from];
  if (buf.empty() && (revents_from & (POLLIN | POLLHUP | POLLERR))) {
    char chunk[1 << 16];
    const ssize_t n = read(p.fd[from], chunk, sizeof(chunk));
    if (n == 0) return false;
    if (n < 0) return errno == EAGAIN || errno == EINTR;
    buf.assign(chunk, static_cast<size_t>(n));
    revents_to |= POLLOUT;  // try at once
  }
  if (!buf.empty() && (revents_to & (POLLOUT | POLLERR | POLLHUP))) {
    const ssize_t n = send(p.fd[to], buf.data(), buf.size(), MSG_NOSIGNAL);
    if (n < 0) return errno == EAGAIN || errno == EINTR;
    buf.erase(0, static_cast<size_t>(n));
  }
  return true;
}

}  // namespace

absl::StatusOr<std::unique_ptr<TcpProxy>> TcpProxy::Start(
    const std::string& target) {
  absl::string_view rest = target;
  if (!absl::ConsumePrefix(&rest, "tcp://")) {
    return absl::InvalidArgumentError(absl::StrCat("not tcp://: ", target));
  }
  const size_t colon = rest.rfind(':');
  int port = 0;
  struct in_addr addr;
  if (colon == absl::string_view::npos ||
      !absl::SimpleAtoi(rest.substr(colon + 1), &port) ||
      inet_pton(AF_INET, std::string(rest.substr(0, colon)).c_str(), &addr) !=
          1) {
    return absl::InvalidArgumentError(
        absl::StrCat("not tcp://<ipv4>:<port>: ", target));
  }
  std::unique_ptr<TcpProxy> p(new TcpProxy());
  p->target_addr_ = addr.s_addr;
  p->target_port_ = htons(static_cast<uint16_t>(port));
  p->listen_fd_ = socket(AF_INET, SOCK_STREAM, 0);
  if (p->listen_fd_ < 0) return absl::InternalError("socket");
  const int one = 1;
  setsockopt(p->listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  struct sockaddr_in sa = {};
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  sa.sin_port = 0;
  if (bind(p->listen_fd_, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) != 0 ||
      listen(p->listen_fd_, 64) != 0) {
    return absl::InternalError(absl::StrCat("bind/listen: errno ", errno));
  }
  socklen_t len = sizeof(sa);
  getsockname(p->listen_fd_, reinterpret_cast<sockaddr*>(&sa), &len);
  p->port_ = ntohs(sa.sin_port);
  SetNonBlocking(p->listen_fd_);
  p->thread_ = std::thread([raw = p.get()] { raw->Run(); });
  return p;
}

TcpProxy::~TcpProxy() {
  stop_.store(true);
  if (thread_.joinable()) thread_.join();
  if (listen_fd_ >= 0) close(listen_fd_);
}

std::string TcpProxy::endpoint() const {
  return absl::StrCat("tcp://127.0.0.1:", port_);
}

uint64_t TcpProxy::CutAll() {
  const uint64_t want = cut_requests_.fetch_add(1) + 1;
  while (cuts_done_.load() < want && !stop_.load())
    absl::SleepFor(absl::Milliseconds(1));
  return last_cut_.load();
}

uint64_t TcpProxy::CutOnceConnected(absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (live_.load() == 0 && absl::Now() < deadline)
    absl::SleepFor(absl::Milliseconds(1));
  return CutAll();
}

void TcpProxy::Run() {
  std::vector<Pair> pairs;
  std::vector<pollfd> fds;
  while (!stop_.load()) {
    if (const uint64_t asked = cut_requests_.load();
        asked > cuts_done_.load()) {
      for (Pair& p : pairs) {
        Reset(p.fd[0]);
        Reset(p.fd[1]);
      }
      cut_.fetch_add(pairs.size());
      last_cut_.store(pairs.size());
      pairs.clear();
      cuts_done_.store(asked);
    }
    live_.store(pairs.size());
    fds.clear();
    fds.push_back({listen_fd_, POLLIN, 0});
    for (const Pair& p : pairs) {
      for (int i = 0; i < 2; ++i) {
        short ev = 0;
        if (p.pending[i].empty()) ev |= POLLIN;
        if (!p.pending[1 - i].empty()) ev |= POLLOUT;
        fds.push_back({p.fd[i], ev, 0});
      }
    }
    if (poll(fds.data(), fds.size(), 5) < 0 && errno != EINTR) break;
    for (size_t k = 0; k < pairs.size(); ++k) {
      Pair& p = pairs[k];
      const short r0 = fds[1 + 2 * k].revents, r1 = fds[2 + 2 * k].revents;
      if (!Pump(p, 0, r0, r1) || !Pump(p, 1, r1, r0)) p.dead = true;
    }
    for (auto it = pairs.begin(); it != pairs.end();) {
      if (it->dead) {
        close(it->fd[0]);
        close(it->fd[1]);
        it = pairs.erase(it);
      } else {
        ++it;
      }
    }
    if (fds[0].revents & POLLIN) {
      while (true) {
        const int c = accept(listen_fd_, nullptr, nullptr);
        if (c < 0) break;
        if (down_.load()) {
          Reset(c);
          continue;
        }
        const int n = socket(AF_INET, SOCK_STREAM, 0);
        struct sockaddr_in sa = {};
        sa.sin_family = AF_INET;
        sa.sin_addr.s_addr = target_addr_;
        sa.sin_port = target_port_;
        if (n < 0 ||
            connect(n, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) != 0) {
          if (n >= 0) close(n);
          Reset(c);
          continue;
        }
        const int one = 1;
        setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        setsockopt(n, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        SetNonBlocking(c);
        SetNonBlocking(n);
        Pair p;
        p.fd[0] = c;
        p.fd[1] = n;
        pairs.push_back(std::move(p));
        forwarded_.fetch_add(1);
      }
    }
  }
  for (Pair& p : pairs) {
    close(p.fd[0]);
    close(p.fd[1]);
  }
}

}  // namespace shoal::remote
