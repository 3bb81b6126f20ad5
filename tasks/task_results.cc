#include "tasks/task_results.h"

#include "absl/strings/str_cat.h"
#include "ipc/task_payload.h"

namespace shoal::tasks {

absl::StatusOr<tasks::TaskSubmission> ToSubmission(const ipc::TaskSpec& t,
                                                   uint32_t cpus_per_worker,
                                                   uint32_t gpus_per_worker) {
  tasks::TaskSubmission s;
  s.function = t.function;
  s.cpus = std::max<uint32_t>(1, t.resources.cpus);
  s.gpus = t.resources.gpus;
  if (s.cpus > cpus_per_worker || s.gpus > gpus_per_worker) {
    return absl::InvalidArgumentError(absl::StrCat(
        "task '", t.function, "' asks for ", s.cpus, " cpus and ", s.gpus,
        " gpus but every worker has ", cpus_per_worker, " cpus and ",
        gpus_per_worker,
        " gpus (see shoal start --cpus-per-worker / --gpus-per-worker)"));
  }
  if (t.timeout_ms < 0 || t.timeout_ms > ipc::kMaxTimeoutMs) {
    return absl::InvalidArgumentError(
        absl::StrCat("task '", t.function, "' has timeout_ms ", t.timeout_ms,
                     ": out of range [0, ", ipc::kMaxTimeoutMs,
                     "] (0: none; the most is about ten years)"));
  }
  s.timeout_ns = t.timeout_ms * 1000000;
  s.max_retries = static_cast<uint32_t>(
      t.max_retries < 0 ? ipc::kDefaultMaxRetries : t.max_retries);
  s.args = ipc::EncodeTaskArgs(t.args, t.python_path);
  return s;
}

ipc::TaskResult ToResult(uint64_t id, absl::StatusOr<tasks::TaskOutcome> out) {
  ipc::TaskResult r;
  r.task_id = id;
  if (!out.ok()) {
    r.status = out.status();
    return r;
  }
  r.attempts = out->attempts;
  absl::StatusOr<ipc::TaskOutcomeBody> body =
      ipc::DecodeTaskOutcome(out->result);
  if (!body.ok()) {
    r.status = body.status();
    return r;
  }
  if (out->code != 0) {
    std::string message = body->message;
    if (out->timed_out) {
      message = absl::StrCat("the task exceeded its timeout of ",
                             out->timeout_ns / 1000000, " ms");
    }
    r.status = absl::Status(static_cast<absl::StatusCode>(out->code), message);
    if (!out->timed_out) r.exception = std::move(body->exception);
  }
  r.outputs = std::move(body->outputs);
  return r;
}

}  // namespace shoal::tasks
