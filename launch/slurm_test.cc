#include "launch/slurm.h"

#include <cstdlib>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace shoal::launch {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::vector<std::string> Expand(absl::string_view list) {
  absl::StatusOr<std::vector<std::string>> hosts = ExpandSlurmNodelist(list);
  EXPECT_TRUE(hosts.ok()) << list << ": " << hosts.status();
  return hosts.ok() ? *hosts : std::vector<std::string>{};
}

// Expects InvalidArgument whose message contains `mentions`.
void ExpectInvalid(absl::string_view list, absl::string_view mentions) {
  absl::StatusOr<std::vector<std::string>> hosts = ExpandSlurmNodelist(list);
  ASSERT_FALSE(hosts.ok()) << "\"" << list << "\" expanded";
  EXPECT_EQ(hosts.status().code(), absl::StatusCode::kInvalidArgument)
      << hosts.status();
  EXPECT_THAT(std::string(hosts.status().message()),
              HasSubstr(std::string(mentions)));
}

TEST(ExpandSlurmNodelistTest, IssueExample) {
  EXPECT_THAT(
      Expand("node[01-04,07],gpu3"),
      ElementsAre("node01", "node02", "node03", "node04", "node07", "gpu3"));
}

TEST(ExpandSlurmNodelistTest, PlainHosts) {
  EXPECT_THAT(Expand("gpu3"), ElementsAre("gpu3"));
  EXPECT_THAT(Expand("a,b,c"), ElementsAre("a", "b", "c"));
  EXPECT_THAT(Expand("host-1.example.com"), ElementsAre("host-1.example.com"));
}

TEST(ExpandSlurmNodelistTest, KeepsZeroPaddingOfRangeStart) {
  EXPECT_THAT(Expand("n[008-011]"),
              ElementsAre("n008", "n009", "n010", "n011"));
  EXPECT_THAT(Expand("n[8-11]"), ElementsAre("n8", "n9", "n10", "n11"));
  EXPECT_THAT(Expand("n[098-101]"),
              ElementsAre("n098", "n099", "n100", "n101"));
  EXPECT_THAT(Expand("n[0-1]"), ElementsAre("n0", "n1"));
}

TEST(ExpandSlurmNodelistTest, SingleNumbers) {
  EXPECT_THAT(Expand("x[3]"), ElementsAre("x3"));
  EXPECT_THAT(Expand("x[03]"), ElementsAre("x03"));
  EXPECT_THAT(Expand("x[1,3,5-6]"), ElementsAre("x1", "x3", "x5", "x6"));
  EXPECT_THAT(Expand("x[4-4]"), ElementsAre("x4"));
}

TEST(ExpandSlurmNodelistTest, CartesianProductInOrder) {
  EXPECT_THAT(Expand("r[1-2]n[1-2]"),
              ElementsAre("r1n1", "r1n2", "r2n1", "r2n2"));
  EXPECT_THAT(Expand("r[1-2]n[01,03]x[7]"),
              ElementsAre("r1n01x7", "r1n03x7", "r2n01x7", "r2n03x7"));
  EXPECT_THAT(Expand("[1-2][3-4]"), ElementsAre("13", "14", "23", "24"));
}

TEST(ExpandSlurmNodelistTest, KeepsSuffix) {
  EXPECT_THAT(Expand("a[1-2]-ib"), ElementsAre("a1-ib", "a2-ib"));
  EXPECT_THAT(Expand("a[1-2]-ib,b[9-10].x"),
              ElementsAre("a1-ib", "a2-ib", "b9.x", "b10.x"));
}

TEST(ExpandSlurmNodelistTest, NoPrefix) {
  EXPECT_THAT(Expand("[1-3]"), ElementsAre("1", "2", "3"));
}

TEST(ExpandSlurmNodelistTest, TrimsWhitespaceAroundItems) {
  EXPECT_THAT(Expand("  a, b\n"), ElementsAre("a", "b"));
  EXPECT_THAT(Expand("n[1-2] ,\tm3 "), ElementsAre("n1", "n2", "m3"));
}

TEST(ExpandSlurmNodelistTest, RejectsInteriorWhitespace) {
  ExpectInvalid("no de1", "whitespace");
  ExpectInvalid("n[1, 2]", "whitespace");
  ExpectInvalid("n[1 -2]", "whitespace");
}

