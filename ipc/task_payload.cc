#include "ipc/task_payload.h"

#include "ipc/wire_convert.h"

namespace shoal::ipc {

std::string EncodeTaskArgs(absl::Span<const Value> args,
                           absl::string_view python_path) {
  if (args.empty() && python_path.empty()) return "";
  wire::TaskArgs w;
  for (const Value& v : args) ToWire(v, w.add_args());
  if (!python_path.empty()) w.set_python_path(std::string(python_path));
  return w.SerializeAsString();
}

absl::StatusOr<TaskArgsBody> DecodeTaskArgsBody(absl::string_view bytes) {
  TaskArgsBody out;
  if (bytes.empty()) return out;
  wire::TaskArgs w;
  if (!w.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
    return absl::InvalidArgumentError(
        "task arguments are not a TaskArgs message");
  }
  out.args.reserve(w.args_size());
  for (const wire::Value& a : w.args()) {
    auto v = FromWire(a);
    if (!v.ok()) return v.status();
    out.args.push_back(*std::move(v));
  }
  out.python_path = std::move(*w.mutable_python_path());
  return out;
}

absl::StatusOr<std::vector<Value>> DecodeTaskArgs(absl::string_view bytes) {
  absl::StatusOr<TaskArgsBody> body = DecodeTaskArgsBody(bytes);
  if (!body.ok()) return body.status();
  return std::move(body->args);
}

namespace {

// The status payload's type URL (absl::Status::SetPayload).
constexpr char kTaskExceptionUrl[] =
    "type.googleapis.com/shoal.wire.TaskException";

}  // namespace

std::string EncodeTaskOutcome(absl::string_view message,
                              absl::Span<const Value> outputs,
                              const std::optional<TaskException>& exception) {
  if (message.empty() && outputs.empty() && !exception) return "";
  wire::TaskOutcomeBody w;
  w.set_message(std::string(message));
  for (const Value& v : outputs) ToWire(v, w.add_outputs());
  if (exception) ToWire(*exception, w.mutable_exception());
  return w.SerializeAsString();
}

absl::StatusOr<TaskOutcomeBody> DecodeTaskOutcome(absl::string_view bytes) {
  TaskOutcomeBody out;
  if (bytes.empty()) return out;
  wire::TaskOutcomeBody w;
  if (!w.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
    return absl::InvalidArgumentError(
        "a task outcome is not a TaskOutcomeBody message");
  }
  out.message = w.message();
  for (const wire::Value& o : w.outputs()) {
    auto v = FromWire(o);
    if (!v.ok()) return v.status();
    out.outputs.push_back(*std::move(v));
  }
  if (w.has_exception()) out.exception = FromWire(w.exception());
  return out;
}

absl::Status WithTaskException(absl::Status status,
                               const TaskException& exception) {
  wire::TaskException w;
  ToWire(exception, &w);
  status.SetPayload(kTaskExceptionUrl, absl::Cord(w.SerializeAsString()));
  return status;
}

std::optional<TaskException> TaskExceptionOf(const absl::Status& status) {
  auto payload = status.GetPayload(kTaskExceptionUrl);  // absl::optional
  if (!payload) return std::nullopt;
  wire::TaskException w;
  if (!w.ParseFromString(std::string(*payload))) return std::nullopt;
  return FromWire(w);
}

}  // namespace shoal::ipc
