#include "ipc/task_payload.h"

#include <cstring>

#include "ipc/wire_convert.h"

namespace shoal::ipc {
namespace {

// Compact payloads beside the schema's messages, for the commonest cases on a
// sync task's critical path: a 0x00 first byte (protobuf has no field 0, so
// never the first byte of a TaskArgs or TaskOutcomeBody) and a kind byte.
// They stay in the node's task table; the decoders read both forms.
constexpr char kCompact = '\0';

// Arguments: no argument ('n') or one bytes argument ('y': a Python task's
// pickled call), then the python path's length (4 bytes, little-endian), the
// path, and the argument's bytes to the end.
bool EncodeCompactArgs(absl::Span<const Value> args,
                       absl::string_view python_path, std::string* out) {
  const BytesValue* arg = nullptr;
  if (args.size() > 1) return false;
  if (args.size() == 1) {
    arg = std::get_if<BytesValue>(&args[0]);
    if (arg == nullptr) return false;
  }
  const uint64_t n = python_path.size();
  if (n > UINT32_MAX) return false;
  out->reserve(6 + n + (arg ? arg->data.size() : 0));
  out->assign({kCompact, arg ? 'y' : 'n'});
  for (int i = 0; i < 4; ++i) out->push_back(static_cast<char>(n >> (8 * i)));
  out->append(python_path.data(), python_path.size());
  if (arg) out->append(arg->data);
  return true;
}

absl::StatusOr<TaskArgsBody> DecodeCompactArgs(absl::string_view bytes) {
  auto bad = [] {
    return absl::InvalidArgumentError("compact task arguments are malformed");
  };
  if (bytes.size() < 6 || (bytes[1] != 'n' && bytes[1] != 'y')) return bad();
  uint64_t n = 0;
  for (int i = 3; i >= 0; --i)
    n = (n << 8) | static_cast<uint8_t>(bytes[2 + i]);
  const absl::string_view rest = bytes.substr(6);
  if (n > rest.size() || (bytes[1] == 'n' && n != rest.size())) return bad();
  TaskArgsBody out;
  out.python_path = std::string(rest.substr(0, n));
  if (bytes[1] == 'y')
    out.args.push_back(BytesValue{std::string(rest.substr(n))});
  return out;
}

}  // namespace

std::string EncodeTaskArgs(absl::Span<const Value> args,
                           absl::string_view python_path) {
  if (args.empty() && python_path.empty()) return "";
  std::string compact;
  if (EncodeCompactArgs(args, python_path, &compact)) return compact;
  wire::TaskArgs w;
  for (const Value& v : args) ToWire(v, w.add_args());
  if (!python_path.empty()) w.set_python_path(std::string(python_path));
  return w.SerializeAsString();
}

absl::StatusOr<TaskArgsBody> DecodeTaskArgsBody(absl::string_view bytes) {
  if (!bytes.empty() && bytes[0] == kCompact) return DecodeCompactArgs(bytes);
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

// Outcome: one scalar output and nothing else (see kCompact): 'i' an int64
// and 'f' a double as 8 little-endian bytes, 'b' one byte 0/1, 's' text and
// 'y' bytes to the end.

bool EncodeCompactOutcome(const Value& v, std::string* out) {
  auto fixed = [out](char kind, uint64_t bits) {
    out->assign({kCompact, kind});
    for (int i = 0; i < 8; ++i)
      out->push_back(static_cast<char>(bits >> (8 * i)));
    return true;
  };
  auto sized = [out](char kind, const std::string& data) {
    out->reserve(2 + data.size());
    out->assign({kCompact, kind});
    out->append(data);
    return true;
  };
  if (const auto* i = std::get_if<int64_t>(&v))
    return fixed('i', static_cast<uint64_t>(*i));
  if (const auto* d = std::get_if<double>(&v)) {
    uint64_t bits;
    std::memcpy(&bits, d, sizeof(bits));
    return fixed('f', bits);
  }
  if (const auto* b = std::get_if<bool>(&v)) {
    out->assign({kCompact, 'b', static_cast<char>(*b ? 1 : 0)});
    return true;
  }
  if (const auto* s = std::get_if<std::string>(&v)) return sized('s', *s);
  if (const auto* y = std::get_if<BytesValue>(&v)) return sized('y', y->data);
  return false;
}

absl::StatusOr<TaskOutcomeBody> DecodeCompactOutcome(absl::string_view bytes) {
  TaskOutcomeBody out;
  auto bad = [] {
    return absl::InvalidArgumentError("a compact task outcome is malformed");
  };
  if (bytes.size() < 2) return bad();
  const char kind = bytes[1];
  const absl::string_view rest = bytes.substr(2);
  uint64_t bits = 0;
  if (kind == 'i' || kind == 'f') {
    if (rest.size() != 8) return bad();
    for (int i = 7; i >= 0; --i)
      bits = (bits << 8) | static_cast<uint8_t>(rest[static_cast<size_t>(i)]);
  }
  switch (kind) {
    case 'i':
      out.outputs.push_back(static_cast<int64_t>(bits));
      break;
    case 'f': {
      double d;
      std::memcpy(&d, &bits, sizeof(d));
      out.outputs.push_back(d);
      break;
    }
    case 'b':
      if (rest.size() != 1 || static_cast<uint8_t>(rest[0]) > 1) return bad();
      out.outputs.push_back(rest[0] == 1);
      break;
    case 's':
      out.outputs.push_back(std::string(rest));
      break;
    case 'y':
      out.outputs.push_back(BytesValue{std::string(rest)});
      break;
    default:
      return bad();
  }
  return out;
}

}  // namespace

std::string EncodeTaskOutcome(absl::string_view message,
                              absl::Span<const Value> outputs,
                              const std::optional<TaskException>& exception) {
  if (message.empty() && outputs.empty() && !exception) return "";
  std::string compact;
  if (message.empty() && !exception && outputs.size() == 1 &&
      EncodeCompactOutcome(outputs[0], &compact)) {
    return compact;
  }
  wire::TaskOutcomeBody w;
  w.set_message(std::string(message));
  for (const Value& v : outputs) ToWire(v, w.add_outputs());
  if (exception) ToWire(*exception, w.mutable_exception());
  return w.SerializeAsString();
}

absl::StatusOr<TaskOutcomeBody> DecodeTaskOutcome(absl::string_view bytes) {
  if (!bytes.empty() && bytes[0] == kCompact)
    return DecodeCompactOutcome(bytes);
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
