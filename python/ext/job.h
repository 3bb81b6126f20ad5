// shoal._shoal.Job: a process of a job started by `shoal launch`
// (shoal::launch::Init) — rank, the key-value store, barriers, the node's
// store.
#ifndef SHOAL_PYTHON_EXT_JOB_H_
#define SHOAL_PYTHON_EXT_JOB_H_

#include <memory>

#include "base/mutex.h"
#include "launch/job.h"
#include "python/ext/common.h"

namespace shoal::pyext {

class JobHandle : public std::enable_shared_from_this<JobHandle> {
 public:
  // Errors (raised): FailedPrecondition when not under shoal launch.
  static std::shared_ptr<JobHandle> Init();

  // The job's key-value client is not thread-safe: every use (the KV calls,
  // barriers, and collectives, which exchange ids through it) holds this.
  Mutex& mu() ABSL_LOCK_RETURNED(mu_) { return mu_; }
  // The job, for kv(), Barrier() and creating communicators.
  launch::Job& locked_job() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return *job_; }
  // The job's fixed facts (rank, sizes, id), which need no lock.
  const launch::Job& job() const { return *job_; }

  std::shared_ptr<StoreHandle> store() ABSL_LOCKS_EXCLUDED(store_mu_);

 private:
  Mutex mu_;
  std::unique_ptr<launch::Job> job_;
  Mutex store_mu_;
  std::weak_ptr<StoreHandle> store_ ABSL_GUARDED_BY(store_mu_);
};

}  // namespace shoal::pyext

#endif  // SHOAL_PYTHON_EXT_JOB_H_
