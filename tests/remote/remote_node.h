// A real `shoal start -n 2` node for the remote-client tests, reached over
// its tcp+CURVE frontend, and raw DEALERs on that frontend.
#ifndef SHOAL_TESTS_REMOTE_REMOTE_NODE_H_
#define SHOAL_TESTS_REMOTE_REMOTE_NODE_H_

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "base/subprocess.h"
#include "coordinator/discovery.h"
#include "ipc/socket.h"

namespace shoal::remote {

class RemoteNode {
 public:
  // Starts a node of 2 workers and a 64 MiB store under a fresh job id, with
  // `env` added to its environment and `flags` to its command line (`shoal
  // start` flags; a later --store-bytes wins), and waits until it is ready.
  // Errors: the
  // start's, DeadlineExceeded (not ready in 30 s), the discovery file's, or
  // FailedPrecondition (its TCP frontend does not use CURVE).
  static absl::StatusOr<std::unique_ptr<RemoteNode>> Start(
      std::map<std::string, std::optional<std::string>> env = {},
      std::vector<std::string> flags = {});

  // SIGTERM, then its exit status (0 when it stopped cleanly).
  absl::StatusOr<int> Stop();

  const std::string& job() const { return job_; }
  const coordinator::Discovery& discovery() const { return discovery_; }
  pid_t pid() const { return process_.pid(); }
  Subprocess& process() { return process_; }

  // A DEALER on the TCP frontend with the owner's CURVE keys; `kernel_rcvbuf`
  // (bytes, 0: the default) is set before it connects.
  absl::StatusOr<ipc::Socket> RawDealer(const ipc::SocketOptions& options = {},
                                        int kernel_rcvbuf = 0) const;

 private:
  RemoteNode(std::string job, Subprocess process)
      : job_(std::move(job)), process_(std::move(process)) {}

  std::string job_;
  Subprocess process_;
  coordinator::Discovery discovery_;
};

}  // namespace shoal::remote

#endif  // SHOAL_TESTS_REMOTE_REMOTE_NODE_H_
