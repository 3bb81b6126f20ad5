#include "examples/data_parallel/train.h"

#include <time.h>

#include <cstdio>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/status_macros.h"

namespace shoal::dp {
namespace {

double Now() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<double>(ts.tv_sec) +
         1e-9 * static_cast<double>(ts.tv_nsec);
}

// Hashes this rank's parameters; on rank 0, also compares them with every
// other rank's hash, which those publish in the key-value store. Only rank 0
// waits: the others go on, and a mismatch stops the whole job through rank
// 0's non-zero exit.
class ReplicaCheck {
 public:
  ReplicaCheck(launch::Job& job, Backend& backend, int64_t params,
               std::string prefix)
      : job_(job),
        backend_(backend),
        host_(params),
        prefix_(std::move(prefix)) {}

  absl::StatusOr<uint64_t> Run(int64_t step) {
    SHOAL_RETURN_IF_ERROR(backend_.CopyParamsToHost(absl::MakeSpan(host_)));
    const uint64_t mine =
        HashFloats(host_.data(), static_cast<int64_t>(host_.size()));
    if (job_.world_size() == 1) return mine;
    const std::string key = absl::StrCat(prefix_, "/params/", step, "/");
    if (job_.rank() != 0) {
      SHOAL_RETURN_IF_ERROR(job_.kv().Set(absl::StrCat(key, job_.rank()),
                                          absl::StrCat(absl::Hex(mine))));
      return mine;
    }
    std::string all = absl::StrFormat("rank 0 %016x", mine);
    bool same = true;
    for (int r = 1; r < job_.world_size(); ++r) {
      SHOAL_ASSIGN_OR_RETURN(
          std::string theirs,
          job_.kv().Get(absl::StrCat(key, r), absl::Minutes(5)));
      uint64_t h = 0;
      if (!absl::SimpleHexAtoi(theirs, &h)) {
        return absl::InternalError(
            absl::StrCat("bad checksum '", theirs, "' from rank ", r));
      }
      same = same && h == mine;
      absl::StrAppendFormat(&all, ", rank %d %016x", r, h);
      (void)job_.kv().Delete(absl::StrCat(key, r));
    }
    if (!same) {
      return absl::DataLossError(absl::StrCat(
          "the ranks' parameters are no longer bit-identical after step ", step,
          " (", all, "): every rank must apply the same averaged gradients"));
    }
    return mine;
  }

 private:
  launch::Job& job_;
  Backend& backend_;
  std::vector<float> host_;
  std::string prefix_;
};

}  // namespace

absl::StatusOr<TrainResult> Train(launch::Job& job,
                                  collectives::Communicator* comm,
                                  Backend& backend, const ModelSpec& spec,
                                  const Shard& shard,
                                  const TrainOptions& options) {
  const ParamLayout layout(spec);
  GradSync sync(comm, backend, layout.grad_elems(), options.sync);
  ReplicaCheck check(job, backend, layout.params(), options.kv_prefix);
  const bool lead = job.rank() == 0;
  const int64_t global_batch = int64_t{shard.batch} * shard.world;

  TrainResult result;
  result.buckets = static_cast<int>(sync.buckets().size());
  result.steps.reserve(options.steps);
  double timed_seconds = 0, timed_wait = 0;
  int64_t timed_steps = 0;
  double window_start = Now(), window_wait = 0;
  int64_t window_steps = 0;

  auto grads_ready = [&](int l) {
    return sync.GradientsReady(layout.layer(l).end);
  };
  for (int64_t step = 0; step < options.steps; ++step) {
    const double t0 = Now();
    double wait = 0;
    SHOAL_RETURN_IF_ERROR(backend.ForwardBackward(step, grads_ready));
    SHOAL_RETURN_IF_ERROR(sync.Finish(&wait));
    SHOAL_ASSIGN_OR_RETURN(const float loss, backend.Loss());
    float lr = options.lr;
    if (step + 1 == options.diverge_at && job.rank() == 1) lr *= 1.001f;
    SHOAL_RETURN_IF_ERROR(backend.Update(lr, options.momentum));
    const double seconds = Now() - t0;
    result.steps.push_back({step, loss, seconds});
    if (step >= options.warmup) {
      timed_seconds += seconds;
      timed_wait += wait;
      ++timed_steps;
    }
    ++window_steps;
    window_wait += wait;

    const bool last = step + 1 == options.steps;
    if (last ||
        (options.check_every > 0 && (step + 1) % options.check_every == 0)) {
      SHOAL_ASSIGN_OR_RETURN(result.final_checksum, check.Run(step + 1));
      ++result.checks;
    }
    if (lead &&
        (last || step == 0 ||
         (options.log_every > 0 && (step + 1) % options.log_every == 0))) {
      const double span = Now() - window_start;
      std::printf(
          "step %6lld  loss %.6f  %9.0f samples/s  %6.2f ms/step  (%.2f ms "
          "waiting for gradients)\n",
          static_cast<long long>(step + 1), loss,
          global_batch * window_steps / span, 1e3 * span / window_steps,
          1e3 * window_wait / window_steps);
      std::fflush(stdout);
      window_start = Now();
      window_steps = 0;
      window_wait = 0;
    }
  }
  if (timed_steps > 0) {
    result.samples_per_second = global_batch * timed_steps / timed_seconds;
    result.step_ms = 1e3 * timed_seconds / timed_steps;
    result.wait_ms = 1e3 * timed_wait / timed_steps;
  }
  return result;
}

}  // namespace shoal::dp
