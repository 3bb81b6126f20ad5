#include "collectives/gloo/gloo_connections.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "gloo/context.h"
#include "gloo/transport/address.h"
#include "gloo/transport/pair.h"

namespace shoal::collectives {
namespace {

// "ip:port" for an IPv4 or IPv6 socket address; empty for others.
std::string Endpoint(const sockaddr_storage& a) {
  char text[INET6_ADDRSTRLEN] = {};
  if (a.ss_family == AF_INET) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(&a);
    inet_ntop(AF_INET, &in->sin_addr, text, sizeof(text));
    return std::string(text) + ":" + std::to_string(ntohs(in->sin_port));
  }
  if (a.ss_family == AF_INET6) {
    const auto* in6 = reinterpret_cast<const sockaddr_in6*>(&a);
    inet_ntop(AF_INET6, &in6->sin6_addr, text, sizeof(text));
    return std::string(text) + ":" + std::to_string(ntohs(in6->sin6_port));
  }
  return "";
}

// The "ip:port" forms a pair's address may stand for. gloo prints an
// address as "[ip]:port", and the Debian build (0.0~git20220518) prints the
// port in network byte order (40065 shows as 33180): both are tried; a
// match must also have the pair's IP address.
std::vector<std::string> Candidates(const std::string& printed) {
  std::string text;
  for (char c : printed) {
    if (c != '[' && c != ']') text.push_back(c);
  }
  const size_t colon = text.rfind(':');
  if (colon == std::string::npos) return {};
  const std::string ip = text.substr(0, colon);
  const long port = std::strtol(text.c_str() + colon + 1, nullptr, 10);
  if (port <= 0 || port > 65535) return {};
  const long swapped = ((port & 0xff) << 8) | ((port >> 8) & 0xff);
  return {ip + ":" + std::to_string(port), ip + ":" + std::to_string(swapped)};
}

// Metadata of any descriptor of this process, read with raw system calls:
// the scan below looks at descriptors other threads own (gloo's, the store's,
// in tests other ranks'), and ThreadSanitizer models a descriptor as memory,
// so the libc wrappers would report each later close() elsewhere as a race
// with this read. The kernel's answer is all that is shared.
int StatOf(int fd, struct stat* st) { return syscall(SYS_fstat, fd, st); }
int NameOf(int fd, sockaddr_storage* a, socklen_t* n) {
  return syscall(SYS_getsockname, fd, a, n);
}
int PeerOf(int fd, sockaddr_storage* a, socklen_t* n) {
  return syscall(SYS_getpeername, fd, a, n);
}

// This process's connected TCP sockets: local "ip:port" → descriptor.
std::map<std::string, int> ConnectedSockets() {
  std::map<std::string, int> out;
  std::unique_ptr<DIR, int (*)(DIR*)> dir(opendir("/proc/self/fd"), closedir);
  if (dir == nullptr) return out;
  while (dirent* e = readdir(dir.get())) {
    char* end = nullptr;
    const long fd = std::strtol(e->d_name, &end, 10);
    if (end == e->d_name || *end != '\0') continue;
    struct stat st;
    if (StatOf(static_cast<int>(fd), &st) != 0 || !S_ISSOCK(st.st_mode)) {
      continue;
    }
    sockaddr_storage local = {}, peer = {};
    socklen_t n = sizeof(local), m = sizeof(peer);
    if (NameOf(static_cast<int>(fd), &local, &n) != 0 ||
        PeerOf(static_cast<int>(fd), &peer, &m) != 0) {
      continue;  // not connected (a listener, or not TCP/IP)
    }
    const std::string key = Endpoint(local);
    if (!key.empty()) out[key] = static_cast<int>(fd);
  }
  return out;
}

}  // namespace

GlooConnections GlooConnections::Find(gloo::Context& context, int self_rank) {
  GlooConnections c;
  const std::map<std::string, int> sockets = ConnectedSockets();
  for (int peer = 0; peer < context.size; ++peer) {
    if (peer == self_rank) continue;
    std::unique_ptr<gloo::transport::Pair>& pair = context.getPair(peer);
    if (pair == nullptr) continue;
    auto it = sockets.end();
    for (const std::string& key : Candidates(pair->address().str())) {
      it = sockets.find(key);
      if (it != sockets.end()) break;
    }
    if (it == sockets.end()) continue;
    Socket s;
    s.peer = peer;
    s.fd = it->second;
    struct stat st;
    if (StatOf(s.fd, &st) != 0) continue;
    s.inode = st.st_ino;
    socklen_t n = sizeof(s.remote);
    if (PeerOf(s.fd, &s.remote, &n) == 0) {
      s.address = Endpoint(s.remote);
      s.address = s.address.substr(0, s.address.rfind(':'));
    }
    n = sizeof(s.local);
    NameOf(s.fd, &s.local, &n);
    c.sockets_.push_back(std::move(s));
  }
  return c;
}

bool GlooConnections::Same(const Socket& s) {
  struct stat st;
  return StatOf(s.fd, &st) == 0 && st.st_ino == s.inode;
}

std::optional<GlooConnections::Socket> GlooConnections::FirstLost() const {
  for (const Socket& s : sockets_) {
    struct stat st;
    if (StatOf(s.fd, &st) != 0 || st.st_ino != s.inode) return s;
    tcp_info info = {};
    socklen_t n = sizeof(info);
    if (syscall(SYS_getsockopt, s.fd, IPPROTO_TCP, TCP_INFO, &info, &n) != 0)
      return s;
    // The peer closed (its process ended) or reset the connection.
    if (info.tcpi_state == TCP_CLOSE_WAIT || info.tcpi_state == TCP_CLOSE ||
        info.tcpi_state == TCP_LAST_ACK) {
      return s;
    }
  }
  return std::nullopt;
}

}  // namespace shoal::collectives
