#include "ipc/task_payload.h"

#include "ipc/wire_convert.h"

namespace shoal::ipc {

std::string EncodeTaskArgs(absl::Span<const Value> args) {
  if (args.empty()) return "";
  wire::TaskArgs w;
  for (const Value& v : args) ToWire(v, w.add_args());
  return w.SerializeAsString();
}

absl::StatusOr<std::vector<Value>> DecodeTaskArgs(absl::string_view bytes) {
  std::vector<Value> out;
  if (bytes.empty()) return out;
  wire::TaskArgs w;
  if (!w.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
    return absl::InvalidArgumentError(
        "task arguments are not a TaskArgs message");
  }
  out.reserve(w.args_size());
  for (const wire::Value& a : w.args()) {
    auto v = FromWire(a);
    if (!v.ok()) return v.status();
    out.push_back(*std::move(v));
  }
  return out;
}

std::string EncodeTaskOutcome(absl::string_view message,
                              absl::Span<const Value> outputs) {
  if (message.empty() && outputs.empty()) return "";
  wire::TaskOutcomeBody w;
  w.set_message(std::string(message));
  for (const Value& v : outputs) ToWire(v, w.add_outputs());
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
  return out;
}

}  // namespace shoal::ipc