TEST(ExpandSlurmNodelistTest, RejectsEmptyListOrItem) {
  ExpectInvalid("", "empty");
  ExpectInvalid("   ", "empty");
  ExpectInvalid("a,,b", "empty item");
  ExpectInvalid("a,", "empty item");
  ExpectInvalid(",a", "empty item");
  ExpectInvalid("a, ,b", "empty item");
}

TEST(ExpandSlurmNodelistTest, RejectsUnbalancedBrackets) {
  ExpectInvalid("n[1-2", "unbalanced \"[\"");
  ExpectInvalid("n[1-2,a", "n[1-2,a");
  ExpectInvalid("n1]", "unbalanced \"]\"");
  ExpectInvalid("n[1]]", "n[1]]");
  ExpectInvalid("n[[1]]", "nested");
  ExpectInvalid("a,n[1-2", "n[1-2");
}

TEST(ExpandSlurmNodelistTest, RejectsEmptyGroupOrElement) {
  ExpectInvalid("n[]", "empty bracket group");
  ExpectInvalid("n[1,,2]", "empty element");
  ExpectInvalid("n[1,]", "empty element");
}

TEST(ExpandSlurmNodelistTest, RejectsDescendingRange) {
  ExpectInvalid("n[5-3]", "\"5-3\" ends before it starts");
  ExpectInvalid("n[1,10-09]", "\"10-09\"");
}

TEST(ExpandSlurmNodelistTest, RejectsNonNumericBounds) {
  ExpectInvalid("n[a-b]", "\"a\" is not a number");
  ExpectInvalid("n[1-b]", "\"b\" is not a number");
  ExpectInvalid("n[x]", "\"x\"");
  ExpectInvalid("n[-3]", "bound \"\"");
  ExpectInvalid("n[3-]", "bound \"\"");
  ExpectInvalid("n[1-2-3]", "\"1-2-3\"");
  ExpectInvalid("n[+3]", "\"+3\"");
  ExpectInvalid("n[1234567890123456789]", "1234567890123456789");
}

TEST(ExpandSlurmNodelistTest, CapsExpansion) {
  EXPECT_EQ(Expand("n[1-100000]").size(), kMaxSlurmHosts);
  EXPECT_EQ(Expand("n[1-50000],m[1-50000]").size(), kMaxSlurmHosts);
  ExpectInvalid("n[1-100001]", "more than 100000 hosts");
  ExpectInvalid("n[0-999999999999999999]", "more than 100000 hosts");
  ExpectInvalid("n[1-1000]m[1-1000]", "more than 100000 hosts");
  ExpectInvalid("n[1-100000],extra", "more than 100000 hosts");
  ExpectInvalid("n[1-60000],m[1-60000]", "m[1-60000]");
}

using Env = std::map<std::string, std::string>;

absl::StatusOr<std::optional<SlurmJob>> FromEnv(const Env& env) {
  return SlurmJobFromEnvironment(
      [&env](absl::string_view name) -> std::optional<std::string> {
        auto it = env.find(std::string(name));
        if (it == env.end()) return std::nullopt;
        return it->second;
      });
}

Env BasicEnv() {
  return {{"SLURM_JOB_ID", "4242"},
          {"SLURM_NNODES", "6"},
          {"SLURM_NODEID", "2"},
          {"SLURM_JOB_NODELIST", "node[01-04,07],gpu3"}};
}

void ExpectEnvInvalid(const Env& env, absl::string_view mentions) {
  absl::StatusOr<std::optional<SlurmJob>> job = FromEnv(env);
  ASSERT_FALSE(job.ok());
  EXPECT_EQ(job.status().code(), absl::StatusCode::kInvalidArgument)
      << job.status();
  EXPECT_THAT(std::string(job.status().message()),
              HasSubstr(std::string(mentions)));
}

TEST(SlurmJobFromEnvironmentTest, NotInSlurm) {
  absl::StatusOr<std::optional<SlurmJob>> job = FromEnv({});
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_FALSE(job->has_value());
  // Other SLURM_ variables without a job id: still not a Slurm job.
  job = FromEnv({{"SLURM_NNODES", "2"}});
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_FALSE(job->has_value());
}

TEST(SlurmJobFromEnvironmentTest, ReadsJob) {
  absl::StatusOr<std::optional<SlurmJob>> job = FromEnv(BasicEnv());
  ASSERT_TRUE(job.ok()) << job.status();
  ASSERT_TRUE(job->has_value());
  const SlurmJob& j = **job;
  EXPECT_EQ(j.job_id, "4242");
  EXPECT_EQ(j.nnodes, 6);
  EXPECT_EQ(j.node_rank, 2);
  EXPECT_EQ(j.head_host, "node01");
  EXPECT_THAT(j.hosts, ElementsAre("node01", "node02", "node03", "node04",
                                   "node07", "gpu3"));
  EXPECT_EQ(j.ntasks_per_node, 0);
}

