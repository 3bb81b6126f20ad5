#include "observe/timeline_ring.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/temp_dir.h"
#include "gtest/gtest.h"
#include "observe/timeline_read.h"

namespace shoal::observe {
namespace {

std::string UniqueJob(const char* what) {
  static int n = 0;
  return absl::StrCat("tltest-", what, "-", getpid(), "-", ++n);
}

// Removes the ring's file at the end of a test.
struct Unlinker {
  std::string name;
  ~Unlinker() {
    if (!name.empty()) unlink(absl::StrCat("/dev/shm/", name).c_str());
  }
};

// An event whose every field follows from `i`, so a reader can tell a whole
// event from a torn one.
TimelineEvent EventFor(uint64_t i, uint32_t writer) {
  TimelineEvent e;
  e.start_ns = static_cast<int64_t>(i) * 10 + 1;
  e.end_ns = e.start_ns + 5;
  e.aux_ns = static_cast<int64_t>(i) * 7;
  e.id = i;
  e.bytes = i * 3 + writer;
  e.tid = writer;
  e.kind = static_cast<uint16_t>(EventKind::kTask);
  absl::SNPrintF(e.name, sizeof(e.name), "event-%d-%d", i, writer);
  absl::SNPrintF(e.detail, sizeof(e.detail), "w%d", writer);
  return e;
}

bool Whole(const TimelineEvent& e) {
  const TimelineEvent want = EventFor(e.id, e.tid);
  return e.start_ns == want.start_ns && e.end_ns == want.end_ns &&
         e.aux_ns == want.aux_ns && e.bytes == want.bytes &&
         std::string(e.name) == want.name &&
         std::string(e.detail) == want.detail;
}

TEST(TimelineRingTest, WrapsWhileReadWithoutTornEvents) {
  auto ring = TimelineRing::Create(UniqueJob("wrap"), "worker 0", 256);
  ASSERT_TRUE(ring.ok()) << ring.status();
  Unlinker unlink{(*ring)->name()};
  ASSERT_EQ((*ring)->capacity(), 256u);
  constexpr uint64_t kEvents = 400000;
  std::atomic<bool> done{false};
  std::thread writer([&] {
    for (uint64_t i = 0; i < kEvents; ++i) (*ring)->Write(EventFor(i, 1));
    done = true;
  });
  uint64_t reads = 0, seen = 0;
  while (!done || reads == 0) {
    absl::StatusOr<RingSnapshot> s = ReadRing((*ring)->name(), 0);
    ASSERT_TRUE(s.ok()) << s.status();
    ++reads;
    ASSERT_LE(s->events.size(), 256u);
    uint64_t last = 0;
    for (size_t k = 0; k < s->events.size(); ++k) {
      const TimelineEvent& e = s->events[k];
      ASSERT_TRUE(Whole(e)) << "torn event " << e.id << " " << e.name;
      // Oldest first, never older than one lap behind the head.
      if (k > 0) {
        ASSERT_GT(e.id, last);
      }
      ASSERT_LT(e.id, s->written);
      ASSERT_GE(e.id + 256, s->written);
      last = e.id;
    }
    seen += s->events.size();
  }
  writer.join();
  absl::StatusOr<RingSnapshot> s = ReadRing((*ring)->name(), 0);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->written, kEvents);
  EXPECT_EQ(s->dropped, 0u);
  ASSERT_EQ(s->events.size(), 256u);
  for (size_t k = 0; k < 256; ++k) {
    EXPECT_EQ(s->events[k].id, kEvents - 256 + k);
    EXPECT_TRUE(Whole(s->events[k]));
  }
  EXPECT_GT(reads, 1u);
  EXPECT_GT(seen, 0u);
}

TEST(TimelineRingTest, WritersOfManyThreadsKeepEveryEventWhole) {
  auto ring = TimelineRing::Create(UniqueJob("mt"), "client", 1024);
  ASSERT_TRUE(ring.ok()) << ring.status();
  Unlinker unlink{(*ring)->name()};
  constexpr uint64_t kPerThread = 50000;
  std::vector<std::thread> writers;
  for (uint32_t w = 1; w <= 4; ++w) {
    writers.emplace_back([&, w] {
      for (uint64_t i = 0; i < kPerThread; ++i) (*ring)->Write(EventFor(i, w));
    });
  }
  for (int r = 0; r < 200; ++r) {
    absl::StatusOr<RingSnapshot> s = ReadRing((*ring)->name(), 0);
    ASSERT_TRUE(s.ok()) << s.status();
    for (const TimelineEvent& e : s->events) ASSERT_TRUE(Whole(e)) << e.name;
  }
  for (std::thread& t : writers) t.join();
  absl::StatusOr<RingSnapshot> s = ReadRing((*ring)->name(), 0);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->written, 4 * kPerThread);
  // Every slot holds its last lap's event unless that one was dropped.
  EXPECT_GE(s->events.size() + s->dropped, 1024u);
  for (const TimelineEvent& e : s->events) EXPECT_TRUE(Whole(e));
}

