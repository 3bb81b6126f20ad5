// A task's name: which runner runs it, what it runs, and for which actor.
// This header is the one definition of the form in C++, and ParseTaskName
// its one reader; python/shoal/_naming.py is the Python side's.
//
//   name     := function [ "@actor=" id ] [ "!" ]
//   function := native                   a C++ task function (SHOAL_TASK,
//                                        plugins, built-ins), looked up by
//                                        the whole string
//             | "py:" module ":" qualname   a Python function by import
//                                        ("py:pkg.mod:Class.method")
//             | "py:=" 32 hex            a Python function by value: the
//                                        store object with that id holds its
//                                        pickle (local clients)
//             | "py:#" 32 hex            a Python function by value inside
//                                        the call, named by the blake2b-128
//                                        hash of its pickle (remote clients;
//                                        only with "!")
//   id       := 1 to 9 decimal digits, not 0: the call goes to that actor's
//               class in the task table, which only its worker claims
//   "!"      := (Python names only) the call envelope: args[0] is the pickle
//               of (function bytes or None, args, kwargs), args[1:] its
//               out-of-band buffers (worker/python_runner.h)
//
// A name is at most kMaxTaskNameBytes bytes, its actor suffix included.
#ifndef SHOAL_IPC_TASK_NAME_H_
#define SHOAL_IPC_TASK_NAME_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace shoal::ipc {

inline constexpr size_t kMaxTaskNameBytes = 95;
// The prefix of every Python task name.
inline constexpr char kPythonTaskPrefix[] = "py:";
// Between the function and the actor id.
inline constexpr char kActorMarker[] = "@actor=";
// At the end of a Python task name: the call envelope.
inline constexpr char kEnvelopeSuffix[] = "!";

struct TaskName {
  enum class Kind {
    kNative,         // a C++ task function
    kPythonModule,   // "py:module:qualname"
    kPythonStored,   // "py:=<object id>"
    kPythonCarried,  // "py:#<hash>"
  };
  Kind kind = Kind::kNative;
  // The name without "@actor=<id>" and "!": what the runner looks up.
  absl::string_view function;
  absl::string_view module;    // kPythonModule
  absl::string_view qualname;  // kPythonModule
  absl::string_view hex;       // kPythonStored, kPythonCarried: as written
  uint32_t actor = 0;          // 0: an ordinary task
  bool envelope = false;       // "!"

  bool python() const { return kind != Kind::kNative; }
  // A function sent by value (pickled code).
  bool by_value() const {
    return kind == Kind::kPythonStored || kind == Kind::kPythonCarried;
  }
};

// Parses `name`. The result's views point into `name`: REQUIRES `name`
// outlives them. Errors: InvalidArgument naming what is wrong (empty or
// longer than kMaxTaskNameBytes, a Python name of another shape, an actor
// suffix without a valid id, "py:#" without "!").
absl::StatusOr<TaskName> ParseTaskName(absl::string_view name);

// The actor `name` is addressed to, or 0 for an ordinary task (or a name
// that does not parse).
uint32_t ActorOfTaskName(absl::string_view name);
// `name` without its "@actor=<id>" (a "!" after it stays): what an actor's
// worker runs. A name that does not parse comes back whole.
std::string TaskNameWithoutActor(absl::string_view name);
// `function` addressed to actor `actor` (a "!" at its end stays last).
std::string ActorTaskName(absl::string_view function, uint32_t actor);

}  // namespace shoal::ipc

#endif  // SHOAL_IPC_TASK_NAME_H_
