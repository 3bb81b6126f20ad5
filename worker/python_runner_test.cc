// The Python runner in this test process's own embedded interpreter, with a
// TaskContext that keeps everything in memory (store-object arguments and
// large outputs are covered end to end by python/tests, with real workers).
#include "worker/python_runner.h"

#include <unistd.h>

#include <cstring>
#include <deque>
#include <fstream>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/temp_dir.h"
#include "gtest/gtest.h"
#include "ipc/task_payload.h"
#include "ipc/value.h"

namespace shoal::worker {
namespace {

class MemoryContext : public TaskContext {
 public:
  MemoryContext(std::vector<Value> args, std::string python_path)
      : args_(std::move(args)), python_path_(std::move(python_path)) {}

  size_t num_args() const override { return args_.size(); }
  const Value& arg(size_t i) const override { return args_[i]; }
  absl::StatusOr<TensorView> TensorArg(size_t i) override {
    return absl::UnimplementedError("not used");
  }
  void AddOutput(Value v) override { outputs_.push_back(std::move(v)); }
  absl::StatusOr<MutableTensorView> NewTensorOutput(
      const TensorMeta& meta) override {
    const uint64_t n = static_cast<uint64_t>(meta.NumBytes());
    if (n > kInlineValueLimit)
      return absl::FailedPreconditionError("no store in this test");
    outputs_.push_back(TensorValue{meta, std::string(n, '\0')});
    auto& t = std::get<TensorValue>(outputs_.back());
    return MutableTensorView{meta, reinterpret_cast<uint8_t*>(t.data.data()),
                             n};
  }
  bool cancelled() const override { return false; }
  uint32_t attempt() const override { return 2; }
  uint32_t worker_id() const override { return 7; }
  shm::StoreClient* store() override { return nullptr; }
  absl::string_view python_path() const override { return python_path_; }

  std::deque<Value> outputs_;