TEST(TimelineRingTest, NamesAreCutToTheirFields) {
  auto ring = TimelineRing::Create(UniqueJob("names"), "rank 0", 64);
  ASSERT_TRUE(ring.ok()) << ring.status();
  Unlinker unlink{(*ring)->name()};
  TimelineEventHead h;
  h.start_ns = 1;
  h.end_ns = 2;
  h.id = 7;
  h.kind = static_cast<uint16_t>(EventKind::kCollective);
  const std::string long_name(100, 'n'), long_detail(40, 'd');
  // A lap of long names, then, in the same slots, a long and a short one.
  for (int i = 0; i < 65; ++i) (*ring)->Write(h, long_name, long_detail);
  h.id = 8;
  (*ring)->Write(h, "all_reduce", "");
  absl::StatusOr<RingSnapshot> s = ReadRing((*ring)->name(), 0);
  ASSERT_TRUE(s.ok()) << s.status();
  ASSERT_EQ(s->events.size(), 64u);
  const TimelineEvent& cut = s->events[62];
  const TimelineEvent& short_one = s->events[63];
  EXPECT_EQ(std::string(cut.name), long_name.substr(0, 55));
  EXPECT_EQ(std::string(cut.detail), long_detail.substr(0, 15));
  EXPECT_EQ(cut.id, 7u);
  EXPECT_EQ(short_one.id, 8u);
  EXPECT_EQ(std::string(short_one.name), "all_reduce");
  EXPECT_EQ(std::string(short_one.detail), "");
  // The rest of each field is zeros: nothing of the slot's older event.
  for (size_t i = 10; i < sizeof(short_one.name); ++i)
    EXPECT_EQ(short_one.name[i], '\0') << i;
  for (size_t i = 0; i < sizeof(short_one.detail); ++i)
    EXPECT_EQ(short_one.detail[i], '\0') << i;
}

