// The coordinator's messages on the wire: client hello and welcome, task
// submission, waiting and cancellation, object fetches, worker hello and
// heartbeats, node status and stop.
#include "absl/strings/str_cat.h"
#include "ipc/protocol_internal.h"
#include "ipc/wire_convert.h"

namespace shoal::ipc {
namespace protocol_internal {

// ---- encode -----------------------------------------------------------------

absl::Status EncodeBody(const ClientHello& m, wire::Envelope* w) {
  auto* r = w->mutable_client_hello();
  r->set_pid(m.pid);
  r->set_name(m.name);
  r->set_boot_id(m.boot_id);
  r->set_resumable(m.resumable);
  r->set_machine(m.machine);
  return absl::OkStatus();
}

absl::Status EncodeBody(const ClientWelcome& m, wire::Envelope* w) {
  auto* r = w->mutable_client_welcome();
  r->set_job_id(m.job_id);
  r->set_local(m.local);
  r->set_task_segment(m.task_segment);
  r->set_task_client(m.task_client);
  r->set_store_endpoint(m.store_endpoint);
  r->set_cpus_per_worker(m.cpus_per_worker);
  r->set_gpus_per_worker(m.gpus_per_worker);
  r->set_session(m.session);
  r->set_max_request_bytes(m.max_request_bytes);
  r->set_reply_budget_bytes(m.reply_budget_bytes);
  r->set_resume_grace_ms(m.resume_grace_ms);
  r->set_owner(m.owner);
  return absl::OkStatus();
}

absl::Status EncodeBody(const SubmitRequest& m, wire::Envelope* w) {
  auto* r = w->mutable_submit();
  for (const TaskSpec& t : m.tasks) ToWire(t, r->add_tasks());
  r->set_push(m.push);
  r->set_push_ids(m.push_ids);
  r->set_ids_with_result(m.ids_with_result);
  return absl::OkStatus();
}

// The id lists below take their body before the loop, so that an empty list
// still encodes as that body rather than as an Envelope with none.

absl::Status EncodeBody(const SubmitReply& m, wire::Envelope* w) {
  auto* r = w->mutable_submit_reply();
  for (uint64_t id : m.task_ids) r->add_task_ids(id);
  return absl::OkStatus();
}

absl::Status EncodeBody(const WaitRequest& m, wire::Envelope* w) {
  auto* r = w->mutable_wait();
  for (uint64_t id : m.task_ids) r->add_task_ids(id);
  r->set_timeout_ms(m.timeout_ms);
  r->set_min_done(m.min_done);
  r->set_release(m.release);
  return absl::OkStatus();
}

absl::Status EncodeBody(const WaitReply& m, wire::Envelope* w) {
  auto* r = w->mutable_wait_reply();
  for (const TaskResult& t : m.results) ToWire(t, r->add_results());
  return absl::OkStatus();
}

absl::Status EncodeBody(const CancelRequest& m, wire::Envelope* w) {
  auto* r = w->mutable_cancel();
  for (uint64_t id : m.task_ids) r->add_task_ids(id);
  return absl::OkStatus();
}

absl::Status EncodeBody(const ReleaseTasksRequest& m, wire::Envelope* w) {
  auto* r = w->mutable_release_tasks();
  for (uint64_t id : m.task_ids) r->add_task_ids(id);
  return absl::OkStatus();
}

absl::Status EncodeBody(const FetchObjectRequest& m, wire::Envelope* w) {
  w->mutable_fetch_object()->set_id(IdBytes(m.id));
  return absl::OkStatus();
}

absl::Status EncodeBody(const FetchObjectReply& m, wire::Envelope* w) {
  auto* t = w->mutable_fetch_object_reply()->mutable_tensor();
  ToWire(m.tensor.meta, t->mutable_meta());
  t->set_data(m.tensor.data);
  return absl::OkStatus();
}

absl::Status EncodeBody(const WorkerHello& m, wire::Envelope* w) {
  w->mutable_worker_hello()->set_worker_id(m.worker_id);
  w->mutable_worker_hello()->set_pid(m.pid);
  for (const std::string& f : m.functions)
    w->mutable_worker_hello()->add_functions(f);
  return absl::OkStatus();
}

absl::Status EncodeBody(const WorkerHeartbeat& m, wire::Envelope* w) {
  w->mutable_worker_heartbeat()->set_worker_id(m.worker_id);
  w->mutable_worker_heartbeat()->set_tasks_done(m.tasks_done);
  w->mutable_worker_heartbeat()->set_blocked(m.blocked);
  for (const wire::TaskNameStats& t : m.tasks)
    *w->mutable_worker_heartbeat()->add_tasks() = t;
  return absl::OkStatus();
}

absl::Status EncodeBody(const StatusRequest& m, wire::Envelope* w) {
  w->mutable_status()->set_tasks_by_name(m.tasks_by_name);
  return absl::OkStatus();
}

absl::Status EncodeBody(const NodeStatus& m, wire::Envelope* w) {
  *w->mutable_node_status() = m;
  return absl::OkStatus();
}

absl::Status EncodeBody(const StopRequest&, wire::Envelope* w) {
  w->mutable_stop();
  return absl::OkStatus();
}

absl::Status EncodeBody(const ActorCreateRequest& m, wire::Envelope* w) {
  *w->mutable_actor_create() = m;
  return absl::OkStatus();
}

absl::Status EncodeBody(const ActorCreateReply& m, wire::Envelope* w) {
  *w->mutable_actor_create_reply() = m;
  return absl::OkStatus();
}

absl::Status EncodeBody(const SessionAck&, wire::Envelope* w) {
  w->mutable_session_ack();
  return absl::OkStatus();
}

absl::Status EncodeBody(const PutObjectRequest& m, wire::Envelope* w) {
  auto* t = w->mutable_put_object()->mutable_tensor();
  ToWire(m.tensor.meta, t->mutable_meta());
  t->set_data(m.tensor.data);
  return absl::OkStatus();
}

absl::Status EncodeBody(const PutObjectReply& m, wire::Envelope* w) {
  w->mutable_put_object_reply()->set_id(IdBytes(m.id));
  w->mutable_put_object_reply()->set_nbytes(m.nbytes);
  return absl::OkStatus();
}

absl::Status EncodeBody(const ActorKillRequest& m, wire::Envelope* w) {
  *w->mutable_actor_kill() = m;
  return absl::OkStatus();
}

// ---- decode -----------------------------------------------------------------

namespace {

absl::StatusOr<std::vector<uint64_t>> TaskIds(
    const google::protobuf::RepeatedField<uint64_t>& ids,
    const DecodeLimits& limits) {
  if (static_cast<size_t>(ids.size()) > limits.max_ids) {
    return TooMany("the request", ids.size(), limits.max_ids);
  }
  return std::vector<uint64_t>(ids.begin(), ids.end());
}

// A message whose only field is a list of task ids.
template <class M>
absl::StatusOr<Message> TaskIdsMessageFromWire(
    const google::protobuf::RepeatedField<uint64_t>& ids,
    const DecodeLimits& limits) {
  auto task_ids = TaskIds(ids, limits);
  if (!task_ids.ok()) return task_ids.status();
  return M{*std::move(task_ids)};
}

absl::StatusOr<Message> ClientHelloFromWire(const wire::ClientHello& r,
                                            const DecodeLimits& limits) {
  if (r.name().size() > limits.max_string_bytes || r.boot_id().size() > 64 ||
      r.machine().size() > 64) {
    return absl::ResourceExhaustedError("client hello fields too long");
  }
  if (r.pid() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("client hello's pid ", r.pid(), " is negative"));
  }
  return ClientHello{r.pid(), r.name(), r.boot_id(), r.resumable(),
                     r.machine()};
}

absl::StatusOr<Message> ActorCreateFromWire(const wire::ActorCreateRequest& r) {
  if (r.cpus() > 4096 || r.gpus() > 4096) {
    return absl::InvalidArgumentError(
        absl::StrCat("an actor asks for ", r.cpus(), " cpus and ", r.gpus(),
                     " gpus: out of range [0, 4096]"));
  }
  if (r.max_restarts() > kMaxActorRestarts) {
    return absl::InvalidArgumentError(
        absl::StrCat("an actor's max_restarts ", r.max_restarts(),
                     " is over the limit of ", kMaxActorRestarts));
  }
  if (r.pid() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("an actor's pid ", r.pid(), " is negative"));
  }
  return r;
}

absl::StatusOr<Message> SubmitFromWire(const wire::SubmitRequest& r,
                                       const DecodeLimits& limits) {
  if (static_cast<size_t>(r.tasks_size()) > limits.max_ids) {
    return TooMany("submit", r.tasks_size(), limits.max_ids);
  }
  if (r.tasks_size() == 0)
    return absl::InvalidArgumentError("submit of no tasks");
  SubmitRequest m;
  m.tasks.reserve(r.tasks_size());
  for (const wire::TaskSpec& t : r.tasks()) {
    auto spec = FromWire(t, limits);
    if (!spec.ok()) return spec.status();
    m.tasks.push_back(*std::move(spec));
  }
  m.push = r.push();
  m.push_ids = r.push_ids();
  m.ids_with_result = r.ids_with_result();
  return m;
}

absl::StatusOr<Message> WaitFromWire(const wire::WaitRequest& r,
                                     const DecodeLimits& limits) {
  auto ids = TaskIds(r.task_ids(), limits);
  if (!ids.ok()) return ids.status();
  if (r.timeout_ms() > kMaxTimeoutMs) {
    return absl::InvalidArgumentError(
        absl::StrCat("timeout_ms ", r.timeout_ms(), " is over the limit of ",
                     kMaxTimeoutMs, " (about 10 years); negative means none"));
  }
  return WaitRequest{*std::move(ids), r.timeout_ms(), r.min_done(),
                     r.release()};
}

absl::StatusOr<Message> WaitReplyFromWire(const wire::WaitReply& r,
                                          const DecodeLimits& limits) {
  if (static_cast<size_t>(r.results_size()) > limits.max_ids) {
    return TooMany("wait reply", r.results_size(), limits.max_ids);
  }
  WaitReply m;
  for (const wire::TaskResult& t : r.results()) {
    auto res = FromWire(t, limits);
    if (!res.ok()) return res.status();
    m.results.push_back(*std::move(res));
  }
  return m;
}

absl::StatusOr<Message> FetchObjectReplyFromWire(
    const wire::FetchObjectReply& r) {
  wire::Value v;
  *v.mutable_tensor() = r.tensor();
  auto value = FromWire(v);
  if (!value.ok()) return value.status();
  return FetchObjectReply{std::get<TensorValue>(*std::move(value))};
}

// An InlineTensor as a TensorValue (its size checked against its meta).
absl::StatusOr<TensorValue> InlineTensorFromWire(const wire::InlineTensor& t) {
  wire::Value v;
  *v.mutable_tensor() = t;
  auto value = FromWire(v);
  if (!value.ok()) return value.status();
  return std::get<TensorValue>(*std::move(value));
}

absl::StatusOr<Message> WorkerHelloFromWire(const wire::WorkerHello& r,
                                            const DecodeLimits& limits) {
  if (static_cast<size_t>(r.functions_size()) > limits.max_ids) {
    return TooMany("worker hello", r.functions_size(), limits.max_ids);
  }
  WorkerHello m{r.worker_id(), r.pid(), {}};
  m.functions.assign(r.functions().begin(), r.functions().end());
  return m;
}

}  // namespace

