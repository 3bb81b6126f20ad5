// `shoal submit --json` and `shoal status --json` against a real node: the
// output is one line of JSON that a JSON parser reads back, whatever the
// strings in it hold.
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "google/protobuf/util/json_util.h"
#include "gtest/gtest.h"
#include "proto/cli.pb.h"
#include "proto/shoal.pb.h"
#include "tests/coordinator/node_fixture.h"
#include "tests/testing/command.h"
#include "tests/testing/test_env.h"

namespace shoal::testing {
namespace {

class CliJsonTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<std::unique_ptr<NodeProcess>> node = NodeProcess::Start();
    ASSERT_TRUE(node.ok()) << node.status();
    node_ = *std::move(node);
  }

  // `shoal COMMAND --job-id <the node's> ARGS...`
  CommandResult Shoal(const std::string& command,
                      const std::vector<std::string>& args) {
    std::vector<std::string> argv = {RunfilePath("tools/shoal"), command,
                                     "--job-id", node_->job_id()};
    argv.insert(argv.end(), args.begin(), args.end());
    return RunCommand(argv, command);
  }

  std::unique_ptr<NodeProcess> node_;
};

// Whether `r` printed exactly one line, and it parses as JSON into `parsed`.
template <typename M>
::testing::AssertionResult OneJsonLine(const CommandResult& r, M* parsed) {
  if (r.out.size() != 1) {
    return ::testing::AssertionFailure() << "not one line:\n"
                                         << r.OutText() << r.err;
  }
  const auto status =
      google::protobuf::util::JsonStringToMessage(r.out[0], parsed);
  if (!status.ok()) {
    return ::testing::AssertionFailure() << status.ToString() << "\n"
                                         << r.out[0];
  }
  return ::testing::AssertionSuccess();
}

TEST_F(CliJsonTest, SubmitJsonEscapesAFailedTasksMessage) {
  // What a Python traceback brings: newlines, quotes, a backslash, a tab.
  const std::string message =
      "Traceback (most recent call last):\n  File \"task.py\", line 3\n"
      "ValueError: bad path C:\\tmp\t\"x\"";
  CommandResult r =
      Shoal("submit", {"fail_with", absl::StrCat("str:", message), "--json"});
  EXPECT_EQ(r.code, 1) << r.err;
  cli::TaskResultJson parsed;
  ASSERT_TRUE(OneJsonLine(r, &parsed));
  EXPECT_NE(parsed.message().find(message), std::string::npos)
      << parsed.message();
  EXPECT_EQ(parsed.code(), static_cast<int>(absl::StatusCode::kInternal));
  EXPECT_GT(parsed.task_id(), 0u);
  EXPECT_TRUE(parsed.outputs().empty());
}

TEST_F(CliJsonTest, SubmitJsonListsOutputs) {
  CommandResult r =
      Shoal("submit", {"getenv", "str:SHOAL_NO_SUCH_VAR_X", "--json"});
  EXPECT_EQ(r.code, 0) << r.err;
  cli::TaskResultJson parsed;
  ASSERT_TRUE(OneJsonLine(r, &parsed));
  EXPECT_EQ(parsed.code(), 0);
  // Zero fields are printed too, for scripts that index them.
  EXPECT_NE(r.out[0].find("\"code\":0"), std::string::npos) << r.out[0];
  ASSERT_EQ(parsed.outputs_size(), 1);
}

TEST_F(CliJsonTest, StatusJsonParses) {
  CommandResult r = Shoal("status", {"--json"});
  EXPECT_EQ(r.code, 0) << r.err;
  wire::NodeStatus parsed;  // the wire schema's record, printed as it is
  ASSERT_TRUE(OneJsonLine(r, &parsed));
  EXPECT_EQ(parsed.job_id(), node_->job_id());
  EXPECT_GT(parsed.workers_size(), 0);
  EXPECT_GT(parsed.store().capacity_bytes(), 0u);
}

}  // namespace
}  // namespace shoal::testing
