#include "ipc/task_name.h"

#include <string>

#include "gtest/gtest.h"

namespace shoal::ipc {
namespace {

using Kind = TaskName::Kind;

constexpr char kHex[] = "0123456789abcdef0123456789ABCDEF";

TEST(TaskNameTest, NativeNamesAreTakenWhole) {
  absl::StatusOr<TaskName> n = ParseTaskName("noop");
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_EQ(n->kind, Kind::kNative);
  EXPECT_EQ(n->function, "noop");
  EXPECT_EQ(n->actor, 0u);
  EXPECT_FALSE(n->envelope);
  // "!" means the envelope only in Python names.
  n = ParseTaskName("odd!");
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_EQ(n->function, "odd!");
  EXPECT_FALSE(n->envelope);
}

TEST(TaskNameTest, PythonNamesByModule) {
  absl::StatusOr<TaskName> n = ParseTaskName("py:pkg.mod:Class.method!");
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_EQ(n->kind, Kind::kPythonModule);
  EXPECT_EQ(n->module, "pkg.mod");
  EXPECT_EQ(n->qualname, "Class.method");
  EXPECT_EQ(n->function, "py:pkg.mod:Class.method");
  EXPECT_TRUE(n->envelope);
  EXPECT_TRUE(n->python());
  EXPECT_FALSE(n->by_value());
}

TEST(TaskNameTest, PythonNamesByValue) {
  // The result's views point into the name, which outlives them.
  const std::string stored = std::string("py:=") + kHex;
  absl::StatusOr<TaskName> n = ParseTaskName(stored);
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_EQ(n->kind, Kind::kPythonStored);
  EXPECT_EQ(n->hex, kHex);
  EXPECT_TRUE(n->by_value());
  const std::string carried = std::string("py:#") + kHex + "!";
  n = ParseTaskName(carried);
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_EQ(n->kind, Kind::kPythonCarried);
  EXPECT_TRUE(n->envelope);
}

TEST(TaskNameTest, ActorSuffixSitsBeforeTheEnvelope) {
  absl::StatusOr<TaskName> n = ParseTaskName("py:m:f@actor=12!");
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_EQ(n->actor, 12u);
  EXPECT_EQ(n->function, "py:m:f");
  EXPECT_TRUE(n->envelope);
  n = ParseTaskName("m@actor=3");
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_EQ(n->actor, 3u);
  EXPECT_EQ(n->function, "m");
}

TEST(TaskNameTest, RefusesMalformedNames) {
  for (const std::string& bad : {
           std::string(""),
           std::string(96, 'a'),
           std::string("py:"),
           std::string("py:mod"),
           std::string("py:mod:"),
           std::string("py::f"),
           std::string("py:a:b:c"),
           std::string("py:=abc"),
           std::string("py:=") + kHex + "0",
           std::string("py:=0123456789abcdef0123456789abcdeg"),
           std::string("py:#") + kHex,  // carried needs the envelope
           std::string("py:m:f@actor="),
           std::string("py:m:f@actor=0"),
           std::string("py:m:f@actor=x1"),
           std::string("py:m:f@actor=1234567890"),
           std::string("f@actor=1!"),
           std::string("@actor=4"),
       }) {
    EXPECT_FALSE(ParseTaskName(bad).ok()) << "'" << bad << "'";
  }
}

TEST(TaskNameTest, ALaterActorSuffixIsTheOneThatCounts) {
  // The table routes by the last marker; every reader agrees with it.
  absl::StatusOr<TaskName> n = ParseTaskName("m@actor=5@actor=7");
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_EQ(n->actor, 7u);
  EXPECT_EQ(ActorOfTaskName("m@actor=5@actor=7"), 7u);
}

TEST(TaskNameTest, ActorNamesRoundTrip) {
  EXPECT_EQ(ActorTaskName("py:m:f", 12), "py:m:f@actor=12");
  EXPECT_EQ(ActorTaskName("py:m:f!", 12), "py:m:f@actor=12!");
  EXPECT_EQ(ActorOfTaskName("py:m:f@actor=12!"), 12u);
  EXPECT_EQ(TaskNameWithoutActor("py:m:f@actor=12!"), "py:m:f!");
  EXPECT_EQ(TaskNameWithoutActor("py:m:f"), "py:m:f");
  EXPECT_EQ(ActorOfTaskName("py:m:f"), 0u);
  EXPECT_EQ(ActorOfTaskName("not@actor=x"), 0u);
  EXPECT_EQ(TaskNameWithoutActor("not@actor=x"), "not@actor=x");
}

}  // namespace
}  // namespace shoal::ipc
