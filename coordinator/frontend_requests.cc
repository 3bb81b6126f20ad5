// The frontend's requests (docs/protocol.md). Local clients only say hello
// here (then use the task table directly); remote ones submit, wait, cancel
// and release through these handlers, with the coordinator's own task client
// as their proxy.
#include <algorithm>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "base/log.h"
#include "base/overloaded.h"
#include "base/process_info.h"
#include "base/status_macros.h"
#include "coordinator/frontend.h"
#include "ipc/protocol.h"
#include "ipc/task_name.h"
#include "tasks/task_results.h"

namespace shoal::coordinator {
namespace {

ipc::Message Error(const absl::Status& s) { return ipc::ErrorReply{s}; }

// How long a one-task pushed submit's SubmitReply is held (ids_with_result),
// rounded up to the event loop's millisecond.
constexpr absl::Duration kHoldIdsFor = absl::Microseconds(50);
// A pushed submit with at most this many unfinished tasks makes the event
// loop spin briefly for its result (a sync client).
constexpr size_t kSpinUnfinishedAtMost = 4;

}  // namespace

std::optional<ipc::Message> Frontend::Handle(Session& s, uint64_t request_id,
                                             const ipc::Message& body) {
  return std::visit(
      Overloaded{
          [&](const ipc::ClientHello& m) -> std::optional<ipc::Message> {
            if (m.resumable && s.minor >= 4) {
              // The welcome comes from the new session: its first reply.
              Principal& p = *s.principal;
              if (p.sessions.size() + 1 > options_.max_sessions_per_client) {
                return Error(absl::ResourceExhaustedError(
                    absl::StrCat("this client has ", p.sessions.size(),
                                 " sessions open: over the limit "
                                 "max_sessions_per_client = ",
                                 options_.max_sessions_per_client)));
              }
              Session& fresh = sessions_.NewResumable(p, s.route);
              fresh.minor = s.minor;
              if (fresh.minor >= 5) (void)fresh.requests.Accept(request_id);
              Reply(fresh, request_id, OnHello(fresh, m));
              return std::nullopt;
            }
            return OnHello(s, m);
          },
          [&](const ipc::SubmitRequest& m) -> std::optional<ipc::Message> {
            return OnSubmit(s, request_id, m);
          },
          [&](const ipc::WaitRequest& m) -> std::optional<ipc::Message> {
            return OnWait(s, request_id, m);
          },
          [&](const ipc::CancelRequest& m) -> std::optional<ipc::Message> {
            return OnCancel(s, m);
          },
          [&](const ipc::ReleaseTasksRequest& m)
              -> std::optional<ipc::Message> { return OnReleaseTasks(s, m); },
          [&](const ipc::FetchObjectRequest& m) -> std::optional<ipc::Message> {
            return OnFetch(m);
          },
          [&](const ipc::PutObjectRequest& m) -> std::optional<ipc::Message> {
            return OnPut(s, m);
          },
          [&](const ipc::DeleteRequest& m) -> std::optional<ipc::Message> {
            return OnReleaseOutput(s, m.id);
          },
          [&](const ipc::StatusRequest& m) -> std::optional<ipc::Message> {
            // Other principals' function names are the owner's to see.
            const bool owner = s.principal->owner;
            return host_->Status(m.tasks_by_name && owner, owner);
          },
          [&](const ipc::ActorCreateRequest& m) -> std::optional<ipc::Message> {
            return OnActorCreate(s, m);
          },
          [&](const ipc::ActorKillRequest& m) -> std::optional<ipc::Message> {
            return OnActorKill(s, m);
          },
          [&](const ipc::StopRequest&) -> std::optional<ipc::Message> {
            if (!s.principal->owner) {
              return Error(absl::PermissionDeniedError(
                  "only the node's owner may stop it"));
            }
            host_->RequestStop();
            return ipc::OkReply{};
          },
          [&](const auto&) -> std::optional<ipc::Message> {
            return Error(absl::InvalidArgumentError(absl::StrCat(
                "the coordinator does not serve ", ipc::MessageName(body))));
          },
      },
      body);
}

ipc::Message Frontend::OnHello(Session& s, const ipc::ClientHello& m) {
  ipc::ClientWelcome w;
  w.job_id = options_.job_id;
  w.store_endpoint = store_endpoint_;
  w.cpus_per_worker = static_cast<uint32_t>(options_.cpus_per_worker);
  w.gpus_per_worker = static_cast<uint32_t>(options_.gpus_per_worker);
  w.session = s.id;
  w.max_request_bytes = options_.max_request_bytes;
  w.reply_budget_bytes = options_.max_reply_bytes_per_client;
  w.resume_grace_ms =
      static_cast<uint32_t>(absl::ToInt64Milliseconds(options_.resume_grace));
  w.owner = s.principal->owner;
  if (m.machine == boot_id_ && m.pid > 0) {
    // A client of this machine: once its process is gone (its start time
    // tells a reused pid), its session ends without waiting to resume.
    if (absl::StatusOr<uint64_t> t = ProcessStartTicks(m.pid); t.ok()) {
      s.local_pid = m.pid;
      s.local_start_ticks = *t;
    }
  }
  // The shared-memory fast path is for processes on this machine (same boot)
  // that we can watch (their pid is visible here), and only for the owner:
  // the task table bypasses every check the frontend makes.
  if (s.principal->owner && !m.boot_id.empty() && m.boot_id == boot_id_ &&
      m.pid > 0) {
    (void)host_->AdmitLocalClient(m.pid, &w);
  }
  return w;
}

absl::Status Frontend::CheckOwner(const Session& s, uint64_t id) const {
  auto it = tasks_.find(id);
  // Another session's task gets the same answer as an unknown one: its ids
  // are not confirmed to exist.
  if (it == tasks_.end() || it->second.session != s.serial) {
    return absl::NotFoundError(
        absl::StrCat("no task ", id, " (unknown or released)"));
  }
  return absl::OkStatus();
}

absl::Status Frontend::CheckTask(const Session& s,
                                 const ipc::TaskSpec& t) const {
  const Principal& p = *s.principal;
  const std::string& function = t.function;
  SHOAL_ASSIGN_OR_RETURN(const ipc::TaskName name,
                         ipc::ParseTaskName(function));
  const std::set<std::string>& known = host_->Functions();
  if (!known.empty() && known.count(function) == 0 && !name.python() &&
      name.actor == 0) {
    return absl::NotFoundError(
        absl::StrCat("no worker has a task function '", function, "' (",
                     known.size(), " known: ", absl::StrJoin(known, ", "),
                     "); load plugins with --plugin"));
  }
  // A search path is code: the owner's own folders only.
  if (!p.owner && !t.python_path.empty()) {
    return absl::PermissionDeniedError(absl::StrCat(
        "task '", function,
        "' sets python_path, which only the node's owner may: its workers "
        "import from the node's own paths"));
  }
  if (name.actor != 0 && !p.owner)
    SHOAL_RETURN_IF_ERROR(host_->MayCallActor(p.key, name.actor));
  if (options_.allowed_modules.empty() || !name.python())
    return absl::OkStatus();
  if (name.by_value() || name.envelope) {
    return absl::PermissionDeniedError(absl::StrCat(
        "'", function,
        "' carries pickled code or arguments, which this node refuses: it "
        "admits only Python modules under --allow-modules"));
  }
  for (const std::string& prefix : options_.allowed_modules) {
    if (name.module == prefix ||
        absl::StartsWith(name.module, absl::StrCat(prefix, ".")))
      return absl::OkStatus();
  }
  return absl::PermissionDeniedError(absl::StrCat(
      "module '", name.module, "' is not in this node's --allow-modules list"));
}

absl::StatusOr<uint32_t> Frontend::AccountOf(Principal& p) {
  if (p.account != 0) return p.account;
  const uint32_t account = next_account_;
  next_account_ = next_account_ == UINT32_MAX ? 1 : next_account_ + 1;
  SHOAL_RETURN_IF_ERROR(
      store_->SetAccountLimit(account, options_.max_store_bytes_per_client));
  p.account = account;
  return account;
}

void Frontend::RemoveSession(Session& s) {
  if (const uint32_t account = sessions_.Remove(s); account != 0) {
    // Limit 0: the store removes the account once its last object is freed.
    if (absl::Status gone = store_->SetAccountLimit(account, 0); !gone.ok())
      SHOAL_LOG(WARNING, "store account %u: %s", account,
                std::string(gone.message()).c_str());
  }
}

absl::Status Frontend::CheckQuota(const Principal& p, size_t count) const {
  if (p.held_bytes >= options_.max_store_bytes_per_client) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "this client holds ", p.held_bytes,
        " bytes of results in the store: at or over the limit "
        "max_store_bytes_per_client = ",
        options_.max_store_bytes_per_client, " (release results)"));
  }
  const uint64_t queued = p.tasks - p.finished;
  if (queued + count > options_.max_queued_per_client) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "this client has ", queued, " tasks queued or running and submits ",
        count, ": over the limit max_queued_per_client = ",
        options_.max_queued_per_client));
  }
  if (p.finished > options_.max_held_per_client) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "this client holds ", p.finished,
        " results: over the limit max_held_per_client = ",
        options_.max_held_per_client, " (wait with release, or release them)"));
  }
  return absl::OkStatus();
}

