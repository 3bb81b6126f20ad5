#include "examples/data_parallel/grad_sync.h"

#include <sched.h>
#include <time.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"

namespace shoal::dp {
namespace {

double Now() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<double>(ts.tv_sec) +
         1e-9 * static_cast<double>(ts.tv_nsec);
}

}  // namespace

OverlapChoice ChooseOverlap(bool gpu, int cpus, int local_ranks) {
  if (gpu) return {true, "NCCL on its own stream"};
  if (cpus >= 2 * local_ranks) {
    return {true, absl::StrCat(local_ranks, " rank",
                               local_ranks == 1 ? "" : "s", " on ", cpus,
                               " CPUs: a core to spare for each all-reduce")};
  }
  return {false, absl::StrCat(local_ranks, " rank", local_ranks == 1 ? "" : "s",
                              " on ", cpus,
                              " CPUs: no core to spare for the all-reduce; "
                              "--overlap forces it")};
}

int UsableCpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return 1;
  return std::max(1, CPU_COUNT(&set));
}

std::vector<std::pair<int64_t, int64_t>> MakeBuckets(
    int64_t elems, const GradSyncOptions& options) {
  const int64_t per = std::max<int64_t>(1, options.bucket_bytes / 4);
  const int64_t first =
      std::clamp<int64_t>(options.first_bucket_bytes / 4, 1, per);
  std::vector<std::pair<int64_t, int64_t>> buckets;
  for (int64_t at = 0; at < elems;) {
    const int64_t end = std::min(elems, at + (buckets.empty() ? first : per));
    buckets.emplace_back(at, end);
    at = end;
  }
  return buckets;
}

GradSync::GradSync(collectives::Communicator* comm, Backend& backend,
                   int64_t grad_elems, GradSyncOptions options)
    : comm_(comm),
      backend_(backend),
      options_(options),
      buckets_(MakeBuckets(grad_elems, options)) {}

absl::Status GradSync::Post(size_t b) {
  const auto [begin, end] = buckets_[b];
  collectives::CallOptions call;
  call.backend = backend_.on_device() ? collectives::CollectiveBackend::kNccl
                                      : collectives::CollectiveBackend::kShm;
  SHOAL_ASSIGN_OR_RETURN(call.stream, backend_.StreamAfterGrads());
  float* g = backend_.grads() + begin;
  absl::StatusOr<collectives::Work> work = comm_->AllReduceAsync(
      g, g, end - begin, DType::kF32, collectives::ReduceOp::kAvg, call);
  if (!work.ok()) {
    return absl::Status(work.status().code(),
                        absl::StrCat("all-reduce of gradient bucket ", b, ": ",
                                     work.status().message()));
  }
  pending_.push_back(*std::move(work));
  return absl::OkStatus();
}

absl::Status GradSync::GradientsReady(int64_t prefix_end) {
  if (comm_ == nullptr || !options_.overlap) return absl::OkStatus();
  while (next_ < buckets_.size() && buckets_[next_].second <= prefix_end) {
    SHOAL_RETURN_IF_ERROR(Post(next_++));
  }
  return absl::OkStatus();
}

absl::Status GradSync::Finish(double* wait_seconds) {
  if (comm_ == nullptr) return absl::OkStatus();
  while (next_ < buckets_.size()) SHOAL_RETURN_IF_ERROR(Post(next_++));
  const double t0 = Now();
  absl::Status first_error;
  for (collectives::Work& w : pending_) {
    absl::Status s = w.Wait();
    if (!s.ok() && first_error.ok()) first_error = s;
  }
  *wait_seconds += Now() - t0;
  pending_.clear();
  next_ = 0;
  return first_error;
}

}  // namespace shoal::dp
