#include "coordinator/supervisor.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "base/log.h"
#include "base/process_info.h"

namespace shoal::coordinator {

Supervisor::Supervisor(SupervisorOptions options, std::vector<WorkerSpec> specs,
                       Hooks hooks)
    : options_(std::move(options)), hooks_(std::move(hooks)) {
  for (WorkerSpec& s : specs) {
    Worker w;
    w.spec = std::move(s);
    workers_.push_back(std::move(w));
  }
}

Supervisor::~Supervisor() { StopAll(absl::ZeroDuration()); }

absl::Status Supervisor::Start(Worker& w) {
  SubprocessOptions o;
  for (const auto& [k, v] : options_.env) o.env[k] = v;
  for (const auto& [k, v] : w.spec.env) o.env[k] = v;
  o.env["SHOAL_WORKER_ID"] = absl::StrCat(w.spec.id);
  // Each worker sees only its own GPUs; an empty value hides them all.
  o.env["CUDA_VISIBLE_DEVICES"] = w.spec.visible_devices;
  if (hooks_.before_start) {
    auto extra = hooks_.before_start(w.spec.id);
    if (!extra.ok()) return extra.status();
    for (const auto& [k, v] : *extra) o.env[k] = v;
  }
  // Workers die with the coordinator: nothing may outlive it holding tasks.
  o.parent_death_signal = SIGKILL;
  if (!options_.log_dir.empty()) {
    o.stdout_file =
        absl::StrCat(options_.log_dir, "/worker-", w.spec.id, ".log");
    o.stderr_file = o.stdout_file;
  }
  absl::StatusOr<Subprocess> p = Subprocess::Start(options_.command, o);
  if (!p.ok()) return p.status();
  absl::StatusOr<int> fd = OpenPidFd(p->pid());
  if (!fd.ok()) return fd.status();
  w.process = *std::move(p);
  w.pidfd = *fd;
  w.state = State::kRunning;
  w.started = absl::Now();
  w.last_heartbeat = w.started;  // the start counts as a sign of life
  return absl::OkStatus();
}

absl::Status Supervisor::StartAll() {
  for (Worker& w : workers_) {
    absl::Status s = Start(w);
    if (!s.ok()) {
      return absl::Status(s.code(), absl::StrCat("starting worker ", w.spec.id,
                                                 ": ", s.message()));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<uint32_t> Supervisor::Add(WorkerSpec spec) {
  if (stopping_) return absl::UnavailableError("the node is shutting down");
  spec.id = static_cast<uint32_t>(workers_.size());
  Worker w;
  w.spec = std::move(spec);
  workers_.push_back(std::move(w));
  Worker& added = workers_.back();
  absl::Status s = Start(added);
  if (!s.ok()) {
    added.state = State::kStopped;
    added.retired = true;
    return s;
  }
  return added.spec.id;
}

void Supervisor::Retire(uint32_t id) {
  if (id >= workers_.size()) return;
  Worker& w = workers_[id];
  w.retired = true;
  if (w.state == State::kRunning) {
    w.process.Signal(SIGKILL);
  } else {
    w.state = State::kStopped;
  }
}

bool Supervisor::WillRestart(uint32_t id) const {
  return id < workers_.size() && workers_[id].state == State::kBackoff;
}

void Supervisor::PollFds(std::vector<int>* fds,
                         std::vector<uint32_t>* ids) const {
  for (const Worker& w : workers_) {
    if (w.state == State::kRunning && w.pidfd >= 0) {
      fds->push_back(w.pidfd);
      ids->push_back(w.spec.id);
    }
  }
}

void Supervisor::OnExit(uint32_t id) {
  if (id >= workers_.size()) return;
  Worker& w = workers_[id];
  if (w.state != State::kRunning) return;
  absl::StatusOr<int> status = w.process.Wait(absl::Seconds(1));
  if (!status.ok()) return;  // pidfd readable but not yet reapable: next poll
  close(w.pidfd);
  w.pidfd = -1;
  w.last_exit = DescribeWaitStatus(*status);
  const absl::Time now = absl::Now();
  if (now - w.started >= options_.stable_after) w.consecutive_failures = 0;
  const absl::Duration delay =
      std::min(options_.backoff_max,
               options_.backoff_initial *
                   (1 << std::min<uint32_t>(w.consecutive_failures, 16)));
  ++w.consecutive_failures;
  const bool restarts_left =
      w.spec.max_restarts < 0 ||
      w.restarts < static_cast<uint32_t>(w.spec.max_restarts);
  w.state = stopping_ || w.retired || !restarts_left ? State::kStopped
                                                     : State::kBackoff;
  w.restart_at = now + delay;
  SHOAL_LOG(
      WARNING, "worker %d%s (pid %d) exited: %s%s", id,
      w.spec.label.empty() ? "" : absl::StrCat(" (", w.spec.label, ")"),
      w.process.pid(), w.last_exit,
      w.state == State::kStopped
          ? ""
          : absl::StrCat("; restarting in ", absl::FormatDuration(delay)));
  if (hooks_.on_exit) hooks_.on_exit(id, w.last_exit);
}

void Supervisor::OnHeartbeat(uint32_t id, int32_t pid) {
  if (id >= workers_.size()) return;
  Worker& w = workers_[id];
  if (w.state == State::kRunning && w.process.pid() == pid)
    w.last_heartbeat = absl::Now();
}

absl::Time Supervisor::Tick(absl::Time now) {
  absl::Time next = now + absl::Seconds(1);
  for (Worker& w : workers_) {
    if (w.state == State::kBackoff && !stopping_) {
      if (now >= w.restart_at) {
        absl::Status s = Start(w);
        if (s.ok()) {
          ++w.restarts;
          SHOAL_LOG(INFO, "worker %d restarted as pid %d (restart %d)",
                    w.spec.id, w.process.pid(), w.restarts);
        } else {
          w.restart_at = now + options_.backoff_max;
          SHOAL_LOG(ERROR, "worker %d failed to restart: %s", w.spec.id,
                    s.ToString());
        }
      } else {
        next = std::min(next, w.restart_at);
      }
    }
    if (w.state == State::kRunning &&
        now - w.last_heartbeat > options_.heartbeat_timeout) {
      SHOAL_LOG(
          WARNING,
          "worker %d (pid %d) sent no heartbeat for %s: killing it as hung",
          w.spec.id, w.process.pid(),
          absl::FormatDuration(now - w.last_heartbeat));
      w.process.Signal(SIGKILL);
      w.last_heartbeat = now;  // once; its exit arrives through the pidfd
    }
  }
  return next;
}

void Supervisor::Signal(uint32_t id, int sig) {
  if (id < workers_.size() && workers_[id].state == State::kRunning) {
    workers_[id].process.Signal(sig);
  }
}

pid_t Supervisor::Pid(uint32_t id) const {
  if (id >= workers_.size() || workers_[id].state != State::kRunning) return 0;
  return workers_[id].process.pid();
}

std::vector<ipc::WorkerStatus> Supervisor::Status() const {
  std::vector<ipc::WorkerStatus> out;
  for (const Worker& w : workers_) {
    ipc::WorkerStatus s;
    s.set_id(w.spec.id);
    s.set_gpus(w.spec.visible_devices);
    s.set_restarts(w.restarts);
    s.set_last_exit(w.last_exit);
    s.set_role(w.spec.label);
    switch (w.state) {
      case State::kRunning:
        s.set_pid(w.process.pid());
        s.set_state("running");
        s.set_rss_bytes(ProcessRssBytes(s.pid()).value_or(0));
        break;
      case State::kBackoff:
        s.set_state("restarting");
        break;
      case State::kStopped:
        s.set_state("stopped");
        break;
    }
    out.push_back(std::move(s));
  }
  return out;
}

void Supervisor::StopAll(absl::Duration grace) {
  stopping_ = true;
  for (Worker& w : workers_) {
    if (w.state == State::kRunning) w.process.Signal(SIGTERM);
  }
  const absl::Time deadline = absl::Now() + grace;
  for (Worker& w : workers_) {
    if (w.state != State::kRunning) {
      w.state = State::kStopped;
      continue;
    }
    absl::Duration left =
        std::max(absl::ZeroDuration(), deadline - absl::Now());
    if (!w.process.Wait(left).ok()) {
      w.process.Signal(SIGKILL);
      (void)w.process.Wait(absl::Seconds(5));
    }
    if (w.pidfd >= 0) close(w.pidfd);
    w.pidfd = -1;
    w.state = State::kStopped;
  }
}

}  // namespace shoal::coordinator
