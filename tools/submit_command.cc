// `shoal submit FUNCTION ARGS...`: runs one task on a node and prints its
// outputs.
//
// Arguments: 3 (int), 2.5 (float), true/false, str:TEXT, bytes:TEXT,
// f32:1,2,3 (also f64, i32, i64: a 1-D tensor), obj:HEX (a store object).
#include <cstdio>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "coordinator/client.h"
#include "proto/cli.pb.h"
#include "tools/cli/args.h"
#include "tools/cli/json.h"
#include "tools/commands.h"

namespace shoal::cli {
namespace {

template <typename T>
absl::StatusOr<Value> ParseList(absl::string_view list, DType dtype) {
  std::string data;
  int64_t n = 0;
  for (absl::string_view item : absl::StrSplit(list, ',', absl::SkipEmpty())) {
    double d;
    if (!absl::SimpleAtod(item, &d)) {
      return absl::InvalidArgumentError(
          absl::StrCat("'", item, "' is not a number"));
    }
    const T v = static_cast<T>(d);
    data.append(reinterpret_cast<const char*>(&v), sizeof(T));
    ++n;
  }
  return Value(
      TensorValue{TensorMeta::Contiguous(dtype, {n}), std::move(data)});
}

absl::StatusOr<Value> ParseArg(absl::string_view a,
                               coordinator::Client& client) {
  int64_t i;
  double d;
  if (absl::SimpleAtoi(a, &i)) return Value(i);
  if (absl::SimpleAtod(a, &d)) return Value(d);
  if (a == "true" || a == "false") return Value(a == "true");
  if (absl::ConsumePrefix(&a, "str:")) return Value(std::string(a));
  if (absl::ConsumePrefix(&a, "bytes:"))
    return Value(BytesValue{std::string(a)});
  if (absl::ConsumePrefix(&a, "f32:")) return ParseList<float>(a, DType::kF32);
  if (absl::ConsumePrefix(&a, "f64:")) return ParseList<double>(a, DType::kF64);
  if (absl::ConsumePrefix(&a, "i32:"))
    return ParseList<int32_t>(a, DType::kI32);
  if (absl::ConsumePrefix(&a, "i64:"))
    return ParseList<int64_t>(a, DType::kI64);
  if (absl::ConsumePrefix(&a, "obj:")) {
    absl::StatusOr<ObjectId> id = ObjectId::FromHex(a);
    if (!id.ok()) return id.status();
    if (client.store() == nullptr) {
      return absl::FailedPreconditionError(
          "obj: arguments need a client on the node's machine");
    }
    absl::StatusOr<shm::ObjectBuffer> buf = client.store()->Get(*id);
    if (!buf.ok()) return buf.status();
    Value v = ObjectValue{*id, buf->meta, buf->nbytes};
    (void)client.store()->Release(*id);
    return v;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("cannot read argument '", a,
                   "': use 3, 2.5, true, str:TEXT, bytes:TEXT, f32:1,2,3 "
                   "(f64/i32/i64) or obj:HEX"));
}

// `shoal submit`'s flags and positional arguments.
struct SubmitFlags {
  bool json = false;
  absl::Duration timeout;   // zero: none
  absl::Duration wait_for;  // zero: wait forever
  int64_t cpus = 1;
  int64_t gpus = 0;
  int64_t retries = -1;
  std::string job_id;
  std::string endpoint;
  std::vector<std::string> positional;  // FUNCTION ARGS...
};

// Errors: InvalidArgument (a bad flag, no function named); Cancelled after
// --help.
absl::StatusOr<SubmitFlags> ParseSubmitFlags(int argc, char** argv) {
  ArgParser p(
      "shoal submit FUNCTION [ARGS...] [flags]",
      "Runs a task on a node and prints its outputs. Arguments: 3 (int), 2.5\n"
      "(float), true/false, str:TEXT, bytes:TEXT, f32:1,2,3 (also f64, i32, "
      "i64),\n"
      "obj:HEX (a store object). It waits for the result: a task is the\n"
      "client's, and ends with its session when the command exits.");
  bool& json = p.Bool("json", false, "print the result as JSON");
  absl::Duration& timeout =
      p.Duration("timeout", absl::ZeroDuration(),
                 "task timeout: 30 (seconds), 1.5s, 100ms, 2m (0: none)");
  absl::Duration& wait_for =
      p.Duration("wait-timeout", absl::ZeroDuration(),
                 "give up waiting after this long (0: never)");
  int64_t& cpus = p.Int("cpus", 1, "CPUs the task needs");
  int64_t& gpus = p.Int("gpus", 0, "GPUs the task needs");
  int64_t& retries =
      p.Int("retries", -1, "retries if its worker dies (-1: default 3)");
  std::string& job_id =
      p.String("job-id", "", "which node (default: the one started last)");
  std::string& endpoint =
      p.String("endpoint", "", "the coordinator's frontend (tcp://...)");
  if (absl::Status s = p.Parse(argc, argv); !s.ok()) return s;
  if (p.positional().empty()) {
    return absl::InvalidArgumentError(
        "name the function to run: shoal submit FUNCTION ARGS...");
  }
  return SubmitFlags{json,    timeout, wait_for, cpus,          gpus,
                     retries, job_id,  endpoint, p.positional()};
}

// The task the flags and arguments describe (obj: arguments are looked up in
// `client`'s store).
absl::StatusOr<ipc::TaskSpec> TaskSpecFromFlags(const SubmitFlags& f,
                                                coordinator::Client& client) {
  ipc::TaskSpec spec;
  spec.function = f.positional[0];
  for (size_t i = 1; i < f.positional.size(); ++i) {
    absl::StatusOr<Value> v = ParseArg(f.positional[i], client);
    if (!v.ok()) return v.status();
    spec.args.push_back(*std::move(v));
  }
  spec.resources.cpus = static_cast<uint32_t>(f.cpus);
  spec.resources.gpus = static_cast<uint32_t>(f.gpus);
  spec.timeout_ms = absl::ToInt64Milliseconds(f.timeout);
  spec.max_retries = static_cast<int32_t>(f.retries);
  return spec;
}

// One JSON object: the task's id, status, attempts and outputs (as text).
absl::Status PrintResultJson(const ipc::TaskResult& r,
                             const std::vector<std::string>& outs) {
  TaskResultJson j;
  j.set_task_id(r.task_id);
  j.set_code(static_cast<int32_t>(r.status.code()));
  j.set_message(std::string(r.status.message()));
  j.set_attempts(r.attempts);
  for (const std::string& o : outs) j.add_outputs(o);
  return PrintJson(j);
}

// Prints the result (JSON, or the outputs one a line when it succeeded),
// releases its outputs and returns the exit code: 1 if the task failed.
int ReportResult(coordinator::Client& client, const ipc::TaskResult& r,
                 bool json) {
  std::vector<std::string> outs;
  for (const Value& v : r.outputs) outs.push_back(ValueToString(v));
  if (json) {
    if (absl::Status s = PrintResultJson(r, outs); !s.ok()) {
      client.ReleaseOutputs(r);
      return Fail(s);
    }
  } else if (r.status.ok()) {
    for (const std::string& o : outs) std::printf("%s\n", o.c_str());
  }
  client.ReleaseOutputs(r);
  if (!r.status.ok()) {
    if (!json) {
      std::fprintf(stderr, "task failed: %s\n", r.status.ToString().c_str());
    }
    return 1;
  }
  return 0;
}

}  // namespace

int SubmitCommand(int argc, char** argv) {
  absl::StatusOr<SubmitFlags> f = ParseSubmitFlags(argc, argv);
  if (!f.ok()) return Fail(f.status());
  coordinator::ClientOptions co;
  co.job_id = f->job_id;
  co.endpoint = f->endpoint;
  auto client = coordinator::Client::Connect(co);
  if (!client.ok()) return Fail(client.status());
  absl::StatusOr<ipc::TaskSpec> spec = TaskSpecFromFlags(*f, **client);
  if (!spec.ok()) return Fail(spec.status());
  absl::StatusOr<coordinator::TaskRef> task =
      (*client)->Submit(*std::move(spec));
  if (!task.ok()) return Fail(task.status());
  absl::StatusOr<ipc::TaskResult> r = (*client)->Wait(
      *task, f->wait_for > absl::ZeroDuration() ? f->wait_for
                                                : absl::InfiniteDuration());
  if (!r.ok()) return Fail(r.status());
  return ReportResult(**client, *r, f->json);
}

}  // namespace shoal::cli