 private:
  std::vector<Value> args_;
  std::string python_path_;
};

class PythonRunnerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    // A fresh private folder (mkdtemp): Python imports from it.
    const char* parent = std::getenv("TEST_TMPDIR");
    absl::StatusOr<TempDir> tmp =
        TempDir::Create("pyrunner-", parent != nullptr ? parent : "");
    ASSERT_TRUE(tmp.ok()) << tmp.status();
    tmp_ = new TempDir(*std::move(tmp));
    dir_ = new std::string(tmp_->path());
    std::ofstream(*dir_ + "/runner_tasks.py") << R"PY(
import numpy as np
import _shoal_task

def echo(*args):
    return args

def double(a):
    assert not a.flags.writeable
    return a * 2

def boom(x):
    raise ValueError("bad value %d" % x)

class Custom(Exception):
    pass

def tricky():
    raise Custom("two\nlines\nTraceback (most recent call last):\n  fake")

def returns_list():
    return [1, 2]

def whoami():
    return _shoal_task.attempt(), _shoal_task.worker_id()

def big():
    return np.zeros(1 << 20, dtype=np.uint8)

def strided():
    return np.arange(12, dtype=np.int64).reshape(3, 4)[:, ::2]

def numpy_scalars():
    return np.float32(1.5), np.int64(7), np.bool_(True)

class Holder:
    @staticmethod
    def method(x):
        return x + 1
)PY";
  }

  static void TearDownTestSuite() {
    delete tmp_;
    tmp_ = nullptr;
  }

  absl::Status Run(const std::string& fn, std::vector<Value> args) {
    return RunWithPath(fn, std::move(args), *dir_);
  }
  absl::Status RunWithPath(const std::string& fn, std::vector<Value> args,
                           const std::string& path) {
    ctx_ = std::make_unique<MemoryContext>(std::move(args), path);
    return runner_->Run(fn, *ctx_);
  }

  // A folder under the test's temporary folder holding `files` (name →
  // text); its path.
  static std::string Folder(
      const std::string& name,
      const std::vector<std::pair<std::string, std::string>>& files) {
    const std::string d = absl::StrCat(*dir_, "/", name);
    EXPECT_EQ(system(absl::StrCat("mkdir -p ", d).c_str()), 0);
    for (const auto& [file, text] : files)
      std::ofstream(absl::StrCat(d, "/", file)) << text;
    return d;
  }

  // The probe module, in a folder put into the worker's own sys.path (by a
  // task's code, which the runner leaves alone): it reads sys.path and
  // sys.modules for the test.
  void AddProbe() {
    const std::string probe = Folder("probe", {{"shoal_probe.py", R"PY(
import sys

def syspath():
    return "\n".join(sys.path)

def module_file(name):
    m = sys.modules.get(name)
    return "(not imported)" if m is None else str(getattr(m, "__file__", ""))
)PY"}});
    absl::Status s = RunWithPath("py:sys:path.append", {probe}, "");
    ASSERT_TRUE(s.ok()) << s;
  }
  std::string Probe(const std::string& fn, std::vector<Value> args = {}) {
    absl::Status s =
        RunWithPath(absl::StrCat("py:shoal_probe:", fn), std::move(args), "");
    EXPECT_TRUE(s.ok()) << s;
    if (!s.ok() || ctx_->outputs_.empty()) return "";
    return std::get<std::string>(ctx_->outputs_.at(0));
  }
  std::string RunString(const std::string& fn, const std::string& path,
                        std::vector<Value> args = {}) {
    absl::Status s = RunWithPath(fn, std::move(args), path);
    EXPECT_TRUE(s.ok()) << fn << " under " << path << ": " << s;
    if (!s.ok() || ctx_->outputs_.empty()) return "";
    return std::get<std::string>(ctx_->outputs_.at(0));
  }

  static TempDir* tmp_;
  static std::string* dir_;
  std::unique_ptr<TaskRunner> runner_ = MakePythonRunner();
  std::unique_ptr<MemoryContext> ctx_;
};

TempDir* PythonRunnerTest::tmp_ = nullptr;
std::string* PythonRunnerTest::dir_ = nullptr;

TEST_F(PythonRunnerTest, HandlesOnlyPyNames) {
  EXPECT_TRUE(runner_->Handles("py:m:f"));
  EXPECT_FALSE(runner_->Handles("noop"));
  EXPECT_FALSE(runner_->Handles("python"));
}

TEST_F(PythonRunnerTest, ScalarsRoundTrip) {
  ASSERT_TRUE(Run("py:runner_tasks:echo",
                  {int64_t{-5}, 2.5, std::string("text"),
                   BytesValue{std::string("\0b", 2)}, true, std::monostate{}})
                  .ok());
  ASSERT_EQ(ctx_->outputs_.size(), 6u);
  EXPECT_EQ(std::get<int64_t>(ctx_->outputs_[0]), -5);
  EXPECT_EQ(std::get<double>(ctx_->outputs_[1]), 2.5);
  EXPECT_EQ(std::get<std::string>(ctx_->outputs_[2]), "text");
  EXPECT_EQ(std::get<BytesValue>(ctx_->outputs_[3]).data,
            std::string("\0b", 2));
  EXPECT_EQ(std::get<bool>(ctx_->outputs_[4]), true);
  EXPECT_TRUE(std::holds_alternative<std::monostate>(ctx_->outputs_[5]));
}

TEST_F(PythonRunnerTest, InlineTensorsArriveReadOnlyAndReturn) {
  TensorValue t{TensorMeta::Contiguous(DType::kF32, {2, 3}), {}};
  t.data.resize(24);
  float v[6] = {1, 2, 3, 4, 5, 6};
  std::memcpy(t.data.data(), v, 24);
  absl::Status s = Run("py:runner_tasks:double", {t});
  ASSERT_TRUE(s.ok()) << s;
  ASSERT_EQ(ctx_->outputs_.size(), 1u);
  const auto& out = std::get<TensorValue>(ctx_->outputs_[0]);
  EXPECT_EQ(out.meta, TensorMeta::Contiguous(DType::kF32, {2, 3}));
  float got[6];
  std::memcpy(got, out.data.data(), 24);
  for (int i = 0; i < 6; ++i) EXPECT_EQ(got[i], 2 * v[i]);
}

TEST_F(PythonRunnerTest, StridedResultsAreGathered) {
  ASSERT_TRUE(Run("py:runner_tasks:strided", {}).ok());
  const auto& out = std::get<TensorValue>(ctx_->outputs_.at(0));
  EXPECT_EQ(out.meta, TensorMeta::Contiguous(DType::kI64, {3, 2}));
  int64_t got[6];
  std::memcpy(got, out.data.data(), sizeof(got));
  const int64_t want[6] = {0, 2, 4, 6, 8, 10};
  for (int i = 0; i < 6; ++i) EXPECT_EQ(got[i], want[i]);
}

TEST_F(PythonRunnerTest, NumpyScalarsBecomeScalars) {
  ASSERT_TRUE(Run("py:runner_tasks:numpy_scalars", {}).ok());
  ASSERT_EQ(ctx_->outputs_.size(), 3u);
  EXPECT_EQ(std::get<double>(ctx_->outputs_[0]), 1.5);
  EXPECT_EQ(std::get<int64_t>(ctx_->outputs_[1]), 7);
  EXPECT_EQ(std::get<bool>(ctx_->outputs_[2]), true);
}

TEST_F(PythonRunnerTest, ExceptionCarriesTypeMessageAndTraceback) {
  absl::Status s = Run("py:runner_tasks:boom", {int64_t{3}});
  EXPECT_EQ(s.code(), absl::StatusCode::kUnknown);
  EXPECT_TRUE(absl::StartsWith(s.message(), "ValueError: bad value 3\n")) << s;
  EXPECT_TRUE(
      absl::StrContains(s.message(), "Traceback (most recent call last)"))
      << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "runner_tasks.py")) << s;
}

