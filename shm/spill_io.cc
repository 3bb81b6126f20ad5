#include "shm/spill_io.h"

#include <utility>

#include "base/status_macros.h"

namespace shoal::shm {

absl::StatusOr<std::unique_ptr<SpillIo>> SpillIo::Start(
    const SpillFolder* folder) {
  std::unique_ptr<SpillIo> io(new SpillIo(folder));
  SHOAL_ASSIGN_OR_RETURN(io->done_event_, EventFd::Create());
  io->thread_ = std::thread([p = io.get()] { p->Loop(); });
  return io;
}

SpillIo::~SpillIo() {
  {
    MutexLock lock(&mu_);
    stop_ = true;
    queue_.clear();
  }
  changed_.SignalAll();
  thread_.join();
}

uint64_t SpillIo::Submit(SpillMove move) {
  uint64_t seq = 0;
  {
    MutexLock lock(&mu_);
    seq = move.seq = next_seq_++;
    queue_.push_back(std::move(move));
  }
  changed_.SignalAll();
  return seq;
}

std::vector<SpillMove> SpillIo::TakeDone() {
  done_event_.Drain();
  MutexLock lock(&mu_);
  return std::exchange(done_, {});
}

void SpillIo::WaitForAll() {
  MutexLock lock(&mu_);
  while (!queue_.empty() || busy_) changed_.Wait(&mu_);
}

void SpillIo::Loop() {
  SpillMove done;
  bool have_done = false;
  while (true) {
    SpillMove move;
    {
      MutexLock lock(&mu_);
      if (have_done) {
        done_.push_back(std::move(done));
        have_done = busy_ = false;
        done_event_.Signal();
        changed_.SignalAll();
      }
      while (queue_.empty() && !stop_) changed_.Wait(&mu_);
      if (stop_) return;
      move = std::move(queue_.front());
      queue_.pop_front();
      busy_ = true;
    }
    move.status = move.kind == SpillMove::Kind::kOut
                      ? folder_->WriteFile(move.id, move.data, move.nbytes)
                      : folder_->Read(move.id, move.data, move.nbytes);
    done = std::move(move);
    have_done = true;
  }
}

}  // namespace shoal::shm