TEST(SlurmJobFromEnvironmentTest, AlternativeNames) {
  Env env = {{"SLURM_JOB_ID", "7"},
             {"SLURM_JOB_NUM_NODES", "2"},
             {"SLURM_NODEID", "1"},
             {"SLURM_NODELIST", "a[1-2]-ib"}};
  absl::StatusOr<std::optional<SlurmJob>> job = FromEnv(env);
  ASSERT_TRUE(job.ok()) << job.status();
  ASSERT_TRUE(job->has_value());
  EXPECT_EQ((*job)->nnodes, 2);
  EXPECT_EQ((*job)->node_rank, 1);
  EXPECT_EQ((*job)->head_host, "a1-ib");
  EXPECT_THAT((*job)->hosts, ElementsAre("a1-ib", "a2-ib"));
}

TEST(SlurmJobFromEnvironmentTest, PrimaryNamesWin) {
  Env env = BasicEnv();
  env["SLURM_JOB_NUM_NODES"] = "99";
  env["SLURM_NODELIST"] = "other";
  absl::StatusOr<std::optional<SlurmJob>> job = FromEnv(env);
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ((*job)->nnodes, 6);
  EXPECT_EQ((*job)->head_host, "node01");
}

TEST(SlurmJobFromEnvironmentTest, NtasksPerNode) {
  for (const auto& [value, expected] : std::vector<std::pair<std::string, int>>{
           {"4", 4}, {"4(x2)", 4}, {" 8 ", 8}, {"2(x3),1", 2}, {"16,8", 16}}) {
    Env env = BasicEnv();
    env["SLURM_NTASKS_PER_NODE"] = value;
    absl::StatusOr<std::optional<SlurmJob>> job = FromEnv(env);
    ASSERT_TRUE(job.ok()) << value << ": " << job.status();
    EXPECT_EQ((*job)->ntasks_per_node, expected) << value;
  }
  for (const std::string value :
       {"", "x", "(x2)", "0", "4x", "-1", "4.5", "99999999999999999999"}) {
    Env env = BasicEnv();
    env["SLURM_NTASKS_PER_NODE"] = value;
    ExpectEnvInvalid(env, "SLURM_NTASKS_PER_NODE");
  }
}

TEST(SlurmJobFromEnvironmentTest, MissingVariables) {
  for (const char* name :
       {"SLURM_NNODES", "SLURM_NODEID", "SLURM_JOB_NODELIST"}) {
    Env env = BasicEnv();
    env.erase(name);
    ExpectEnvInvalid(env, name);
  }
  Env env = BasicEnv();
  env.erase("SLURM_NNODES");
  ExpectEnvInvalid(env, "SLURM_NNODES or SLURM_JOB_NUM_NODES is not set");
  env = BasicEnv();
  env.erase("SLURM_JOB_NODELIST");
  ExpectEnvInvalid(env, "SLURM_JOB_NODELIST or SLURM_NODELIST is not set");
}

TEST(SlurmJobFromEnvironmentTest, EmptyVariables) {
  for (const char* name :
       {"SLURM_JOB_ID", "SLURM_NNODES", "SLURM_NODEID", "SLURM_JOB_NODELIST"}) {
    Env env = BasicEnv();
    env[name] = " ";
    ExpectEnvInvalid(env, absl::StrCat(name, " is set but empty"));
  }
}

TEST(SlurmJobFromEnvironmentTest, BadIntegers) {
  Env env = BasicEnv();
  env["SLURM_NNODES"] = "six";
  ExpectEnvInvalid(env, "SLURM_NNODES=\"six\" is not an integer");
  env = BasicEnv();
  env["SLURM_NNODES"] = "0";
  ExpectEnvInvalid(env, "SLURM_NNODES=\"0\" is not >= 1");
  env = BasicEnv();
  env["SLURM_NODEID"] = "1x";
  ExpectEnvInvalid(env, "SLURM_NODEID=\"1x\" is not an integer");
  env = BasicEnv();
  env["SLURM_NNODES"] = "99999999999";
  ExpectEnvInvalid(env, "SLURM_NNODES");
}

