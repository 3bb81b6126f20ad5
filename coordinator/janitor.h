// Janitor: a process forked when a node starts that removes the node's
// shared-memory segments once the coordinator is gone, however it went
// (SIGKILL included), so that no later start is needed to clean up
// (docs/security.md, "The store service and shared-memory segments").
//
// It waits on a pipe whose only write end the coordinator holds (close-on-
// exec, so workers do not inherit it): end of file means the coordinator has
// exited. It then unlinks the node's store and task-table segments by name
// (the names it was started with, and those the coordinator sent it through
// the pipe: a fallback name taken when another user held the usual one), and
// the workers' collective segments of this job ("shoal-<job>-...-<pid>
// -coll") once the process named in each is gone (workers die with the
// coordinator, a moment later). It unlinks only segments of its own user: a
// name that another user took first is left alone. It runs in a session of its
// own with its standard streams on /dev/null, so a signal to the node's process
// group or a reader waiting for the node's output is not held up by it.
#ifndef SHOAL_COORDINATOR_JANITOR_H_
#define SHOAL_COORDINATOR_JANITOR_H_

#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace shoal::coordinator {

class Janitor {
 public:
  // Forks the janitor of job `job_id`'s node (this process is its
  // coordinator). `segments`: names under /dev/shm to remove once this
  // process has exited.
  // REQUIRES: job_id is a valid job id (shm::SegmentNameForJob accepts it).
  // Errors: Internal if pipe2 or fork fails.
  static absl::StatusOr<std::unique_ptr<Janitor>> Start(
      absl::string_view job_id, std::vector<std::string> segments);

  // Adds `segment` (a name under /dev/shm, made after Start) to those the
  // janitor removes. REQUIRES: `segment` holds no '/' and no newline.
  // Errors: InvalidArgument (a bad name), Internal (the pipe write failed).
  absl::Status Watch(absl::string_view segment);

  // Closes the pipe: the janitor wakes, finds the segments already removed
  // by their owners (a clean exit), and exits. It is not waited for.
  ~Janitor();

  Janitor(const Janitor&) = delete;
  Janitor& operator=(const Janitor&) = delete;

  pid_t pid() const { return pid_; }

 private:
  Janitor(int write_fd, pid_t pid) : write_fd_(write_fd), pid_(pid) {}

  int write_fd_;
  pid_t pid_;
};

}  // namespace shoal::coordinator

#endif  // SHOAL_COORDINATOR_JANITOR_H_
