#include "tests/testing/store_fixture.h"

#include <signal.h>

#include "absl/strings/str_cat.h"
#include "tests/testing/test_env.h"

namespace shoal::testing {

absl::StatusOr<std::unique_ptr<StoreProcess>> StoreProcess::Start(
    uint64_t store_bytes, std::vector<std::string> extra_flags) {
  auto p = std::make_unique<StoreProcess>();
  p->job_id_ = UniqueJobId();
  std::vector<std::string> argv = {RunfilePath("tools/shoal_lean"),
                                   "store",
                                   "--job-id",
                                   p->job_id_,
                                   "--store-bytes",
                                   absl::StrCat(store_bytes)};
  argv.insert(argv.end(), extra_flags.begin(), extra_flags.end());
  SubprocessOptions o;
  o.pipe_stdout = true;
  o.parent_death_signal = SIGKILL;
  absl::StatusOr<Subprocess> proc = Subprocess::Start(argv, o);
  if (!proc.ok()) return proc.status();
  p->process_ = *std::move(proc);
  absl::StatusOr<std::string> line = p->process_.ReadLine(absl::Seconds(30));
  if (!line.ok()) return line.status();
  const size_t at = line->find("endpoint ");
  if (at == std::string::npos) {
    return absl::InternalError(
        absl::StrCat("unexpected store output: ", *line));
  }
  p->endpoint_ = line->substr(at + 9);
  return p;
}

StoreProcess::~StoreProcess() {
  if (process_.running()) (void)Stop();
}

absl::StatusOr<std::unique_ptr<shm::StoreClient>> StoreProcess::Connect(
    const std::string& name) {
  shm::StoreClientOptions o;
  o.endpoint = endpoint_;
  o.name = name;
  o.rpc_timeout = absl::Seconds(20);
  return shm::StoreClient::Connect(o);
}

absl::StatusOr<int> StoreProcess::Stop() {
  process_.Signal(SIGTERM);
  return process_.Wait(absl::Seconds(20));
}

}  // namespace shoal::testing
