#include "tasks/task_table.h"

#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <functional>
#include <map>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace shoal::tasks {
namespace {

std::string JobId() {
  static int n = 0;
  return absl::StrCat("tt", getpid(), "-", n++);
}

class TaskTableTest : public ::testing::Test {
 protected:
  void SetUp() override {
    TaskTableOptions o;
    o.max_tasks = 1024;
    o.max_chunks = 64;
    auto t = TaskTable::Create(JobId(), o);
    ASSERT_TRUE(t.ok()) << t.status();
    table_ = *std::move(t);
    client_ = *table_->AddClient(getpid());
    worker_ = *table_->AddWorker(getpid(), 1, 0);
  }

  TaskSubmission Task(std::string fn, std::string args = "",
                      uint32_t gpus = 0) {
    TaskSubmission t;
    t.function = std::move(fn);
    t.args = std::move(args);
    t.gpus = gpus;
    return t;
  }

  std::unique_ptr<TaskTable> table_;
  uint32_t client_ = 0;
  uint32_t worker_ = 0;
};

TEST_F(TaskTableTest, SubmitClaimCompleteTakeInFifoOrder) {
  const std::string big(200000, 'x');  // spans chunks
  auto ids =
      table_->Submit(client_, {Task("a", "1"), Task("b", big), Task("c")});
  ASSERT_TRUE(ids.ok()) << ids.status();
  ASSERT_EQ(ids->size(), 3u);
  EXPECT_EQ(*table_->Poll((*ids)[0]), TaskState::kQueued);
  for (int n = 0; n < 3; ++n) {
    auto claim = table_->Claim(worker_);
    ASSERT_TRUE(claim.ok() && claim->has_value());
    EXPECT_EQ((*claim)->id, (*ids)[n]);
    EXPECT_EQ((*claim)->function, std::string(1, 'a' + n));
    EXPECT_EQ((*claim)->attempt, 1u);
    if (n == 1) {
      EXPECT_EQ((*claim)->args, big);
    }
    EXPECT_EQ(*table_->Poll((*ids)[n]), TaskState::kRunning);
    // Only one task at a time per worker is tracked; complete before the next.
    const std::string result =
        n == 2 ? std::string(100000, 'r') : absl::StrCat("r", n);
    ASSERT_TRUE(table_->Complete(worker_, (*ids)[n], 0, result).ok());
  }
  EXPECT_FALSE(table_->Claim(worker_)->has_value());
  for (int n = 0; n < 3; ++n) {
    EXPECT_EQ(*table_->Poll((*ids)[n]), TaskState::kDone);
    auto out = table_->Take(client_, (*ids)[n], /*release=*/true);
    ASSERT_TRUE(out.ok()) << out.status();
    EXPECT_EQ(out->code, 0);
    EXPECT_EQ(out->result,
              n == 2 ? std::string(100000, 'r') : absl::StrCat("r", n));
    EXPECT_EQ(table_->Poll((*ids)[n]).status().code(),
              absl::StatusCode::kNotFound);
  }
  auto st = table_->Stats();
  ASSERT_TRUE(st.ok());
  EXPECT_EQ(st->free_entries, 1024u);
  EXPECT_EQ(st->free_chunks, 64u);
  EXPECT_EQ(st->submitted, 3u);
  EXPECT_EQ(st->completed, 3u);
}

TEST_F(TaskTableTest, ResourceClassesAndFifoAcrossClasses) {
  const uint32_t gpu_worker = *table_->AddWorker(getpid(), 1, 1);
  auto ids =
      table_->Submit(client_, {Task("gpu", "", 1), Task("cpu1"), Task("cpu2")});
  ASSERT_TRUE(ids.ok());
  // The CPU-only worker skips the GPU task.
  auto c = table_->Claim(worker_);
  ASSERT_TRUE(c->has_value());
  EXPECT_EQ((*c)->function, "cpu1");
  // The GPU worker takes the oldest task it can run: the GPU one.
  auto g = table_->Claim(gpu_worker);
  ASSERT_TRUE(g->has_value());
  EXPECT_EQ((*g)->function, "gpu");
}

TEST_F(TaskTableTest, CancelQueuedAndRunning) {
  auto ids = *table_->Submit(client_, {Task("running"), Task("queued")});
  auto claim = table_->Claim(worker_);
  ASSERT_TRUE(claim->has_value());
  EXPECT_EQ(*table_->Cancel(ids[1]), TaskState::kQueued);
  EXPECT_EQ(*table_->Poll(ids[1]), TaskState::kDone);
  EXPECT_EQ(table_->Take(client_, ids[1], true)->code,
            static_cast<int32_t>(absl::StatusCode::kCancelled));
  EXPECT_FALSE(table_->CancelRequested(ids[0]));
  EXPECT_EQ(*table_->Cancel(ids[0]), TaskState::kRunning);
  EXPECT_TRUE(table_->CancelRequested(ids[0]));
  ASSERT_TRUE(table_
                  ->Complete(worker_, ids[0],
                             static_cast<int32_t>(absl::StatusCode::kCancelled),
                             "")
                  .ok());
  EXPECT_EQ(table_->Cancel(12345).status().code(), absl::StatusCode::kNotFound);
}

TEST_F(TaskTableTest, DeadWorkersTaskIsRetriedThenFails) {
  TaskSubmission t = Task("crashy");
  t.max_retries = 2;
  auto ids = *table_->Submit(client_, {t});
  for (int attempt = 1; attempt <= 3; ++attempt) {
    auto claim = table_->Claim(worker_);
    ASSERT_TRUE(claim->has_value()) << attempt;
    EXPECT_EQ((*claim)->attempt, static_cast<uint32_t>(attempt));
    auto requeued = table_->FailRunning(worker_, 14, "worker died");
    ASSERT_TRUE(requeued.ok());
    EXPECT_EQ(*requeued, attempt < 3);
  }
  auto out = table_->Take(client_, ids[0], true);
  ASSERT_TRUE(out.ok());
  EXPECT_EQ(out->code, 14);
  EXPECT_EQ(out->result, "worker died");
  EXPECT_EQ(out->attempts, 3u);
}

// A task's store account goes from its submission to every claim of it
// (retries included), and an entry reused by a task without one has none.
TEST_F(TaskTableTest, TheAccountGoesFromSubmitToEveryClaim) {
  TaskSubmission a = Task("a", std::string(100000, 'a'));  // payload chunks
  a.account = 7;
  TaskSubmission b = Task("b");
  TaskSubmission c = Task("c");
  c.account = 0xfffffffe;
  auto ids = table_->Submit(client_, {a, b, c});
  ASSERT_TRUE(ids.ok()) << ids.status();
  auto claim = table_->Claim(worker_);
  ASSERT_TRUE(claim.ok() && claim->has_value());
  EXPECT_EQ((*claim)->id, (*ids)[0]);
  EXPECT_EQ((*claim)->account, 7u);
  // The worker dies: the retry carries the account too.
  ASSERT_TRUE(*table_->FailRunning(worker_, 14, "worker died"));
  claim = table_->Claim(worker_);
  ASSERT_TRUE(claim.ok() && claim->has_value());
  EXPECT_EQ((*claim)->id, (*ids)[0]);
  EXPECT_EQ((*claim)->attempt, 2u);
  EXPECT_EQ((*claim)->account, 7u);
  // A task claimed inside it (nested) has its own.
  auto nested = table_->ClaimNested(worker_);
  ASSERT_TRUE(nested.ok() && nested->has_value()) << nested.status();
  EXPECT_EQ((*nested)->id, (*ids)[1]);
  EXPECT_EQ((*nested)->account, 0u);
  ASSERT_TRUE(table_->Complete(worker_, (*ids)[1], 0, "").ok());
  ASSERT_TRUE(table_->Complete(worker_, (*ids)[0], 0, "").ok());
  claim = table_->Claim(worker_);
  ASSERT_TRUE(claim.ok() && claim->has_value());
  EXPECT_EQ((*claim)->account, 0xfffffffeu);
  ASSERT_TRUE(table_->Complete(worker_, (*ids)[2], 0, "").ok());
  for (uint64_t id : *ids) ASSERT_TRUE(table_->Take(client_, id, true).ok());

  // The entry c used is the next one given out (the last freed): reused by
  // a task without an account, it claims none.
  auto again = table_->Submit(client_, {Task("plain")});
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(TaskIndex((*again)[0]), TaskIndex((*ids)[2]));
  claim = table_->Claim(worker_);
  ASSERT_TRUE(claim.ok() && claim->has_value());
  EXPECT_EQ((*claim)->id, (*again)[0]);
  EXPECT_EQ((*claim)->account, 0u);
  ASSERT_TRUE(table_->Complete(worker_, (*again)[0], 0, "").ok());
  ASSERT_TRUE(table_->Take(client_, (*again)[0], true).ok());
}

TEST_F(TaskTableTest, RemovedClientsTasksAreFreed) {
  auto ids = *table_->Submit(client_, {Task("a"), Task("b"), Task("c")});
  auto claim = table_->Claim(worker_);  // a runs
  ASSERT_TRUE(table_->Complete(worker_, ids[0], 0, "done").ok());
  claim = table_->Claim(worker_);  // b runs
  ASSERT_TRUE(table_->RemoveClient(client_).ok());
  EXPECT_TRUE(table_->CancelRequested(ids[1]));
  ASSERT_TRUE(table_->Complete(worker_, ids[1], 0, "late").ok());
  auto st = table_->Stats();
  EXPECT_EQ(st->free_entries, 1024u);
  EXPECT_EQ(st->queued, 0u);
}

TEST_F(TaskTableTest, RejectsBadSubmissions) {
  EXPECT_EQ(table_->Submit(client_, {Task("")}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(
      table_->Submit(client_, {Task(std::string(200, 'f'))}).status().code(),
      absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(table_->Submit(client_, {Task("f", std::string(10 << 20, 'a'))})
                .status()
                .code(),
            absl::StatusCode::kResourceExhausted);
  auto st = table_->Stats();
  EXPECT_EQ(st->free_entries, 1024u);
  EXPECT_EQ(st->free_chunks, 64u);
}

// The largest payloads (8 chunks of arguments, and of result) fit one
// journaled step: taking or freeing a chain journals two words whatever its
// length (more than 4 chunks used to overflow the 32-word journal, which
// aborts the process).
TEST_F(TaskTableTest, LargestPayloadsGoThrough) {
  const size_t largest = 8 * (TaskTable::kChunkBytes - 8);
  const std::string args(largest, 'a');
  const std::string result(largest, 'r');
  auto ids = table_->Submit(client_, {Task("large", args)});
  ASSERT_TRUE(ids.ok()) << ids.status();
  auto claim = table_->Claim(worker_);
  ASSERT_TRUE(claim.ok() && claim->has_value());
  EXPECT_EQ((*claim)->args, args);
  ASSERT_TRUE(table_->Complete(worker_, (*ids)[0], 0, result).ok());
  auto out = table_->Take(client_, (*ids)[0], /*release=*/true);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->result, result);
  EXPECT_EQ(table_->Submit(client_, {Task("over", args + "x")}).status().code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(table_->Stats()->free_chunks, 64u);
}

TEST_F(TaskTableTest, FullTableIsResourceExhausted) {
  std::vector<TaskSubmission> many(1024, Task("x"));
  ASSERT_TRUE(table_->Submit(client_, many).ok());
  EXPECT_EQ(table_->Submit(client_, {Task("one-more")}).status().code(),
            absl::StatusCode::kResourceExhausted);
}

// Real processes: two forked workers run 20,000 tasks submitted by this one.
TEST_F(TaskTableTest, WorkersInOtherProcessesRunEverything) {
  ASSERT_TRUE(table_->RemoveWorker(worker_).ok());
  const std::string name = table_->segment_name();
  std::vector<pid_t> pids;
  for (int w = 0; w < 2; ++w) {
    const uint32_t slot = *table_->AddWorker(0, 1, 0);
    pid_t pid = fork();
    if (pid == 0) {
      auto t = TaskTable::Open(name, absl::Seconds(5));
      if (!t.ok()) _exit(2);
      while (true) {
        auto claim = (*t)->Claim(slot);
        if (!claim.ok()) _exit(0);  // closed
        if (!claim->has_value()) {
          (*t)->WaitForWork(slot, absl::Microseconds(50),
                            absl::Milliseconds(100));
          continue;
        }
        if (!(*t)->Complete(slot, (*claim)->id, 0, (*claim)->args + "!").ok())
          _exit(3);
      }
    }
    pids.push_back(pid);
  }
  const int kTasks = 20000;
  std::map<uint64_t, std::string> expect;
  // Takes every finished task; returns how many.
  auto drain = [&] {
    int taken = 0;
    for (auto it = expect.begin(); it != expect.end();) {
      if (*table_->Poll(it->first) != TaskState::kDone) {
        ++it;
        continue;
      }
      auto out = table_->Take(client_, it->first, true);
      EXPECT_TRUE(out.ok()) << out.status();
      EXPECT_EQ(out->result, it->second);
      it = expect.erase(it);
      ++taken;
    }
    return taken;
  };
  const absl::Time deadline = absl::Now() + absl::Seconds(60);
  int next = 0;
  while ((next < kTasks || !expect.empty()) && absl::Now() < deadline) {
    // Keep at most 800 of the table's 1024 entries in flight.
    if (next < kTasks && expect.size() < 600) {
      std::vector<TaskSubmission> batch;
      for (int i = next; i < std::min(kTasks, next + 200); ++i) {
        batch.push_back(Task("echo", absl::StrCat(i)));
      }
      auto ids = table_->Submit(client_, batch);
      ASSERT_TRUE(ids.ok()) << ids.status();
      for (size_t i = 0; i < ids->size(); ++i)
        expect[(*ids)[i]] = absl::StrCat(next + i, "!");
      next += ids->size();
      continue;
    }
    const uint32_t armed = table_->ArmClient(client_);
    if (drain() == 0)
      table_->SleepClient(client_, armed, absl::Milliseconds(50));
    table_->DisarmClient(client_);
  }
  EXPECT_TRUE(expect.empty()) << expect.size() << " tasks never finished";
  table_->Close();
  for (pid_t pid : pids) {
    int status;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  }
}

// Two tasks submitted one after the other while both workers sleep wake both
// workers, even when the first one rung has not woken up yet (here: it is
// stopped) — ringing it twice would leave the second task waiting for it.
TEST_F(TaskTableTest, BackToBackSubmitsWakeOneSleeperEach) {
  ASSERT_TRUE(table_->RemoveWorker(worker_).ok());
  const std::string name = table_->segment_name();
  pid_t pids[2];
  int woke[2][2];  // per worker: a pipe it writes to once awake
  for (int w = 0; w < 2; ++w) {
    ASSERT_EQ(pipe(woke[w]), 0);
    const uint32_t slot = *table_->AddWorker(0, 1, 0);
    pids[w] = fork();
    if (pids[w] == 0) {
      auto t = TaskTable::Open(name, absl::Seconds(5));
      if (!t.ok()) _exit(2);
      (*t)->WaitForWork(slot, absl::ZeroDuration(), absl::Seconds(20));
      _exit(write(woke[w][1], "w", 1) == 1 ? 0 : 3);
    }
    close(woke[w][1]);
  }
  absl::SleepFor(absl::Milliseconds(300));  // both asleep on their bells
  // The worker rung first cannot wake up (and leave the sleepers).
  ASSERT_EQ(kill(pids[0], SIGSTOP), 0);
  ASSERT_TRUE(table_->Submit(client_, {Task("a")}).ok());
  ASSERT_TRUE(table_->Submit(client_, {Task("b")}).ok());
  pollfd p{woke[1][0], POLLIN, 0};
  EXPECT_EQ(poll(&p, 1, 5000), 1) << "the second worker was never rung";
  kill(pids[0], SIGCONT);
  for (int w = 0; w < 2; ++w) {
    int status;
    ASSERT_EQ(waitpid(pids[w], &status, 0), pids[w]);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
    close(woke[w][0]);
  }
}

// Forks a process that opens the table at `name`, is SIGKILLed when it
// reaches the fault point `point` ("name", or "name#n" for its n-th pass),
// and runs `op` on its own handle; checks that it died there.
void KillInside(const std::string& name, const char* point,
                const std::function<void(TaskTable&)>& op) {
  pid_t pid = fork();
  if (pid == 0) {
    static std::string target;
    static int passes_left;
    const std::string spec = point;
    const size_t hash = spec.find('#');
    target = spec.substr(0, hash);
    passes_left =
        hash == std::string::npos ? 1 : std::stoi(spec.substr(hash + 1));
    TaskTable::SetFaultHookForTesting([](const char* p) {
      if (target == p && --passes_left == 0) raise(SIGKILL);
    });
    auto t = TaskTable::Open(name, absl::Seconds(5));
    if (!t.ok()) _exit(2);
    op(**t);
    _exit(0);
  }
  int status;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFSIGNALED(status)) << "the fault point was not reached";
}

// A process killed inside an operation: the journal rolls it back.
TEST_F(TaskTableTest, DeathInsideOperationsIsRolledBack) {
  const std::string name = table_->segment_name();
  for (const char* point :
       {"submit:before-enqueue", "submit:after-enqueue", "claim:before-assign",
        "complete:before-finish", "complete:after-finish"}) {
    SCOPED_TRACE(point);
    // Something to claim and complete.
    auto ids =
        *table_->Submit(client_, {Task("victim", std::string(100000, 'v'))});
    const auto before = *table_->Stats();
    ASSERT_NO_FATAL_FAILURE(KillInside(name, point, [&](TaskTable& t) {
      if (absl::StartsWith(point, "submit")) {
        TaskSubmission s;
        s.function = "doomed";
        s.args = std::string(150000, 'd');
        (void)t.Submit(client_, {s});
      } else {
        auto claim = t.Claim(worker_);
        if (absl::StartsWith(point, "complete") && claim.ok() &&
            claim->has_value()) {
          (void)t.Complete(worker_, (*claim)->id, 0, std::string(100000, 'r'));
        }
      }
    }));
    // The next locked operation repairs (Poll alone takes no lock, so it can
    // see the dead process's unfinished writes until then).
    ASSERT_TRUE(table_->Stats().ok());
    // A worker that died in Complete had claimed
    // the task (a committed operation): it is still running on the dead
    // worker, which the coordinator handles by requeueing it.
    if (absl::StartsWith(point, "complete")) {
      EXPECT_EQ(*table_->Poll(ids[0]), TaskState::kRunning);
      ASSERT_TRUE(*table_->FailRunning(worker_, 14, "worker died"));
    }
    // The table is exactly as before.
    const auto after = *table_->Stats();
    EXPECT_EQ(after.free_entries, before.free_entries);
    EXPECT_EQ(after.free_chunks, before.free_chunks);
    EXPECT_EQ(after.queued, before.queued);
    EXPECT_EQ(*table_->Poll(ids[0]), TaskState::kQueued);
    // And it still works: claim, complete, take.
    auto claim = table_->Claim(worker_);
    ASSERT_TRUE(claim.ok() && claim->has_value());
    ASSERT_TRUE(table_->Complete(worker_, (*claim)->id, 0, "ok").ok());
    ASSERT_TRUE(table_->Take(client_, ids[0], true).ok());
  }
  EXPECT_EQ(table_->Stats()->free_entries, 1024u);
  EXPECT_EQ(table_->Stats()->free_chunks, 64u);
}

// Take, Release and Cancel killed inside the lock: rolled back, the table
// exactly as before, and it still works.
TEST_F(TaskTableTest, DeathInsideTakeReleaseCancelIsRolledBack) {
  const std::string name = table_->segment_name();
  for (const char* point :
       {"take:after-free", "release:after-unlink", "release:after-free",
        "cancel:after-unlink", "cancel:after-finish"}) {
    SCOPED_TRACE(point);
    const bool take = absl::StartsWith(point, "take");
    auto ids =
        *table_->Submit(client_, {Task("victim", std::string(100000, 'v'))});
    if (take) {
      auto claim = table_->Claim(worker_);
      ASSERT_TRUE(claim.ok() && claim->has_value());
      ASSERT_TRUE(
          table_->Complete(worker_, (*claim)->id, 0, std::string(100000, 'r'))
              .ok());
    }
    const TaskState state_before = *table_->Poll(ids[0]);
    const auto before = *table_->Stats();
    ASSERT_NO_FATAL_FAILURE(KillInside(name, point, [&](TaskTable& t) {
      if (take) {
        (void)t.Take(client_, ids[0], /*release=*/true);
      } else if (absl::StartsWith(point, "release")) {
        (void)t.Release(client_, ids[0]);
      } else {
        (void)t.Cancel(ids[0]);
      }
    }));
    ASSERT_TRUE(table_->Stats().ok());  // the next locked operation repairs
    const auto after = *table_->Stats();
    EXPECT_EQ(after.free_entries, before.free_entries);
    EXPECT_EQ(after.free_chunks, before.free_chunks);
    EXPECT_EQ(after.queued, before.queued);
    EXPECT_EQ(*table_->Poll(ids[0]), state_before);
    // And it still works.
    if (take) {
      auto out = table_->Take(client_, ids[0], true);
      ASSERT_TRUE(out.ok()) << out.status();
      EXPECT_EQ(out->result, std::string(100000, 'r'));
    } else {
      auto claim = table_->Claim(worker_);
      ASSERT_TRUE(claim.ok() && claim->has_value());
      ASSERT_TRUE(table_->Complete(worker_, (*claim)->id, 0, "ok").ok());
      ASSERT_TRUE(table_->Take(client_, ids[0], true).ok());
    }
  }
  EXPECT_EQ(table_->Stats()->free_entries, 1024u);
  EXPECT_EQ(table_->Stats()->free_chunks, 64u);
}

}  // namespace
// A batch is all or nothing: one that does not fit (entries, chunks,
// classes) or names an unknown actor or an oversized payload anywhere
// submits nothing and names the limit; the table is as before and still
// takes what fits.
TEST_F(TaskTableTest, BatchThatDoesNotFitSubmitsNothing) {
  auto expect_nothing = [&](std::vector<TaskSubmission> batch,
                            absl::StatusCode code, absl::string_view says) {
    const auto before = *table_->Stats();
    auto ids = table_->Submit(client_, batch);
    EXPECT_EQ(ids.status().code(), code) << ids.status();
    EXPECT_TRUE(absl::StrContains(ids.status().message(), says))
        << ids.status();
    const auto after = *table_->Stats();
    EXPECT_EQ(after.free_entries, before.free_entries);
    EXPECT_EQ(after.free_chunks, before.free_chunks);
    EXPECT_EQ(after.queued, before.queued);
    EXPECT_EQ(after.submitted, before.submitted);
  };
  const std::string big(200000, 'b');  // 4 of the 64 chunks each
  expect_nothing(std::vector<TaskSubmission>(17, Task("big", big)),
                 absl::StatusCode::kResourceExhausted, "max_chunks = 64");
  expect_nothing({Task("a"), Task("b"), Task("f", std::string(10 << 20, 'a'))},
                 absl::StatusCode::kResourceExhausted, "limit");
  expect_nothing({Task("a"), Task(ActorFunction("f", 99))},
                 absl::StatusCode::kNotFound, "actor 99");
  std::vector<TaskSubmission> classes;
  for (uint32_t g = 1; g <= kMaxResourceClasses + 1; ++g)
    classes.push_back(Task("g", "", g));
  expect_nothing(classes, absl::StatusCode::kResourceExhausted,
                 "resource requests");
  ASSERT_TRUE(
      table_->Submit(client_, std::vector<TaskSubmission>(1020, Task("x")))
          .ok());
  expect_nothing(std::vector<TaskSubmission>(10, Task("y")),
                 absl::StatusCode::kResourceExhausted, "max_tasks = 1024");
  // What fits still goes in, whole.
  auto last = table_->Submit(
      client_, {Task("big", big), Task("g", "", 3), Task("c"), Task("d")});
  ASSERT_TRUE(last.ok()) << last.status();
  EXPECT_EQ(table_->Stats()->free_entries, 0u);
}

// A process killed between (or inside) the tasks of a batch: the next locker
// takes the whole batch back out, ids and free stacks included.
TEST_F(TaskTableTest, DeathInsideABatchSubmitTakesItAllBack) {
  const std::string name = table_->segment_name();
  for (const char* point : {"submit:after-task", "submit:before-enqueue#2",
                            "submit:after-enqueue#3", "submit:after-task#3"}) {
    SCOPED_TRACE(point);
    auto victim = *table_->Submit(client_, {Task("victim")});
    // The id the next Submit gets, if the batch leaves no trace.
    const uint64_t probe = (*table_->Submit(client_, {Task("probe")}))[0];
    ASSERT_TRUE(table_->Release(client_, probe).ok());
    const uint64_t next_id =
        MakeTaskId(TaskGeneration(probe) + 1, TaskIndex(probe));
    const auto before = *table_->Stats();
    ASSERT_NO_FATAL_FAILURE(KillInside(name, point, [&](TaskTable& t) {
      // With accounts: the largest steps a Submit journals (a new class,
      // payload chunks, an account) still fit the journal.
      TaskSubmission first = Task("doomed1", std::string(150000, 'd'));
      first.account = 3;
      TaskSubmission second = Task("doomed2", std::string(150000, 'e'),
                                   /*gpus=*/1);  // a new class
      second.account = 4;
      TaskSubmission third = Task("doomed3");
      third.at_head = true;
      (void)t.Submit(client_, {first, second, third});
    }));
    ASSERT_TRUE(table_->Stats().ok());  // the next locked operation repairs
    const auto after = *table_->Stats();
    EXPECT_EQ(after.free_entries, before.free_entries);
    EXPECT_EQ(after.free_chunks, before.free_chunks);
    EXPECT_EQ(after.queued, before.queued);
    EXPECT_EQ(after.submitted, before.submitted);
    auto again = table_->Submit(client_, {Task("after")});
    ASSERT_TRUE(again.ok()) << again.status();
    EXPECT_EQ((*again)[0], next_id);
    // The FIFO holds the victim, then the new task: nothing of the batch.
    for (uint64_t id : {victim[0], (*again)[0]}) {
      auto claim = table_->Claim(worker_);
      ASSERT_TRUE(claim.ok() && claim->has_value());
      EXPECT_EQ((*claim)->id, id);
      ASSERT_TRUE(table_->Complete(worker_, id, 0, "ok").ok());
      ASSERT_TRUE(table_->Take(client_, id, true).ok());
    }
    EXPECT_FALSE(table_->Claim(worker_)->has_value());
  }
  EXPECT_EQ(table_->Stats()->free_entries, 1024u);
  EXPECT_EQ(table_->Stats()->free_chunks, 64u);
}

TEST_F(TaskTableTest, ActorCallsGoOnlyToTheActorsWorkerInOrder) {
  const uint32_t actor_worker = *table_->AddWorker(getpid(), 1, 0, /*actor=*/7);
  EXPECT_TRUE(absl::IsNotFound(
      table_->Submit(client_, {Task(ActorFunction("m", 7))}).status()));
  ASSERT_TRUE(table_->AddActor(7).ok());
  EXPECT_TRUE(absl::IsAlreadyExists(table_->AddActor(7)));
  auto ids = table_->Submit(client_, {Task(ActorFunction("m1", 7)), Task("t"),
                                      Task(ActorFunction("m2", 7))});
  ASSERT_TRUE(ids.ok()) << ids.status();
  // The ordinary worker gets only the ordinary task.
  auto c = table_->Claim(worker_);
  ASSERT_TRUE(c.ok() && c->has_value());
  EXPECT_EQ((*c)->function, "t");
  ASSERT_TRUE(table_->Complete(worker_, (*c)->id, 0, "").ok());
  EXPECT_FALSE(table_->Claim(worker_)->has_value());
  // The actor's worker gets its calls in submission order.
  for (const char* want : {"m1", "m2"}) {
    auto a = table_->Claim(actor_worker);
    ASSERT_TRUE(a.ok() && a->has_value());
    EXPECT_EQ(FunctionWithoutActor((*a)->function), want);
    EXPECT_EQ(ActorOfFunction((*a)->function), 7u);
    ASSERT_TRUE(table_->Complete(actor_worker, (*a)->id, 0, "").ok());
  }
  EXPECT_FALSE(table_->Claim(actor_worker)->has_value());
}

TEST(ActorFunctionTest, NamesRoundTripWithAMarkerAfterTheId) {
  EXPECT_EQ(ActorFunction("py:m:f", 12), "py:m:f@actor=12");
  EXPECT_EQ(ActorOfFunction("py:m:f@actor=12"), 12u);
  EXPECT_EQ(ActorOfFunction("py:m:f@actor=12!"), 12u);
  EXPECT_EQ(FunctionWithoutActor("py:m:f@actor=12!"), "py:m:f!");
  EXPECT_EQ(ActorOfFunction("py:m:f"), 0u);
  EXPECT_EQ(ActorOfFunction("py:m:f@actor="), 0u);
  EXPECT_EQ(ActorOfFunction("py:m:f@actor=99999999999"), 0u);
  EXPECT_EQ(FunctionWithoutActor("add"), "add");
}

TEST_F(TaskTableTest, EndActorFailsQueuedAndLaterCalls) {
  ASSERT_TRUE(table_->AddActor(3).ok());
  TaskSubmission first = Task(ActorFunction("init", 3));
  auto queued = table_->Submit(client_, {Task(ActorFunction("m", 3))});
  first.at_head = true;
  auto init = table_->Submit(client_, {first});
  ASSERT_TRUE(queued.ok() && init.ok());
  const uint32_t w = *table_->AddWorker(getpid(), 1, 0, 3);
  auto c = table_->Claim(w);
  ASSERT_TRUE(c.ok() && c->has_value());
  EXPECT_EQ((*c)->id, (*init)[0]);  // at_head: ahead of the queued call
  ASSERT_TRUE(table_->Complete(w, (*c)->id, 0, "").ok());
  ASSERT_TRUE(table_->EndActor(3, 14, "gone").ok());
  auto out = table_->Take(client_, (*queued)[0], true);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->code, 14);
  EXPECT_EQ(out->result, "gone");
  absl::Status later =
      table_->Submit(client_, {Task(ActorFunction("m", 3))}).status();
  EXPECT_TRUE(absl::IsUnavailable(later)) << later;
  EXPECT_TRUE(absl::StartsWith(later.message(), "actor 3")) << later;
  // An ended, empty class is reused for a new actor.
  ASSERT_TRUE(table_->AddActor(4).ok());
}

}  // namespace shoal::tasks
