#include "worker/python_interrupt.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "base/log.h"
#include "base/mutex.h"

namespace shoal::worker {
namespace {

// Default of ForceCancelGrace().
constexpr absl::Duration kDefaultForceCancelGrace = absl::Seconds(2);

// A Python task running on this worker (RunningPythonTask).
struct Running {
  uint64_t id;
  const TaskContext* ctx;
  unsigned long thread;  // PyThread_get_thread_ident() of its thread
  bool interrupted;      // the asynchronous exception was sent
};

Mutex g_mu;
std::vector<Running>* g_running ABSL_GUARDED_BY(g_mu) =
    new std::vector<Running>();

int g_pipe[2] = {-1, -1};  // the handler writes task ids; the watch reads

Running* FindLocked(uint64_t id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(g_mu) {
  for (auto it = g_running->rbegin(); it != g_running->rend(); ++it) {
    if (it->id == id) return &*it;
  }
  return nullptr;
}

// Whether `id` runs here now and its cancel flag is set.
bool CancelledHere(uint64_t id) ABSL_LOCKS_EXCLUDED(g_mu) {
  MutexLock lock(&g_mu);
  Running* r = FindLocked(id);
  return r != nullptr && r->ctx->cancelled();
}

bool RunsHere(uint64_t id) ABSL_LOCKS_EXCLUDED(g_mu) {
  MutexLock lock(&g_mu);
  return FindLocked(id) != nullptr;
}

// Sends TaskCancelledError to task `id`'s thread, if it still runs. Takes
// the GIL (it may wait while C code holds it: the kill does not wait on
// this).
void Interrupt(uint64_t id) {
  PyGILState_STATE gil = PyGILState_Ensure();
  {
    MutexLock lock(&g_mu);
    Running* r = FindLocked(id);
    if (r != nullptr && !r->interrupted) {
      PyThreadState_SetAsyncExc(r->thread, TaskCancelledErrorType());
      r->interrupted = true;
    }
  }
  PyGILState_Release(gil);
}

void OnSignal(int, siginfo_t* info, void*) {
  const int saved = errno;
  const uint64_t id = static_cast<uint64_t>(
      reinterpret_cast<uintptr_t>(info->si_value.sival_ptr));
  ssize_t n = write(g_pipe[1], &id, sizeof(id));
  (void)n;  // a full pipe drops it: the client's cancel is then plain
  errno = saved;
}

// The watch thread: interrupts force-cancelled tasks as their ids arrive,
// and kills this process when one still runs after the grace period.
void Watch() {
  const absl::Duration grace = ForceCancelGrace();
  std::map<uint64_t, absl::Time> kill_at;
  while (true) {
    int timeout_ms = -1;
    const absl::Time now = absl::Now();
    for (const auto& [id, at] : kill_at) {
      const int ms = static_cast<int>(absl::ToInt64Milliseconds(
          absl::Ceil(at - now, absl::Milliseconds(1))));
      timeout_ms = timeout_ms < 0 ? std::max(ms, 0) : std::min(timeout_ms, ms);
    }
    pollfd p{g_pipe[0], POLLIN, 0};
    if (poll(&p, 1, timeout_ms) > 0) {
      uint64_t id;
      while (read(g_pipe[0], &id, sizeof(id)) == sizeof(id)) {
        if (kill_at.count(id) > 0 || !CancelledHere(id)) continue;
        SHOAL_LOG(INFO, "task %d: cancelled with force: interrupting it", id);
        kill_at[id] = absl::Now() + grace;
        if (grace > absl::ZeroDuration()) std::thread(Interrupt, id).detach();
      }
    }
    for (auto it = kill_at.begin(); it != kill_at.end();) {
      if (absl::Now() < it->second) {
        ++it;
        continue;
      }
      if (RunsHere(it->first)) {
        SHOAL_LOG(WARNING,
                  "task %d: still running %s after its forced cancellation: "
                  "killing this worker (the node starts another)",
                  it->first, absl::FormatDuration(grace));
        kill(getpid(), SIGKILL);
      }
      it = kill_at.erase(it);
    }
  }
}

}  // namespace

int ForceCancelSignal() { return SIGRTMIN + 6; }

absl::Duration ForceCancelGrace() {
  if (const char* s = std::getenv("SHOAL_FORCE_CANCEL_GRACE_MS");
      s != nullptr) {
    int64_t ms;
    if (absl::SimpleAtoi(s, &ms) && ms >= 0) return absl::Milliseconds(ms);
  }
  return kDefaultForceCancelGrace;
}

void StartForceCancelWatch() {
  static std::once_flag once;
  std::call_once(once, [] {
    if (pipe2(g_pipe, O_NONBLOCK | O_CLOEXEC) != 0) {
      SHOAL_LOG(WARNING, "forced cancellation is off: pipe2: %s",
                strerror(errno));
      return;
    }
    struct sigaction sa = {};
    sa.sa_sigaction = OnSignal;
    sa.sa_flags = SA_SIGINFO | SA_RESTART;
    sigemptyset(&sa.sa_mask);
    if (sigaction(ForceCancelSignal(), &sa, nullptr) != 0) {
      SHOAL_LOG(WARNING, "forced cancellation is off: sigaction: %s",
                strerror(errno));
      return;
    }
    std::thread(Watch).detach();
  });
}

RunningPythonTask::RunningPythonTask(const TaskContext& ctx)
    : id_(ctx.task_id()) {
  MutexLock lock(&g_mu);
  g_running->push_back(Running{id_, &ctx, PyThread_get_thread_ident(), false});
}

RunningPythonTask::~RunningPythonTask() {
  MutexLock lock(&g_mu);
  for (auto it = g_running->rbegin(); it != g_running->rend(); ++it) {
    if (it->id == id_) {
      g_running->erase(std::next(it).base());
      return;
    }
  }
}

bool RunningPythonTask::TakeInterrupt() {
  MutexLock lock(&g_mu);
  Running* r = FindLocked(id_);
  if (r == nullptr || !r->interrupted) return false;
  PyThreadState_SetAsyncExc(r->thread, nullptr);
  return true;
}

PyObject* TaskCancelledErrorType() {
  static PyObject* type = PyErr_NewExceptionWithDoc(
      "shoal.task.TaskCancelledError",
      "Raised inside a task cancelled with shoal.cancel(f, force=True). A "
      "BaseException, so `except Exception` does not stop it.",
      PyExc_BaseException, nullptr);
  return type;
}

}  // namespace shoal::worker
