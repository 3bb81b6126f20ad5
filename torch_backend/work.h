// ShoalWork: a collective issued to shoal, as torch sees it (c10d::Work).
//
// It wraps collectives::Work handles (the communicator's async handles: one
// per collective, several for an op made of sends and receives) and a finish
// step that runs once the collective succeeded (copying a staged result
// into non-contiguous outputs, the element-wise tail of a bitwise
// reduction). Whoever first needs the result completes it: wait() and a
// successful isCompleted() on the caller's thread, or — once getFuture()
// handed out a Future, which DDP waits on without calling wait() — the
// process group's Completer thread. Errors become std::runtime_error (a
// Python RuntimeError) naming the op.
#ifndef SHOAL_TORCH_BACKEND_WORK_H_
#define SHOAL_TORCH_BACKEND_WORK_H_

#include <ATen/core/ivalue.h>

#include <chrono>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>
#include <vector>

#include "absl/status/status.h"
#include "base/mutex.h"
#include "collectives/communicator.h"

namespace shoal::torch_backend {

class Completer;

class ShoalWork : public ::c10d::Work {
 public:
  // `inner` are the issued collectives (the op is done when all are);
  // `outputs` the tensors torch gets as
  // result() and as the Future's value; `finish` (may be empty) runs after
  // success; `keep_alive` holds staging buffers the collective reads or
  // writes until it finished.
  ShoalWork(int rank, ::c10d::OpType type, std::string what,
            std::vector<collectives::Work> inner,
            std::vector<at::Tensor> outputs, std::function<void()> finish,
            std::vector<at::Tensor> keep_alive,
            std::weak_ptr<Completer> completer,
            std::chrono::milliseconds timeout);

  bool isCompleted() override;
  std::vector<at::Tensor> result() override { return outputs_; }
  void synchronize() override {}
  // Throws std::runtime_error: the collective's error, or (a finite
  // `timeout`) that it did not finish in time.
  bool wait(std::chrono::milliseconds timeout) override;
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override;

  // Waits for the collective (its own timeout bounds that), runs the finish
  // step, completes the Work and its Future. Idempotent, thread-safe.
  void Complete() ABSL_LOCKS_EXCLUDED(complete_mu_);

 private:
  // Whether every inner work finished.
  bool InnerDone();

  const std::string what_;
  std::vector<collectives::Work> inner_;
  const std::chrono::milliseconds timeout_;  // in errors; 0 when unknown
  const std::vector<at::Tensor> outputs_;
  std::function<void()> finish_;
  std::vector<at::Tensor> keep_alive_;
  // Owned by the process group (a Work may outlive it: then getFuture
  // completes the work on the caller's thread).
  std::weak_ptr<Completer> completer_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;

  Mutex complete_mu_;
  bool done_ ABSL_GUARDED_BY(complete_mu_) = false;
  bool future_handed_out_ ABSL_GUARDED_BY(complete_mu_) = false;
};

// A thread that completes, in issue order, the works whose Futures someone
// holds. Starts at the first Enqueue; the destructor completes what is
// queued (each bounded by its collective's timeout) and joins.
class Completer {
 public:
  Completer() = default;
  ~Completer() ABSL_LOCKS_EXCLUDED(mu_);
  void Enqueue(c10::intrusive_ptr<ShoalWork> work) ABSL_LOCKS_EXCLUDED(mu_);

 private:
  void Loop() ABSL_LOCKS_EXCLUDED(mu_);

  Mutex mu_;
  CondVar cv_;
  std::deque<c10::intrusive_ptr<ShoalWork>> queue_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_ ABSL_GUARDED_BY(mu_);
};

// A Work that is already complete (the op ran synchronously): `error`
// (may be null) is its failure; `source_rank` (>= 0) its sourceRank(), for a
// receive from any source.
c10::intrusive_ptr<::c10d::Work> CompletedWork(int rank, ::c10d::OpType type,
                                               std::vector<at::Tensor> outputs,
                                               std::exception_ptr error,
                                               int source_rank = -1);

// "shoal <what>: <status>" as an exception torch passes on to Python. A
// DeadlineExceeded reads "shoal <what>: Timed out waiting <timeout>ms: ..."
// (torch's tests match "Timed out"; `timeout` 0: without the figure).
std::exception_ptr ErrorFor(
    const std::string& what, const absl::Status& s,
    std::chrono::milliseconds timeout = std::chrono::milliseconds(0));
// ErrorFor's message.
std::string ErrorMessage(const std::string& what, const absl::Status& s,
                         std::chrono::milliseconds timeout);

}  // namespace shoal::torch_backend

#endif  // SHOAL_TORCH_BACKEND_WORK_H_
