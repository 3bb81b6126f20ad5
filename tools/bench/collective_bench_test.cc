#include "tools/bench/collective_bench.h"

#include "gtest/gtest.h"

namespace shoal::bench {
namespace {

TEST(CollectiveBenchTest, BusFactorsAreNcclTests) {
  EXPECT_DOUBLE_EQ(BusFactor(Collective::kAllReduce, 2), 1.0);
  EXPECT_DOUBLE_EQ(BusFactor(Collective::kAllReduce, 4), 1.5);
  EXPECT_DOUBLE_EQ(BusFactor(Collective::kAllGather, 4), 0.75);
  EXPECT_DOUBLE_EQ(BusFactor(Collective::kReduceScatter, 2), 0.5);
  EXPECT_DOUBLE_EQ(BusFactor(Collective::kAllToAll, 4), 0.75);
  EXPECT_DOUBLE_EQ(BusFactor(Collective::kBroadcast, 8), 1.0);
  EXPECT_DOUBLE_EQ(BusFactor(Collective::kReduce, 8), 1.0);
  EXPECT_DOUBLE_EQ(BusFactor(Collective::kSendRecv, 8), 1.0);
}

TEST(CollectiveBenchTest, ParsesEveryCollectiveName) {
  for (Collective c :
       {Collective::kAllReduce, Collective::kBroadcast, Collective::kReduce,
        Collective::kAllGather, Collective::kReduceScatter,
        Collective::kAllToAll, Collective::kSendRecv}) {
    absl::StatusOr<Collective> p = ParseCollective(CollectiveName(c));
    ASSERT_TRUE(p.ok());
    EXPECT_EQ(*p, c);
  }
  EXPECT_FALSE(ParseCollective("allreduce_perf").ok());
}

TEST(CollectiveBenchTest, AutoItersFillsTheTargetWithinBounds) {
  EXPECT_EQ(AutoIters(1e-3, 0.02), 20);
  EXPECT_EQ(AutoIters(1.0, 0.02), 5);
  EXPECT_EQ(AutoIters(1e-9, 0.02), 100000);
  EXPECT_EQ(AutoIters(0, 0.02), 5);
}

TEST(CollectiveBenchTest, RowsSurviveJson) {
  CollectiveBenchConfig c;
  CollectiveRow r{"shoal", 4096, 1024, 1.25, 1.5, 0, 3};
  const std::string j = RowToJson(r, c, 2);
  absl::StatusOr<CollectiveRow> back = RowFromJson(j);
  ASSERT_TRUE(back.ok()) << back.status() << j;
  EXPECT_EQ(back->system, "shoal");
  EXPECT_EQ(back->bytes, 4096u);
  EXPECT_EQ(back->count, 1024);
  EXPECT_DOUBLE_EQ(back->oop_us, 1.25);
  EXPECT_DOUBLE_EQ(back->ip_us, 1.5);
  EXPECT_EQ(back->ip_wrong, 3);
  EXPECT_DOUBLE_EQ(back->oop_lo_us, -1);  // no spread given
  r.oop_lo_us = 1.0;
  r.oop_hi_us = 9.5;
  r.ip_lo_us = 1.25;
  r.ip_hi_us = 2.0;
  back = RowFromJson(RowToJson(r, c, 2));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_DOUBLE_EQ(back->oop_lo_us, 1.0);
  EXPECT_DOUBLE_EQ(back->oop_hi_us, 9.5);
  EXPECT_DOUBLE_EQ(back->ip_lo_us, 1.25);
  EXPECT_DOUBLE_EQ(back->ip_hi_us, 2.0);
  // The peers' rows (printed by their programs) read the same way.
  back = RowFromJson(
      "{\"system\": \"Open MPI\", \"bytes\": 1048576, \"count\": 262144, "
      "\"oop_us\": 150.500, \"oop_wrong\": 0, \"ip_us\": 140.000, "
      "\"ip_wrong\": 0}");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->system, "Open MPI");
  EXPECT_DOUBLE_EQ(back->oop_us, 150.5);
  EXPECT_FALSE(RowFromJson("# a comment").ok());
}

// A bimodal run shows in the spread and in the worst round, not in the
// median of the rounds.
TEST(CollectiveBenchTest, SpreadAndWorstRoundShowASlowRound) {
  auto row = [](double median, double lo, double hi) {
    CollectiveRow r;
    r.system = "x";
    r.oop_us = median;
    r.oop_lo_us = lo;
    r.oop_hi_us = hi;
    return r;
  };
  const std::vector<CollectiveRow> shoal = {row(85, 84, 90), row(534, 80, 560),
                                            row(86, 85, 88)};
  const std::vector<CollectiveRow> mpi = {row(165, 160, 170),
                                          row(166, 150, 180), row(160, -1, -1)};
  EXPECT_EQ(SpreadCell(shoal, false), "80.0-560.0");
  // A row without a spread counts with its median.
  EXPECT_EQ(SpreadCell(mpi, false), "150.0-180.0");
  EXPECT_EQ(SpreadCell({}, false), "-");
  EXPECT_EQ(SpreadCell(shoal, true), "-");  // nothing in place
  EXPECT_EQ(WorstRoundRatioCell(shoal, mpi, false), "0.31x");  // 166 / 534
  EXPECT_EQ(WorstRoundRatioCell(shoal, {}, false), "-");
}

// Ranks take the allowed CPUs in order while they fit; beyond, none binds.
TEST(CollectiveBenchTest, EachRankGetsACpuOfItsOwnOnlyWhereTheyFit) {
  EXPECT_EQ(CpuForLocalRank({0, 1}, 0, 2), 0);
  EXPECT_EQ(CpuForLocalRank({0, 1}, 1, 2), 1);
  EXPECT_EQ(CpuForLocalRank({2, 5, 7}, 1, 2), 5);
  EXPECT_EQ(CpuForLocalRank({0, 1}, 0, 4), -1);
  EXPECT_EQ(CpuForLocalRank({0, 1}, 2, 2), -1);
  EXPECT_EQ(CpuForLocalRank({}, 0, 1), -1);
}

TEST(CollectiveBenchTest, FlagsMakeAConfigAndBadOnesAreRefused) {
  auto parse = [](std::vector<const char*> argv) {
    cli::ArgParser p("t", "t");
    CollectiveFlags f = DeclareCollectiveFlags(p);
    argv.insert(argv.begin(), "t");
    absl::Status s =
        p.Parse(static_cast<int>(argv.size()), const_cast<char**>(argv.data()));
    if (!s.ok()) return absl::StatusOr<CollectiveBenchConfig>(s);
    return ConfigFromFlags(f);
  };
  absl::StatusOr<CollectiveBenchConfig> c =
      parse({"-b", "8K", "-e", "1M", "-f", "2", "-d", "half", "-o", "max", "-n",
             "7"});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->min_bytes, 8192u);
  EXPECT_EQ(c->max_bytes, 1u << 20);
  EXPECT_EQ(c->dtype, DType::kF16);
  EXPECT_EQ(c->op, collectives::ReduceOp::kMax);
  EXPECT_EQ(c->iters, 7);
  EXPECT_EQ(c->backend, "auto");
  // The flags that reproduce it parse back to the same config.
  std::vector<std::string> args = ConfigArgs(*c);
  std::vector<const char*> argv;
  for (const std::string& a : args) argv.push_back(a.c_str());
  absl::StatusOr<CollectiveBenchConfig> again = parse(argv);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->min_bytes, c->min_bytes);
  EXPECT_EQ(again->dtype, c->dtype);
  EXPECT_EQ(again->op, c->op);
  EXPECT_FALSE(again->bind);
  absl::StatusOr<CollectiveBenchConfig> bound = parse({"--bind", "1"});
  ASSERT_TRUE(bound.ok()) << bound.status();
  EXPECT_TRUE(bound->bind);
  args = ConfigArgs(*bound);
  argv.clear();
  for (const std::string& a : args) argv.push_back(a.c_str());
  again = parse(argv);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_TRUE(again->bind);

  EXPECT_FALSE(parse({"-d", "uint8"}).ok());
  EXPECT_FALSE(parse({"-o", "xor"}).ok());
  EXPECT_FALSE(parse({"-b", "1M", "-e", "4K"}).ok());
  EXPECT_FALSE(parse({"-f", "1"}).ok());
  EXPECT_FALSE(parse({"--backend", "mpi"}).ok());
  EXPECT_FALSE(parse({"--coll", "sendrecv", "--backend", "nccl"}).ok());
}

}  // namespace
}  // namespace shoal::bench