// The exception's fields ride on the status (ipc::TaskExceptionOf), apart:
// no client has to find the traceback in the message text.
TEST_F(PythonRunnerTest, ExceptionFieldsAreAttached) {
  absl::Status s = Run("py:runner_tasks:boom", {int64_t{3}});
  std::optional<ipc::TaskException> e = ipc::TaskExceptionOf(s);
  ASSERT_TRUE(e.has_value()) << s;
  // The type alone; the exception pickled in a field of its own.
  EXPECT_EQ(e->type, "builtins.ValueError");
  EXPECT_FALSE(e->pickled.empty());
  EXPECT_EQ(e->message, "bad value 3");
  EXPECT_TRUE(
      absl::StartsWith(e->traceback, "Traceback (most recent call last):\n"))
      << e->traceback;
  EXPECT_TRUE(absl::StrContains(e->traceback, "runner_tasks.py"))
      << e->traceback;
  EXPECT_TRUE(absl::EndsWith(e->traceback, "ValueError: bad value 3\n"))
      << e->traceback;

  s = Run("py:runner_tasks:tricky", {});
  e = ipc::TaskExceptionOf(s);
  ASSERT_TRUE(e.has_value()) << s;
  EXPECT_TRUE(absl::StartsWith(e->type, "runner_tasks.Custom"));
  EXPECT_EQ(e->message,
            "two\nlines\nTraceback (most recent call last):\n  fake");
  EXPECT_TRUE(absl::StrContains(e->traceback, "in tricky")) << e->traceback;

  // An import failure says so ahead of its traceback.
  e = ipc::TaskExceptionOf(Run("py:no_such_module_xyz:f", {}));
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->type, "builtins.ModuleNotFoundError");
  EXPECT_EQ(e->message, "No module named 'no_such_module_xyz'");
  EXPECT_TRUE(absl::StartsWith(
      e->traceback, "(while importing py:no_such_module_xyz:f)\nTraceback"))
      << e->traceback;

  // Other failures carry none.
  EXPECT_FALSE(ipc::TaskExceptionOf(Run("py:runner_tasks:returns_list", {}))
                   .has_value());
}

