#include "coordinator/client.h"

#include <sched.h>
#include <unistd.h>
#include <zmq.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <map>
#include <optional>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "base/process_info.h"
#include "base/spin_turn.h"
#include "base/status_macros.h"
#include "coordinator/client_pipeline.h"
#include "coordinator/discovery.h"
#include "ipc/curve.h"
#include "ipc/protocol.h"
#include "ipc/rpc_channel.h"
#include "tasks/task_results.h"
#include "tasks/task_table.h"

namespace shoal::coordinator {
namespace {

// Whether two tcp:// endpoints name the same port on this machine
// (127.0.0.1, localhost and the wildcard all reach a loopback listener).
bool SameTcpEndpoint(const std::string& a, const std::string& b) {
  if (a.empty() || b.empty()) return false;
  const size_t ca = a.rfind(':'), cb = b.rfind(':');
  if (ca == std::string::npos || cb == std::string::npos) return false;
  if (a.substr(ca) != b.substr(cb)) return false;
  return a == b || ipc::IsLoopbackEndpoint(b);
}

std::string EnvOr(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v ? std::string(v) : fallback;
}

}  // namespace

class Client::Impl {
 public:
  explicit Impl(ClientOptions o) : o_(std::move(o)) {
    if (const char* us = std::getenv("SHOAL_CLIENT_BUSY_SPIN_US")) {
      int64_t n = 0;
      if (absl::SimpleAtoi(us, &n) && n >= 0) {
        o_.busy_spin = absl::Microseconds(n);
      }
    }
  }
  ~Impl();

  absl::Status Connect();

  // Local fast path.
  absl::StatusOr<std::vector<TaskRef>> SubmitLocal(
      std::vector<ipc::TaskSpec> tasks);
  absl::StatusOr<std::vector<ipc::TaskResult>> WaitLocal(
      absl::Span<const TaskRef> tasks, absl::Duration timeout, size_t min_done,
      bool release);
  // Moves arguments over the inline limit into the store.
  absl::Status SpillLargeArgs(ipc::TaskSpec& task,
                              std::vector<ObjectId>* spilled);
  void ReleaseSpilled(uint64_t task);

