// Store quotas that hold: a task's outputs are charged to its store account as
// they are written, and the output that would take the account over its limit
// fails its task. (A quota checked only when tasks are submitted lets one
// batch of fill(2^20) hold many times the quota, and other clients' fills
// then fail with "store full".)
//
// A node as small as it can be with the real parts: this process plays the
// coordinator (it hosts the store service on a thread, creates the task
// table, submits through its own table slot and supervises the workers), and
// the workers are real `shoal worker` processes running the built-in `fill`,
// Python functions, and the tasks of quota_plugin.cc.
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <iostream>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "base/subprocess.h"
#include "base/temp_dir.h"
#include "gtest/gtest.h"
#include "ipc/task_payload.h"
#include "shm/store_client.h"
#include "shm/store_service_thread.h"
#include "tasks/task_table.h"
#include "tests/testing/test_env.h"

namespace shoal {
namespace {

using shoal::testing::RunfilePath;
using shoal::testing::WaitUntil;

constexpr uint64_t kMiB = uint64_t{1} << 20;
constexpr uint32_t kGreedy = 7;  // the account of the client over its quota
constexpr uint32_t kHonest = 8;  // another client's

struct Finished {
  int32_t code = 0;  // absl::StatusCode
  std::string message;
  std::vector<Value> outputs;
  uint32_t attempts = 0;
};

tasks::TaskSubmission Task(std::string function, std::vector<Value> args,
                           uint32_t account) {
  tasks::TaskSubmission t;
  t.function = std::move(function);
  t.args = ipc::EncodeTaskArgs(args);
  t.account = account;
  return t;
}

// fill(n): n f32 elements, 4n bytes.
tasks::TaskSubmission Fill(int64_t n, uint32_t account) {
  return Task("fill", {n, 1.0}, account);
}

class StoreQuotaTest : public ::testing::Test {
 protected:
  void SetUp() override {
    job_ = shoal::testing::UniqueJobId();
    auto dir = TempDir::Create("shoal-quota-test-");
    ASSERT_TRUE(dir.ok()) << dir.status();
    dir_ = *std::move(dir);
    shm::StoreOptions so;
    so.job_id = job_;
    so.store_bytes = 128 * kMiB;
    so.prefault_ahead_bytes = 0;
    so.max_clients = 16;
    auto store = shm::StoreServiceThread::Start(so);
    ASSERT_TRUE(store.ok()) << store.status();
    service_ = *std::move(store);
    store_ = Connect("test");
    monitor_store_ = Connect("monitor");
    ASSERT_NE(store_, nullptr);
    ASSERT_NE(monitor_store_, nullptr);
    tasks::TaskTableOptions to;
    to.max_tasks = 1024;
    to.max_chunks = 64;
    auto table = tasks::TaskTable::Create(job_, to);
    ASSERT_TRUE(table.ok()) << table.status();
    table_ = *std::move(table);
    auto client = table_->AddClient(
        getpid(), static_cast<int32_t>(store_->client_slot()));
    ASSERT_TRUE(client.ok()) << client.status();
    client_ = *client;
    for (int i = 0; i < 2; ++i) ASSERT_TRUE(StartWorker().ok());
    monitor_ = std::thread([this] { Monitor(); });
  }

  void TearDown() override {
    stop_monitor_ = true;
    if (monitor_.joinable()) monitor_.join();
    if (table_ != nullptr) {
      table_->Close();
      table_->WakeAllWorkers();
    }
    for (auto& [slot, worker] : workers_) {
      if (!worker.Wait(absl::Seconds(10)).ok()) worker.Signal(SIGKILL);
    }
    workers_.clear();
    store_.reset();
    monitor_store_.reset();
    service_.reset();
  }

  std::unique_ptr<shm::StoreClient> Connect(const std::string& name) {
    auto c = service_->Connect(name);
    EXPECT_TRUE(c.ok()) << c.status();
    return c.ok() ? *std::move(c) : nullptr;
  }

