// nccl_communicator.h in a build without CUDA: every entry point returns
// FailedPrecondition("... shoal was built without CUDA ...").
#include <utility>

#include "collectives/nccl/nccl_communicator.h"
#include "gpu/gpu_info.h"

namespace shoal::collectives {

struct NcclCommunicator::Impl {};

NcclCommunicator::NcclCommunicator(int rank, int size, int device,
                                   NcclOptions options)
    : rank_(rank),
      size_(size),
      device_(device),
      options_(std::move(options)),
      impl_(std::make_unique<Impl>()) {}

NcclCommunicator::~NcclCommunicator() = default;

absl::StatusOr<std::unique_ptr<NcclCommunicator>> NcclCommunicator::Create(
    Rendezvous& rendezvous, const std::string& comm_name, int rank, int world,
    int device, NcclOptions options) {
  return gpu::BuiltWithoutCuda("NcclCommunicator::Create");
}

void* NcclCommunicator::stream() const { return nullptr; }

absl::Status NcclCommunicator::AllReduce(const void* in, void* out,
                                         int64_t count, DType dtype,
                                         ReduceOp op, void* stream) {
  return gpu::BuiltWithoutCuda("NcclCommunicator::AllReduce");
}

absl::Status NcclCommunicator::Broadcast(const void* in, void* out,
                                         int64_t count, DType dtype, int root,
                                         void* stream) {
  return gpu::BuiltWithoutCuda("NcclCommunicator::Broadcast");
}

absl::Status NcclCommunicator::Reduce(const void* in, void* out, int64_t count,
                                      DType dtype, ReduceOp op, int root,
                                      void* stream) {
  return gpu::BuiltWithoutCuda("NcclCommunicator::Reduce");
}

absl::Status NcclCommunicator::AllGather(const void* in, void* out,
                                         int64_t count_per_rank, DType dtype,
                                         void* stream) {
  return gpu::BuiltWithoutCuda("NcclCommunicator::AllGather");
}

absl::Status NcclCommunicator::ReduceScatter(const void* in, void* out,
                                             int64_t count_per_rank,
                                             DType dtype, ReduceOp op,
                                             void* stream) {
  return gpu::BuiltWithoutCuda("NcclCommunicator::ReduceScatter");
}

absl::Status NcclCommunicator::AllToAll(const void* in, void* out,
                                        int64_t count_per_rank, DType dtype,
                                        void* stream) {
  return gpu::BuiltWithoutCuda("NcclCommunicator::AllToAll");
}

absl::Status NcclCommunicator::Send(const void* buf, int64_t count, DType dtype,
                                    int peer, void* stream) {
  return gpu::BuiltWithoutCuda("NcclCommunicator::Send");
}

absl::Status NcclCommunicator::Recv(void* buf, int64_t count, DType dtype,
                                    int peer, void* stream) {
  return gpu::BuiltWithoutCuda("NcclCommunicator::Recv");
}

absl::Status NcclCommunicator::Synchronize(
    void* stream, std::optional<absl::Duration> timeout) {
  return gpu::BuiltWithoutCuda("NcclCommunicator::Synchronize");
}

absl::StatusOr<bool> NcclCommunicator::Test(void* stream) {
  return gpu::BuiltWithoutCuda("NcclCommunicator::Test");
}

}  // namespace shoal::collectives
