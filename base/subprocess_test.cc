#include "base/subprocess.h"

#include <dirent.h>
#include <signal.h>
#include <sys/wait.h>

#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace shoal {
namespace {

int OpenFdCount() {
  DIR* d = opendir("/proc/self/fd");
  int n = 0;
  while (readdir(d) != nullptr) ++n;
  closedir(d);
  return n;
}

TEST(SubprocessTest, PipesStdinAndStdout) {
  SubprocessOptions o;
  o.pipe_stdin = true;
  o.pipe_stdout = true;
  auto p = Subprocess::Start({"cat"}, o);
  ASSERT_TRUE(p.ok()) << p.status();
  ASSERT_TRUE(p->WriteLine("hello").ok());
  auto line = p->ReadLine(absl::Seconds(10));
  ASSERT_TRUE(line.ok()) << line.status();
  EXPECT_EQ(*line, "hello");
  p->CloseStdin();
  EXPECT_EQ(p->ReadLine(absl::Seconds(10)).status().code(),
            absl::StatusCode::kOutOfRange);
  auto status = p->Wait(absl::Seconds(10));
  ASSERT_TRUE(status.ok());
  EXPECT_EQ(DescribeWaitStatus(*status), "exit 0");
}

TEST(SubprocessTest, EnvironmentIsSetAndRemoved) {
  setenv("SHOAL_SUBPROCESS_TEST_GONE", "x", 1);
  SubprocessOptions o;
  o.pipe_stdout = true;
  o.env["SHOAL_SUBPROCESS_TEST_SET"] = "42";
  o.env["SHOAL_SUBPROCESS_TEST_GONE"] = std::nullopt;
  auto p = Subprocess::Start(
      {"sh", "-c",
       "echo \"${SHOAL_SUBPROCESS_TEST_SET}-${SHOAL_SUBPROCESS_TEST_GONE-unset}"
       "\""},
      o);
  ASSERT_TRUE(p.ok()) << p.status();
  auto line = p->ReadLine(absl::Seconds(10));
  ASSERT_TRUE(line.ok()) << line.status();
  EXPECT_EQ(*line, "42-unset");
}

TEST(SubprocessTest, ExecFailureIsAStatusNotAnExitCode) {
  const int before = OpenFdCount();
  auto p = Subprocess::Start({"/nonexistent/shoal-no-such-program"});
  EXPECT_EQ(p.status().code(), absl::StatusCode::kNotFound) << p.status();
  EXPECT_EQ(Subprocess::Start({}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(OpenFdCount(), before);
}

TEST(SubprocessTest, BadOutputFileLeaksNoDescriptor) {
  const int before = OpenFdCount();
  SubprocessOptions o;
  o.pipe_stdin = true;
  o.pipe_stdout = true;
  o.stderr_file = "/nonexistent-dir/shoal/err.log";
  auto p = Subprocess::Start({"true"}, o);
  EXPECT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("/nonexistent-dir/shoal/err.log"),
            absl::string_view::npos)
      << p.status();
  EXPECT_EQ(OpenFdCount(), before);
}

TEST(SubprocessTest, SignalReachesTheProcessGroup) {
  SubprocessOptions o;
  o.new_process_group = true;
  auto p = Subprocess::Start({"sh", "-c", "sleep 60 & wait"}, o);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->Wait(absl::Milliseconds(50)).status().code(),
            absl::StatusCode::kDeadlineExceeded);
  p->Signal(SIGTERM);
  auto status = p->Wait(absl::Seconds(10));
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_EQ(DescribeWaitStatus(*status), "killed by SIGTERM (signal 15)");
  EXPECT_FALSE(p->running());
}

}  // namespace
}  // namespace shoal
