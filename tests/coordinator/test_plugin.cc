// Task functions for the coordinator tests, loaded with --plugin. Also shows
// how a plugin is written: include worker/task.h, register with SHOAL_TASK,
// link nothing of shoal (the worker binary provides it).
#include <signal.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>

#include "absl/time/clock.h"
#include "worker/task.h"

namespace {

// getenv(name) → its value ("" if unset).
absl::Status GetEnv(shoal::worker::TaskContext& ctx) {
  SHOAL_ASSIGN_OR_RETURN(std::string name, ctx.StringArg(0));
  const char* v = std::getenv(name.c_str());
  ctx.AddOutput(std::string(v ? v : ""));
  return absl::OkStatus();
}

// pid() → the worker's pid.
absl::Status Pid(shoal::worker::TaskContext& ctx) {
  ctx.AddOutput(static_cast<int64_t>(getpid()));
  return absl::OkStatus();
}

// hang(seconds): busy for `seconds`, ignoring cancellation.
absl::Status Hang(shoal::worker::TaskContext& ctx) {
  SHOAL_ASSIGN_OR_RETURN(double seconds, ctx.FloatArg(0));
  const absl::Time until = absl::Now() + absl::Seconds(seconds);
  while (absl::Now() < until) absl::SleepFor(absl::Milliseconds(5));
  return absl::OkStatus();
}

// crash_once(path): the first run (no file at path) creates it and aborts;
// later runs return "survived" and the attempt number.
absl::Status CrashOnce(shoal::worker::TaskContext& ctx) {
  SHOAL_ASSIGN_OR_RETURN(std::string path, ctx.StringArg(0));
  if (access(path.c_str(), F_OK) != 0) {
    std::ofstream(path) << "crashed\n";
    std::abort();
  }
  ctx.AddOutput(std::string("survived"));
  ctx.AddOutput(static_cast<int64_t>(ctx.attempt()));
  return absl::OkStatus();
}

// signal_me(path, seconds): writes the worker's pid to `path`, then sleeps
// (so a test can kill the worker mid-task); on a retry it returns at once.
absl::Status SignalMe(shoal::worker::TaskContext& ctx) {
  SHOAL_ASSIGN_OR_RETURN(std::string path, ctx.StringArg(0));
  SHOAL_ASSIGN_OR_RETURN(double seconds, ctx.FloatArg(1));
  if (ctx.attempt() == 1) {
    std::ofstream(path + ".tmp") << getpid() << "\n";
    rename((path + ".tmp").c_str(), path.c_str());
    const absl::Time until = absl::Now() + absl::Seconds(seconds);
    while (absl::Now() < until && !ctx.cancelled())
      absl::SleepFor(absl::Milliseconds(5));
  }
  ctx.AddOutput(static_cast<int64_t>(ctx.attempt()));
  return absl::OkStatus();
}

// fail_with(message): fails with Internal and `message` as it is (the CLI
// tests print it, newlines and quotes included).
absl::Status FailWith(shoal::worker::TaskContext& ctx) {
  SHOAL_ASSIGN_OR_RETURN(std::string message, ctx.StringArg(0));
  return absl::InternalError(message);
}

}  // namespace

SHOAL_TASK("getenv", GetEnv);
SHOAL_TASK("pid", Pid);
SHOAL_TASK("hang", Hang);
SHOAL_TASK("crash_once", CrashOnce);
SHOAL_TASK("signal_me", SignalMe);
SHOAL_TASK("fail_with", FailWith);