  ClientOptions o_;
  ipc::RpcChannelOptions channel_options_;
  ipc::RpcChannel channel_;
  std::optional<RemotePipeline> pipeline_;  // made by the first SubmitAsync
  ipc::ClientWelcome welcome_;
  std::unique_ptr<shm::StoreClient> store_;
  std::unique_ptr<tasks::TaskTable> table_;
  std::map<uint64_t, std::vector<ObjectId>>
      spilled_;  // task → argument objects
};

absl::Status Client::Impl::Connect() {
  ipc::RpcChannelOptions channel;
  channel.socket.max_msg_bytes = 128 << 20;
  channel.limits.max_frame_bytes = 128 << 20;
  channel.server_key = o_.server_key;
  channel.peer = "the coordinator";
  if (o_.endpoint.empty()) o_.endpoint = EnvOr("SHOAL_COORDINATOR", "");
  std::string key_file = o_.client_key_file.empty()
                             ? EnvOr("SHOAL_CLIENT_KEY_FILE", "")
                             : o_.client_key_file;
  if (o_.endpoint.empty()) {
    // The node's owner: its ipc:// socket, which file permissions guard.
    SHOAL_ASSIGN_OR_RETURN(Discovery d, ReadDiscovery(o_.job_id));
    o_.endpoint = d.frontend;
  } else if (absl::StartsWith(o_.endpoint, "tcp://") &&
             (channel.server_key.empty() || key_file.empty())) {
    // A TCP address of a node of ours on this machine: the owner's keys in
    // its job folder.
    absl::StatusOr<Discovery> d = ReadDiscovery(o_.job_id);
    if (d.ok() && SameTcpEndpoint(d->tcp, o_.endpoint)) {
      if (channel.server_key.empty()) channel.server_key = d->server_key;
      if (key_file.empty()) key_file = d->client_key_file;
    }
  }
  if (channel.server_key.empty() && absl::StartsWith(o_.endpoint, "tcp://"))
    channel.server_key = EnvOr("SHOAL_SERVER_KEY", "");
  // The owner's ipc:// socket has no CURVE: file permissions guard it.
  if (absl::StartsWith(o_.endpoint, "ipc://")) channel.server_key.clear();
  if (o_.name.empty()) o_.name = absl::StrCat("pid ", getpid());
  if (!channel.server_key.empty()) {
    if (key_file.empty()) {
      return absl::FailedPreconditionError(
          "the coordinator uses CURVE: pass a client key-pair file "
          "(SHOAL_CLIENT_KEY_FILE) "
          "whose public key it admits");
    }
    SHOAL_ASSIGN_OR_RETURN(channel.client_keys, ipc::ReadKeyPair(key_file));
  }
  channel_options_ = channel;
  SHOAL_ASSIGN_OR_RETURN(channel_,
                         ipc::RpcChannel::Connect(o_.endpoint, channel));
  // A resumable session (1.4; an older node ignores the field): its tasks
  // and results outlive a connection that breaks.
  ipc::ClientHello hello{static_cast<int32_t>(getpid()), o_.name,
                         o_.force_remote ? "" : BootId(), /*resumable=*/true,
                         BootId()};
  SHOAL_ASSIGN_OR_RETURN(
      welcome_, channel_.Call<ipc::ClientWelcome>(hello, o_.rpc_timeout));
  channel_.SetSession(welcome_.session);
  channel_.SetMaxRequestBytes(welcome_.max_request_bytes);
  if (!welcome_.local) return absl::OkStatus();
  shm::StoreClientOptions so;
  so.endpoint = welcome_.store_endpoint;
  so.name = o_.name;
  SHOAL_ASSIGN_OR_RETURN(store_, shm::StoreClient::Connect(so));
  SHOAL_ASSIGN_OR_RETURN(
      table_, tasks::TaskTable::Open(welcome_.task_segment, absl::Seconds(10)));
  return table_->SetClientStoreSlot(
      welcome_.task_client, static_cast<int32_t>(store_->client_slot()));
}

Client::Impl::~Impl() {
  // The coordinator frees our tasks when it sees this process exit; a client
  // object that goes away while the process lives releases them itself.
  if (table_ != nullptr) {
    for (const auto& [task, ids] : spilled_) {
      for (const ObjectId& id : ids) (void)store_->Release(id);
    }
  }
}

absl::Status Client::Impl::SpillLargeArgs(ipc::TaskSpec& task,
                                          std::vector<ObjectId>* spilled) {
  for (Value& v : task.args) {
    const TensorValue* t = std::get_if<TensorValue>(&v);
    const BytesValue* b = std::get_if<BytesValue>(&v);
    const size_t size = t ? t->data.size() : b ? b->data.size() : 0;
    if (size <= kInlineValueLimit) continue;
    const TensorMeta meta =
        t ? t->meta : TensorMeta::Bytes(static_cast<int64_t>(size));
    const std::string& data = t ? t->data : b->data;
    const ObjectId id = ObjectId::Random();
    SHOAL_RETURN_IF_ERROR(store_->Put(id, meta, data.data()));
    spilled->push_back(id);
    v = ObjectValue{id, meta, size};
  }
  return absl::OkStatus();
}

void Client::Impl::ReleaseSpilled(uint64_t task) {
  auto it = spilled_.find(task);
  if (it == spilled_.end()) return;
  for (const ObjectId& id : it->second) (void)store_->ReleaseAndDelete(id);
  spilled_.erase(it);
}

absl::StatusOr<std::vector<TaskRef>> Client::Impl::SubmitLocal(
    std::vector<ipc::TaskSpec> tasks) {
  std::vector<tasks::TaskSubmission> subs;
  std::vector<std::vector<ObjectId>> spilled(tasks.size());
  subs.reserve(tasks.size());
  for (size_t i = 0; i < tasks.size(); ++i) {
    absl::Status s = SpillLargeArgs(tasks[i], &spilled[i]);
    absl::StatusOr<tasks::TaskSubmission> sub =
        s.ok() ? tasks::ToSubmission(tasks[i], welcome_.cpus_per_worker,
                                     welcome_.gpus_per_worker)
               : absl::StatusOr<tasks::TaskSubmission>(s);
    if (!sub.ok()) {
      for (auto& ids : spilled) {
        for (const ObjectId& id : ids) (void)store_->Release(id);
      }
      return sub.status();
    }
    subs.push_back(*std::move(sub));
  }
  absl::StatusOr<std::vector<uint64_t>> ids =
      table_->Submit(welcome_.task_client, subs);
  if (!ids.ok()) {
    for (auto& list : spilled) {
      for (const ObjectId& id : list) (void)store_->Release(id);
    }
    return ids.status();
  }
  std::vector<TaskRef> refs;
  refs.reserve(ids->size());
  for (size_t i = 0; i < ids->size(); ++i) {
    refs.push_back(TaskRef{(*ids)[i]});
    if (!spilled[i].empty()) spilled_[(*ids)[i]] = std::move(spilled[i]);
  }
  return refs;
}

absl::StatusOr<std::vector<ipc::TaskResult>> Client::Impl::WaitLocal(
    absl::Span<const TaskRef> tasks, absl::Duration timeout, size_t min_done,
    bool release) {
  const size_t want =
      min_done == 0 ? tasks.size() : std::min(min_done, tasks.size());
  const absl::Time start = absl::Now();
  const absl::Time deadline = timeout == absl::InfiniteDuration()
                                  ? absl::InfiniteFuture()
                                  : start + timeout;
  auto count_done = [&]() -> absl::StatusOr<size_t> {
    size_t done = 0;
    for (const TaskRef& t : tasks) {
      SHOAL_ASSIGN_OR_RETURN(tasks::TaskState st, table_->Poll(t.id));
      if (st == tasks::TaskState::kDone) ++done;
    }
    return done;
  };
  // Not while this thread finds the CPU contended (base/spin_turn.h).
  bool spinning = SpinAllowed();
  while (true) {
    SHOAL_ASSIGN_OR_RETURN(size_t done, count_done());
    if (done >= want) break;
    const absl::Time now = absl::Now();
    if (now >= deadline) break;
    if (spinning && now - start < o_.spin) {
      // A result usually arrives within microseconds: yield instead of
      // paying for a sleep and a wake-up (~20 µs each way here).
      // Busy-waits only for one task that runs on another CPU: on this CPU
      // (or queued, for a worker here to claim) it needs the CPU given up.
      spinning = table_->SpinTurn(
          now - start < o_.busy_spin && tasks.size() == 1 ? tasks[0].id : 0);
      continue;
    }
    const uint32_t armed = table_->ArmClient(welcome_.task_client);
    SHOAL_ASSIGN_OR_RETURN(done, count_done());
    if (done < want) {
      table_->SleepClient(welcome_.task_client, armed,
                          deadline == absl::InfiniteFuture()
                              ? absl::Seconds(1)
                              : std::min(absl::Seconds(1), deadline - now));
    }
    table_->DisarmClient(welcome_.task_client);
  }
  std::vector<ipc::TaskResult> results;
  for (const TaskRef& t : tasks) {
    absl::StatusOr<tasks::TaskState> st = table_->Poll(t.id);
    if (!st.ok() || *st != tasks::TaskState::kDone) continue;
    results.push_back(
        ToResult(t.id, table_->Take(welcome_.task_client, t.id, release)));
    ReleaseSpilled(t.id);
  }
  return results;
}

// ---- Client
// ----------------------------------------------------------------------

Client::Client(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Client::~Client() = default;

absl::StatusOr<std::unique_ptr<Client>> Client::Connect(ClientOptions options) {
  auto impl = std::make_unique<Impl>(std::move(options));
  SHOAL_RETURN_IF_ERROR(impl->Connect());
  return std::unique_ptr<Client>(new Client(std::move(impl)));
}

bool Client::local() const { return impl_->welcome_.local; }
bool Client::owner() const {
  // A node before protocol 1.4 does not say; it took any client's path.
  return impl_->welcome_.protocol_minor < 4 || impl_->welcome_.owner;
}
const std::string& Client::job_id() const { return impl_->welcome_.job_id; }
shm::StoreClient* Client::store() { return impl_->store_.get(); }

absl::StatusOr<TaskRef> Client::Submit(ipc::TaskSpec task) {
  std::vector<ipc::TaskSpec> one;
  one.push_back(std::move(task));
  SHOAL_ASSIGN_OR_RETURN(std::vector<TaskRef> refs, Submit(std::move(one)));
  return refs[0];
}

absl::StatusOr<std::vector<TaskRef>> Client::Submit(
    std::vector<ipc::TaskSpec> tasks) {
  if (tasks.empty()) return std::vector<TaskRef>();
  if (local()) return impl_->SubmitLocal(std::move(tasks));
  std::vector<TaskRef> refs;
  refs.reserve(tasks.size());
  // One message per kMaxBatch tasks (the protocol's per-message limit).
  for (size_t begin = 0; begin < tasks.size(); begin += kMaxBatch) {
    const size_t end = std::min(tasks.size(), begin + kMaxBatch);
    ipc::SubmitRequest req;
    req.tasks.assign(std::make_move_iterator(tasks.begin() + begin),
                     std::make_move_iterator(tasks.begin() + end));
    SHOAL_ASSIGN_OR_RETURN(ipc::SubmitReply r,
                           impl_->channel_.Call<ipc::SubmitReply>(
                               std::move(req), impl_->o_.rpc_timeout));
    for (uint64_t id : r.task_ids) refs.push_back(TaskRef{id});
  }
  return refs;
}

absl::StatusOr<PendingTask> Client::SubmitAsync(ipc::TaskSpec task) {
  if (local()) {
    SHOAL_ASSIGN_OR_RETURN(TaskRef ref, Submit(std::move(task)));
    return PendingTask{ref.id};
  }
  if (!impl_->pipeline_) {
    PipelineOptions p;
    p.window = std::max<size_t>(1, impl_->o_.window);
    // 1.2 nodes send a batch's task ids first; older ones get one task per
    // message, matched by request id.
    p.batch = impl_->welcome_.protocol_minor >= 2 && impl_->o_.max_batch > 1;
    p.ids_with_result = impl_->welcome_.protocol_minor >= 3;
    p.resumable = impl_->welcome_.protocol_minor >= 4;
    p.name = impl_->o_.name;
    p.hello_timeout = impl_->o_.rpc_timeout;
    p.max_batch = std::max<size_t>(1, impl_->o_.max_batch);
    p.flush_after = impl_->o_.flush_after;
    SHOAL_ASSIGN_OR_RETURN(impl_->pipeline_,
                           RemotePipeline::Connect(impl_->o_.endpoint,
                                                   impl_->channel_options_, p));
  }
  SHOAL_ASSIGN_OR_RETURN(
      const uint64_t handle,
      impl_->pipeline_->Submit(std::move(task), impl_->o_.rpc_timeout));
  return PendingTask{handle};
}

absl::Status Client::Flush() {
  if (local() || !impl_->pipeline_) return absl::OkStatus();
  return impl_->pipeline_->Flush();
}

absl::StatusOr<uint64_t> Client::TaskId(PendingTask task) {
  if (local()) return task.handle;
  if (!impl_->pipeline_) {
    return absl::NotFoundError(
        absl::StrCat("no SubmitAsync task ", task.handle));
  }
  return impl_->pipeline_->TaskId(task.handle, impl_->o_.rpc_timeout);
}

absl::Status Client::Cancel(PendingTask task) {
  if (local()) return Cancel(TaskRef{task.handle});
  if (!impl_->pipeline_) {
    return absl::NotFoundError(
        absl::StrCat("no SubmitAsync task ", task.handle));
  }
  return impl_->pipeline_->Cancel(task.handle, impl_->o_.rpc_timeout);
}

absl::StatusOr<ipc::TaskResult> Client::Await(PendingTask task,
                                              absl::Duration timeout) {
  if (local()) return Wait(TaskRef{task.handle}, timeout, /*release=*/true);
  if (!impl_->pipeline_) {
    return absl::NotFoundError(
        absl::StrCat("no SubmitAsync task ", task.handle));
  }
  return impl_->pipeline_->Take(task.handle, timeout);
}

absl::StatusOr<
    std::vector<std::pair<PendingTask, absl::StatusOr<ipc::TaskResult>>>>
Client::AwaitSome(absl::Span<const PendingTask> tasks, size_t min_done,
                  absl::Duration timeout) {
  std::vector<std::pair<PendingTask, absl::StatusOr<ipc::TaskResult>>> out;
  if (local()) {
    std::vector<TaskRef> refs;
    for (const PendingTask& t : tasks) refs.push_back({t.handle});
    SHOAL_ASSIGN_OR_RETURN(std::vector<ipc::TaskResult> done,
                           Wait(refs, timeout, min_done, /*release=*/true));
    for (ipc::TaskResult& r : done)
      out.emplace_back(PendingTask{r.task_id}, std::move(r));
    return out;
  }
  if (tasks.empty()) return out;
  if (!impl_->pipeline_) {
    return absl::NotFoundError(
        absl::StrCat("no SubmitAsync task ", tasks[0].handle));
  }
  std::vector<uint64_t> handles;
  handles.reserve(tasks.size());
  for (const PendingTask& t : tasks) handles.push_back(t.handle);
  SHOAL_ASSIGN_OR_RETURN(
      auto taken, impl_->pipeline_->TakeSome(handles, min_done, timeout));
  out.reserve(taken.size());
  for (auto& [h, r] : taken) out.emplace_back(PendingTask{h}, std::move(r));
  return out;
}

absl::StatusOr<std::vector<ipc::TaskResult>> Client::Wait(
    absl::Span<const TaskRef> tasks, absl::Duration timeout, size_t min_done,
    bool release) {
  if (local()) return impl_->WaitLocal(tasks, timeout, min_done, release);
  if (tasks.size() > kMaxBatch) {
    if (min_done != 0 && min_done < tasks.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("waiting for some of more than ", kMaxBatch,
                       " tasks at once needs a local client"));
    }
    // All of them: wait chunk by chunk within the one deadline.
    const absl::Time deadline = timeout == absl::InfiniteDuration()
                                    ? absl::InfiniteFuture()
                                    : absl::Now() + timeout;
    std::vector<ipc::TaskResult> all;
    for (size_t begin = 0; begin < tasks.size(); begin += kMaxBatch) {
      const size_t n = std::min(kMaxBatch, tasks.size() - begin);
      const absl::Duration left =
          deadline == absl::InfiniteFuture()
              ? absl::InfiniteDuration()
              : std::max(absl::ZeroDuration(), deadline - absl::Now());
      SHOAL_ASSIGN_OR_RETURN(std::vector<ipc::TaskResult> part,
                             Wait(tasks.subspan(begin, n), left, 0, release));
      for (ipc::TaskResult& r : part) all.push_back(std::move(r));
    }
    return all;
  }
  ipc::WaitRequest w;
  for (const TaskRef& t : tasks) w.task_ids.push_back(t.id);
  w.timeout_ms = timeout == absl::InfiniteDuration()
                     ? -1
                     : absl::ToInt64Milliseconds(timeout);
  w.min_done = static_cast<uint32_t>(min_done);
  w.release = release;
  const absl::Duration rpc = timeout == absl::InfiniteDuration()
                                 ? absl::InfiniteDuration()
                                 : timeout + impl_->o_.rpc_timeout;
  SHOAL_ASSIGN_OR_RETURN(ipc::WaitReply r, impl_->channel_.Call<ipc::WaitReply>(
                                               std::move(w), rpc));
  return std::move(r.results);
}

absl::StatusOr<ipc::TaskResult> Client::Wait(TaskRef task,
                                             absl::Duration timeout,
                                             bool release) {
  SHOAL_ASSIGN_OR_RETURN(
      std::vector<ipc::TaskResult> results,
      Wait(absl::MakeConstSpan(&task, 1), timeout, 1, release));
  if (results.empty()) {
    return absl::DeadlineExceededError(
        absl::StrCat("task ", task.id, " did not finish within ",
                     absl::FormatDuration(timeout)));
  }
  return std::move(results[0]);
}

absl::Status Client::Cancel(TaskRef task) {
  if (local()) return impl_->table_->Cancel(task.id).status();
  return impl_->channel_
      .Call<ipc::OkReply>(ipc::CancelRequest{{task.id}}, impl_->o_.rpc_timeout)
      .status();
}

absl::Status Client::Release(TaskRef task) {
  if (local()) {
    // Output objects of a finished task are ours to release too.
    absl::StatusOr<tasks::TaskState> st = impl_->table_->Poll(task.id);
    if (st.ok() && *st == tasks::TaskState::kDone) {
      ReleaseOutputs(ToResult(
          task.id, impl_->table_->Take(impl_->welcome_.task_client, task.id,
                                       /*release=*/true)));
      impl_->ReleaseSpilled(task.id);
      return absl::OkStatus();
    }
    absl::Status s =
        impl_->table_->Release(impl_->welcome_.task_client, task.id);
    impl_->ReleaseSpilled(task.id);
    return s;
  }
  return impl_->channel_
      .Call<ipc::OkReply>(ipc::ReleaseTasksRequest{{task.id}},
                          impl_->o_.rpc_timeout)
      .status();
}

void Client::ReleaseOutputs(const ipc::TaskResult& result) {
  if (!local()) {
    // The coordinator holds remote clients' objects; those of results taken
    // with release are held for us until we say so.
    for (const Value& v : result.outputs) {
      if (const auto* o = std::get_if<ObjectValue>(&v)) {
        if (impl_->pipeline_ && impl_->pipeline_->HoldsOutput(o->id)) {
          impl_->pipeline_->ReleaseOutput(o->id);
          continue;
        }
        (void)impl_->channel_.Call<ipc::OkReply>(ipc::DeleteRequest{o->id},
                                                 impl_->o_.rpc_timeout);
      }
    }
    return;
  }
  for (const Value& v : result.outputs) {
    if (const auto* o = std::get_if<ObjectValue>(&v))
      (void)impl_->store_->ReleaseAndDelete(o->id);
  }
}

absl::StatusOr<TensorValue> Client::Fetch(const ObjectId& id) {
  if (local()) {
    SHOAL_ASSIGN_OR_RETURN(shm::ObjectBuffer buf, impl_->store_->Get(id));
    TensorValue t{buf.meta, std::string(reinterpret_cast<const char*>(buf.data),
                                        buf.nbytes)};
    (void)impl_->store_->Release(id);
    return t;
  }
  SHOAL_ASSIGN_OR_RETURN(
      ipc::FetchObjectReply r,
      impl_->channel_.Call<ipc::FetchObjectReply>(ipc::FetchObjectRequest{id},
                                                  impl_->o_.rpc_timeout));
  return std::move(r.tensor);
}

absl::StatusOr<ipc::NodeStatus> Client::Status(bool tasks_by_name) {
  return impl_->channel_.Call<ipc::NodeStatus>(
      ipc::StatusRequest{tasks_by_name}, impl_->o_.rpc_timeout);
}

absl::StatusOr<ipc::ActorCreateReply> Client::CreateActor(
    ipc::ActorCreateRequest request) {
  if (request.pid() == 0) request.set_pid(static_cast<int32_t>(getpid()));
  return impl_->channel_.Call<ipc::ActorCreateReply>(std::move(request),
                                                     impl_->o_.rpc_timeout);
}

absl::Status Client::KillActor(uint32_t actor_id) {
  ipc::ActorKillRequest k;
  k.set_actor_id(actor_id);
  return impl_->channel_.Call<ipc::OkReply>(std::move(k), impl_->o_.rpc_timeout)
      .status();
}

absl::Status Client::StopNode() {
  return impl_->channel_
      .Call<ipc::OkReply>(ipc::StopRequest{}, impl_->o_.rpc_timeout)
      .status();
}

}  // namespace shoal::coordinator
