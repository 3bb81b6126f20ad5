#include "tools/cli/args.h"

#include "gtest/gtest.h"

namespace shoal::cli {
namespace {

TEST(ParseBytesTest, Units) {
  EXPECT_EQ(*ParseBytes("4096"), 4096u);
  EXPECT_EQ(*ParseBytes("64M"), uint64_t{64} << 20);
  EXPECT_EQ(*ParseBytes("1G"), uint64_t{1} << 30);
  EXPECT_EQ(*ParseBytes("1.5GiB"), uint64_t{3} << 29);
  EXPECT_EQ(*ParseBytes("2k"), 2048u);
  EXPECT_FALSE(ParseBytes("lots").ok());
  EXPECT_FALSE(ParseBytes("-1M").ok());
  EXPECT_EQ(FormatBytes(uint64_t{64} << 20), "64 MiB");
}

TEST(ParseSecondsTest, PlainNumbersAreSecondsOthersAbslDurations) {
  EXPECT_EQ(*ParseSeconds("30"), absl::Seconds(30));
  EXPECT_EQ(*ParseSeconds(" 0.5 "), absl::Milliseconds(500));
  EXPECT_EQ(*ParseSeconds("0"), absl::ZeroDuration());
  EXPECT_EQ(*ParseSeconds("1.5s"), absl::Milliseconds(1500));
  EXPECT_EQ(*ParseSeconds("100ms"), absl::Milliseconds(100));
  EXPECT_EQ(*ParseSeconds("2m"), absl::Minutes(2));
  EXPECT_EQ(*ParseSeconds("1h30m"), absl::Minutes(90));
  EXPECT_EQ(*ParseSeconds("250us"), absl::Microseconds(250));
  for (const char* bad : {"", "soon", "5 s", "-1", "-2s", "1x", "nan", "s"}) {
    absl::StatusOr<absl::Duration> d = ParseSeconds(bad);
    EXPECT_EQ(d.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(d.status().message().find("1.5s"), std::string::npos) << bad;
  }
}

TEST(ArgParserTest, DurationFlags) {
  ArgParser p("shoal test", "testing");
  absl::Duration& timeout = p.Duration("timeout", absl::Seconds(5), "t");
  absl::Duration& grace = p.Duration("grace", absl::ZeroDuration(), "g");
  const char* argv[] = {"test", "--timeout=250ms", "--grace", "3"};
  ASSERT_TRUE(p.Parse(4, const_cast<char**>(argv)).ok());
  EXPECT_EQ(timeout, absl::Milliseconds(250));
  EXPECT_EQ(grace, absl::Seconds(3));
  EXPECT_NE(p.Help().find("(default: 5s)"), std::string::npos) << p.Help();

  ArgParser q("shoal test", "testing");
  q.Duration("wait-timeout", absl::ZeroDuration(), "w");
  const char* bad[] = {"test", "--wait-timeout=forever"};
  absl::Status s = q.Parse(2, const_cast<char**>(bad));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("--wait-timeout=forever"), std::string::npos) << s;
  EXPECT_NE(s.message().find("a duration"), std::string::npos) << s;
}

TEST(ArgParserTest, FlagsPositionalsAndRest) {
  ArgParser p("shoal test", "testing");
  std::string& name = p.String("name", "x", "a name");
  int64_t& n = p.Int("iters", 5, "iterations");
  bool& json = p.Bool("json", false, "json");
  bool& peers = p.Bool("peers", true, "peers");
  uint64_t& bytes = p.Bytes("store-bytes", 0, "size");
  p.Alias('n', "iters");
  const char* argv[] = {"test", "--name=abc", "-n",          "7",
                        "pos",  "--json",     "--no-peers",  "--store-bytes",
                        "2G",   "--",         "--not-a-flag"};
  ASSERT_TRUE(p.Parse(11, const_cast<char**>(argv)).ok());
  EXPECT_EQ(name, "abc");
  EXPECT_EQ(n, 7);
  EXPECT_TRUE(json);
  EXPECT_FALSE(peers);
  EXPECT_EQ(bytes, uint64_t{2} << 30);
  EXPECT_EQ(p.positional(), std::vector<std::string>{"pos"});
  EXPECT_EQ(p.rest(), std::vector<std::string>{"--not-a-flag"});
  EXPECT_TRUE(p.seen("iters"));
}

TEST(ArgParserTest, ErrorsSayWhatIsWrong) {
  ArgParser p("shoal test", "testing");
  p.Int("iters", 5, "iterations");
  const char* bad_flag[] = {"test", "--bogus"};
  absl::Status s = p.Parse(2, const_cast<char**>(bad_flag));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("--bogus"), std::string::npos);
  ArgParser q("shoal test", "testing");
  q.Int("iters", 5, "iterations");
  const char* bad_value[] = {"test", "--iters=many"};
  s = q.Parse(2, const_cast<char**>(bad_value));
  EXPECT_NE(s.message().find("integer"), std::string::npos);
  ArgParser r("shoal test", "testing");
  r.Int("iters", 5, "iterations");
  const char* missing[] = {"test", "--iters"};
  EXPECT_FALSE(r.Parse(2, const_cast<char**>(missing)).ok());
}

}  // namespace
}  // namespace shoal::cli