TEST_F(PythonRunnerTest, MissingModuleOrFunctionIsAnError) {
  absl::Status s = Run("py:no_such_module_xyz:f", {});
  EXPECT_EQ(s.code(), absl::StatusCode::kUnknown);
  EXPECT_TRUE(absl::StartsWith(s.message(), "ModuleNotFoundError")) << s;
  s = Run("py:runner_tasks:nope", {});
  EXPECT_TRUE(absl::StartsWith(s.message(), "AttributeError")) << s;
  for (const char* bad :
       {"py:", "py:mod", "py::f", "py:mod:", "py:a:b:c", "py:=", "py:=0123",
        "py:#0123456789abcdef0123456789abcdef",
        "py:=0123456789abcdef0123456789abcde!"}) {
    EXPECT_EQ(Run(bad, {}).code(), absl::StatusCode::kInvalidArgument) << bad;
  }
}

TEST_F(PythonRunnerTest, DottedAttributePaths) {
  ASSERT_TRUE(Run("py:runner_tasks:Holder.method", {int64_t{41}}).ok());
  EXPECT_EQ(std::get<int64_t>(ctx_->outputs_.at(0)), 42);
}

// A list goes back pickled by the shoal package, which this test process
// lacks (python/tests cover the pickled results with real workers): the
// failure names the value and what was missing.
TEST_F(PythonRunnerTest, PickledReturnValuesNeedTheShoalPackage) {
  absl::Status s = Run("py:runner_tasks:returns_list", {});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(s.message(), "returned a list")) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "shoal._serialize")) << s;
}

TEST_F(PythonRunnerTest, TaskModuleSeesItsContext) {
  ASSERT_TRUE(Run("py:runner_tasks:whoami", {}).ok());
  EXPECT_EQ(std::get<int64_t>(ctx_->outputs_.at(0)), 2);
  EXPECT_EQ(std::get<int64_t>(ctx_->outputs_.at(1)), 7);
}

