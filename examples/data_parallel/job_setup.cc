#include "examples/data_parallel/job_setup.h"

#include <optional>
#include <set>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "gpu/device_visibility.h"
#include "gpu/gpu_info.h"
#include "ipc/tensor_meta.h"

namespace shoal::dp {

absl::StatusOr<DeviceChoice> ChooseDevice(launch::Job& job,
                                          absl::string_view flag,
                                          absl::string_view kv_prefix) {
  if (flag != "auto" && flag != "cpu" && flag != "gpu") {
    return absl::InvalidArgumentError(
        absl::StrCat("--device must be auto, cpu or gpu, not '", flag, "'"));
  }
  const bool forced_gpu = flag == "gpu";
  // This rank's candidate: a GPU it would use, or none (with the reason).
  std::optional<std::string> entry;
  int device = 0;
  std::string why;
  if (flag == "cpu") {
    why = "--device cpu";
  } else if (!gpu::GetBuildInfo().cuda) {
    why = "shoal was built without CUDA";
  } else {
    // Reads CUDA_VISIBLE_DEVICES and /proc only: CUDA stays uninitialised
    // unless a GPU is used.
    SHOAL_ASSIGN_OR_RETURN(std::vector<std::string> visible,
                           gpu::DiscoverGpusFromEnvironment(std::nullopt));
    const int n = static_cast<int>(visible.size());
    if (n == 0) {
      why = "no GPU visible";
    } else if (n >= job.local_world_size()) {
      device = job.local_rank();
      entry = visible[device];
    } else if (n == 1) {
      entry = visible[0];  // --nproc-per-node gpu: each sees its own
    } else {
      why = absl::StrCat(n, " GPUs visible for ", job.local_world_size(),
                         " processes on this node");
    }
  }
  if (forced_gpu && !entry) {
    return absl::FailedPreconditionError(
        absl::StrCat("--device gpu, but ", why));
  }

  // Every rank must pick the same kind, and no two ranks of a node the same
  // GPU (NCCL refuses that): publish, read everyone's, decide the same way.
  const std::string key = absl::StrCat(kv_prefix, "/device/");
  const std::string mine =
      entry ? absl::StrCat("gpu ", job.node_rank(), "/", *entry)
            : absl::StrCat("cpu ", why);
  SHOAL_RETURN_IF_ERROR(job.kv().Set(absl::StrCat(key, job.rank()), mine));
  std::set<std::string> gpus_seen;
  std::string fallback;
  for (int r = 0; r < job.world_size(); ++r) {
    SHOAL_ASSIGN_OR_RETURN(
        std::string theirs,
        job.kv().Get(absl::StrCat(key, r), absl::Minutes(5)));
    if (fallback.empty() && theirs.rfind("cpu ", 0) == 0) {
      fallback = absl::StrCat("rank ", r, ": ", theirs.substr(4));
    } else if (fallback.empty() && !gpus_seen.insert(theirs).second) {
      fallback = absl::StrCat(
          "two ranks would share GPU ", theirs.substr(4),
          " (NCCL needs one GPU per rank: shoal launch --nproc-per-node gpu)");
    }
  }
  DeviceChoice c;
  if (!fallback.empty()) {
    if (forced_gpu) {
      return absl::FailedPreconditionError(
          absl::StrCat("--device gpu, but ", fallback));
    }
    c.why = absl::StrCat("CPU: ", fallback);
    return c;
  }
  c.gpu = true;
  c.device = device;
  c.why = absl::StrCat("GPU ", *entry, " (every rank has its own)");
  return c;
}

absl::StatusOr<SharedDataset> SharedDataset::Open(launch::Job& job,
                                                  const ModelSpec& spec,
                                                  int64_t samples,
                                                  uint64_t seed,
                                                  absl::string_view kv_prefix) {
  const int64_t ld = spec.d_in + spec.d_out;
  const TensorMeta meta = TensorMeta::Contiguous(DType::kF32, {samples, ld});
  const std::string key =
      absl::StrCat(kv_prefix, "/dataset/node", job.node_rank());
  shm::StoreClient& store = job.store();
  ObjectId id;
  const bool owner = job.local_rank() == 0;
  if (owner) {
    id = ObjectId::Random();
    SHOAL_ASSIGN_OR_RETURN(shm::MutableObjectBuffer buf,
                           store.Create(id, meta));
    GenerateDataset(spec, samples, seed,
                    absl::MakeSpan(reinterpret_cast<float*>(buf.data),
                                   static_cast<size_t>(samples * ld)));
    SHOAL_RETURN_IF_ERROR(store.Seal(id));
    SHOAL_RETURN_IF_ERROR(job.kv().Set(key, id.ToHex()));
  } else {
    SHOAL_ASSIGN_OR_RETURN(std::string hex,
                           job.kv().Get(key, absl::Minutes(5)));
    SHOAL_ASSIGN_OR_RETURN(id, ObjectId::FromHex(hex));
  }
  // Everyone, the creator too, reads through an ordinary zero-copy Get.
  SHOAL_ASSIGN_OR_RETURN(shm::ObjectBuffer view,
                         store.Get(id, absl::Minutes(5)));
  if (owner) SHOAL_RETURN_IF_ERROR(store.Release(id));  // the Create's
  if (view.meta.dtype != DType::kF32 || view.meta.shape != meta.shape) {
    (void)store.Release(id);
    return absl::InvalidArgumentError(absl::StrCat(
        "the data set in the store has shape ", view.meta.ToString(),
        ", this process expects ", meta.ToString(),
        ": every rank must run with the same flags"));
  }
  return SharedDataset(
      &job, id, {reinterpret_cast<const float*>(view.data), samples}, owner);
}

SharedDataset::SharedDataset(SharedDataset&& other) noexcept
    : job_(std::exchange(other.job_, nullptr)),
      id_(other.id_),
      view_(other.view_),
      owner_(other.owner_) {}

SharedDataset::~SharedDataset() {
  if (job_ != nullptr) (void)job_->store().Release(id_);
}

absl::Status SharedDataset::Close() {
  if (job_ == nullptr) return absl::OkStatus();
  launch::Job* job = std::exchange(job_, nullptr);
  SHOAL_RETURN_IF_ERROR(job->store().Release(id_));
  if (owner_) SHOAL_RETURN_IF_ERROR(job->store().Delete(id_));
  return absl::OkStatus();
}

}  // namespace shoal::dp
