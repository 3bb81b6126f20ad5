// StoreProcess: a real `shoal store` process for tests, started with a unique
// job id and stopped (SIGTERM) at destruction.
#ifndef SHOAL_TESTS_TESTING_STORE_FIXTURE_H_
#define SHOAL_TESTS_TESTING_STORE_FIXTURE_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "base/subprocess.h"
#include "shm/store_client.h"

namespace shoal::testing {

class StoreProcess {
 public:
  // Starts `shoal store --job-id <unique> --store-bytes <bytes> <extra...>` and
  // waits for its "store ready" line.
  static absl::StatusOr<std::unique_ptr<StoreProcess>> Start(
      uint64_t store_bytes, std::vector<std::string> extra_flags = {});
  ~StoreProcess();

  const std::string& endpoint() const { return endpoint_; }
  const std::string& job_id() const { return job_id_; }
  std::string segment_name() const { return "shoal-" + job_id_ + "-store"; }
  Subprocess& process() { return process_; }

  absl::StatusOr<std::unique_ptr<shm::StoreClient>> Connect(
      const std::string& name = "test");

  // SIGTERM, then the exit status.
  absl::StatusOr<int> Stop();

 private:
  Subprocess process_;
  std::string job_id_;
  std::string endpoint_;
};

}  // namespace shoal::testing

#endif  // SHOAL_TESTS_TESTING_STORE_FIXTURE_H_
