#include "tests/remote/remote_node.h"

#include <signal.h>
#include <zmq.h>

#include <utility>

#include "absl/status/status.h"
#include "base/status_macros.h"
#include "ipc/curve.h"
#include "tests/testing/test_env.h"

namespace shoal::remote {

absl::StatusOr<std::unique_ptr<RemoteNode>> RemoteNode::Start(
    std::map<std::string, std::optional<std::string>> env,
    std::vector<std::string> flags) {
  std::string job = testing::UniqueJobId();
  SubprocessOptions so;
  so.pipe_stdout = true;
  so.parent_death_signal = SIGKILL;
  so.env = std::move(env);
  std::vector<std::string> argv = {testing::RunfilePath("tools/shoal"),
                                   "start",
                                   "-n",
                                   "2",
                                   "--job-id",
                                   job,
                                   "--store-bytes",
                                   "64M"};
  argv.insert(argv.end(), flags.begin(), flags.end());
  absl::StatusOr<Subprocess> process = Subprocess::Start(argv, so);
  if (!process.ok()) return process.status();
  std::unique_ptr<RemoteNode> node(
      new RemoteNode(std::move(job), *std::move(process)));
  SHOAL_RETURN_IF_ERROR(
      node->process_.ReadLine(absl::Seconds(30)).status());  // ready
  absl::StatusOr<coordinator::Discovery> d =
      coordinator::ReadDiscovery(node->job_);
  if (!d.ok()) return d.status();
  node->discovery_ = *std::move(d);
  if (node->discovery_.server_key.empty()) {
    return absl::FailedPreconditionError(
        "the node's TCP frontend should use CURVE");
  }
  return node;
}

absl::StatusOr<int> RemoteNode::Stop() {
  process_.Signal(SIGTERM);
  return process_.Wait(absl::Seconds(30));
}

absl::StatusOr<ipc::Socket> RemoteNode::RawDealer(
    const ipc::SocketOptions& options, int kernel_rcvbuf) const {
  absl::StatusOr<ipc::Socket> s = ipc::Socket::Create(ZMQ_DEALER, options);
  if (!s.ok()) return s.status();
  if (kernel_rcvbuf > 0 && zmq_setsockopt(s->raw(), ZMQ_RCVBUF, &kernel_rcvbuf,
                                          sizeof(kernel_rcvbuf)) != 0) {
    return absl::InternalError("zmq_setsockopt(ZMQ_RCVBUF)");
  }
  absl::StatusOr<ipc::CurveKeyPair> keys =
      ipc::ReadKeyPair(discovery_.client_key_file);
  if (!keys.ok()) return keys.status();
  SHOAL_RETURN_IF_ERROR(
      ipc::ConfigureCurveClient(*s, discovery_.server_key, *keys));
  SHOAL_RETURN_IF_ERROR(s->Connect(discovery_.tcp));
  return s;
}

}  // namespace shoal::remote
