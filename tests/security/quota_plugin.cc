// Task functions for store_quota_test, loaded by its workers (SHOAL_PLUGINS):
// tasks that write several outputs, go on after a refused one, or crash with
// an output half written.
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <fstream>

#include "worker/task.h"

namespace {

// One f32 output of `n` elements, zeroed.
absl::Status FillOne(shoal::worker::TaskContext& ctx, int64_t n) {
  SHOAL_ASSIGN_OR_RETURN(shoal::worker::MutableTensorView out,
                         ctx.NewTensorOutput(shoal::TensorMeta::Contiguous(
                             shoal::DType::kF32, {n})));
  std::memset(out.data, 0, out.nbytes);
  return absl::OkStatus();
}

// fill_outputs(n, k): k f32 outputs of n elements; fails with the first
// refusal.
absl::Status FillOutputs(shoal::worker::TaskContext& ctx) {
  SHOAL_ASSIGN_OR_RETURN(const int64_t n, ctx.IntArg(0));
  SHOAL_ASSIGN_OR_RETURN(const int64_t k, ctx.IntArg(1));
  for (int64_t i = 0; i < k; ++i) SHOAL_RETURN_IF_ERROR(FillOne(ctx, n));
  return absl::OkStatus();
}

// fill_ignoring_refusals(n, k): tries k outputs of n elements, goes on past
// any that fails, and returns OK.
absl::Status FillIgnoringRefusals(shoal::worker::TaskContext& ctx) {
  SHOAL_ASSIGN_OR_RETURN(const int64_t n, ctx.IntArg(0));
  SHOAL_ASSIGN_OR_RETURN(const int64_t k, ctx.IntArg(1));
  for (int64_t i = 0; i < k; ++i) (void)FillOne(ctx, n);
  return absl::OkStatus();
}

// fill_then_crash(n, path): one output of n elements; then, on the first run
// (no file at `path`), creates the file and aborts with the output unsealed.
absl::Status FillThenCrash(shoal::worker::TaskContext& ctx) {
  SHOAL_ASSIGN_OR_RETURN(const int64_t n, ctx.IntArg(0));
  SHOAL_ASSIGN_OR_RETURN(const std::string path, ctx.StringArg(1));
  SHOAL_RETURN_IF_ERROR(FillOne(ctx, n));
  if (access(path.c_str(), F_OK) != 0) {
    std::ofstream(path) << "crashed\n";
    std::abort();
  }
  return absl::OkStatus();
}

}  // namespace

SHOAL_TASK("fill_outputs", FillOutputs);
SHOAL_TASK("fill_ignoring_refusals", FillIgnoringRefusals);
SHOAL_TASK("fill_then_crash", FillThenCrash);