TEST(TimelineRingTest, ReadsOnlyPrivateRingsOfItsLayout) {
  const std::string job = UniqueJob("perm");
  auto ring = TimelineRing::Create(job, "worker 0", 64);
  ASSERT_TRUE(ring.ok()) << ring.status();
  Unlinker unlink{(*ring)->name()};
  const std::string path = absl::StrCat("/dev/shm/", (*ring)->name());
  struct stat st;
  ASSERT_EQ(stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600);
  EXPECT_TRUE(ReadRing((*ring)->name(), 0).ok());

  // Readable by others: refused.
  ASSERT_EQ(chmod(path.c_str(), 0644), 0);
  EXPECT_TRUE(absl::IsPermissionDenied(ReadRing((*ring)->name(), 0).status()));
  ASSERT_EQ(chmod(path.c_str(), 0600), 0);

  // A link under a ring's name: refused, not followed.
  const std::string link_name =
      absl::StrCat("shoal-", job, "-1-aaaaaaaaaaaa-timeline");
  Unlinker unlink_link{link_name};
  ASSERT_EQ(symlink(path.c_str(), absl::StrCat("/dev/shm/", link_name).c_str()),
            0);
  EXPECT_TRUE(absl::IsPermissionDenied(ReadRing(link_name, 0).status()));

  // A file of the right size but not a ring, and one of another size.
  const std::string junk =
      absl::StrCat("shoal-", job, "-2-bbbbbbbbbbbb-timeline");
  Unlinker unlink_junk{junk};
  const int fd = open(absl::StrCat("/dev/shm/", junk).c_str(),
                      O_RDWR | O_CREAT | O_EXCL, 0600);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(ftruncate(fd, kTimelineHeaderBytes + 64 * sizeof(TimelineSlot)), 0);
  EXPECT_TRUE(absl::IsDataLoss(ReadRing(junk, 0).status()));
  ASSERT_EQ(ftruncate(fd, 12345), 0);
  EXPECT_TRUE(absl::IsDataLoss(ReadRing(junk, 0).status()));
  close(fd);

  // Gathering skips all three and keeps the real ring.
  absl::StatusOr<Timeline> t = GatherTimeline(job, absl::InfiniteDuration());
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->processes.size(), 1u);
  EXPECT_EQ(t->skipped_rings, 2u);
}

TEST(TimelineRingTest, CollectiveTalliesAddUpByOpAndBackend) {
  auto ring = TimelineRing::Create(UniqueJob("tally"), "rank 0", 64);
  ASSERT_TRUE(ring.ok()) << ring.status();
  Unlinker gone{(*ring)->name()};
  // Four threads counting two kinds at once, each naming them first.
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      const uint32_t tid = 10 + t;
      for (int i = 0; i < 1000; ++i) {
        (*ring)->CountCollective("all_reduce", "shm", 4096, 10, 3, tid);
        (*ring)->CountCollective("broadcast", "gloo", 8, 20, 0, tid);
      }
    });
  }
  for (std::thread& t : threads) t.join();
  // Each thread has its own entries (8 so far); the reader sums them. Kinds
  // beyond the tallies are not counted (and do not disturb others). The
  // names below are made at one address, one after the other.
  for (uint32_t k = 0; k < kCollectiveTallies; ++k) {
    const std::string op = absl::StrCat("op", k);
    (*ring)->CountCollective(op, "shm", 1, 1, 1, /*tid=*/99);
  }
  auto snap = ReadRing((*ring)->name(), 0, /*events=*/false);
  ASSERT_TRUE(snap.ok()) << snap.status();
  EXPECT_TRUE(snap->events.empty());
  ASSERT_EQ(snap->collectives.size(), 2 + (kCollectiveTallies - 8));
  const CollectiveCount& a = snap->collectives[0];
  const CollectiveCount& b = snap->collectives[1];
  EXPECT_EQ(a.op, "all_reduce");
  EXPECT_EQ(a.backend, "shm");
  EXPECT_EQ(a.calls, 4000u);
  EXPECT_EQ(a.bytes, 4000u * 4096);
  EXPECT_EQ(a.busy_ns, 40000u);
  EXPECT_EQ(a.wait_ns, 12000u);
  EXPECT_EQ(b.op, "broadcast");
  EXPECT_EQ(b.backend, "gloo");
  EXPECT_EQ(b.calls, 4000u);
  EXPECT_EQ(snap->collectives[2].op, "op0");
  EXPECT_EQ(snap->collectives[3].op, "op1");
  EXPECT_EQ(snap->collectives[3].calls, 1u);
  EXPECT_EQ(snap->collectives.back().op,
            absl::StrCat("op", kCollectiveTallies - 9));
}