TEST(SlurmJobFromEnvironmentTest, NodeRankOutOfRange) {
  Env env = BasicEnv();
  env["SLURM_NODEID"] = "6";
  ExpectEnvInvalid(env, "SLURM_NODEID=\"6\" is outside [0, 6)");
  env["SLURM_NODEID"] = "-1";
  ExpectEnvInvalid(env, "SLURM_NODEID=\"-1\" is outside [0, 6)");
  env["SLURM_NODEID"] = "5";
  EXPECT_TRUE(FromEnv(env).ok());
}

TEST(SlurmJobFromEnvironmentTest, BadNodelist) {
  Env env = BasicEnv();
  env["SLURM_JOB_NODELIST"] = "node[01-04";
  ExpectEnvInvalid(env, "SLURM_JOB_NODELIST=\"node[01-04\"");
  ExpectEnvInvalid(env, "unbalanced");
}

TEST(SlurmJobFromEnvironmentTest, NodeCountMismatch) {
  Env env = BasicEnv();
  env["SLURM_NNODES"] = "5";
  ExpectEnvInvalid(env, "names 6 hosts but SLURM_NNODES=5");
  env["SLURM_NNODES"] = "7";
  ExpectEnvInvalid(env, "names 6 hosts but SLURM_NNODES=7");
}

// Sets (or, with nullopt, unsets) environment variables for one scope and
// restores what was there before.
class ScopedEnv {
 public:
  explicit ScopedEnv(std::map<std::string, std::optional<std::string>> vars) {
    for (const auto& [name, value] : vars) {
      const char* old = std::getenv(name.c_str());
      saved_[name] = old ? std::optional<std::string>(old) : std::nullopt;
      Set(name, value);
    }
  }
  ~ScopedEnv() {
    for (const auto& [name, value] : saved_) Set(name, value);
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  static void Set(const std::string& name,
                  const std::optional<std::string>& value) {
    if (value.has_value()) {
      setenv(name.c_str(), value->c_str(), 1);
    } else {
      unsetenv(name.c_str());
    }
  }
  std::map<std::string, std::optional<std::string>> saved_;
};

std::optional<std::string> GetenvOrNull(const char* name) {
  const char* value = std::getenv(name);
  return value ? std::optional<std::string>(value) : std::nullopt;
}

TEST(SlurmJobFromEnvironmentTest, ProcessEnvironment) {
  const std::vector<const char*> names = {
      "SLURM_JOB_ID",         "SLURM_NNODES",       "SLURM_JOB_NUM_NODES",
      "SLURM_NODEID",         "SLURM_JOB_NODELIST", "SLURM_NODELIST",
      "SLURM_NTASKS_PER_NODE"};
  std::vector<std::optional<std::string>> before;
  for (const char* name : names) before.push_back(GetenvOrNull(name));
  {
    ScopedEnv env({{"SLURM_JOB_ID", "31337"},
                   {"SLURM_NNODES", "4"},
                   {"SLURM_JOB_NUM_NODES", std::nullopt},
                   {"SLURM_NODEID", "3"},
                   {"SLURM_JOB_NODELIST", "r[1-2]n[1-2]"},
                   {"SLURM_NODELIST", std::nullopt},
                   {"SLURM_NTASKS_PER_NODE", "8(x4)"}});
    absl::StatusOr<std::optional<SlurmJob>> job = SlurmJobFromEnvironment();
    ASSERT_TRUE(job.ok()) << job.status();
    ASSERT_TRUE(job->has_value());
    EXPECT_EQ((*job)->job_id, "31337");
    EXPECT_EQ((*job)->nnodes, 4);
    EXPECT_EQ((*job)->node_rank, 3);
    EXPECT_EQ((*job)->head_host, "r1n1");
    EXPECT_THAT((*job)->hosts, ElementsAre("r1n1", "r1n2", "r2n1", "r2n2"));
    EXPECT_EQ((*job)->ntasks_per_node, 8);
  }
  {
    ScopedEnv env({{"SLURM_JOB_ID", std::nullopt}});
    absl::StatusOr<std::optional<SlurmJob>> job = SlurmJobFromEnvironment();
    ASSERT_TRUE(job.ok()) << job.status();
    EXPECT_FALSE(job->has_value());
  }
  for (size_t i = 0; i < names.size(); ++i) {
    EXPECT_EQ(GetenvOrNull(names[i]), before[i]) << names[i];
  }
}

}  // namespace
}  // namespace shoal::launch
