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
    const Peer& peer, uint64_t request_id, const ipc::Message& body) {
  return std::visit(
      Overloaded{
          [&](const ipc::ClientHello& m) -> std::optional<ipc::Message> {
            return OnHello(peer, m);
          },
          [&](const ipc::SubmitRequest& m) -> std::optional<ipc::Message> {
            return OnSubmit(peer, request_id, m);
          },
          [&](const ipc::WaitRequest& m) -> std::optional<ipc::Message> {
            return OnWait(peer, request_id, m);
          },
          [&](const ipc::CancelRequest& m) -> std::optional<ipc::Message> {
            return OnCancel(peer, m);
          },
          [&](const ipc::ReleaseTasksRequest& m)
              -> std::optional<ipc::Message> {
            return OnReleaseTasks(peer, m);
          },
          [&](const ipc::FetchObjectRequest& m) -> std::optional<ipc::Message> {
            return OnFetch(m);
          },
          [&](const ipc::DeleteRequest& m) -> std::optional<ipc::Message> {
            return OnReleaseOutput(peer, m.id);
          },
          [&](const ipc::StatusRequest&) -> std::optional<ipc::Message> {
            return OnStatus();
          },
          [&](const ipc::ActorCreateRequest& m) -> std::optional<ipc::Message> {
            return OnActorCreate(peer, m);
          },
          [&](const ipc::ActorKillRequest& m) -> std::optional<ipc::Message> {
            return OnActorKill(peer, m);
          },
          [&](const ipc::StopRequest&) -> std::optional<ipc::Message> {
            if (!peer.owner) {
              return Error(absl::PermissionDeniedError(
                  "only the node's owner may stop it"));
            }
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

ipc::Message Coordinator::Impl::OnHello(const Peer& peer,
                                        const ipc::ClientHello& m) {
  ipc::ClientWelcome w;
  w.job_id = options_.job_id;
  w.store_endpoint = store_endpoint_;
  w.cpus_per_worker = static_cast<uint32_t>(options_.cpus_per_worker);
  w.gpus_per_worker = static_cast<uint32_t>(options_.gpus_per_worker);
  // The shared-memory fast path is for processes on this machine (same boot)
  // that we can watch (their pid is visible here), and only for the owner:
  // the task table bypasses every check the frontend makes.
  const bool same_machine =
      peer.owner && !m.boot_id.empty() && m.boot_id == BootId();
  if (same_machine && m.pid > 0) {
    absl::StatusOr<int> pidfd = OpenPidFd(m.pid);
    if (pidfd.ok()) {
      absl::StatusOr<uint32_t> slot = table_->AddClient(m.pid);
      if (slot.ok()) {
        local_clients_[*slot] = LocalClient{m.pid, *pidfd, peer.routing_id};
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

std::optional<ipc::Message> Coordinator::Impl::OnSubmit(
    const Peer& peer, uint64_t request_id, const ipc::SubmitRequest& m) {
  PeerState& state = StateOf(peer);
  if (absl::Status q = CheckQuota(state, m.tasks.size()); !q.ok())
    return Error(q);
  std::vector<tasks::TaskSubmission> subs;
  subs.reserve(m.tasks.size());
  for (const ipc::TaskSpec& t : m.tasks) {
    if (!functions_.empty() && functions_.count(t.function) == 0 &&
        !absl::StartsWith(t.function, "py:") &&
        !absl::StrContains(t.function, "@actor=")) {
      return Error(absl::NotFoundError(absl::StrCat(
          "no worker has a task function '", t.function, "' (",
          functions_.size(), " known: ", absl::StrJoin(functions_, ", "),
          "); load plugins with --plugin")));
    }
    if (absl::Status ok = CheckFunction(peer, t.function); !ok.ok())
      return Error(ok);
    absl::StatusOr<tasks::TaskSubmission> s =
        tasks::ToSubmission(t, static_cast<uint32_t>(options_.cpus_per_worker),
                            static_cast<uint32_t>(options_.gpus_per_worker));
    if (!s.ok()) return Error(s.status());
    subs.push_back(*std::move(s));
  }
  // One Submit for the batch: TaskTable::Submit is all-or-nothing (it
  // rolls a batch back under its lock when a task does not fit).
  absl::StatusOr<std::vector<uint64_t>> submitted =
      table_->Submit(own_client_, subs);
  if (!submitted.ok()) {
    return Error(absl::Status(
        submitted.status().code(),
        absl::StrCat(submitted.status().message(), " (none of the batch of ",
                     subs.size(), " was submitted)")));
  }
  std::vector<uint64_t> ids = *std::move(submitted);
  const absl::Time now = absl::Now();
  const std::string key = peer.key();
  for (uint64_t id : ids) {
    remote_tasks_[id] = RemoteTask{key, now};
    state.tasks.insert(id);
  }
  if (!m.push) {
    // Watched for the store-bytes quota: a finished result's outputs count
    // against its peer whether or not it collects them (CountUncollected).
    for (uint64_t id : ids) {
      auto [it, fresh] = watched_.try_emplace(id);
      if (fresh) watch_order_.push_back(id);
      it->second.quota = true;
    }
    return ipc::SubmitReply{std::move(ids)};
  }
  // Each result is pushed when its task finishes (OnCompletions), a
  // WaitReply with this request's id; with push_ids (1.2) the ids go first
  // (this reply is sent before OnCompletions can push a result), unless the
  // one task's result can carry its id (1.3, ids_with_result: held_ids_).
  auto push = std::make_shared<const PushTarget>(PushTarget{peer, request_id});
  for (uint64_t id : ids) Watch(id, push, 0);
  spin_for_push_ = watched_.size() <= kSpinWatchedAtMost;
  spin_task_ = ids.size() == 1 ? ids[0] : 0;
  if (m.push_ids && m.ids_with_result && ids.size() == 1) {
    if (held_ids_.empty()) held_until_ = absl::Now() + kHoldIdsFor;
    held_ids_.push_back(HeldIds{peer, request_id, ids[0]});
    return std::nullopt;
  }
  if (m.push_ids) return ipc::SubmitReply{std::move(ids)};
  return std::nullopt;
}

absl::Status Coordinator::Impl::CheckOwner(const Peer& peer,
                                           uint64_t id) const {
  auto it = remote_tasks_.find(id);
  if (it == remote_tasks_.end()) {
    return absl::NotFoundError(
        absl::StrCat("no task ", id, " (unknown or released)"));
  }
  if (it->second.peer != peer.key()) {
    // The same answer as for an unknown id: another client's ids are not
    // confirmed to exist.
    return absl::NotFoundError(
        absl::StrCat("no task ", id, " (unknown or released)"));
  }
  return absl::OkStatus();
}

ipc::TaskResult Coordinator::Impl::ResultOf(uint64_t id, bool release) {
  ipc::TaskResult r = ToResult(id, table_->Take(own_client_, id, release));
  // A worker's new output reaches our store client with its creatorship, and
  // before any result names it (its id is new): its first sight here tells
  // whose task made it. An object a task only passed along keeps its creator.
  auto task = remote_tasks_.find(id);
  if (task == remote_tasks_.end()) return r;
  for (const Value& v : r.outputs) {
    const auto* o = std::get_if<ObjectValue>(&v);
    if (o == nullptr || produced_by_.count(o->id) != 0) continue;
    absl::StatusOr<bool> ours = store_client_->Created(o->id);
    if (ours.ok() && *ours) produced_by_.emplace(o->id, task->second.peer);
  }
  return r;
}

std::optional<ipc::Message> Coordinator::Impl::TryWait(
    const Peer& peer, const ipc::WaitRequest& m, bool force) {
  size_t done = 0;
  for (uint64_t id : m.task_ids) {
    absl::Status owner = CheckOwner(peer, id);
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
  PeerState& state = StateOf(peer);
  for (uint64_t id : m.task_ids) {
    absl::StatusOr<tasks::TaskState> st = table_->Poll(id);
    if (!st.ok() || *st != tasks::TaskState::kDone) continue;
    reply.results.push_back(TakeFor(state, id, m.release));
  }
  return reply;
}

ipc::TaskResult Coordinator::Impl::TakeFor(PeerState& state, uint64_t id,
                                           bool release) {
  ipc::TaskResult r = ResultOf(id, release);
  if (release) {
    ForgetTask(id);
    const absl::Time now = absl::Now();
    for (const Value& v : r.outputs) {
      if (const auto* o = std::get_if<ObjectValue>(&v))
        state.outputs[o->id] = {o->nbytes, now};
    }
  } else {
    uint64_t bytes = 0;
    for (const Value& v : r.outputs) {
      if (const auto* o = std::get_if<ObjectValue>(&v)) bytes += o->nbytes;
    }
    state.Hold(id, bytes);
  }
  return r;
}

// Ids are checked before anything is taken: a repeated id would be taken
// (and released) twice.
static absl::Status CheckWaitRequest(const ipc::WaitRequest& m) {
  std::set<uint64_t> seen;
  for (uint64_t id : m.task_ids) {
    if (!seen.insert(id).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("task_ids names task ", id, " twice"));
    }
  }
  if (m.timeout_ms > ipc::kMaxTimeoutMs) {
    return absl::InvalidArgumentError(
        absl::StrCat("timeout_ms ", m.timeout_ms, " is over the limit of ",
                     ipc::kMaxTimeoutMs, " (about 10 years); negative means none"));
  }
  return absl::OkStatus();
}

std::optional<ipc::Message> Coordinator::Impl::OnWait(
    const Peer& peer, uint64_t request_id, const ipc::WaitRequest& m) {
  if (absl::Status s = CheckWaitRequest(m); !s.ok()) return Error(s);
  // Owners first, then how many finished: the reply now, or a wait that
  // completions and its deadline answer (frontend_watch.cc).
  size_t done = 0;
  for (uint64_t id : m.task_ids) {
    if (absl::Status owner = CheckOwner(peer, id); !owner.ok())
      return Error(owner);
    absl::StatusOr<tasks::TaskState> st = table_->Poll(id);
    if (!st.ok()) return Error(st.status());
    done += *st == tasks::TaskState::kDone;
  }
  const size_t want = m.min_done == 0
                          ? m.task_ids.size()
                          : std::min<size_t>(m.min_done, m.task_ids.size());
  if (done >= want || m.timeout_ms == 0) return TryWait(peer, m, true);
  PendingWait w;
  w.peer = peer;
  w.request_id = request_id;
  w.request = m;
  w.done = done;
  w.want = want;
  AddWait(std::move(w));
  return std::nullopt;
}

ipc::Message Coordinator::Impl::OnCancel(const Peer& peer,
                                         const ipc::CancelRequest& m) {
  for (uint64_t id : m.task_ids) {
    absl::Status s = CheckOwner(peer, id);
    if (!s.ok()) return Error(s);
    absl::StatusOr<tasks::TaskState> was = table_->Cancel(id);
    if (!was.ok()) return Error(was.status());
  }
  return ipc::OkReply{};
}

void Coordinator::Impl::ReleaseOutputs(const std::string& peer,
                                       const std::vector<Value>& outputs) {
  auto state = peers_.find(peer);
  const bool owner = state != peers_.end() && state->second.peer.owner;
  for (const Value& v : outputs) {
    const auto* o = std::get_if<ObjectValue>(&v);
    if (o == nullptr) continue;
    auto made = produced_by_.find(o->id);
    if (made != produced_by_.end() && made->second == peer) {
      (void)store_client_->Release(o->id);
      (void)store_client_->Delete(o->id);
      produced_by_.erase(made);
    } else if (owner) {
      (void)store_client_->Delete(o->id);
    }
  }
}

ipc::Message Coordinator::Impl::OnReleaseTasks(
    const Peer& peer, const ipc::ReleaseTasksRequest& m) {
  for (uint64_t id : m.task_ids) {
    absl::Status s = CheckOwner(peer, id);
    if (!s.ok()) return Error(s);
    DropTask(id);
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
    if (ListedInStatus(w)) *st.add_workers() = std::move(w);
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
