// Encodings of a task's arguments and outcome as they sit in the node's task
// table (tasks/task_table.h stores them as opaque bytes). Defined by the schema
// (TaskArgs, TaskOutcomeBody, TaskException in proto/shoal.proto).
#ifndef SHOAL_IPC_TASK_PAYLOAD_H_
#define SHOAL_IPC_TASK_PAYLOAD_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "ipc/messages.h"
#include "ipc/value.h"

namespace shoal::ipc {

// Arguments (and a Python task's module search path) → bytes ("" for none,
// so a no-argument task costs nothing). No argument or one bytes argument (a
// Python task's pickled call) takes a compact form outside the schema
// (task_payload.cc); the arguments stay in the node's task table, and
// DecodeTaskArgs reads both.
std::string EncodeTaskArgs(absl::Span<const Value> args,
                           absl::string_view python_path = "");
// Errors: InvalidArgument for bytes that are not TaskArgs.
absl::StatusOr<std::vector<Value>> DecodeTaskArgs(absl::string_view bytes);

// Everything EncodeTaskArgs encoded.
struct TaskArgsBody {
  std::vector<Value> args;
  std::string python_path;  // ':'-separated; "" none
};
// Errors: InvalidArgument for bytes that are not TaskArgs.
absl::StatusOr<TaskArgsBody> DecodeTaskArgsBody(absl::string_view bytes);

// A task's message (for errors), outputs, and the Python exception that
// failed it (if one did) → bytes ("" for none). One scalar output alone (an
// int, float, bool, text or bytes; the commonest result) takes a compact
// form outside the schema (task_payload.cc); the outcome stays in the node's
// task table, and DecodeTaskOutcome reads both.
std::string EncodeTaskOutcome(
    absl::string_view message, absl::Span<const Value> outputs,
    const std::optional<TaskException>& exception = std::nullopt);
struct TaskOutcomeBody {
  std::string message;
  std::vector<Value> outputs;
  std::optional<TaskException> exception;
};
absl::StatusOr<TaskOutcomeBody> DecodeTaskOutcome(absl::string_view bytes);

// A task runner returns a plain absl::Status (worker/executor.h); a Python
// exception rides on it as a status payload, from the runner that caught it
// to the executor that stores it in the outcome.
absl::Status WithTaskException(absl::Status status,
                               const TaskException& exception);
// The exception WithTaskException attached, if any.
std::optional<TaskException> TaskExceptionOf(const absl::Status& status);

}  // namespace shoal::ipc

#endif  // SHOAL_IPC_TASK_PAYLOAD_H_
