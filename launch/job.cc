#include "launch/job.h"

#include <cstdlib>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "observe/timeline.h"

namespace shoal::launch {
namespace {

absl::StatusOr<std::string> Env(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') {
    return absl::FailedPreconditionError(absl::StrCat(
        name,
        " is not set: start this program with `shoal launch -- PROGRAM`"));
  }
  return std::string(v);
}

absl::StatusOr<int> EnvInt(const char* name) {
  SHOAL_ASSIGN_OR_RETURN(std::string v, Env(name));
  int n;
  if (!absl::SimpleAtoi(v, &n) || n < 0) {
    return absl::FailedPreconditionError(
        absl::StrCat(name, "='", v, "' is not a count"));
  }
  return n;
}

}  // namespace

absl::Status Job::Barrier(absl::Duration timeout) {
  // Named by restart and call number: a restarted group never meets the
  // stale participants of the previous one.
  const std::string name =
      absl::StrCat("__shoal/barrier/", restart_count_, "/", barriers_++);
  return kv_->Barrier(name, static_cast<uint32_t>(world_size_), timeout);
}

absl::StatusOr<std::unique_ptr<Job>> Init() {
  std::unique_ptr<Job> job(new Job);
  SHOAL_ASSIGN_OR_RETURN(job->rank_, EnvInt("RANK"));
  SHOAL_ASSIGN_OR_RETURN(job->world_size_, EnvInt("WORLD_SIZE"));
  SHOAL_ASSIGN_OR_RETURN(job->local_rank_, EnvInt("LOCAL_RANK"));
  SHOAL_ASSIGN_OR_RETURN(job->local_world_size_, EnvInt("LOCAL_WORLD_SIZE"));
  SHOAL_ASSIGN_OR_RETURN(job->node_rank_, EnvInt("GROUP_RANK"));
  SHOAL_ASSIGN_OR_RETURN(job->nnodes_, EnvInt("SHOAL_NNODES"));
  SHOAL_ASSIGN_OR_RETURN(job->restart_count_, EnvInt("SHOAL_RESTART_COUNT"));
  SHOAL_ASSIGN_OR_RETURN(job->job_id_, Env("SHOAL_JOB_ID"));
  if (job->rank_ >= job->world_size_ ||
      job->local_rank_ >= job->local_world_size_) {
    return absl::FailedPreconditionError("RANK or LOCAL_RANK out of range");
  }
  SHOAL_ASSIGN_OR_RETURN(std::string kv, Env("SHOAL_KV_ENDPOINT"));
  SHOAL_ASSIGN_OR_RETURN(job->kv_, launch::KvClient::Connect(kv));
  shm::StoreClientOptions so;
  SHOAL_ASSIGN_OR_RETURN(so.endpoint, Env("SHOAL_STORE_ENDPOINT"));
  so.name = absl::StrCat("rank ", job->rank_);
  SHOAL_ASSIGN_OR_RETURN(job->store_, shm::StoreClient::Connect(so));
  // The rank's track on the job's timeline; a rank without one still runs.
  (void)observe::StartTimeline(job->job_id_, absl::StrCat("rank ", job->rank_));
  return job;
}

}  // namespace shoal::launch