TEST(TimelineRingTest, SegmentNamesParseFromTheEnd) {
  int pid = 0;
  EXPECT_TRUE(
      IsTimelineSegmentOf("shoal-a-1-42-0123456789ab-timeline", "a-1", &pid));
  EXPECT_EQ(pid, 42);
  EXPECT_FALSE(
      IsTimelineSegmentOf("shoal-a-1-42-0123456789ab-timeline", "a", &pid));
  EXPECT_FALSE(IsTimelineSegmentOf("shoal-a-42-0123456789ab-store", "a", &pid));
  EXPECT_FALSE(
      IsTimelineSegmentOf("shoal-a-x-0123456789ab-timeline", "a", &pid));
  EXPECT_FALSE(
      IsTimelineSegmentOf("shoal-a-42-0123456789zz-timeline", "a", &pid));
  EXPECT_FALSE(TimelineRing::Create("bad/job", "x", 64).ok());
}

// The pid of a process that has exited.
int DeadPid() {
  const pid_t child = fork();
  if (child == 0) _exit(0);
  waitpid(child, nullptr, 0);
  return child;
}

// Makes an empty file in `dir` named as `pid`'s ring of `job`; returns its
// name.
std::string RingFile(const TempDir& dir, const std::string& job, int pid) {
  static int n = 0;
  const std::string name =
      TimelineSegmentName(job, pid, absl::StrFormat("%012x", ++n));
  EXPECT_TRUE(dir.WriteFile(name, "").ok()) << name;
  return name;
}

bool Exists(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0;
}

// In a folder of its own: the stores of other tests sweep /dev/shm.
TEST(TimelineRingTest, OnlyRingsOfEndedJobsAreRemoved) {
  absl::StatusOr<TempDir> dir = TempDir::Create("shoal-rings-");
  ASSERT_TRUE(dir.ok()) << dir.status();
  const int dead = DeadPid();
  const std::string ended = RingFile(*dir, "ended", dead);
  const std::string stored = RingFile(*dir, "stored", dead);
  const std::string writing_dead = RingFile(*dir, "writing", dead);
  const std::string writing_live = RingFile(*dir, "writing", getpid());
  const std::string other = "shoal-notes.txt";
  ASSERT_TRUE(dir->WriteFile(other, "").ok());

  const std::vector<std::string> removed = RemoveEndedJobsRings(
      [&](const std::string& job) { return job == "stored"; },
      dir->path() + "/");
  // Only the job with no live writer and nothing else keeping it.
  EXPECT_EQ(removed, std::vector<std::string>{ended});
  EXPECT_FALSE(Exists(dir->File(ended)));
  for (const std::string& kept : {stored, writing_dead, writing_live, other}) {
    EXPECT_TRUE(Exists(dir->File(kept))) << kept;
  }
}

TEST(TimelineRingTest, JsonEscapesWhateverARingHolds) {
  const std::string job = UniqueJob("json");
  auto ring = TimelineRing::Create(job, "worker \"0\"", 64);
  ASSERT_TRUE(ring.ok()) << ring.status();
  Unlinker unlink{(*ring)->name()};
  TimelineEvent e = EventFor(1, 7);
  const char hostile[] = "a\"b\\c\n\x01\xff}";
  std::memcpy(e.name, hostile, sizeof(hostile));
  (*ring)->Write(e);
  absl::StatusOr<Timeline> t = GatherTimeline(job, absl::InfiniteDuration());
  ASSERT_TRUE(t.ok()) << t.status();
  const std::string json = TimelineToChromeJson(*t);
  EXPECT_NE(json.find("\"name\":\"a\\\"b\\\\c\\u000a\\u0001\\u00ff}\""),
            std::string::npos)
      << json;
  EXPECT_NE(json.find("worker \\\"0\\\""), std::string::npos) << json;
  for (unsigned char c : json)
    EXPECT_TRUE(c == '\n' || (c >= 0x20 && c < 0x7f));
}

}  // namespace
}  // namespace shoal::observe
