#include "torch_backend/work.h"

#include <ATen/core/jit_type.h>

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
           std::exception_ptr error)
      : ::c10d::Work(rank, type), outputs_(std::move(outputs)) {
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

 private:
  std::vector<at::Tensor> outputs_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
};

}  // namespace

std::exception_ptr ErrorFor(const std::string& what, const absl::Status& s) {
  return std::make_exception_ptr(
      std::runtime_error(absl::StrCat("shoal ", what, ": ", s.ToString())));
}

c10::intrusive_ptr<::c10d::Work> CompletedWork(int rank, ::c10d::OpType type,
                                               std::vector<at::Tensor> outputs,
                                               std::exception_ptr error) {
  return c10::make_intrusive<DoneWork>(rank, type, std::move(outputs),
                                       std::move(error));
}

ShoalWork::ShoalWork(int rank, ::c10d::OpType type, std::string what,
                     collectives::Work inner, std::vector<at::Tensor> outputs,
                     std::function<void()> finish,
                     std::vector<at::Tensor> keep_alive,
                     std::weak_ptr<Completer> completer)
    : ::c10d::Work(rank, type),
      what_(std::move(what)),
      inner_(std::move(inner)),
      outputs_(std::move(outputs)),
      finish_(std::move(finish)),
      keep_alive_(std::move(keep_alive)),
      completer_(std::move(completer)) {}

bool ShoalWork::isCompleted() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (completed_) return true;
  }
  if (!inner_.Test()) return false;
  // Done on shoal's side: finish it here unless another thread already is.
  if (!complete_mu_.TryLock()) return false;
  complete_mu_.Unlock();
  Complete();
  return true;
}

bool ShoalWork::wait(std::chrono::milliseconds timeout) {
  if (timeout != ::c10d::Store::kNoTimeout) {
    (void)inner_.Wait(absl::FromChrono(timeout));
    if (!inner_.Test()) {
      throw std::runtime_error(absl::StrCat(
          "shoal ", what_, ": did not finish within ", timeout.count(), " ms"));
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
  const absl::Status s = inner_.Wait();
  std::exception_ptr error;
  if (!s.ok()) {
    error = ErrorFor(what_, s);
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
