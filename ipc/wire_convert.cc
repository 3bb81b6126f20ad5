#include "ipc/wire_convert.h"

#include "absl/strings/str_cat.h"
#include "base/overloaded.h"

namespace shoal::ipc {

bool ValidStatusCode(int32_t code) {
  return code > 0 &&
         code <= static_cast<int32_t>(absl::StatusCode::kUnauthenticated);
}

bool StatusFromWire(int32_t code, const std::string& message,
                    absl::Status* out) {
  if (code == 0) {
    *out = absl::OkStatus();
    return true;
  }
  if (!ValidStatusCode(code)) return false;
  *out = absl::Status(static_cast<absl::StatusCode>(code), message);
  return true;
}

void ToWire(const TensorMeta& m, wire::TensorMetaSpec* out) {
  out->set_dtype(static_cast<uint32_t>(m.dtype));
  for (int64_t d : m.shape) out->add_shape(d);
  for (int64_t s : m.strides) out->add_strides(s);
  out->mutable_device()->set_type(static_cast<uint32_t>(m.device.type));
  out->mutable_device()->set_index(m.device.index);
}

absl::StatusOr<TensorMeta> FromWire(const wire::TensorMetaSpec& w) {
  if (!IsValidDType(w.dtype())) {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown dtype value ", w.dtype()));
  }
  if (w.shape_size() > kMaxRank || w.strides_size() > kMaxRank) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor rank ", std::max(w.shape_size(), w.strides_size()),
                     " exceeds the maximum of ", kMaxRank));
  }
  if (w.device().type() > 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown device type ", w.device().type()));
  }
  TensorMeta m;
  m.dtype = static_cast<DType>(w.dtype());
  m.shape.assign(w.shape().begin(), w.shape().end());
  m.strides.assign(w.strides().begin(), w.strides().end());
  m.device.type = static_cast<Device::Type>(w.device().type());
  m.device.index = w.device().index();
  absl::Status s = m.Validate();
  if (!s.ok()) return s;
  return m;
}

void ToWire(const Value& v, wire::Value* out) {
  std::visit(Overloaded{
                 [&](std::monostate) {},
                 [&](bool b) { out->set_b(b); },
                 [&](int64_t i) { out->set_i(i); },
                 [&](double d) { out->set_f(d); },
                 [&](const std::string& s) { out->set_s(s); },
                 [&](const BytesValue& b) { out->set_raw(b.data); },
                 [&](const TensorValue& t) {
                   ToWire(t.meta, out->mutable_tensor()->mutable_meta());
                   out->mutable_tensor()->set_data(t.data);
                 },
                 [&](const ObjectValue& o) {
                   out->mutable_object()->set_id(std::string(o.id.Binary()));
                   ToWire(o.meta, out->mutable_object()->mutable_meta());
                   out->mutable_object()->set_nbytes(o.nbytes);
                 },
             },
             v);
}

absl::StatusOr<Value> FromWire(const wire::Value& w) {
  switch (w.kind_case()) {
    case wire::Value::KIND_NOT_SET:
      return Value();
    case wire::Value::kB:
      return Value(w.b());
    case wire::Value::kI:
      return Value(w.i());
    case wire::Value::kF:
      return Value(w.f());
    case wire::Value::kS:
      return Value(w.s());
    case wire::Value::kRaw:
      return Value(BytesValue{w.raw()});
    case wire::Value::kTensor: {
      auto meta = FromWire(w.tensor().meta());
      if (!meta.ok()) return meta.status();
      if (static_cast<int64_t>(w.tensor().data().size()) != meta->NumBytes()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "inline tensor ", meta->ToString(), " needs ", meta->NumBytes(),
            " bytes, got ", w.tensor().data().size()));
      }
      return Value(TensorValue{*std::move(meta), w.tensor().data()});
    }
    case wire::Value::kObject: {
      auto id = ObjectId::FromBinary(w.object().id());
      if (!id.ok()) return id.status();
      auto meta = FromWire(w.object().meta());
      if (!meta.ok()) return meta.status();
      return Value(ObjectValue{*id, *std::move(meta), w.object().nbytes()});
    }
  }
  return absl::InvalidArgumentError("unknown value kind");
}

