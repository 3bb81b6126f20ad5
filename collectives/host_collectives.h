// HostCollectives: the collectives on host (CPU) memory, as one interface over
// the backends that run them — the shared-memory backend within a node
// (ShmCommunicator, through ShmHostCollectives), gloo over TCP between nodes
// (GlooCommunicator), and the two combined (HierarchicalCommunicator).
// Communicator picks one per call and runs the op through this interface.
//
// The verbs, their conventions (in == out is in place; counts are elements,
// per rank for the gather/scatter/all-to-all ops) and their errors are
// ShmCommunicator's (shm_communicator.h); a `timeout` of ZeroDuration means
// the backend's default. After a failure the backend refuses further calls
// with FailedPrecondition. Whether calls may overlap (on other threads) is
// each implementation's: all allow a Send and a Recv beside a collective.
#ifndef SHOAL_COLLECTIVES_HOST_COLLECTIVES_H_
#define SHOAL_COLLECTIVES_HOST_COLLECTIVES_H_

#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "collectives/reduce_op.h"
#include "collectives/shm/shm_communicator.h"
#include "ipc/tensor_meta.h"

namespace shoal::collectives {

class HostCollectives {
 public:
  virtual ~HostCollectives() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;

  virtual absl::Status AllReduce(const void* in, void* out, int64_t count,
                                 DType dtype, ReduceOp op,
                                 absl::Duration timeout) = 0;
  virtual absl::Status Broadcast(const void* in, void* out, int64_t count,
                                 DType dtype, int root,
                                 absl::Duration timeout) = 0;
  virtual absl::Status Reduce(const void* in, void* out, int64_t count,
                              DType dtype, ReduceOp op, int root,
                              absl::Duration timeout) = 0;
  virtual absl::Status AllGather(const void* in, void* out, int64_t count,
                                 DType dtype, absl::Duration timeout) = 0;
  virtual absl::Status ReduceScatter(const void* in, void* out, int64_t count,
                                     DType dtype, ReduceOp op,
                                     absl::Duration timeout) = 0;
  virtual absl::Status AllToAll(const void* in, void* out, int64_t count,
                                DType dtype, absl::Duration timeout) = 0;
  virtual absl::Status Send(const void* in, int64_t count, DType dtype,
                            int peer, absl::Duration timeout) = 0;
  virtual absl::Status Recv(void* out, int64_t count, DType dtype, int peer,
                            absl::Duration timeout) = 0;
  virtual absl::Status Barrier(absl::Duration timeout) = 0;
};

// The shm backend behind the interface; `shm` must outlive it.
class ShmHostCollectives : public HostCollectives {
 public:
  explicit ShmHostCollectives(ShmCommunicator* shm) : shm_(shm) {}

  int rank() const override { return shm_->rank(); }
  int size() const override { return shm_->size(); }
  absl::Status AllReduce(const void* in, void* out, int64_t count, DType dtype,
                         ReduceOp op, absl::Duration timeout) override {
    return shm_->AllReduce(in, out, count, dtype, op, timeout);
  }
  absl::Status Broadcast(const void* in, void* out, int64_t count, DType dtype,
                         int root, absl::Duration timeout) override {
    return shm_->Broadcast(in, out, count, dtype, root, timeout);
  }
  absl::Status Reduce(const void* in, void* out, int64_t count, DType dtype,
                      ReduceOp op, int root, absl::Duration timeout) override {
    return shm_->Reduce(in, out, count, dtype, op, root, timeout);
  }
  absl::Status AllGather(const void* in, void* out, int64_t count, DType dtype,
                         absl::Duration timeout) override {
    return shm_->AllGather(in, out, count, dtype, timeout);
  }
  absl::Status ReduceScatter(const void* in, void* out, int64_t count,
                             DType dtype, ReduceOp op,
                             absl::Duration timeout) override {
    return shm_->ReduceScatter(in, out, count, dtype, op, timeout);
  }
  absl::Status AllToAll(const void* in, void* out, int64_t count, DType dtype,
                        absl::Duration timeout) override {
    return shm_->AllToAll(in, out, count, dtype, timeout);
  }
  absl::Status Send(const void* in, int64_t count, DType dtype, int peer,
                    absl::Duration timeout) override {
    return shm_->Send(in, count, dtype, peer, timeout);
  }
  absl::Status Recv(void* out, int64_t count, DType dtype, int peer,
                    absl::Duration timeout) override {
    return shm_->Recv(out, count, dtype, peer, timeout);
  }
  absl::Status Barrier(absl::Duration timeout) override {
    return shm_->Barrier(timeout);
  }

 private:
  ShmCommunicator* shm_;
};

}  // namespace shoal::collectives

#endif  // SHOAL_COLLECTIVES_HOST_COLLECTIVES_H_
