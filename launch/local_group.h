// LocalGroup: the processes `shoal launch` runs on this node — started each in
// its own process group and with PR_SET_PDEATHSIG, their output forwarded
// (optionally prefixed with the rank, optionally to per-rank log files), their
// exits watched through pidfds, and stopped together (SIGTERM to every group,
// a grace period, then SIGKILL).
#ifndef SHOAL_LAUNCH_LOCAL_GROUP_H_
#define SHOAL_LAUNCH_LOCAL_GROUP_H_

#include <zmq.h>

#include <deque>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "base/subprocess.h"

namespace shoal::launch {

struct RankSpec {
  int rank = 0;
  int local_rank = 0;
  std::map<std::string, std::string> env;
};

struct LocalGroupOptions {
  std::vector<std::string> command;
  // Prefix every output line with "[rank] ".
  bool tee = false;
  // Also write <log_dir>/rank<R>.stdout and .stderr (appended to; mode 0600;
  // the folder made 0700 if missing). The folder must be this user's and
  // not writable by others, the files no links: see OpenPrivateFolder and
  // OpenPrivateFileAt (base/temp_dir.h). Default "": none.
  std::string log_dir;
  // Lines of each process's stderr kept for the root-cause summary.
  int tail_lines = 20;
  // Between SIGTERM and SIGKILL when stopping. Default 5 s.
  absl::Duration grace = absl::Seconds(5);
};

// How one process ended.
struct RankExit {
  int rank = 0;
  int local_rank = 0;
  int wait_status = 0;
  std::vector<std::string> stderr_tail;
};

class LocalGroup {
 public:
  explicit LocalGroup(LocalGroupOptions options) : o_(std::move(options)) {}
  ~LocalGroup();  // kills what still runs

  // Starts one process per spec. Errors: exec failures; with log_dir,
  // FailedPrecondition when the folder or a rank's file is refused (a link,
  // another user's), naming it. The ones started are stopped.
  absl::Status Start(const std::vector<RankSpec>& specs);

  // Adds the items to poll (exits and output) ...
  void AppendPollItems(std::vector<zmq_pollitem_t>* items);
  // ... and handles the ones ready, from index `first` on (the same order).
  void Handle(const std::vector<zmq_pollitem_t>& items, size_t first);

  // SIGTERM to every process group still running; SIGKILL after the grace.
  void StopAll();
  // Forwards a signal to every process group still running.
  void Forward(int sig);
  // Sends SIGKILL when a stop's grace ran out; returns when it next needs a
  // call (InfiniteFuture if not stopping).
  absl::Time Tick(absl::Time now);

  bool AllExited() const;
  // The first process that exited non-zero or by a signal (in exit order).
  const std::optional<RankExit>& first_failure() const {
    return first_failure_;
  }
  size_t size() const { return procs_.size(); }

 private:
  struct Stream {
    int fd = -1;
    int out_fd = -1;  // where it goes: the launcher's stdout or stderr
    int log_fd = -1;
    std::string partial;  // an unfinished line (tee mode)
  };
  struct Proc {
    RankSpec spec;
    Subprocess process;
    int pidfd = -1;
    bool exited = false;
    Stream out, err;
    std::deque<std::string> tail;
  };

  // Start's loop: opens each rank's log files in `log_dir_fd` (-1: none),
  // then starts it.
  absl::Status StartEach(const std::vector<RankSpec>& specs, int log_dir_fd);
  void Pump(Proc& p, Stream& s, bool is_stderr, bool final);
  void Emit(Proc& p, Stream& s, bool is_stderr, const char* data, size_t n);
  void OnExit(Proc& p);

  LocalGroupOptions o_;
  std::vector<Proc> procs_;
  std::optional<RankExit> first_failure_;
  std::optional<absl::Time> kill_at_;
};

}  // namespace shoal::launch

#endif  // SHOAL_LAUNCH_LOCAL_GROUP_H_
