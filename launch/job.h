// shoal::launch::Init(): how a program started by `shoal launch` joins its job.
//
//   #include "launch/job.h"
//
//   int main() {
//     auto job = shoal::launch::Init();            // reads what the launcher
//     set if (!job.ok()) { ... }
//     (*job)->kv().Set(absl::StrCat("hello/", (*job)->rank()), "hi");
//     (*job)->Barrier();                   // every process of the job
//     ... (*job)->store().Put(...) ...     // the node's shared-memory store
//   }
//
// The environment follows torch.distributed's env:// convention (RANK,
// WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK, MASTER_ADDR,
// MASTER_PORT), so a PyTorch program started by `shoal launch` initialises its
// process group unchanged.
#ifndef SHOAL_LAUNCH_JOB_H_
#define SHOAL_LAUNCH_JOB_H_

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "launch/kv_client.h"
#include "shm/store_client.h"

namespace shoal::launch {

class Job {
 public:
  int rank() const { return rank_; }
  int world_size() const { return world_size_; }
  int local_rank() const { return local_rank_; }
  int local_world_size() const { return local_world_size_; }
  int node_rank() const { return node_rank_; }
  int nnodes() const { return nnodes_; }
  // How many times the launcher restarted the group before this run.
  int restart_count() const { return restart_count_; }
  const std::string& job_id() const { return job_id_; }

  // The node's shared-memory store.
  shm::StoreClient& store() { return *store_; }
  // The job's key-value store (shared by every process on every node).
  launch::KvClient& kv() { return *kv_; }

  // Returns once every process of the job called Barrier (the n-th call of
  // each process meets the n-th of the others).
  // Errors: DeadlineExceeded (a process did not arrive in time), Unavailable.
  absl::Status Barrier(absl::Duration timeout = absl::Minutes(5));

 private:
  friend absl::StatusOr<std::unique_ptr<Job>> Init();
  Job() = default;

  int rank_ = 0, world_size_ = 1, local_rank_ = 0, local_world_size_ = 1;
  int node_rank_ = 0, nnodes_ = 1, restart_count_ = 0;
  std::string job_id_;
  uint64_t barriers_ = 0;
  std::unique_ptr<shm::StoreClient> store_;
  std::unique_ptr<launch::KvClient> kv_;
};

// Joins the job from the environment `shoal launch` set.
// Errors: FailedPrecondition (not started by shoal launch: names the missing
// variable), Unavailable (the store or key-value store does not answer).
absl::StatusOr<std::unique_ptr<Job>> Init();

}  // namespace shoal::launch

#endif  // SHOAL_LAUNCH_JOB_H_
