// NodeKeepAlive: how the launchers of a multi-node job notice that another
// node is gone — like torchrun's rendezvous keep-alive.
//
// Each launcher adds 1 to its keep-alive counter in the job's key-value store
// (`<prefix><node>`, on node 0's launcher) every `period`, through a thread
// with its own connection, and reads everyone's counters in the same round.
// A node whose counter has not moved for `dead_after` (its launcher was
// killed, its machine went down or off the network), or, seen from the other
// nodes, node 0's key-value service not answering for `dead_after` (node 0's
// launcher hosts it), is lost: fd() becomes readable and lost() says which
// node and why. The launcher then stops its own ranks (launcher.cc).
//
// A launcher that exits normally first sets its counter to "done" (Retire),
// so a node that finished earlier is never taken for lost.
#ifndef SHOAL_LAUNCH_NODE_KEEPALIVE_H_
#define SHOAL_LAUNCH_NODE_KEEPALIVE_H_

#include <atomic>
#include <optional>
#include <string>
#include <thread>

#include "absl/time/time.h"
#include "base/mutex.h"

namespace shoal::launch {

struct KeepAliveOptions {
  std::string kv_endpoint;  // node 0's key-value service
  std::string secret;       // its CURVE secret (KvClientOptions::secret)
  std::string prefix;       // keys: <prefix><node>
  int node = 0;             // this node
  int nnodes = 1;
  absl::Duration period = absl::Seconds(1);
  absl::Duration dead_after = absl::Seconds(10);
};

class NodeKeepAlive {
 public:
  struct Lost {
    int node = -1;
    std::string why;  // "node 1's launcher has not answered for 10s"
  };

  // Starts the thread (none when nnodes ≤ 1: fd() never becomes readable).
  explicit NodeKeepAlive(KeepAliveOptions o);
  NodeKeepAlive(const NodeKeepAlive&) = delete;
  NodeKeepAlive& operator=(const NodeKeepAlive&) = delete;
  // Stops the thread (within about one period).
  ~NodeKeepAlive();

  // Readable (an eventfd) once a node is lost.
  int fd() const { return fd_; }
  // The lost node, once fd() is readable; else nullopt.
  std::optional<Lost> lost() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  void Run();
  void Report(Lost lost) ABSL_LOCKS_EXCLUDED(mu_);

  const KeepAliveOptions o_;
  const int fd_;
  std::atomic<bool> running_{true};
  mutable Mutex mu_;
  std::optional<Lost> lost_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;
};

}  // namespace shoal::launch

#endif  // SHOAL_LAUNCH_NODE_KEEPALIVE_H_
