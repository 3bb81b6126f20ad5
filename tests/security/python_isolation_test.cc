// Python task code that must not run where it must not, against a real node
// of one worker (docs/security.md, "What a connected client may do"):
// - a task's python_path and what it imported from there end with the task,
//   so a module it shadowed is not served to the next task (an owner's task
//   with the path, then one without it, on the same worker);
// - a function carried by value under a content hash that is not its own is
//   refused, whichever client's upload came first.
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "coordinator/client.h"
#include "coordinator/discovery.h"
#include "gtest/gtest.h"
#include "ipc/curve.h"
#include "ipc/messages.h"
#include "tests/coordinator/node_fixture.h"
#include "tests/security/node_test_base.h"
#include "tests/security/raw_client.h"

namespace shoal {
namespace {

using coordinator::Client;
using shoal::testing::NodeTest;
using shoal::testing::RawClient;
using shoal::testing::WriteClientKeys;

std::string MakeFolder(
    const std::string& name,
    const std::vector<std::pair<std::string, std::string>>& files) {
  const std::string d = absl::StrCat(::testing::TempDir(), "/", name);
  EXPECT_EQ(system(absl::StrCat("mkdir -p ", d).c_str()), 0);
  for (const auto& [file, text] : files)
    std::ofstream(absl::StrCat(d, "/", file)) << text;
  return d;
}

absl::StatusOr<ipc::TaskResult> RunTask(Client& client, std::string function,
                                        std::vector<Value> args,
                                        std::string python_path = "") {
  ipc::TaskSpec t;
  t.function = std::move(function);
  t.args = std::move(args);
  t.python_path = std::move(python_path);
  absl::StatusOr<coordinator::TaskRef> ref = client.Submit(std::move(t));
  if (!ref.ok()) return ref.status();
  return client.Wait(*ref, absl::Seconds(60));
}

// The text a task returned (its first output, a str); "" after a failure.
std::string TextOf(const absl::StatusOr<ipc::TaskResult>& r) {
  EXPECT_TRUE(r.ok()) << r.status();
  if (!r.ok()) return "";
  EXPECT_TRUE(r->status.ok()) << r->status;
  if (!r->status.ok() || r->outputs.empty()) return "";
  const auto* s = std::get_if<std::string>(&r->outputs[0]);
  return s == nullptr ? "(not a str)" : *s;
}

class PythonIsolationTest : public NodeTest {
 protected:
  // One worker, with the probe module on its own sys.path.
  void StartNode(std::vector<std::string> flags = {}) {
    const std::string probe = MakeFolder("probe", {{"shoal_probe.py", R"PY(
import sys

def syspath():
    return "\n".join(sys.path)

def module_file(name):
    m = sys.modules.get(name)
    return "(not imported)" if m is None else str(getattr(m, "__file__", ""))
)PY"}});
    flags.insert(flags.end(), {"-n", "1", "--pythonpath", probe});
    NodeTest::StartNode(std::move(flags));
  }
};

TEST_F(PythonIsolationTest, ShadowingPathEndsWithItsTask) {
  StartNode();
  auto owner = node_->Connect();
  ASSERT_TRUE(owner.ok()) << owner.status();
  Client& c = **owner;
  const std::string shadow = MakeFolder("shadow", {{"colorsys.py", R"PY(
def rgb_to_hsv(r, g, b):
    return "shadowed"
)PY"}});
  const std::string before = TextOf(RunTask(c, "py:shoal_probe:syspath", {}));
  ASSERT_FALSE(before.empty());
  ASSERT_EQ(TextOf(RunTask(c, "py:shoal_probe:module_file",
                           {std::string("colorsys")})),
            "(not imported)");
  const std::vector<Value> red = {1.0, 0.0, 0.0};
  for (int round = 0; round < 2; ++round) {
    // The owner's task with a path that shadows the standard colorsys.
    EXPECT_EQ(TextOf(RunTask(c, "py:colorsys:rgb_to_hsv", red, shadow)),
              "shadowed");
    // sys.path is as before, and the shadow module left sys.modules.
    EXPECT_EQ(TextOf(RunTask(c, "py:shoal_probe:syspath", {})), before);
    const std::string file = TextOf(
        RunTask(c, "py:shoal_probe:module_file", {std::string("colorsys")}));
    EXPECT_FALSE(absl::StartsWith(file, shadow)) << file;
    // A task without the path gets the real colorsys.
    absl::StatusOr<ipc::TaskResult> real =
        RunTask(c, "py:colorsys:rgb_to_hsv", red);
    ASSERT_TRUE(real.ok() && real->status.ok())
        << real.status() << " " << (real.ok() ? real->status.ToString() : "");
    ASSERT_EQ(real->outputs.size(), 3u);
    EXPECT_EQ(std::get<double>(real->outputs[0]), 0.0);
    EXPECT_EQ(std::get<double>(real->outputs[1]), 1.0);
    EXPECT_EQ(std::get<double>(real->outputs[2]), 1.0);
    EXPECT_TRUE(absl::StartsWith(TextOf(RunTask(c, "py:shoal_probe:module_file",
                                                {std::string("colorsys")})),
                                 "/usr/lib/python3"));
  }
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
// pickle.dumps(operator.neg / abs, 4), and the names dump_function gives
// them: hashlib.blake2b(pickle, digest_size=16).hexdigest().
const std::string kNegPickle("\x80\x04\x8c\x09_operator\x8c\x03neg\x93.", 20);
const std::string kAbsPickle(
    "\x80\x04\x8c\x08"
    "builtins\x8c\x03"
    "abs\x93.",
    19);
constexpr char kNegHash[] = "8812495bf7a9e8f381cafafaa4b75943";
constexpr char kAbsHash[] = "b1fa93b45cb57547ee320f4e35617022";

absl::StatusOr<ipc::TaskResult> RawRun(RawClient& raw, std::string function,
                                       std::vector<Value> args) {
  ipc::SubmitRequest s;
  ipc::TaskSpec t;
  t.function = std::move(function);
  t.args = std::move(args);
  s.tasks.push_back(std::move(t));
  absl::StatusOr<ipc::Message> sub = raw.Call(s);
  if (!sub.ok()) return sub.status();
  ipc::WaitRequest w;
  w.task_ids = std::get<ipc::SubmitReply>(*sub).task_ids;
  w.release = true;
  w.timeout_ms = 60000;
  absl::StatusOr<ipc::Message> got = raw.Call(w, absl::Seconds(70));
  if (!got.ok()) return got.status();
  const auto& results = std::get<ipc::WaitReply>(*got).results;
  if (results.size() != 1) return absl::InternalError("no result");
  return results[0];
}

int64_t IntOf(const absl::StatusOr<ipc::TaskResult>& r) {
  EXPECT_TRUE(r.ok()) << r.status();
  if (!r.ok()) return -1000;
  EXPECT_TRUE(r->status.ok()) << r->status;
  if (!r->status.ok() || r->outputs.empty()) return -1000;
  return std::get<int64_t>(r->outputs[0]);
}

void ExpectForgeryRefused(const absl::StatusOr<ipc::TaskResult>& r) {
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->status.code(), absl::StatusCode::kInvalidArgument) << r->status;
  EXPECT_TRUE(absl::StrContains(r->status.message(), kNegHash)) << r->status;
  EXPECT_TRUE(absl::StrContains(r->status.message(), kAbsHash)) << r->status;
}

TEST_F(PythonIsolationTest, FunctionUnderAnotherFunctionsHashIsRefused) {
  auto guest = ipc::GenerateCurveKeyPair();
  ASSERT_TRUE(guest.ok());
  StartNode({"--client-keys", WriteClientKeys("guests.txt", {&*guest})});
  RawClient a(discovery_.frontend);  // the owner
  RawClient b(discovery_.tcp, 1000, &*guest, discovery_.server_key);
  const std::string neg = absl::StrCat("py:#", kNegHash, "!");
  // B uploads abs under neg's hash before anyone ran neg: refused, nothing
  // cached; A's neg runs as neg.
  ExpectForgeryRefused(RawRun(b, neg, {CarriedCall(kAbsPickle, 5)}));
  EXPECT_EQ(IntOf(RawRun(a, neg, {CarriedCall(kNegPickle, 5)})), -5);
  // With neg cached, B's forgery is refused again rather than served it,
  // and A still gets neg.
  ExpectForgeryRefused(RawRun(b, neg, {CarriedCall(kAbsPickle, 5)}));
  EXPECT_EQ(IntOf(RawRun(a, neg, {CarriedCall(kNegPickle, 5)})), -5);
  // Each under its own hash runs as itself.
  EXPECT_EQ(IntOf(RawRun(b, absl::StrCat("py:#", kAbsHash, "!"),
                         {CarriedCall(kAbsPickle, 5)})),
            5);
  EXPECT_EQ(IntOf(RawRun(a, neg, {CarriedCall(kNegPickle, 6)})), -6);
}

}  // namespace
}  // namespace shoal