void ToWire(const TaskSpec& t, wire::TaskSpec* out) {
  out->set_function(t.function);
  for (const Value& v : t.args) ToWire(v, out->add_args());
  out->mutable_resources()->set_cpus(t.resources.cpus);
  out->mutable_resources()->set_gpus(t.resources.gpus);
  out->set_timeout_ms(t.timeout_ms);
  out->set_max_retries(t.max_retries);
  if (!t.python_path.empty()) out->set_python_path(t.python_path);
}

absl::StatusOr<TaskSpec> FromWire(const wire::TaskSpec& w,
                                  const DecodeLimits& limits) {
  if (w.function().empty() || w.function().size() > 95) {
    return absl::InvalidArgumentError(
        absl::StrCat("a task's function name must be 1-95 bytes, got ",
                     w.function().size()));
  }
  if (static_cast<size_t>(w.args_size()) > limits.max_ids) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "a task with ", w.args_size(), " arguments exceeds the limit"));
  }
  TaskSpec t;
  t.function = w.function();
  for (const wire::Value& a : w.args()) {
    auto v = FromWire(a);
    if (!v.ok()) return v.status();
    t.args.push_back(*std::move(v));
  }
  t.resources.cpus = std::max<uint32_t>(1, w.resources().cpus());
  t.resources.gpus = w.resources().gpus();
  if (t.resources.cpus > 4096 || t.resources.gpus > 4096) {
    return absl::InvalidArgumentError("implausible resource request");
  }
  t.timeout_ms = w.timeout_ms();
  if (t.timeout_ms < 0 || t.timeout_ms > kMaxTimeoutMs) {
    return absl::InvalidArgumentError(
        absl::StrCat("a task's timeout_ms ", t.timeout_ms,
                     " is out of range [0, ", kMaxTimeoutMs,
                     "] (0: none; the most is about ten years)"));
  }
  t.max_retries = w.max_retries();
  if (t.max_retries < -1 || t.max_retries > 1000) {
    return absl::InvalidArgumentError(absl::StrCat(
        "max_retries ", t.max_retries, " out of range [-1, 1000]"));
  }
  if (w.python_path().size() > kMaxPythonPathBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a task's python_path must be at most ", kMaxPythonPathBytes,
        " bytes, got ", w.python_path().size()));
  }
  t.python_path = w.python_path();
  return t;
}

void ToWire(const TaskException& e, wire::TaskException* out) {
  out->set_type(e.type);
  out->set_message(e.message);
  out->set_traceback(e.traceback);
  out->set_pickled(e.pickled);
}

TaskException FromWire(const wire::TaskException& w) {
  return TaskException{w.type(), w.message(), w.traceback(), w.pickled()};
}

void ToWire(const TaskResult& r, wire::TaskResult* out) {
  out->set_task_id(r.task_id);
  out->set_code(static_cast<int32_t>(r.status.code()));
  out->set_message(std::string(r.status.message()));
  for (const Value& v : r.outputs) ToWire(v, out->add_outputs());
  out->set_attempts(r.attempts);
  if (r.exception) ToWire(*r.exception, out->mutable_exception());
}

absl::StatusOr<TaskResult> FromWire(const wire::TaskResult& w,
                                    const DecodeLimits& limits) {
  TaskResult r;
  r.task_id = w.task_id();
  if (!StatusFromWire(w.code(), w.message(), &r.status)) {
    return absl::InvalidArgumentError(
        absl::StrCat("invalid status code ", w.code()));
  }
  if (static_cast<size_t>(w.outputs_size()) > limits.max_ids) {
    return absl::ResourceExhaustedError("a result with too many outputs");
  }
  for (const wire::Value& o : w.outputs()) {
    auto v = FromWire(o);
    if (!v.ok()) return v.status();
    r.outputs.push_back(*std::move(v));
  }
  r.attempts = w.attempts();
  if (w.has_exception()) r.exception = FromWire(w.exception());
  return r;
}

}  // namespace shoal::ipc
