// NodeProcess: a real `shoal start` node for tests (unique job id, the test
// plugin loaded), stopped at destruction.
#ifndef SHOAL_TESTS_COORDINATOR_NODE_FIXTURE_H_
#define SHOAL_TESTS_COORDINATOR_NODE_FIXTURE_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "base/subprocess.h"
#include "coordinator/client.h"

namespace shoal::testing {

class NodeProcess {
 public:
  static absl::StatusOr<std::unique_ptr<NodeProcess>> Start(
      std::vector<std::string> flags = {}, SubprocessOptions options = {});
  ~NodeProcess();

  const std::string& job_id() const { return job_id_; }
  const std::string& frontend() const { return frontend_; }
  pid_t pid() const { return process_.pid(); }
  Subprocess& process() { return process_; }

  absl::StatusOr<std::unique_ptr<coordinator::Client>> Connect(
      bool remote = false);
  absl::StatusOr<int> Stop();

 private:
  Subprocess process_;
  std::string job_id_;
  std::string frontend_;
};

}  // namespace shoal::testing

#endif  // SHOAL_TESTS_COORDINATOR_NODE_FIXTURE_H_
