#include "ipc/protocol.h"

#include <type_traits>

#include "absl/strings/str_cat.h"
#include "ipc/wire_convert.h"
#include "proto/shoal.pb.h"

namespace shoal::ipc {
namespace {

template <class... Ts>
struct Overloaded : Ts... {
  using Ts::operator()...;
};
template <class... Ts>
Overloaded(Ts...) -> Overloaded<Ts...>;

std::string IdBytes(const ObjectId& id) { return std::string(id.Binary()); }

absl::Status TooMany(absl::string_view what, size_t n, size_t limit) {
  return absl::ResourceExhaustedError(
      absl::StrCat(what, " lists ", n, " items, above the limit of ", limit));
}

// ---- encode -----------------------------------------------------------------

absl::Status BodyToWire(const Message& body, wire::Envelope* w) {
  return std::visit(
      Overloaded{
          [&](const ErrorReply& m) -> absl::Status {
            if (m.status.ok()) {
              return absl::InvalidArgumentError(
                  "an ErrorReply needs a non-OK status");
            }
            w->mutable_error()->set_code(static_cast<int32_t>(m.status.code()));
            w->mutable_error()->set_message(std::string(m.status.message()));
            return absl::OkStatus();
          },
          [&](const OkReply&) -> absl::Status {
            w->mutable_ok();
            return absl::OkStatus();
          },
          [&](const StoreConnectRequest& m) -> absl::Status {
            w->mutable_store_connect()->set_pid(m.pid);
            w->mutable_store_connect()->set_name(m.name);
            return absl::OkStatus();
          },
          [&](const StoreConnectReply& m) -> absl::Status {
            auto* r = w->mutable_store_connect_reply();
            r->set_client_slot(m.client_slot);
            r->set_segment_name(m.segment_name);
            r->set_segment_bytes(m.segment_bytes);
            r->set_session(m.session);
            return absl::OkStatus();
          },
          [&](const StoreDisconnectRequest&) -> absl::Status {
            w->mutable_store_disconnect();
            return absl::OkStatus();
          },
          [&](const CreateRequest& m) -> absl::Status {
            absl::Status s = m.meta.Validate();
            if (!s.ok()) return s;
            auto* r = w->mutable_create();
            r->set_id(IdBytes(m.id));
            ToWire(m.meta, r->mutable_meta());
            r->set_nbytes(m.nbytes);
            r->set_device_uuid(m.device_uuid);
            return absl::OkStatus();
          },
          [&](const CreateReply& m) -> absl::Status {
            auto* r = w->mutable_create_reply();
            r->set_offset(m.offset);
            r->set_entry(m.entry);
            r->set_generation(m.generation);
            return absl::OkStatus();
          },
          [&](const SealedNotice& m) -> absl::Status {
            w->mutable_sealed()->set_id(IdBytes(m.id));
            return absl::OkStatus();
          },
          [&](const AbortRequest& m) -> absl::Status {
            w->mutable_abort()->set_id(IdBytes(m.id));
            return absl::OkStatus();
          },
          [&](const GetRequest& m) -> absl::Status {
            auto* r = w->mutable_get();
            for (const ObjectId& id : m.ids) r->add_ids(IdBytes(id));
            r->set_timeout_ms(m.timeout_ms);
            return absl::OkStatus();
          },
          [&](const GetReply& m) -> absl::Status {
            auto* r = w->mutable_get_reply();
            for (const ObjectInfo& info : m.objects) {
              auto* o = r->add_objects();
              o->set_id(IdBytes(info.id));
              o->set_code(static_cast<int32_t>(info.status.code()));
              o->set_message(std::string(info.status.message()));
              o->set_offset(info.offset);
              o->set_nbytes(info.nbytes);
              o->set_entry(info.entry);
              o->set_generation(info.generation);
              if (info.status.ok()) ToWire(info.meta, o->mutable_meta());
            }
            return absl::OkStatus();
          },
          [&](const ReleaseRequest& m) -> absl::Status {
            w->mutable_release()->set_id(IdBytes(m.id));
            return absl::OkStatus();
          },
          [&](const DeleteRequest& m) -> absl::Status {
            w->mutable_delete_object()->set_id(IdBytes(m.id));
            return absl::OkStatus();
          },
          [&](const ContainsRequest& m) -> absl::Status {
            w->mutable_contains()->set_id(IdBytes(m.id));
            return absl::OkStatus();
          },
          [&](const ContainsReply& m) -> absl::Status {
            w->mutable_contains_reply()->set_sealed(m.sealed);
            return absl::OkStatus();
          },
          [&](const StoreStatsRequest&) -> absl::Status {
            w->mutable_store_stats();
            return absl::OkStatus();
          },
          [&](const StoreStats& m) -> absl::Status {
            ToWire(m, w->mutable_store_stats_reply());
            return absl::OkStatus();
          },
          [&](const ReclaimHint& m) -> absl::Status {
            w->mutable_reclaim_hint()->set_id(IdBytes(m.id));
            return absl::OkStatus();
          },
          [&](const ClientHello& m) -> absl::Status {
            auto* r = w->mutable_client_hello();
            r->set_pid(m.pid);
            r->set_name(m.name);
            r->set_boot_id(m.boot_id);
            return absl::OkStatus();
          },
          [&](const ClientWelcome& m) -> absl::Status {
            auto* r = w->mutable_client_welcome();
            r->set_job_id(m.job_id);
            r->set_local(m.local);
            r->set_task_segment(m.task_segment);
            r->set_task_client(m.task_client);
            r->set_store_endpoint(m.store_endpoint);
            r->set_cpus_per_worker(m.cpus_per_worker);
            r->set_gpus_per_worker(m.gpus_per_worker);
            return absl::OkStatus();
          },
          [&](const SubmitRequest& m) -> absl::Status {
            auto* r = w->mutable_submit();
            for (const TaskSpec& t : m.tasks) ToWire(t, r->add_tasks());
            return absl::OkStatus();
          },
          [&](const SubmitReply& m) -> absl::Status {
            auto* r = w->mutable_submit_reply();
            for (uint64_t id : m.task_ids) r->add_task_ids(id);
            return absl::OkStatus();
          },
          [&](const WaitRequest& m) -> absl::Status {
            auto* r = w->mutable_wait();
            for (uint64_t id : m.task_ids) r->add_task_ids(id);
            r->set_timeout_ms(m.timeout_ms);
            r->set_min_done(m.min_done);
            r->set_release(m.release);
            return absl::OkStatus();
          },
          [&](const WaitReply& m) -> absl::Status {
            auto* r = w->mutable_wait_reply();
            for (const TaskResult& t : m.results) ToWire(t, r->add_results());
            return absl::OkStatus();
          },
          [&](const CancelRequest& m) -> absl::Status {
            auto* r = w->mutable_cancel();
            for (uint64_t id : m.task_ids) r->add_task_ids(id);
            return absl::OkStatus();
          },
          [&](const ReleaseTasksRequest& m) -> absl::Status {
            auto* r = w->mutable_release_tasks();
            for (uint64_t id : m.task_ids) r->add_task_ids(id);
            return absl::OkStatus();
          },
          [&](const FetchObjectRequest& m) -> absl::Status {
            w->mutable_fetch_object()->set_id(IdBytes(m.id));
            return absl::OkStatus();
          },
          [&](const FetchObjectReply& m) -> absl::Status {
            auto* t = w->mutable_fetch_object_reply()->mutable_tensor();
            ToWire(m.tensor.meta, t->mutable_meta());
            t->set_data(m.tensor.data);
            return absl::OkStatus();
          },
          [&](const WorkerHello& m) -> absl::Status {
            w->mutable_worker_hello()->set_worker_id(m.worker_id);
            w->mutable_worker_hello()->set_pid(m.pid);
            for (const std::string& f : m.functions)
              w->mutable_worker_hello()->add_functions(f);
            return absl::OkStatus();
          },
          [&](const WorkerHeartbeat& m) -> absl::Status {
            w->mutable_worker_heartbeat()->set_worker_id(m.worker_id);
            w->mutable_worker_heartbeat()->set_tasks_done(m.tasks_done);
            return absl::OkStatus();
          },
          [&](const StatusRequest&) -> absl::Status {
            w->mutable_status();
            return absl::OkStatus();
          },
          [&](const NodeStatus& m) -> absl::Status {
            auto* r = w->mutable_node_status();
            r->set_job_id(m.job_id);
            r->set_coordinator_pid(m.coordinator_pid);
            r->set_uptime_ms(m.uptime_ms);
            for (const WorkerStatus& ws : m.workers) {
              auto* o = r->add_workers();
              o->set_id(ws.id);
              o->set_pid(ws.pid);
              o->set_gpus(ws.gpus);
              o->set_state(ws.state);
              o->set_tasks_done(ws.tasks_done);
              o->set_tasks_failed(ws.tasks_failed);
              o->set_restarts(ws.restarts);
              o->set_rss_bytes(ws.rss_bytes);
              o->set_last_exit(ws.last_exit);
            }
            r->set_queued(m.queued);
            r->set_running(m.running);
            r->set_submitted(m.submitted);
            r->set_completed(m.completed);
            ToWire(m.store, r->mutable_store());
            r->set_frontend(m.frontend);
            r->set_results_held(m.results_held);
            return absl::OkStatus();
          },
          [&](const StopRequest&) -> absl::Status {
            w->mutable_stop();
            return absl::OkStatus();
          },
          [&](const KvSetRequest& m) -> absl::Status {
            w->mutable_kv_set()->set_key(m.key);
            w->mutable_kv_set()->set_value(m.value);
            return absl::OkStatus();
          },
          [&](const KvGetRequest& m) -> absl::Status {
            w->mutable_kv_get()->set_key(m.key);
            w->mutable_kv_get()->set_timeout_ms(m.timeout_ms);
            return absl::OkStatus();
          },
          [&](const KvValue& m) -> absl::Status {
            w->mutable_kv_value()->set_found(m.found);
            w->mutable_kv_value()->set_value(m.value);
            w->mutable_kv_value()->set_count(m.count);
            return absl::OkStatus();
          },
          [&](const KvAddRequest& m) -> absl::Status {
            w->mutable_kv_add()->set_key(m.key);
            w->mutable_kv_add()->set_delta(m.delta);
            return absl::OkStatus();
          },
          [&](const KvCompareAndSetRequest& m) -> absl::Status {
            auto* r = w->mutable_kv_cas();
            r->set_key(m.key);
            r->set_expected(m.expected);
            r->set_desired(m.desired);
            r->set_expect_absent(m.expect_absent);
            return absl::OkStatus();
          },
          [&](const KvDeleteRequest& m) -> absl::Status {
            w->mutable_kv_delete()->set_key(m.key);
            w->mutable_kv_delete()->set_prefix(m.prefix);
            return absl::OkStatus();
          },
          [&](const KvListRequest& m) -> absl::Status {
            w->mutable_kv_list()->set_prefix(m.prefix);
            return absl::OkStatus();
          },
          [&](const KvListReply& m) -> absl::Status {
            auto* r = w->mutable_kv_list_reply();
            for (const auto& [k, v] : m.entries) {
              r->add_keys(k);
              r->add_values(v);
            }
            return absl::OkStatus();
          },
          [&](const KvWaitRequest& m) -> absl::Status {
            auto* r = w->mutable_kv_wait();
            for (const std::string& k : m.keys) r->add_keys(k);
            r->set_timeout_ms(m.timeout_ms);
            return absl::OkStatus();
          },
          [&](const BarrierRequest& m) -> absl::Status {
            w->mutable_barrier()->set_name(m.name);
            w->mutable_barrier()->set_world(m.world);
            w->mutable_barrier()->set_timeout_ms(m.timeout_ms);
            return absl::OkStatus();
          },
      },
      body);
}

// ---- decode -----------------------------------------------------------------

absl::StatusOr<std::vector<uint64_t>> TaskIds(
    const google::protobuf::RepeatedField<uint64_t>& ids,
    const DecodeLimits& limits) {
  if (static_cast<size_t>(ids.size()) > limits.max_ids) {
    return TooMany("the request", ids.size(), limits.max_ids);
  }
  return std::vector<uint64_t>(ids.begin(), ids.end());
}

absl::Status KeyTooLong() {
  return absl::ResourceExhaustedError("key-value key above the length limit");
}

absl::StatusOr<Message> BodyFromWire(const wire::Envelope& w,
                                     const DecodeLimits& limits) {
  auto id_of = [](const std::string& bytes) {
    return ObjectId::FromBinary(bytes);
  };
  switch (w.body_case()) {
    case wire::Envelope::kError: {
      if (!ValidStatusCode(w.error().code())) {
        return absl::InvalidArgumentError(
            absl::StrCat("error reply with invalid code ", w.error().code()));
      }
      return ErrorReply{
          absl::Status(static_cast<absl::StatusCode>(w.error().code()),
                       w.error().message())};
    }
    case wire::Envelope::kOk:
      return OkReply{};
    case wire::Envelope::kStoreConnect: {
      if (w.store_connect().name().size() > limits.max_string_bytes) {
        return absl::ResourceExhaustedError("client name too long");
      }
      if (w.store_connect().pid() <= 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("invalid pid ", w.store_connect().pid()));
      }
      return StoreConnectRequest{w.store_connect().pid(),
                                 w.store_connect().name()};
    }
    case wire::Envelope::kStoreConnectReply: {
      const auto& r = w.store_connect_reply();
      return StoreConnectReply{r.client_slot(), r.segment_name(),
                               r.segment_bytes(), r.session()};
    }
    case wire::Envelope::kStoreDisconnect:
      return StoreDisconnectRequest{};
    case wire::Envelope::kCreate: {
      CreateRequest m;
      auto id = id_of(w.create().id());
      if (!id.ok()) return id.status();
      m.id = *id;
      auto meta = FromWire(w.create().meta());
      if (!meta.ok()) return meta.status();
      m.meta = *std::move(meta);
      m.nbytes = w.create().nbytes();
      m.device_uuid = w.create().device_uuid();
      if (!m.device_uuid.empty() && m.device_uuid.size() != 16) {
        return absl::InvalidArgumentError(
            "create: device_uuid must be 16 bytes");
      }
      return m;
    }
    case wire::Envelope::kCreateReply: {
      const auto& r = w.create_reply();
      return CreateReply{r.offset(), r.entry(), r.generation()};
    }
    case wire::Envelope::kSealed: {
      auto id = id_of(w.sealed().id());
      if (!id.ok()) return id.status();
      return SealedNotice{*id};
    }
    case wire::Envelope::kAbort: {
      auto id = id_of(w.abort().id());
      if (!id.ok()) return id.status();
      return AbortRequest{*id};
    }
    case wire::Envelope::kGet: {
      if (static_cast<size_t>(w.get().ids_size()) > limits.max_ids) {
        return TooMany("get", w.get().ids_size(), limits.max_ids);
      }
      GetRequest m;
      m.timeout_ms = w.get().timeout_ms();
      for (const std::string& b : w.get().ids()) {
        auto id = id_of(b);
        if (!id.ok()) return id.status();
        m.ids.push_back(*id);
      }
      return m;
    }
    case wire::Envelope::kGetReply: {
      if (static_cast<size_t>(w.get_reply().objects_size()) > limits.max_ids) {
        return TooMany("get reply", w.get_reply().objects_size(),
                       limits.max_ids);
      }
      GetReply m;
      for (const wire::ObjectInfo& o : w.get_reply().objects()) {
        ObjectInfo info;
        auto id = id_of(o.id());
        if (!id.ok()) return id.status();
        info.id = *id;
        if (!StatusFromWire(o.code(), o.message(), &info.status)) {
          return absl::InvalidArgumentError(
              absl::StrCat("invalid status code ", o.code()));
        }
        info.offset = o.offset();
        info.nbytes = o.nbytes();
        info.entry = o.entry();
        info.generation = o.generation();
        if (info.status.ok()) {
          auto meta = FromWire(o.meta());
          if (!meta.ok()) return meta.status();
          info.meta = *std::move(meta);
        }
        m.objects.push_back(std::move(info));
      }
      return m;
    }
    case wire::Envelope::kRelease: {
      auto id = id_of(w.release().id());
      if (!id.ok()) return id.status();
      return ReleaseRequest{*id};
    }
    case wire::Envelope::kDeleteObject: {
      auto id = id_of(w.delete_object().id());
      if (!id.ok()) return id.status();
      return DeleteRequest{*id};
    }
    case wire::Envelope::kContains: {
      auto id = id_of(w.contains().id());
      if (!id.ok()) return id.status();
      return ContainsRequest{*id};
    }
    case wire::Envelope::kContainsReply:
      return ContainsReply{w.contains_reply().sealed()};
    case wire::Envelope::kStoreStats:
      return StoreStatsRequest{};
    case wire::Envelope::kStoreStatsReply:
      return FromWire(w.store_stats_reply());
    case wire::Envelope::kReclaimHint: {
      auto id = id_of(w.reclaim_hint().id());
      if (!id.ok()) return id.status();
      return ReclaimHint{*id};
    }
    case wire::Envelope::kClientHello: {
      const auto& r = w.client_hello();
      if (r.name().size() > limits.max_string_bytes ||
          r.boot_id().size() > 64) {
        return absl::ResourceExhaustedError("client hello fields too long");
      }
      return ClientHello{r.pid(), r.name(), r.boot_id()};
    }
    case wire::Envelope::kClientWelcome: {
      const auto& r = w.client_welcome();
      return ClientWelcome{r.job_id(),         r.local(),
                           r.task_segment(),   r.task_client(),
                           r.store_endpoint(), r.cpus_per_worker(),
                           r.gpus_per_worker()};
    }
    case wire::Envelope::kSubmit: {
      if (static_cast<size_t>(w.submit().tasks_size()) > limits.max_ids) {
        return TooMany("submit", w.submit().tasks_size(), limits.max_ids);
      }
      if (w.submit().tasks_size() == 0)
        return absl::InvalidArgumentError("submit of no tasks");
      SubmitRequest m;
      m.tasks.reserve(w.submit().tasks_size());
      for (const wire::TaskSpec& t : w.submit().tasks()) {
        auto spec = FromWire(t, limits);
        if (!spec.ok()) return spec.status();
        m.tasks.push_back(*std::move(spec));
      }
      return m;
    }
    case wire::Envelope::kSubmitReply: {
      auto ids = TaskIds(w.submit_reply().task_ids(), limits);
      if (!ids.ok()) return ids.status();
      return SubmitReply{*std::move(ids)};
    }
    case wire::Envelope::kWait: {
      auto ids = TaskIds(w.wait().task_ids(), limits);
      if (!ids.ok()) return ids.status();
      return WaitRequest{*std::move(ids), w.wait().timeout_ms(),
                         w.wait().min_done(), w.wait().release()};
    }
    case wire::Envelope::kWaitReply: {
      if (static_cast<size_t>(w.wait_reply().results_size()) > limits.max_ids) {
        return TooMany("wait reply", w.wait_reply().results_size(),
                       limits.max_ids);
      }
      WaitReply m;
      for (const wire::TaskResult& r : w.wait_reply().results()) {
        auto res = FromWire(r, limits);
        if (!res.ok()) return res.status();
        m.results.push_back(*std::move(res));
      }
      return m;
    }
    case wire::Envelope::kCancel: {
      auto ids = TaskIds(w.cancel().task_ids(), limits);
      if (!ids.ok()) return ids.status();
      return CancelRequest{*std::move(ids)};
    }
    case wire::Envelope::kReleaseTasks: {
      auto ids = TaskIds(w.release_tasks().task_ids(), limits);
      if (!ids.ok()) return ids.status();
      return ReleaseTasksRequest{*std::move(ids)};
    }
    case wire::Envelope::kFetchObject: {
      auto id = id_of(w.fetch_object().id());
      if (!id.ok()) return id.status();
      return FetchObjectRequest{*id};
    }
    case wire::Envelope::kFetchObjectReply: {
      wire::Value v;
      *v.mutable_tensor() = w.fetch_object_reply().tensor();
      auto value = FromWire(v);
      if (!value.ok()) return value.status();
      return FetchObjectReply{std::get<TensorValue>(*std::move(value))};
    }
    case wire::Envelope::kWorkerHello: {
      if (static_cast<size_t>(w.worker_hello().functions_size()) >
          limits.max_ids) {
        return TooMany("worker hello", w.worker_hello().functions_size(),
                       limits.max_ids);
      }
      WorkerHello m{w.worker_hello().worker_id(), w.worker_hello().pid(), {}};
      m.functions.assign(w.worker_hello().functions().begin(),
                         w.worker_hello().functions().end());
      return m;
    }
    case wire::Envelope::kWorkerHeartbeat:
      return WorkerHeartbeat{w.worker_heartbeat().worker_id(),
                             w.worker_heartbeat().tasks_done()};
    case wire::Envelope::kStatus:
      return StatusRequest{};
    case wire::Envelope::kNodeStatus: {
      const auto& r = w.node_status();
      NodeStatus m;
      m.job_id = r.job_id();
      m.coordinator_pid = r.coordinator_pid();
      m.uptime_ms = r.uptime_ms();
      for (const wire::WorkerStatus& ws : r.workers()) {
        m.workers.push_back(WorkerStatus{
            ws.id(), ws.pid(), ws.gpus(), ws.state(), ws.tasks_done(),
            ws.tasks_failed(), ws.restarts(), ws.rss_bytes(), ws.last_exit()});
      }
      m.queued = r.queued();
      m.running = r.running();
      m.submitted = r.submitted();
      m.completed = r.completed();
      m.store = FromWire(r.store());
      m.frontend = r.frontend();
      m.results_held = r.results_held();
      return m;
    }
    case wire::Envelope::kStop:
      return StopRequest{};
    case wire::Envelope::kKvSet: {
      if (w.kv_set().key().size() > limits.max_string_bytes)
        return KeyTooLong();
      return KvSetRequest{w.kv_set().key(), w.kv_set().value()};
    }
    case wire::Envelope::kKvGet: {
      if (w.kv_get().key().size() > limits.max_string_bytes)
        return KeyTooLong();
      return KvGetRequest{w.kv_get().key(), w.kv_get().timeout_ms()};
    }
    case wire::Envelope::kKvValue:
      return KvValue{w.kv_value().found(), w.kv_value().value(),
                     w.kv_value().count()};
    case wire::Envelope::kKvAdd: {
      if (w.kv_add().key().size() > limits.max_string_bytes)
        return KeyTooLong();
      return KvAddRequest{w.kv_add().key(), w.kv_add().delta()};
    }
    case wire::Envelope::kKvCas: {
      const auto& r = w.kv_cas();
      if (r.key().size() > limits.max_string_bytes) return KeyTooLong();
      return KvCompareAndSetRequest{r.key(), r.expected(), r.desired(),
                                    r.expect_absent()};
    }
    case wire::Envelope::kKvDelete:
      return KvDeleteRequest{w.kv_delete().key(), w.kv_delete().prefix()};
    case wire::Envelope::kKvList:
      return KvListRequest{w.kv_list().prefix()};
    case wire::Envelope::kKvListReply: {
      const auto& r = w.kv_list_reply();
      if (r.keys_size() != r.values_size()) {
        return absl::InvalidArgumentError(
            "kv list reply with mismatched keys and values");
      }
      KvListReply m;
      for (int i = 0; i < r.keys_size(); ++i)
        m.entries.emplace_back(r.keys(i), r.values(i));
      return m;
    }
    case wire::Envelope::kKvWait: {
      if (static_cast<size_t>(w.kv_wait().keys_size()) > limits.max_ids) {
        return TooMany("kv wait", w.kv_wait().keys_size(), limits.max_ids);
      }
      KvWaitRequest m;
      for (const std::string& k : w.kv_wait().keys()) {
        if (k.size() > limits.max_string_bytes) return KeyTooLong();
        m.keys.push_back(k);
      }
      m.timeout_ms = w.kv_wait().timeout_ms();
      return m;
    }
    case wire::Envelope::kBarrier: {
      if (w.barrier().name().size() > limits.max_string_bytes)
        return KeyTooLong();
      if (w.barrier().world() == 0)
        return absl::InvalidArgumentError("a barrier of 0 processes");
      return BarrierRequest{w.barrier().name(), w.barrier().world(),
                            w.barrier().timeout_ms()};
    }
    case wire::Envelope::BODY_NOT_SET:
      break;
  }
  return absl::InvalidArgumentError("message has no body (or an unknown one)");
}

}  // namespace