absl::StatusOr<Message> TaskBodyFromWire(const wire::Envelope& w,
                                         const DecodeLimits& limits) {
  switch (w.body_case()) {
    case wire::Envelope::kClientHello:
      return ClientHelloFromWire(w.client_hello(), limits);
    case wire::Envelope::kClientWelcome: {
      const auto& r = w.client_welcome();
      ClientWelcome m;
      m.job_id = r.job_id();
      m.local = r.local();
      m.task_segment = r.task_segment();
      m.task_client = r.task_client();
      m.store_endpoint = r.store_endpoint();
      m.cpus_per_worker = r.cpus_per_worker();
      m.gpus_per_worker = r.gpus_per_worker();
      m.session = r.session();
      m.max_request_bytes = r.max_request_bytes();
      m.reply_budget_bytes = r.reply_budget_bytes();
      m.resume_grace_ms = r.resume_grace_ms();
      m.owner = r.owner();
      m.protocol_minor = w.minor();
      return m;
    }
    case wire::Envelope::kSubmit:
      return SubmitFromWire(w.submit(), limits);
    case wire::Envelope::kSubmitReply:
      return TaskIdsMessageFromWire<SubmitReply>(w.submit_reply().task_ids(),
                                                 limits);
    case wire::Envelope::kWait:
      return WaitFromWire(w.wait(), limits);
    case wire::Envelope::kWaitReply:
      return WaitReplyFromWire(w.wait_reply(), limits);
    case wire::Envelope::kCancel:
      return TaskIdsMessageFromWire<CancelRequest>(w.cancel().task_ids(),
                                                   limits);
    case wire::Envelope::kReleaseTasks:
      return TaskIdsMessageFromWire<ReleaseTasksRequest>(
          w.release_tasks().task_ids(), limits);
    case wire::Envelope::kFetchObject:
      return IdMessageFromWire<FetchObjectRequest>(w.fetch_object().id());
    case wire::Envelope::kFetchObjectReply:
      return FetchObjectReplyFromWire(w.fetch_object_reply());
    case wire::Envelope::kWorkerHello:
      return WorkerHelloFromWire(w.worker_hello(), limits);
    case wire::Envelope::kWorkerHeartbeat:
      return WorkerHeartbeat{w.worker_heartbeat().worker_id(),
                             w.worker_heartbeat().tasks_done(),
                             w.worker_heartbeat().blocked(),
                             {w.worker_heartbeat().tasks().begin(),
                              w.worker_heartbeat().tasks().end()}};
    case wire::Envelope::kStatus:
      return StatusRequest{w.status().tasks_by_name()};
    case wire::Envelope::kNodeStatus:
      return w.node_status();
    case wire::Envelope::kStop:
      return StopRequest{};
    case wire::Envelope::kActorCreate:
      return ActorCreateFromWire(w.actor_create());
    case wire::Envelope::kActorCreateReply:
      return w.actor_create_reply();
    case wire::Envelope::kActorKill:
      return w.actor_kill();
    case wire::Envelope::kSessionAck:
      return SessionAck{};
    case wire::Envelope::kPutObject: {
      auto t = InlineTensorFromWire(w.put_object().tensor());
      if (!t.ok()) return t.status();
      return PutObjectRequest{*std::move(t)};
    }
    case wire::Envelope::kPutObjectReply: {
      absl::StatusOr<ObjectId> id =
          ObjectId::FromBinary(w.put_object_reply().id());
      if (!id.ok()) return id.status();
      return PutObjectReply{*id, w.put_object_reply().nbytes()};
    }
    default:
      return NotInArea("task", w);
  }
}

}  // namespace protocol_internal
}  // namespace shoal::ipc
