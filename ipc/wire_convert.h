// Internal to ipc/: conversions between the C++ value types and the generated
// protobuf messages. Only protocol*.cc and task_payload.cc include it.
#ifndef SHOAL_IPC_WIRE_CONVERT_H_
#define SHOAL_IPC_WIRE_CONVERT_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "ipc/messages.h"
#include "ipc/protocol.h"
#include "ipc/value.h"
#include "proto/shoal.pb.h"

namespace shoal::ipc {

void ToWire(const TensorMeta& m, wire::TensorMetaSpec* out);
absl::StatusOr<TensorMeta> FromWire(const wire::TensorMetaSpec& w);

void ToWire(const Value& v, wire::Value* out);
// Errors: InvalidArgument (bad tensor metadata, an inline tensor whose data
// does not match its metadata, a bad object id).
absl::StatusOr<Value> FromWire(const wire::Value& w);

void ToWire(const TaskSpec& t, wire::TaskSpec* out);
absl::StatusOr<TaskSpec> FromWire(const wire::TaskSpec& w,
                                  const DecodeLimits& limits);

void ToWire(const TaskException& e, wire::TaskException* out);
TaskException FromWire(const wire::TaskException& w);

void ToWire(const TaskResult& r, wire::TaskResult* out);
absl::StatusOr<TaskResult> FromWire(const wire::TaskResult& w,
                                    const DecodeLimits& limits);

// A status from a wire code and message. Returns false (leaving `out`
// untouched) for a code that is not an absl::StatusCode. (Not a
// StatusOr<Status>: constructing one from an error Status makes a *value*.)
bool StatusFromWire(int32_t code, const std::string& message,
                    absl::Status* out);
bool ValidStatusCode(int32_t code);

}  // namespace shoal::ipc

#endif  // SHOAL_IPC_WIRE_CONVERT_H_