absl::StatusOr<std::string> Encode(const Envelope& envelope) {
  wire::Envelope w;
  w.set_major(kProtocolMajor);
  w.set_minor(kProtocolMinor);
  w.set_request_id(envelope.request_id);
  absl::Status s = BodyToWire(envelope.body, &w);
  if (!s.ok()) return s;
  std::string out;
  if (!w.SerializeToString(&out))
    return absl::InternalError("protobuf serialisation failed");
  return out;
}

absl::StatusOr<std::string> Encode(uint64_t request_id, Message body) {
  return Encode(Envelope{request_id, std::move(body)});
}

std::string EncodeError(uint64_t request_id, const absl::Status& status) {
  absl::StatusOr<std::string> frame = Encode(
      request_id, ErrorReply{status.ok() ? absl::InternalError(
                                               "error reply without an error")
                                         : status});
  if (frame.ok()) return *std::move(frame);
  wire::Envelope w;
  w.set_major(kProtocolMajor);
  w.set_minor(kProtocolMinor);
  w.set_request_id(request_id);
  w.mutable_error()->set_code(
      static_cast<int32_t>(absl::StatusCode::kInternal));
  w.mutable_error()->set_message("failed to encode an error reply");
  return w.SerializeAsString();
}

DecodeResult Decode(absl::string_view frame, const DecodeLimits& limits) {
  DecodeResult result;
  if (frame.size() > limits.max_frame_bytes) {
    result.envelope = absl::ResourceExhaustedError(
        absl::StrCat("frame of ", frame.size(), " bytes exceeds the limit of ",
                     limits.max_frame_bytes));
    return result;
  }
  wire::Envelope w;
  if (!w.ParseFromArray(frame.data(), static_cast<int>(frame.size()))) {
    result.envelope = absl::InvalidArgumentError(absl::StrCat(
        "frame of ", frame.size(), " bytes is not a shoal message"));
    return result;
  }
  result.request_id = w.request_id();
  if (w.major() != kProtocolMajor) {
    result.envelope = absl::FailedPreconditionError(
        absl::StrCat("protocol version mismatch: peer speaks ", w.major(), ".",
                     w.minor(), ", this side speaks ", kProtocolMajor, ".",
                     kProtocolMinor, "; use matching shoal builds"));
    return result;
  }
  absl::StatusOr<Message> body = BodyFromWire(w, limits);
  if (!body.ok()) {
    result.envelope = body.status();
    return result;
  }
  result.envelope = Envelope{w.request_id(), *std::move(body)};
  return result;
}

