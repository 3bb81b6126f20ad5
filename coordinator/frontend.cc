// The coordinator's frontend requests. Local clients only say hello here (then
// use the task table directly); remote ones submit, wait, cancel and release
// through these handlers, with the coordinator's own task client as proxy.
#include <unistd.h>

#include <fstream>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "base/log.h"
#include "base/overloaded.h"
#include "base/process_info.h"
#include "coordinator/coordinator_impl.h"
#include "ipc/router.h"
#include "ipc/task_payload.h"
#include "tasks/task_results.h"

namespace shoal::coordinator {
namespace {

ipc::Message Error(const absl::Status& s) { return ipc::ErrorReply{s}; }

std::string BootId() {
  std::ifstream in("/proc/sys/kernel/random/boot_id");
  std::string id;
  std::getline(in, id);
  return std::string(absl::StripAsciiWhitespace(id));
}

}  // namespace

std::optional<ipc::Message> Coordinator::Impl::Handle(
    const std::string& routing_id, uint64_t request_id,
    const ipc::Message& body) {
  return std::visit(
      Overloaded{
          [&](const ipc::ClientHello& m) -> std::optional<ipc::Message> {
            return OnHello(routing_id, m);
          },
          [&](const ipc::SubmitRequest& m) -> std::optional<ipc::Message> {
            return OnSubmit(routing_id, m);
          },
          [&](const ipc::WaitRequest& m) -> std::optional<ipc::Message> {
            return OnWait(routing_id, request_id, m);
          },
          [&](const ipc::CancelRequest& m) -> std::optional<ipc::Message> {
            return OnCancel(routing_id, m);
          },
          [&](const ipc::ReleaseTasksRequest& m)
              -> std::optional<ipc::Message> {
            return OnReleaseTasks(routing_id, m);
          },
          [&](const ipc::FetchObjectRequest& m) -> std::optional<ipc::Message> {
            return OnFetch(m);
          },
          [&](const ipc::StatusRequest&) -> std::optional<ipc::Message> {
            return OnStatus();
          },
          [&](const ipc::ActorCreateRequest& m) -> std::optional<ipc::Message> {
            return OnActorCreate(m);
          },
          [&](const ipc::ActorKillRequest& m) -> std::optional<ipc::Message> {
            return OnActorKill(m);
          },
          [&](const ipc::StopRequest&) -> std::optional<ipc::Message> {
            stop_requested_ = true;
            return ipc::OkReply{};
          },
          [&](const auto&) -> std::optional<ipc::Message> {
            return Error(absl::InvalidArgumentError(absl::StrCat(
                "the coordinator does not serve ", ipc::MessageName(body))));
          },
      },
      body);
}

ipc::Message Coordinator::Impl::OnHello(const std::string& routing_id,
                                        const ipc::ClientHello& m) {
  ipc::ClientWelcome w;
  w.job_id = options_.job_id;
  w.store_endpoint = store_endpoint_;
  w.cpus_per_worker = static_cast<uint32_t>(options_.cpus_per_worker);
  w.gpus_per_worker = static_cast<uint32_t>(options_.gpus_per_worker);
  // The shared-memory fast path is for processes on this machine (same boot)
  // that we can watch (their pid is visible here).
  const bool same_machine = !m.boot_id.empty() && m.boot_id == BootId();
  if (same_machine && m.pid > 0) {
    absl::StatusOr<int> pidfd = OpenPidFd(m.pid);
    if (pidfd.ok()) {
      absl::StatusOr<uint32_t> slot = table_->AddClient(m.pid);
      if (slot.ok()) {
        local_clients_[*slot] = LocalClient{m.pid, *pidfd, routing_id};
        w.local = true;
        w.task_segment = table_->segment_name();
        w.task_client = *slot;
        return w;
      }
      close(*pidfd);
      SHOAL_LOG(WARNING, "local client pid %d served remotely: %s", m.pid,
                slot.status().ToString());
    }
  }
  return w;
}

ipc::Message Coordinator::Impl::OnSubmit(const std::string& routing_id,
                                         const ipc::SubmitRequest& m) {
  std::vector<tasks::TaskSubmission> subs;
  subs.reserve(m.tasks.size());
  for (const ipc::TaskSpec& t : m.tasks) {
    if (!functions_.empty() && functions_.count(t.function) == 0 &&
        !absl::StartsWith(t.function, "py:")) {
      return Error(absl::NotFoundError(absl::StrCat(
          "no worker has a task function '", t.function, "' (",
          functions_.size(), " known: ", absl::StrJoin(functions_, ", "),
          "); load plugins with --plugin")));
    }
    absl::StatusOr<tasks::TaskSubmission> s =
        tasks::ToSubmission(t, static_cast<uint32_t>(options_.cpus_per_worker),
                            static_cast<uint32_t>(options_.gpus_per_worker));
    if (!s.ok()) return Error(s.status());
    subs.push_back(*std::move(s));
  }
  absl::StatusOr<std::vector<uint64_t>> ids = table_->Submit(own_client_, subs);
  if (!ids.ok()) return Error(ids.status());
  const absl::Time now = absl::Now();
  for (uint64_t id : *ids) remote_tasks_[id] = RemoteTask{routing_id, now};
  return ipc::SubmitReply{*std::move(ids)};
}

absl::Status Coordinator::Impl::CheckOwner(const std::string& routing_id,
                                           uint64_t id) const {
  auto it = remote_tasks_.find(id);
  if (it == remote_tasks_.end()) {
    return absl::NotFoundError(
        absl::StrCat("no task ", id, " (unknown or released)"));
  }
  if (it->second.routing_id != routing_id) {
    return absl::PermissionDeniedError(
        absl::StrCat("task ", id, " belongs to another client"));
  }
  return absl::OkStatus();
}

ipc::TaskResult Coordinator::Impl::ResultOf(uint64_t id, bool release) {
  return ToResult(id, table_->Take(own_client_, id, release));
}

std::optional<ipc::Message> Coordinator::Impl::TryWait(
    const std::string& routing_id, const ipc::WaitRequest& m, bool force) {
  size_t done = 0;
  for (uint64_t id : m.task_ids) {
    absl::Status owner = CheckOwner(routing_id, id);
    if (!owner.ok()) return Error(owner);
    absl::StatusOr<tasks::TaskState> st = table_->Poll(id);
    if (!st.ok()) return Error(st.status());
    if (*st == tasks::TaskState::kDone) ++done;
  }
  const size_t want = m.min_done == 0
                          ? m.task_ids.size()
                          : std::min<size_t>(m.min_done, m.task_ids.size());
  if (done < want && !force) return std::nullopt;
  ipc::WaitReply reply;
  for (uint64_t id : m.task_ids) {
    if (*table_->Poll(id) != tasks::TaskState::kDone) continue;
    reply.results.push_back(ResultOf(id, m.release));
    if (m.release) remote_tasks_.erase(id);
  }
  return reply;
}

std::optional<ipc::Message> Coordinator::Impl::OnWait(
    const std::string& routing_id, uint64_t request_id,
    const ipc::WaitRequest& m) {
  std::optional<ipc::Message> now = TryWait(routing_id, m, m.timeout_ms == 0);
  if (now) return now;
  PendingWait w;
  w.routing_id = routing_id;
  w.request_id = request_id;
  w.request = m;
  if (m.timeout_ms > 0)
    w.deadline = absl::Now() + absl::Milliseconds(m.timeout_ms);
  waits_.push_back(std::move(w));
  return std::nullopt;
}

void Coordinator::Impl::OnCompletions() {
  const absl::Time now = absl::Now();
  for (auto it = waits_.begin(); it != waits_.end();) {
    const bool due = it->deadline && now >= *it->deadline;
    std::optional<ipc::Message> reply =
        TryWait(it->routing_id, it->request, due);
    if (reply) {
      ipc::SendReply(frontend_, it->routing_id, it->request_id,
                     *std::move(reply));
      it = waits_.erase(it);
    } else {
      ++it;
    }
  }
}

ipc::Message Coordinator::Impl::OnCancel(const std::string& routing_id,
                                         const ipc::CancelRequest& m) {
  for (uint64_t id : m.task_ids) {
    absl::Status s = CheckOwner(routing_id, id);
    if (!s.ok()) return Error(s);
    absl::StatusOr<tasks::TaskState> was = table_->Cancel(id);
    if (!was.ok()) return Error(was.status());
  }
  return ipc::OkReply{};
}

void Coordinator::Impl::ReleaseOutputs(const std::vector<Value>& outputs) {
  for (const Value& v : outputs) {
    if (const auto* o = std::get_if<ObjectValue>(&v)) {
      (void)store_client_->Release(o->id);
      (void)store_client_->Delete(o->id);
    }
  }
}

ipc::Message Coordinator::Impl::OnReleaseTasks(
    const std::string& routing_id, const ipc::ReleaseTasksRequest& m) {
  for (uint64_t id : m.task_ids) {
    absl::Status s = CheckOwner(routing_id, id);
    if (!s.ok()) return Error(s);
    absl::StatusOr<tasks::TaskState> st = table_->Poll(id);
    if (st.ok() && *st == tasks::TaskState::kDone) {
      ReleaseOutputs(ResultOf(id, /*release=*/true).outputs);
    } else {
      (void)table_->Release(own_client_, id);
    }
    remote_tasks_.erase(id);
  }
  return ipc::OkReply{};
}

ipc::Message Coordinator::Impl::OnFetch(const ipc::FetchObjectRequest& m) {
  absl::StatusOr<shm::ObjectBuffer> buf = store_client_->Get(m.id);
  if (!buf.ok()) return Error(buf.status());
  ipc::FetchObjectReply reply;
  reply.tensor.meta = buf->meta;
  reply.tensor.data.assign(reinterpret_cast<const char*>(buf->data),
                           buf->nbytes);
  (void)store_client_->Release(m.id);
  return reply;
}

ipc::Message Coordinator::Impl::OnStatus() {
  ipc::NodeStatus st;
  st.set_job_id(options_.job_id);
  st.set_coordinator_pid(getpid());
  st.set_uptime_ms(absl::ToInt64Milliseconds(absl::Now() - started_));
  st.set_frontend(frontend_endpoint_);
  for (ipc::WorkerStatus& w : supervisor_->Status()) {
    *st.add_workers() = std::move(w);
  }
  for (ipc::WorkerStatus& w : *st.mutable_workers()) {
    const int32_t slot =
        w.id() < worker_slot_.size() ? worker_slot_[w.id()] : -1;
    if (slot >= 0) {
      absl::StatusOr<tasks::TaskWorkerCounters> c =
          table_->WorkerCounters(static_cast<uint32_t>(slot));
      if (c.ok()) {
        w.set_tasks_done(c->done);
        w.set_tasks_failed(c->failed);
        if (w.state() == "running") w.set_state(c->busy ? "busy" : "idle");
      }
    }
  }
  if (absl::StatusOr<tasks::TaskTableStats> ts = table_->Stats(); ts.ok()) {
    st.set_queued(ts->queued);
    st.set_running(ts->running);
    st.set_submitted(ts->submitted);
    st.set_completed(ts->completed);
    st.set_results_held(ts->done_untaken);
  }
  if (absl::StatusOr<shm::StoreStats> ss = store_client_->Stats(); ss.ok())
    *st.mutable_store() = *std::move(ss);
  return st;
}

}  // namespace shoal::coordinator
