// NodeProcess: a real `shoal start` node for tests (unique job id, the test
// plugin loaded), stopped at destruction; and what the tests of a node build
// their requests and checks with (Task, ProcStatusKb).
#ifndef SHOAL_TESTS_COORDINATOR_NODE_FIXTURE_H_
#define SHOAL_TESTS_COORDINATOR_NODE_FIXTURE_H_

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "base/subprocess.h"
#include "coordinator/client.h"
#include "ipc/messages.h"

namespace shoal::testing {

// A task of `function` with `args`.
ipc::TaskSpec Task(std::string function, std::vector<Value> args = {});

// The field `field` ("VmRSS", "VmHWM") of /proc/`pid`/status in KiB; -1 when
// it cannot be read.
int64_t ProcStatusKb(pid_t pid, absl::string_view field);

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