  // A `shoal worker` in a new task-table slot, as the coordinator starts one.
  absl::Status StartWorker() {
    SHOAL_ASSIGN_OR_RETURN(const uint32_t slot, table_->AddWorker(0, 1, 0));
    SubprocessOptions o;
    o.parent_death_signal = SIGKILL;
    o.env = {
        {"SHOAL_WORKER_ID", absl::StrCat(next_worker_id_++)},
        {"SHOAL_WORKER_SLOT", absl::StrCat(slot)},
        {"SHOAL_TASK_SEGMENT", table_->segment_name()},
        {"SHOAL_STORE_ENDPOINT", service_->endpoint()},
        // Nobody listens: the heartbeats go unanswered, which is fine here.
        {"SHOAL_BACKEND_ENDPOINT",
         absl::StrCat("ipc://", dir_.File("backend.sock"))},
        {"SHOAL_PLUGINS", RunfilePath("tests/security/libquota_plugin.so")},
        {"SHOAL_COMPLETION_FD", std::nullopt},
        {"SHOAL_COMPLETION_CLIENT", std::nullopt},
    };
    SHOAL_ASSIGN_OR_RETURN(
        Subprocess p,
        Subprocess::Start({RunfilePath("tools/shoal"), "worker"}, o));
    workers_.emplace(slot, std::move(p));
    return absl::OkStatus();
  }

  // What the coordinator does for a worker that died: its task is requeued
  // (or failed), its slot freed, and a new worker started.
  void ReplaceDeadWorkers() {
    std::vector<uint32_t> dead;
    for (auto& [slot, worker] : workers_) {
      if (worker.Wait(absl::ZeroDuration()).ok()) dead.push_back(slot);
    }
    for (uint32_t slot : dead) {
      workers_.erase(slot);
      (void)table_->FailRunning(
          slot, static_cast<int32_t>(absl::StatusCode::kAborted),
          "the worker died");
      ASSERT_TRUE(table_->RemoveWorker(slot).ok());
      ASSERT_TRUE(StartWorker().ok());
      ++replaced_;
    }
  }

  // Submits `subs` as one batch and waits for all of them; the outputs of
  // those that succeeded are this test's to release.
  std::vector<Finished> Run(const std::vector<tasks::TaskSubmission>& subs) {
    auto ids = table_->Submit(client_, subs);
    EXPECT_TRUE(ids.ok()) << ids.status();
    if (!ids.ok()) return {};
    const bool all_done = WaitUntil(
        [&] {
          ReplaceDeadWorkers();
          return std::all_of(ids->begin(), ids->end(), [&](uint64_t id) {
            auto state = table_->Poll(id);
            return state.ok() && *state == tasks::TaskState::kDone;
          });
        },
        absl::Seconds(60));
    EXPECT_TRUE(all_done);
    std::vector<Finished> out;
    for (uint64_t id : *ids) {
      Finished f;
      auto taken = table_->Take(client_, id, /*release=*/true);
      EXPECT_TRUE(taken.ok()) << taken.status();
      if (!taken.ok()) {
        f.code = static_cast<int32_t>(taken.status().code());
        out.push_back(std::move(f));
        continue;
      }
      f.code = taken->code;
      f.attempts = taken->attempts;
      auto body = ipc::DecodeTaskOutcome(taken->result);
      EXPECT_TRUE(body.ok()) << body.status();
      if (body.ok()) {
        f.message = body->message;
        f.outputs = std::move(body->outputs);
      }
      out.push_back(std::move(f));
    }
    return out;
  }

  // Deletes the store objects among `outputs` (this test holds them).
  void Free(const std::vector<Value>& outputs) {
    for (const Value& v : outputs) {
      if (const auto* o = std::get_if<ObjectValue>(&v)) {
        EXPECT_TRUE(store_->Delete(o->id).ok());
        EXPECT_TRUE(store_->Release(o->id).ok());
      }
    }
  }

  uint64_t Usage(uint32_t account) {
    auto u = store_->AccountUsage(account);
    EXPECT_TRUE(u.ok()) << u.status();
    return u.ok() ? *u : ~uint64_t{0};
  }

  // Samples what the greedy account and the whole store hold, all along.
  void Monitor() {
    while (!stop_monitor_) {
      auto u = monitor_store_->AccountUsage(kGreedy);
      if (u.ok()) {
        max_greedy_ = std::max<uint64_t>(max_greedy_, *u);
      }
      auto st = monitor_store_->Stats();
      if (st.ok()) max_used_ = std::max<uint64_t>(max_used_, st->used_bytes());
      absl::SleepFor(absl::Microseconds(200));
    }
  }

