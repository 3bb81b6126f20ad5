// Supervisor: starts the node's worker processes (fork+exec, never a bare
// fork), notices each death at once through a pidfd, restarts with bounded
// exponential backoff, and kills workers whose heartbeats stop (hung).
//
// It owns only processes; what a death means for tasks and the store is the
// coordinator's business, through the hooks.
#ifndef SHOAL_COORDINATOR_SUPERVISOR_H_
#define SHOAL_COORDINATOR_SUPERVISOR_H_

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "base/subprocess.h"
#include "ipc/messages.h"

namespace shoal::coordinator {

struct WorkerSpec {
  uint32_t id = 0;
  uint32_t cpus = 1;
  uint32_t gpus = 0;
  // CUDA_VISIBLE_DEVICES for this worker: its GPUs, mapped through the
  // coordinator's own list. Empty: the worker sees no GPU.
  std::string visible_devices;
  // Restarts after deaths: -1 (the pool's workers) without limit; an actor's
  // worker gets its max_restarts.
  int max_restarts = -1;
  // What it is, for status ("actor 3 Counter"); empty for pool workers.
  std::string label;
  // Environment of this worker only, on top of SupervisorOptions::env.
  std::map<std::string, std::string> env;
};

struct SupervisorOptions {
  // The command each worker runs (e.g. {"/path/shoal", "worker"}).
  std::vector<std::string> command;
  // Environment every worker gets on top of the coordinator's.
  std::map<std::string, std::string> env;
  // Folder for worker-<id>.log (stdout and stderr). Default "": inherit.
  std::string log_dir;
  // Restart delay: starts at `backoff_initial`, doubles per consecutive
  // failure up to `backoff_max`; a worker up for `stable_after` resets it.
  absl::Duration backoff_initial = absl::Milliseconds(100);
  absl::Duration backoff_max = absl::Seconds(5);
  absl::Duration stable_after = absl::Seconds(10);
  // A worker silent this long is considered hung and killed. Default 10 s.
  absl::Duration heartbeat_timeout = absl::Seconds(10);
};

class Supervisor {
 public:
  struct Hooks {
    // Called before each (re)start: returns the worker's extra environment
    // (for example its task-table slot). An error delays the start (retried
    // with backoff).
    std::function<absl::StatusOr<std::map<std::string, std::string>>(
        uint32_t worker)>
        before_start;
    // Called after a worker exited and was reaped, with a description of how
    // ("exit 1", "killed by SIGKILL (signal 9)").
    std::function<void(uint32_t worker, const std::string& how)> on_exit;
  };

  Supervisor(SupervisorOptions options, std::vector<WorkerSpec> specs,
             Hooks hooks);
  ~Supervisor();  // StopAll(0)

  // Starts every worker. Errors: the first start failure (exec errors are
  // reported here).
  absl::Status StartAll();
  // Adds a worker (an actor's) and starts it; its id is the next free one
  // (spec.id is ignored). Errors: the start's (it is then stopped, never
  // restarted).
  absl::StatusOr<uint32_t> Add(WorkerSpec spec);
  // No more restarts for `worker`; SIGKILLs it if it runs (its exit arrives
  // through the pidfd as usual).
  void Retire(uint32_t worker);
  // Whether `worker` is waiting to be restarted (call from on_exit: false
  // when it was retired or used up its max_restarts).
  bool WillRestart(uint32_t worker) const;

  // The pidfds to poll (readable when that worker exits), with worker ids.
  void PollFds(std::vector<int>* fds, std::vector<uint32_t>* workers) const;
  // Handles a readable pidfd: reaps, calls on_exit, schedules a restart.
  void OnExit(uint32_t worker);
  // A heartbeat (or hello) from a worker.
  void OnHeartbeat(uint32_t worker, int32_t pid);
  // Restarts whose backoff elapsed; kills workers whose heartbeats stopped.
  // Returns when it next needs to be called.
  absl::Time Tick(absl::Time now);
  // Sends `sig` to a running worker (e.g. SIGKILL after an ignored timeout).
  void Signal(uint32_t worker, int sig);
  // The pid of a running worker, or 0.
  pid_t Pid(uint32_t worker) const;

  // Status rows (tasks done/failed are filled in by the caller).
  std::vector<ipc::WorkerStatus> Status() const;

  // Stops every worker: SIGTERM, up to `grace` for them to exit, then SIGKILL.
  // No restarts afterwards.
  void StopAll(absl::Duration grace);

 private:
  enum class State { kRunning, kBackoff, kStopped };
  struct Worker {
    WorkerSpec spec;
    State state = State::kBackoff;
    Subprocess process;
    int pidfd = -1;
    uint32_t restarts = 0;
    uint32_t consecutive_failures = 0;
    absl::Time started;
    absl::Time last_heartbeat;
    absl::Time restart_at;
    std::string last_exit;
    bool retired = false;
  };

  absl::Status Start(Worker& w);

  SupervisorOptions options_;
  Hooks hooks_;
  std::vector<Worker> workers_;
  bool stopping_ = false;
};

}  // namespace shoal::coordinator

#endif  // SHOAL_COORDINATOR_SUPERVISOR_H_
