// The main loop of a worker process (`shoal worker`, exec'd by the
// coordinator): claim a task from the node's task table, run it, complete it;
// heartbeat to the coordinator's backend meanwhile.
#ifndef SHOAL_WORKER_WORKER_MAIN_H_
#define SHOAL_WORKER_WORKER_MAIN_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace shoal::worker {

struct WorkerOptions {
  uint32_t worker_id = 0;      // SHOAL_WORKER_ID
  uint32_t task_slot = 0;      // SHOAL_WORKER_SLOT: its slot in the task table
  std::string task_segment;    // SHOAL_TASK_SEGMENT
  std::string store_endpoint;  // SHOAL_STORE_ENDPOINT
  std::string backend;         // SHOAL_BACKEND_ENDPOINT (ipc://)
  std::vector<std::string> plugins;  // SHOAL_PLUGINS, ':'-separated
  // How long an idle worker keeps looking for work (yielding the CPU) before
  // it sleeps. Default 200 µs (SHOAL_WORKER_SPIN_US): longer than the gap
  // between a remote client's sync tasks, so that they do not each pay a
  // futex wake-up.
  absl::Duration spin = absl::Microseconds(200);
  // Heartbeat period. Default 500 ms.
  absl::Duration heartbeat_interval = absl::Milliseconds(500);
  // A temporary worker (started while another waits for its children,
  // docs/actors.md "Nested tasks") exits after this long without a task.
  // Default infinite (SHOAL_WORKER_IDLE_EXIT_MS).
  absl::Duration idle_exit = absl::InfiniteDuration();
  // How many tasks a waiting task may run inside its wait, one inside the
  // other (HelpWhileWaiting); 0: none. Negative: the default, 100
  // (SHOAL_WORKER_MAX_INLINE_DEPTH).
  int max_inline_depth = -1;
  // An actor's worker (SHOAL_ACTOR_ID set): one client's process, whose
  // Python paths stay applied for its life (PythonRunnerOptions).
  bool actor = false;
};

// Reads the options from the environment the coordinator set.
// Errors: InvalidArgument naming a missing or malformed variable.
absl::StatusOr<WorkerOptions> WorkerOptionsFromEnv();

// Tells the coordinator (with the next heartbeat, sent at once) whether a
// thread of this worker waits in the client API for tasks: `begins` true at
// the start of such a wait, false at its end (waits nest and overlap; the
// worker counts as blocked while any lasts). Waits shorter than ~20 ms are
// not reported. Thread-safe; a no-op outside RunWorker.
void ReportBlockedWait(bool begins);

// Called by a task that waits for tasks (the client API inside a worker),
// between looks at what it waits for: claims one queued task this worker
// can run and runs it to completion inline, on this thread, on top of the
// waiting one (tasks::TaskTable::ClaimNested; docs/actors.md, "Nested
// tasks"). So some worker always runs, and waits never deadlock the node.
// Returns 1 (ran one), 0 (nothing queued for it now), -1 (cannot help: not
// the worker's task thread, an actor's worker, the depth limit reached, or
// outside RunWorker). REQUIRES: the GIL is NOT held.
int HelpWhileWaiting();

// Runs until the coordinator closes the task table (returns OK) or a fatal
// error. The process also dies with the coordinator (PR_SET_PDEATHSIG).
absl::Status RunWorker(const WorkerOptions& options);

}  // namespace shoal::worker

#endif  // SHOAL_WORKER_WORKER_MAIN_H_