std::optional<ipc::Message> Frontend::OnSubmit(Session& s, uint64_t request_id,
                                               const ipc::SubmitRequest& m) {
  Principal& p = *s.principal;
  if (m.push && s.minor >= 1 && request_id == 0) {
    // Its results would go to request 0, which marks a task not pushed.
    return Error(absl::InvalidArgumentError(
        "a submit with push needs a non-zero request id"));
  }
  if (absl::Status q = CheckQuota(p, m.tasks.size()); !q.ok()) return Error(q);
  absl::StatusOr<uint32_t> account = AccountOf(p);
  if (!account.ok()) return Error(account.status());
  std::vector<tasks::TaskSubmission> subs;
  subs.reserve(m.tasks.size());
  for (const ipc::TaskSpec& t : m.tasks) {
    if (absl::Status ok = CheckTask(s, t); !ok.ok()) return Error(ok);
    absl::StatusOr<tasks::TaskSubmission> sub =
        tasks::ToSubmission(t, static_cast<uint32_t>(options_.cpus_per_worker),
                            static_cast<uint32_t>(options_.gpus_per_worker));
    if (!sub.ok()) return Error(sub.status());
    sub->account = *account;
    subs.push_back(*std::move(sub));
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
  // Features by the client's minor: a 1.0 client's push is ignored, as a
  // 1.0 node would.
  const bool push = m.push && s.minor >= 1;
  const bool push_ids = push && m.push_ids && s.minor >= 2;
  const bool with_result = push_ids && m.ids_with_result && s.minor >= 3;
  for (uint64_t id : ids) {
    RemoteTask& t = tasks_[id];
    t.session = s.serial;
    t.push_request = push ? request_id : 0;
    s.tasks.insert(id);
    watch_order_[*account].push_back(id);
  }
  p.tasks += ids.size();
  s.unfinished += ids.size();
  unfinished_ += ids.size();
  if (!push) return ipc::SubmitReply{std::move(ids)};
  // Each result is pushed when its task finishes (OnCompletions), a
  // WaitReply with this request's id; with push_ids (1.2) the ids go first,
  // unless the one task's result can carry its id (1.3: held ids).
  spin_ = unfinished_ <= kSpinUnfinishedAtMost;
  spin_task_ = ids.size() == 1 ? ids[0] : 0;
  if (with_result && ids.size() == 1) {
    if (holding_ids_.empty()) held_until_ = absl::Now() + kHoldIdsFor;
    s.held_ids.emplace_back(request_id, ids[0]);
    holding_ids_.insert(s.serial);
    return std::nullopt;
  }
  if (push_ids) return ipc::SubmitReply{std::move(ids)};
  return std::nullopt;
}

std::optional<ipc::Message> Frontend::OnWait(Session& s, uint64_t request_id,
                                             const ipc::WaitRequest& m) {
  // Ids are checked before anything is taken: a repeated id would be taken
  // (and released) twice.
  std::set<uint64_t> seen;
  for (uint64_t id : m.task_ids) {
    if (!seen.insert(id).second) {
      return Error(absl::InvalidArgumentError(
          absl::StrCat("task_ids names task ", id, " twice")));
    }
    if (absl::Status owner = CheckOwner(s, id); !owner.ok())
      return Error(owner);
  }
  // Answered now, or a wait that completions and its deadline answer.
  size_t done = 0;
  for (uint64_t id : m.task_ids) {
    absl::StatusOr<tasks::TaskState> st = table_->Poll(id);
    if (!st.ok()) return Error(st.status());
    done += *st == tasks::TaskState::kDone;
  }
  const size_t want = m.min_done == 0
                          ? m.task_ids.size()
                          : std::min<size_t>(m.min_done, m.task_ids.size());
  if (done >= want || m.timeout_ms == 0) return TryWait(s, m, true);
  const Principal& p = *s.principal;
  if (p.waits + 1 > options_.max_waits_per_client ||
      p.wait_ids + m.task_ids.size() > options_.max_wait_ids_per_client) {
    return Error(absl::ResourceExhaustedError(absl::StrCat(
        "this client has ", p.waits, " waits pending for ", p.wait_ids,
        " task ids: over the limit max_waits_per_client = ",
        options_.max_waits_per_client,
        " or max_wait_ids_per_client = ", options_.max_wait_ids_per_client)));
  }
  PendingWait w;
  w.request_id = request_id;
  w.request = m;
  w.want = want;
  AddWait(s, std::move(w));
  return std::nullopt;
}

ipc::Message Frontend::OnCancel(Session& s, const ipc::CancelRequest& m) {
  // All or nothing: every id is checked before any is cancelled.
  for (uint64_t id : m.task_ids) {
    if (absl::Status own = CheckOwner(s, id); !own.ok()) return Error(own);
  }
  for (uint64_t id : m.task_ids) {
    absl::StatusOr<tasks::TaskState> was = table_->Cancel(id);
    if (!was.ok()) return Error(was.status());
  }
  return ipc::OkReply{};
}

ipc::Message Frontend::OnReleaseTasks(Session& s,
                                      const ipc::ReleaseTasksRequest& m) {
  for (uint64_t id : m.task_ids) {
    if (absl::Status own = CheckOwner(s, id); !own.ok()) return Error(own);
  }
  for (uint64_t id : m.task_ids) DropTask(id);
  return ipc::OkReply{};
}

ipc::Message Frontend::OnFetch(const ipc::FetchObjectRequest& m) {
  absl::StatusOr<shm::ObjectBuffer> buf = store_->Get(m.id);
  if (!buf.ok()) return Error(buf.status());
  ipc::FetchObjectReply reply;
  reply.tensor.meta = buf->meta;
  reply.tensor.data.assign(reinterpret_cast<const char*>(buf->data),
                           buf->nbytes);
  (void)store_->Release(m.id);
  return reply;
}

ipc::Message Frontend::OnPut(Session& s, const ipc::PutObjectRequest& m) {
  Principal& p = *s.principal;
  const uint64_t n = m.tensor.data.size();
  if (p.held_bytes + n > options_.max_store_bytes_per_client) {
    return Error(absl::ResourceExhaustedError(absl::StrCat(
        "this client holds ", p.held_bytes, " bytes in the store and puts ", n,
        ": over the limit max_store_bytes_per_client = ",
        options_.max_store_bytes_per_client)));
  }
  absl::StatusOr<uint32_t> account = AccountOf(p);
  if (!account.ok()) return Error(account.status());
  const ObjectId id = ObjectId::Random();
  if (absl::Status put = store_->Put(id, m.tensor.meta, m.tensor.data.data(),
                                     shm::CreateOptions{*account});
      !put.ok()) {
    return Error(put);
  }
  s.outputs[id] = {n, absl::Now()};
  p.held_bytes += n;
  produced_by_[id] = p.key;
  return ipc::PutObjectReply{id, n};
}

ipc::Message Frontend::OnReleaseOutput(Session& s, const ObjectId& id) {
  auto it = s.outputs.find(id);
  if (it == s.outputs.end()) {
    return Error(absl::NotFoundError(absl::StrCat(
        "object ", id.ToHex(), " is not an output this client holds")));
  }
  ReleaseOutputs(*s.principal,
                 {Value{ObjectValue{id, TensorMeta{}, it->second.first}}});
  s.principal->held_bytes -=
      std::min(s.principal->held_bytes, it->second.first);
  s.outputs.erase(it);
  return ipc::OkReply{};
}

ipc::Message Frontend::OnActorCreate(Session& s,
                                     const ipc::ActorCreateRequest& m) {
  ipc::TaskSpec init;
  init.function = m.init_function();
  init.python_path = m.python_path();
  if (absl::Status ok = CheckTask(s, init); !ok.ok()) return Error(ok);
  ActorCreator creator{s.principal->key, s.serial, s.principal->owner};
  absl::StatusOr<ipc::ActorCreateReply> reply = host_->CreateActor(creator, m);
  if (!reply.ok()) return Error(reply.status());
  return *std::move(reply);
}

void Frontend::ActorStarted(uint64_t serial) {
  if (Session* s = sessions_.BySerial(serial)) ++s->actors;
}

void Frontend::ActorEnded(uint64_t serial) {
  Session* s = sessions_.BySerial(serial);
  if (s != nullptr && s->actors > 0) --s->actors;
}

ipc::Message Frontend::OnActorKill(Session& s, const ipc::ActorKillRequest& m) {
  ActorCreator caller{s.principal->key, s.serial, s.principal->owner};
  if (absl::Status k = host_->KillActor(caller, m.actor_id()); !k.ok())
    return Error(k);
  return ipc::OkReply{};
}

}  // namespace shoal::coordinator
