#include "torch_backend/work.h"

#include <ATen/core/jit_type.h>

#include <algorithm>
#include <stdexcept>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"

namespace shoal::torch_backend {

namespace {

c10::intrusive_ptr<c10::ivalue::Future> NewTensorListFuture() {
  return c10::make_intrusive<c10::ivalue::Future>(
      c10::ListType::create(c10::TensorType::get()));
}

// A Work that was complete when it was made.
class DoneWork : public ::c10d::Work {
 public:
  DoneWork(int rank, ::c10d::OpType type, std::vector<at::Tensor> outputs,
           std::exception_ptr error, int source_rank)
      : ::c10d::Work(rank, type),
        outputs_(std::move(outputs)),
        source_rank_(source_rank) {
    future_ = NewTensorListFuture();
    if (error) {
      future_->setError(error);
    } else {
      future_->markCompleted(c10::IValue(outputs_));
    }
    finish(error);
  }
  std::vector<at::Tensor> result() override { return outputs_; }
  void synchronize() override {}
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override {
    return future_;
  }
  int sourceRank() const override {
    return source_rank_ >= 0 ? source_rank_ : ::c10d::Work::sourceRank();
  }

 private:
  std::vector<at::Tensor> outputs_;
  const int source_rank_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
};

}  // namespace

std::string ErrorMessage(const std::string& what, const absl::Status& s,
                         std::chrono::milliseconds timeout) {
  if (absl::IsDeadlineExceeded(s)) {
    return timeout.count() > 0
               ? absl::StrCat("shoal ", what, ": Timed out waiting ",
                              timeout.count(), "ms: ", s.message())
               : absl::StrCat("shoal ", what, ": Timed out: ", s.message());
  }
  return absl::StrCat("shoal ", what, ": ", s.ToString());
}

std::exception_ptr ErrorFor(const std::string& what, const absl::Status& s,
                            std::chrono::milliseconds timeout) {
  return std::make_exception_ptr(
      std::runtime_error(ErrorMessage(what, s, timeout)));
}

c10::intrusive_ptr<::c10d::Work> CompletedWork(int rank, ::c10d::OpType type,
                                               std::vector<at::Tensor> outputs,
                                               std::exception_ptr error,
                                               int source_rank) {
  return c10::make_intrusive<DoneWork>(rank, type, std::move(outputs),
                                       std::move(error), source_rank);
}

ShoalWork::ShoalWork(int rank, ::c10d::OpType type, std::string what,
                     std::vector<collectives::Work> inner,
                     std::vector<at::Tensor> outputs,
                     std::function<void()> finish,
                     std::vector<at::Tensor> keep_alive,
                     std::weak_ptr<Completer> completer,
                     std::chrono::milliseconds timeout)
    : ::c10d::Work(rank, type),
      what_(std::move(what)),
      inner_(std::move(inner)),
      timeout_(timeout),
      outputs_(std::move(outputs)),
      finish_(std::move(finish)),
      keep_alive_(std::move(keep_alive)),
      completer_(std::move(completer)) {}

bool ShoalWork::InnerDone() {
  for (collectives::Work& w : inner_) {
    if (!w.Test()) return false;
  }
  return true;
}

bool ShoalWork::isCompleted() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (completed_) return true;
  }
  if (!InnerDone()) return false;
  // Done on shoal's side: finish it here unless another thread already is.
  if (!complete_mu_.TryLock()) return false;
  complete_mu_.Unlock();
  Complete();
  return true;
}

bool ShoalWork::wait(std::chrono::milliseconds timeout) {
  if (timeout != ::c10d::Store::kNoTimeout) {
    const absl::Time deadline = absl::Now() + absl::FromChrono(timeout);
    for (collectives::Work& w : inner_) {
      (void)w.Wait(std::max(absl::ZeroDuration(), deadline - absl::Now()));
    }
    if (!InnerDone()) {
      throw std::runtime_error(absl::StrCat("shoal ", what_,
                                            ": Timed out waiting ",
                                            timeout.count(), "ms for it"));
    }
  }
  Complete();
  std::lock_guard<std::mutex> lock(mutex_);
  if (exception_) std::rethrow_exception(exception_);
  return true;
}

c10::intrusive_ptr<c10::ivalue::Future> ShoalWork::getFuture() {
  bool enqueue = false;
  c10::intrusive_ptr<c10::ivalue::Future> future;
  {
    MutexLock lock(&complete_mu_);
    if (!future_handed_out_) {
      future_handed_out_ = true;
      future_ = NewTensorListFuture();
      if (done_) {
        std::lock_guard<std::mutex> base_lock(mutex_);
        if (exception_) {
          future_->setError(exception_);
        } else {
          future_->markCompleted(c10::IValue(outputs_));
        }
      } else {
        enqueue = true;
      }
    }
    future = future_;
  }
  // Nobody may call wait(): the Completer finishes it.
  if (enqueue) {
    if (std::shared_ptr<Completer> completer = completer_.lock()) {
      completer->Enqueue(c10::intrusive_ptr<ShoalWork>::reclaim_copy(this));
    } else {
      Complete();
    }
  }
  return future;
}

void ShoalWork::Complete() {
  MutexLock lock(&complete_mu_);
  if (done_) return;
  absl::Status s;
  for (collectives::Work& w : inner_) s.Update(w.Wait());
  std::exception_ptr error;
  if (!s.ok()) {
    error = ErrorFor(what_, s, timeout_);
  } else if (finish_) {
    try {
      finish_();
    } catch (...) {
      error = std::current_exception();
    }
  }
  finish_ = nullptr;
  keep_alive_.clear();
  done_ = true;
  finish(error);
  if (future_handed_out_) {
    if (error) {
      future_->setError(error);
    } else {
      future_->markCompleted(c10::IValue(outputs_));
    }
  }
}

Completer::~Completer() {
  std::thread thread;
  {
    MutexLock lock(&mu_);
    stop_ = true;
    cv_.SignalAll();
    thread = std::move(thread_);
  }
  if (thread.joinable()) thread.join();
}

void Completer::Enqueue(c10::intrusive_ptr<ShoalWork> work) {
  MutexLock lock(&mu_);
  queue_.push_back(std::move(work));
  if (!thread_.joinable()) thread_ = std::thread([this] { Loop(); });
  cv_.SignalAll();
}

void Completer::Loop() {
  while (true) {
    c10::intrusive_ptr<ShoalWork> work;
    {
      MutexLock lock(&mu_);
      while (queue_.empty() && !stop_) cv_.Wait(&mu_);
      if (queue_.empty()) return;  // stopping, and everything completed
      work = std::move(queue_.front());
      queue_.pop_front();
    }
    work->Complete();
  }
}

}  // namespace shoal::torch_backend