absl::string_view MessageName(const Message& m) {
  static constexpr absl::string_view kNames[] = {"error",
                                                 "ok",
                                                 "store_connect",
                                                 "store_connect_reply",
                                                 "store_disconnect",
                                                 "create",
                                                 "create_reply",
                                                 "sealed",
                                                 "abort",
                                                 "get",
                                                 "get_reply",
                                                 "release",
                                                 "delete",
                                                 "contains",
                                                 "contains_reply",
                                                 "store_stats",
                                                 "store_stats_reply",
                                                 "reclaim_hint",
                                                 "client_hello",
                                                 "client_welcome",
                                                 "submit",
                                                 "submit_reply",
                                                 "wait",
                                                 "wait_reply",
                                                 "cancel",
                                                 "release_tasks",
                                                 "fetch_object",
                                                 "fetch_object_reply",
                                                 "worker_hello",
                                                 "worker_heartbeat",
                                                 "status",
                                                 "node_status",
                                                 "stop",
                                                 "kv_set",
                                                 "kv_get",
                                                 "kv_value",
                                                 "kv_add",
                                                 "kv_cas",
                                                 "kv_delete",
                                                 "kv_list",
                                                 "kv_list_reply",
                                                 "kv_wait",
                                                 "barrier"};
  static_assert(std::size(kNames) == std::variant_size_v<Message>);
  return kNames[m.index()];
}

}  // namespace shoal::ipc
