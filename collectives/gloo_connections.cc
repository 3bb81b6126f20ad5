#include "collectives/gloo_connections.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <cstdlib>
#include <map>
#include <memory>
#include <string>

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

// gloo prints an address as "[ip]:port" (or "ip:port"): "ip:port".
std::string Normalized(std::string s) {
  std::string out;
  for (char c : s) {
    if (c != '[' && c != ']') out.push_back(c);
  }
  return out;
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
    if (fstat(static_cast<int>(fd), &st) != 0 || !S_ISSOCK(st.st_mode)) {
      continue;
    }
    sockaddr_storage local = {}, peer = {};
    socklen_t n = sizeof(local), m = sizeof(peer);
    if (getsockname(static_cast<int>(fd), reinterpret_cast<sockaddr*>(&local),
                    &n) != 0 ||
        getpeername(static_cast<int>(fd), reinterpret_cast<sockaddr*>(&peer),
                    &m) != 0) {
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
    auto it = sockets.find(Normalized(pair->address().str()));
    if (it == sockets.end()) continue;
    Socket s;
    s.peer = peer;
    s.fd = it->second;
    struct stat st;
    if (fstat(s.fd, &st) != 0) continue;
    s.inode = st.st_ino;
    sockaddr_storage remote = {};
    socklen_t n = sizeof(remote);
    if (getpeername(s.fd, reinterpret_cast<sockaddr*>(&remote), &n) == 0) {
      s.address = Endpoint(remote);
      s.address = s.address.substr(0, s.address.rfind(':'));
    }
    c.sockets_.push_back(std::move(s));
  }
  return c;
}

std::optional<GlooConnections::Socket> GlooConnections::FirstLost() const {
  for (const Socket& s : sockets_) {
    struct stat st;
    if (fstat(s.fd, &st) != 0 || st.st_ino != s.inode) return s;
    tcp_info info = {};
    socklen_t n = sizeof(info);
    if (getsockopt(s.fd, IPPROTO_TCP, TCP_INFO, &info, &n) != 0) return s;
    // The peer closed (its process ended) or reset the connection.
    if (info.tcpi_state == TCP_CLOSE_WAIT || info.tcpi_state == TCP_CLOSE ||
        info.tcpi_state == TCP_LAST_ACK) {
      return s;
    }
  }
  return std::nullopt;
}

}  // namespace shoal::collectives