  static bool IsQuotaError(const Finished& f, uint32_t account,
                           uint64_t limit) {
    return f.code ==
               static_cast<int32_t>(absl::StatusCode::kResourceExhausted) &&
           absl::StrContains(f.message,
                             "would exceed the submitting client's store "
                             "quota") &&
           absl::StrContains(f.message,
                             absl::StrCat("store account ", account, " ")) &&
           absl::StrContains(f.message,
                             absl::StrCat("its limit of ", limit, " bytes"));
  }

  std::string job_;
  TempDir dir_;
  std::unique_ptr<shm::StoreServiceThread> service_;
  std::unique_ptr<shm::StoreClient> store_, monitor_store_;
  std::unique_ptr<tasks::TaskTable> table_;
  uint32_t client_ = 0;
  std::map<uint32_t, Subprocess> workers_;  // by task-table slot
  int next_worker_id_ = 0;
  int replaced_ = 0;
  std::thread monitor_;
  std::atomic<bool> stop_monitor_{false};
  std::atomic<uint64_t> max_greedy_{0}, max_used_{0};
};

// The brief's figures: an 8 MiB quota, a batch of 8 fill(2^20) (4 MiB each).
TEST_F(StoreQuotaTest, ABatchStopsAtItsAccountsLimitAndOthersAreServed) {
  ASSERT_TRUE(store_->SetAccountLimit(kGreedy, 8 * kMiB).ok());
  ASSERT_TRUE(store_->SetAccountLimit(kHonest, 8 * kMiB).ok());
  std::vector<tasks::TaskSubmission> subs;
  for (int i = 0; i < 8; ++i) subs.push_back(Fill(1 << 20, kGreedy));
  // The honest client's fill runs among them, and one with no account.
  subs.insert(subs.begin() + 4, Fill(1 << 20, kHonest));
  subs.insert(subs.begin() + 6, Fill(1 << 20, 0));
  std::vector<Finished> done = Run(subs);
  ASSERT_EQ(done.size(), 10u);
  int ok = 0, refused = 0;
  std::vector<Value> held;
  for (size_t i = 0; i < done.size(); ++i) {
    const Finished& f = done[i];
    if (i == 4 || i == 6) {
      EXPECT_EQ(f.code, 0) << i << ": " << f.message;
    } else if (f.code == 0) {
      ++ok;
    } else {
      EXPECT_TRUE(IsQuotaError(f, kGreedy, 8 * kMiB)) << f.message;
      EXPECT_TRUE(f.outputs.empty());
      ++refused;
    }
    if (f.code == 0) {
      ASSERT_EQ(f.outputs.size(), 1u);
      EXPECT_TRUE(std::holds_alternative<ObjectValue>(f.outputs[0]));
      held.insert(held.end(), f.outputs.begin(), f.outputs.end());
    }
  }
  EXPECT_EQ(ok, 2);
  EXPECT_EQ(refused, 6);
  EXPECT_EQ(Usage(kGreedy), 8 * kMiB);
  EXPECT_EQ(Usage(kHonest), 4 * kMiB);
  // Never more than the quota, at any moment; the store held the greedy
  // account's 8 MiB, the honest 4 MiB and the unaccounted 4 MiB at most.
  EXPECT_LE(max_greedy_.load(), 8 * kMiB);
  EXPECT_LE(max_used_.load(), 16 * kMiB);
  std::cout << "quota 8 MiB: " << ok << " fills served, " << refused
            << " refused; the account held at most " << max_greedy_.load()
            << " bytes, the store " << max_used_.load() << "\n";
  // An example of the message a refused task carries.
  for (const Finished& f : done) {
    if (f.code != 0) {
      std::cout << "refused: " << f.message << "\n";
      break;
    }
  }

  // Once its results are deleted, the account has room again.
  Free(held);
  EXPECT_EQ(Usage(kGreedy), 0u);
  EXPECT_EQ(Usage(kHonest), 0u);
  done = Run({Fill(1 << 20, kGreedy), Fill(1 << 20, kGreedy)});
  ASSERT_EQ(done.size(), 2u);
  for (const Finished& f : done) {
    EXPECT_EQ(f.code, 0) << f.message;
    Free(f.outputs);
  }
  EXPECT_EQ(Usage(kGreedy), 0u);
}

// The outputs a task wrote before the refused one are aborted, and a task
// that goes on without the refused output fails all the same.
TEST_F(StoreQuotaTest, OutputsWrittenBeforeTheRefusalAreAborted) {
  ASSERT_TRUE(store_->SetAccountLimit(kGreedy, 6 * kMiB).ok());
  std::vector<Finished> done =
      Run({Task("fill_outputs", {int64_t{1} << 20, int64_t{2}}, kGreedy)});
  ASSERT_EQ(done.size(), 1u);
  EXPECT_TRUE(IsQuotaError(done[0], kGreedy, 6 * kMiB)) << done[0].message;
  EXPECT_EQ(Usage(kGreedy), 0u);
  done = Run({Task("fill_ignoring_refusals", {int64_t{1} << 20, int64_t{3}},
                   kGreedy)});
  ASSERT_EQ(done.size(), 1u);
  EXPECT_TRUE(IsQuotaError(done[0], kGreedy, 6 * kMiB)) << done[0].message;
  EXPECT_TRUE(done[0].outputs.empty());
  EXPECT_EQ(Usage(kGreedy), 0u);
  auto st = store_->Stats();
  ASSERT_TRUE(st.ok());
  EXPECT_EQ(st->objects(), 0u);
  // Three outputs of 2 MiB fit exactly.
  done = Run({Task("fill_outputs", {int64_t{1} << 19, int64_t{3}}, kGreedy)});
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].code, 0) << done[0].message;
  EXPECT_EQ(done[0].outputs.size(), 3u);
  EXPECT_EQ(Usage(kGreedy), 6 * kMiB);
  Free(done[0].outputs);
  EXPECT_LE(max_greedy_.load(), 6 * kMiB);
}

