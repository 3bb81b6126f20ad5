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
