// SpillIo: the store service's thread for spill files. The service decides
// what moves (under the segment lock: it marks the entry kFlagMoving and
// keeps its arena block), hands the file I/O here, and finishes each move
// under the lock when it is done; the lock every client needs is never held
// while a file is written or read.
#ifndef SHOAL_SHM_SPILL_IO_H_
#define SHOAL_SHM_SPILL_IO_H_

#include <cstdint>
#include <deque>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "base/event_fd.h"
#include "base/mutex.h"
#include "ipc/object_id.h"
#include "shm/spill_folder.h"

namespace shoal::shm {

// One object's bytes moving between the arena and its file.
struct SpillMove {
  enum class Kind { kOut, kIn };
  Kind kind = Kind::kOut;
  uint64_t seq = 0;  // set by Submit
  uint32_t entry = 0;
  ObjectId id;
  uint8_t* data = nullptr;   // the arena block: the source (out) or target (in)
  uint64_t offset = 0;       // the block, which the service frees as the
  uint64_t alloc_bytes = 0;  // move's outcome says
  uint64_t nbytes = 0;
  absl::Status status;  // the I/O's outcome, set by the thread
};

class SpillIo {
 public:
  // Starts the thread, which writes and reads files in `folder` (its
  // WriteFile and Read, which touch no accounting).
  static absl::StatusOr<std::unique_ptr<SpillIo>> Start(
      const SpillFolder* folder);
  // Finishes the move in progress, drops the queued ones, joins.
  ~SpillIo();

  // Queues a move; returns its sequence number.
  uint64_t Submit(SpillMove move) ABSL_LOCKS_EXCLUDED(mu_);
  // The moves done since the last call, in the order they were queued.
  std::vector<SpillMove> TakeDone() ABSL_LOCKS_EXCLUDED(mu_);
  // Waits until every queued move is done.
  void WaitForAll() ABSL_LOCKS_EXCLUDED(mu_);
  // Readable while done moves wait to be taken.
  int fd() const { return done_event_.fd(); }

 private:
  explicit SpillIo(const SpillFolder* folder) : folder_(folder) {}
  void Loop() ABSL_LOCKS_EXCLUDED(mu_);

  const SpillFolder* const folder_;
  EventFd done_event_;
  Mutex mu_;
  CondVar changed_;
  std::deque<SpillMove> queue_ ABSL_GUARDED_BY(mu_);
  std::vector<SpillMove> done_ ABSL_GUARDED_BY(mu_);
  uint64_t next_seq_ ABSL_GUARDED_BY(mu_) = 1;
  bool busy_ ABSL_GUARDED_BY(mu_) = false;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace shoal::shm

#endif  // SHOAL_SHM_SPILL_IO_H_