// Python outputs over the inline limit (bytes, and anything with the buffer
// protocol) are charged as C++ ones are.
TEST_F(StoreQuotaTest, PythonOutputsAreCharged) {
  ASSERT_TRUE(store_->SetAccountLimit(kGreedy, 6 * kMiB).ok());
  const int64_t four_mib = 4 * kMiB;
  std::vector<Finished> done =
      Run({Task("py:builtins:bytes", {four_mib}, kGreedy)});
  ASSERT_EQ(done.size(), 1u);
  ASSERT_EQ(done[0].code, 0) << done[0].message;
  EXPECT_EQ(Usage(kGreedy), 4 * kMiB);
  done = Run({Task("py:builtins:bytearray", {four_mib}, kGreedy),
              Task("py:builtins:bytes", {four_mib}, kGreedy)});
  ASSERT_EQ(done.size(), 2u);
  for (const Finished& f : done) {
    EXPECT_TRUE(IsQuotaError(f, kGreedy, 6 * kMiB)) << f.message;
  }
  // Small outputs travel inline: nothing is charged.
  std::vector<Finished> small =
      Run({Task("py:builtins:bytes", {int64_t{100}}, kGreedy)});
  ASSERT_EQ(small.size(), 1u);
  EXPECT_EQ(small[0].code, 0) << small[0].message;
  EXPECT_EQ(Usage(kGreedy), 4 * kMiB);
  EXPECT_LE(max_greedy_.load(), 6 * kMiB);
}

// A worker that dies with an output half written: the store aborts the
// output and uncharges it, so the task's retry, charged again, fits.
TEST_F(StoreQuotaTest, ARetryAfterACrashIsChargedOnlyForItself) {
  ASSERT_TRUE(store_->SetAccountLimit(kGreedy, 8 * kMiB).ok());
  tasks::TaskSubmission t =
      Task("fill_then_crash",
           {int64_t{2} << 20, dir_.File("crashed")},  // 8 MiB: the whole quota
           kGreedy);
  t.max_retries = 1;
  std::vector<Finished> done = Run({t});
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].code, 0) << done[0].message;
  EXPECT_EQ(done[0].attempts, 2u);
  EXPECT_EQ(replaced_, 1);
  EXPECT_EQ(Usage(kGreedy), 8 * kMiB);
  EXPECT_LE(max_greedy_.load(), 8 * kMiB);
  Free(done[0].outputs);
  EXPECT_EQ(Usage(kGreedy), 0u);
}

}  // namespace
}  // namespace shoal
