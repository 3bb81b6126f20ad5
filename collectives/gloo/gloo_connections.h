// GlooConnections: the TCP sockets under a gloo context's pairs, watched from
// outside gloo.
//
// Why: gloo's TCP pair forgets a send it had queued on a connection that then
// broke. When the peer dies, the pair's device thread reads the end of file,
// fails the pending receives and the sends not yet started, and closes the
// socket — but a send already in its transmit queue (its peer stopped reading
// mid-message) is never failed, and the caller's wait on it lasts until the
// call's timeout. Debian's libgloo-dev cannot compile gloo's pair header (it
// lacks gloo/common/memory.h), so the pair's own state is out of reach; its
// socket is not: gloo closes it on any error, and a peer's reset or close is
// visible in TCP_INFO. A watcher that sees one gone aborts the call.
#ifndef SHOAL_COLLECTIVES_GLOO_GLOO_CONNECTIONS_H_
#define SHOAL_COLLECTIVES_GLOO_GLOO_CONNECTIONS_H_

#include <sys/socket.h>
#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

namespace gloo {
class Context;
}  // namespace gloo

namespace shoal::collectives {

class GlooConnections {
 public:
  struct Socket {
    int peer = -1;        // the peer's rank in the gloo context
    int fd = -1;          // gloo's descriptor for the pair
    ino_t inode = 0;      // the socket's inode: a reused fd number differs
    std::string address;  // the peer's IP address, as text
    sockaddr_storage local = {};   // this end's address and port
    sockaddr_storage remote = {};  // the peer's address and port
  };

  GlooConnections() = default;

  // Finds, among this process's descriptors, the connected socket of each of
  // `context`'s pairs (matched by the pair's local address, which gloo reads
  // from the socket once connected). REQUIRES: `context` is fully connected.
  // Pairs whose socket is not found are left out (then not watched).
  static GlooConnections Find(gloo::Context& context, int self_rank);

  // The first pair whose socket is gone: closed by gloo (after an error on
  // it, or by closeConnections), or closed or reset by the peer. Thread-safe
  // (reads only this process's descriptor table and the sockets' state).
  std::optional<Socket> FirstLost() const;

  int watched() const { return static_cast<int>(sockets_.size()); }
  const std::vector<Socket>& sockets() const { return sockets_; }
  // Whether `s.fd` is still that socket (not closed, its number not reused).
  static bool Same(const Socket& s);

 private:
  std::vector<Socket> sockets_;
};

}  // namespace shoal::collectives

#endif  // SHOAL_COLLECTIVES_GLOO_GLOO_CONNECTIONS_H_