TEST_F(PythonRunnerTest, LargeOutputsNeedTheStore) {
  EXPECT_EQ(Run("py:runner_tasks:big", {}).code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST_F(PythonRunnerTest, CachedFunctionsSurviveManyCalls) {
  for (int i = 0; i < 1000; ++i) {
    ASSERT_TRUE(Run("py:runner_tasks:echo", {int64_t{i}}).ok());
    ASSERT_EQ(std::get<int64_t>(ctx_->outputs_.at(0)), i);
  }
}

// A task's python_path lasts as long as the task: a module it shadows is
// its own (and the same module object in the next task with that path), a
// task without the path imports the real one, and sys.path is as before.
TEST_F(PythonRunnerTest, PathAndItsImportsLastOnlyTheirTask) {
  AddProbe();
  const std::string real = Folder("real", {{"shadowed_mod.py", R"PY(
def who():
    return "real"
)PY"}});
  ASSERT_TRUE(RunWithPath("py:sys:path.append", {real}, "").ok());
  const std::string shadow =
      Folder("shadow", {{"shadowed_mod.py", R"PY(
import shadow_helper
calls = 0
def who():
    global calls
    calls += 1
    return "shadow %d" % calls
)PY"},
                        {"shadow_helper.py", "x = 1\n"}});
  const std::string before = Probe("syspath");
  ASSERT_FALSE(absl::StrContains(before, shadow));
  EXPECT_EQ(Probe("module_file", {std::string("shadowed_mod")}),
            "(not imported)");

  EXPECT_EQ(RunString("py:shadowed_mod:who", shadow), "shadow 1");
  EXPECT_EQ(Probe("syspath"), before);
  EXPECT_EQ(Probe("module_file", {std::string("shadowed_mod")}),
            "(not imported)");
  EXPECT_EQ(Probe("module_file", {std::string("shadow_helper")}),
            "(not imported)");
  // Without the path: the real module, from the worker's own sys.path.
  EXPECT_EQ(RunString("py:shadowed_mod:who", ""), "real");
  EXPECT_EQ(Probe("module_file", {std::string("shadowed_mod")}),
            real + "/shadowed_mod.py");
  // With it again: its own module object again (its global counts on), the
  // real one back afterwards.
  EXPECT_EQ(RunString("py:shadowed_mod:who", shadow), "shadow 2");
  EXPECT_EQ(RunString("py:shadowed_mod:who", ""), "real");
  EXPECT_EQ(Probe("module_file", {std::string("shadowed_mod")}),
            real + "/shadowed_mod.py");
  EXPECT_EQ(Probe("syspath"), before);
}

// Functions are cached per path: one name resolved under two paths is two
// functions.
TEST_F(PythonRunnerTest, FunctionCacheIsPerPath) {
  const std::string one =
      Folder("one", {{"same_name.py", "def f():\n    return 'one'\n"}});
  const std::string two =
      Folder("two", {{"same_name.py", "def f():\n    return 'two'\n"}});
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(RunString("py:same_name:f", one), "one");
    EXPECT_EQ(RunString("py:same_name:f", two), "two");
  }
  EXPECT_EQ(RunWithPath("py:same_name:f", {}, "").code(),
            absl::StatusCode::kUnknown);  // ModuleNotFoundError
}

// The call envelope of "py:#<hash>!": pickle protocol 4 of
// (fn_bytes, (x,), {}), written opcode by opcode.
BytesValue CarriedCall(const std::string& fn_pickle, uint8_t x) {
  std::string p =
      "\x80\x04"
      "C";
  p += static_cast<char>(fn_pickle.size());
  p += fn_pickle;
  p += 'K';
  p += static_cast<char>(x);
  p += "\x85}\x87.";
  return BytesValue{p};
}
// pickle.dumps(operator.neg / abs, 4) and hashlib.blake2b(that,
// digest_size=16).hexdigest(), as _serialize.dump_function names them.
const std::string kNegPickle("\x80\x04\x8c\x09_operator\x8c\x03neg\x93.", 20);
const std::string kAbsPickle(
    "\x80\x04\x8c\x08"
    "builtins\x8c\x03"
    "abs\x93.",
    19);
constexpr char kNegHash[] = "8812495bf7a9e8f381cafafaa4b75943";
constexpr char kAbsHash[] = "b1fa93b45cb57547ee320f4e35617022";

// A function carried under a hash that is not its own is refused, whether
// the cache holds the real one or not; each real one runs as itself.
TEST_F(PythonRunnerTest, CarriedFunctionsAreCheckedAgainstTheirHash) {
  const std::string neg = absl::StrCat("py:#", kNegHash, "!");
  const std::string abs = absl::StrCat("py:#", kAbsHash, "!");
  // Forged first: nothing cached, so the real one still runs after.
  absl::Status s = Run(neg, {CarriedCall(kAbsPickle, 5)});
  ASSERT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), kNegHash)) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), kAbsHash)) << s;
  ASSERT_TRUE(Run(neg, {CarriedCall(kNegPickle, 5)}).ok());
  EXPECT_EQ(std::get<int64_t>(ctx_->outputs_.at(0)), -5);
  // Forged after the real one is cached: refused, not served the cache.
  s = Run(neg, {CarriedCall(kAbsPickle, 7)});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  ASSERT_TRUE(Run(abs, {CarriedCall(kAbsPickle, 7)}).ok());
  EXPECT_EQ(std::get<int64_t>(ctx_->outputs_.at(0)), 7);
  ASSERT_TRUE(Run(neg, {CarriedCall(kNegPickle, 7)}).ok());
  EXPECT_EQ(std::get<int64_t>(ctx_->outputs_.at(0)), -7);
  // The hash in upper case names the same function.
  ASSERT_TRUE(Run(absl::StrCat("py:#", absl::AsciiStrToUpper(kNegHash), "!"),
                  {CarriedCall(kNegPickle, 2)})
                  .ok());
  EXPECT_EQ(std::get<int64_t>(ctx_->outputs_.at(0)), -2);
  // No function in the envelope: refused too.
  std::string none = "\x80\x04NK\x05\x85}\x87.";
  EXPECT_EQ(Run(neg, {BytesValue{none}}).code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace shoal::worker
