#include "ipc/task_name.h"

#include "absl/algorithm/container.h"
#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace shoal::ipc {
namespace {

constexpr size_t kHashHexDigits = 32;
constexpr size_t kMaxActorDigits = 9;

bool AllHex(absl::string_view s) {
  for (char c : s) {
    if (!absl::ascii_isxdigit(static_cast<unsigned char>(c))) return false;
  }
  return true;
}

// Takes "@actor=<id>" off the end of `rest` into `actor`. Errors: a marker
// without 1-9 digits of a non-zero id after it.
absl::Status ConsumeActor(absl::string_view whole, absl::string_view* rest,
                          uint32_t* actor) {
  const size_t at = rest->rfind(kActorMarker);
  if (at == absl::string_view::npos) return absl::OkStatus();
  const absl::string_view digits = rest->substr(at + sizeof(kActorMarker) - 1);
  if (digits.empty() || digits.size() > kMaxActorDigits ||
      !absl::c_all_of(digits, absl::ascii_isdigit) ||
      !absl::SimpleAtoi(digits, actor) || *actor == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", whole, "' names no actor: ", kActorMarker,
                     " takes an id of 1-9 digits at the end of the name"));
  }
  *rest = rest->substr(0, at);
  return absl::OkStatus();
}

absl::Status NotPython(absl::string_view whole) {
  return absl::InvalidArgumentError(absl::StrCat(
      "'", whole,
      "' is not a Python task name: use py:package.module:function"));
}

}  // namespace

absl::StatusOr<TaskName> ParseTaskName(absl::string_view name) {
  if (name.empty() || name.size() > kMaxTaskNameBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("a task name takes 1-", kMaxTaskNameBytes, " bytes; '",
                     name, "' has ", name.size()));
  }
  TaskName n;
  absl::string_view rest = name;
  if (!absl::StartsWith(rest, kPythonTaskPrefix)) {
    if (absl::Status s = ConsumeActor(name, &rest, &n.actor); !s.ok()) return s;
    if (rest.empty()) return absl::InvalidArgumentError("an empty task name");
    n.function = rest;
    return n;
  }
  n.envelope = absl::ConsumeSuffix(&rest, kEnvelopeSuffix);
  if (absl::Status s = ConsumeActor(name, &rest, &n.actor); !s.ok()) return s;
  n.function = rest;
  absl::ConsumePrefix(&rest, kPythonTaskPrefix);
  if (absl::ConsumePrefix(&rest, "=") || absl::ConsumePrefix(&rest, "#")) {
    n.kind = rest.data()[-1] == '=' ? TaskName::Kind::kPythonStored
                                    : TaskName::Kind::kPythonCarried;
    if (rest.size() != kHashHexDigits || !AllHex(rest) ||
        (n.kind == TaskName::Kind::kPythonCarried && !n.envelope)) {
      return NotPython(name);
    }
    n.hex = rest;
    return n;
  }
  // module ":" qualname, neither empty, one colon (no allocation: every
  // submitted task is parsed).
  const size_t colon = rest.find(':');
  if (colon == absl::string_view::npos || colon == 0 ||
      colon + 1 == rest.size() ||
      rest.find(':', colon + 1) != absl::string_view::npos) {
    return NotPython(name);
  }
  n.kind = TaskName::Kind::kPythonModule;
  n.module = rest.substr(0, colon);
  n.qualname = rest.substr(colon + 1);
  return n;
}

uint32_t ActorOfTaskName(absl::string_view name) {
  absl::StatusOr<TaskName> n = ParseTaskName(name);
  return n.ok() ? n->actor : 0;
}

std::string TaskNameWithoutActor(absl::string_view name) {
  absl::StatusOr<TaskName> n = ParseTaskName(name);
  if (!n.ok() || n->actor == 0) return std::string(name);
  return absl::StrCat(n->function, n->envelope ? kEnvelopeSuffix : "");
}

std::string ActorTaskName(absl::string_view function, uint32_t actor) {
  const bool envelope = absl::StartsWith(function, kPythonTaskPrefix) &&
                        absl::ConsumeSuffix(&function, kEnvelopeSuffix);
  return absl::StrCat(function, kActorMarker, actor,
                      envelope ? kEnvelopeSuffix : "");
}

}  // namespace shoal::ipc
