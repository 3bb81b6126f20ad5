#include "observe/task_stats.h"

#include <algorithm>
#include <utility>

#include "ipc/task_name.h"

namespace shoal::observe {

namespace {

// Adds `name`'s entry into `m` (a new one may take the place of
// kOtherTaskName once `m` holds kMaxTaskNames).
void AddInto(absl::flat_hash_map<std::string, wire::TaskNameStats>* m,
             const wire::TaskNameStats& s) {
  std::string name = s.name();
  if (!m->contains(name) && m->size() >= kMaxTaskNames) name = kOtherTaskName;
  auto [it, fresh] = m->try_emplace(name);
  if (fresh) it->second.set_name(name);
  AddTaskNameStats(s, &it->second);
}

bool WellFormed(const wire::TaskNameStats& s) {
  return s.run_buckets_size() == static_cast<int>(kLatencyBuckets) &&
         s.wait_buckets_size() == static_cast<int>(kLatencyBuckets) &&
         s.name().size() <= kMaxTaskNameBytes;
}

std::vector<wire::TaskNameStats> Sorted(
    absl::flat_hash_map<std::string, wire::TaskNameStats> m) {
  std::vector<wire::TaskNameStats> out;
  out.reserve(m.size());
  for (auto& [name, s] : m) out.push_back(std::move(s));
  std::sort(out.begin(), out.end(),
            [](const wire::TaskNameStats& a, const wire::TaskNameStats& b) {
              return a.name() < b.name();
            });
  return out;
}

}  // namespace

absl::string_view TaskStatsName(absl::string_view function) {
  const size_t at = function.rfind(ipc::kActorMarker);
  if (at != absl::string_view::npos) function = function.substr(0, at);
  if (function.size() > kMaxTaskNameBytes)
    function = function.substr(function.size() - kMaxTaskNameBytes);
  return function;
}

size_t LatencyBucket(int64_t ns) {
  const int64_t us = ns / 1000;
  size_t b = 0;
  while (b < kLatencyBoundsUs.size() && us > kLatencyBoundsUs[b]) ++b;
  return b;
}

TaskStats::Entry& TaskStats::EntryFor(absl::string_view name) {
  if (last_ != nullptr && name == last_name_) return *last_;
  auto it = by_name_.find(name);
  if (it == by_name_.end()) {
    if (by_name_.size() >= kMaxTaskNames) name = kOtherTaskName;
    it = by_name_.try_emplace(std::string(name)).first;
  }
  last_name_.assign(name.data(), name.size());  // (reuses its buffer)
  last_ = &it->second;
  return it->second;
}

void TaskStats::Record(const TaskRun& run) {
  const int64_t wait = std::max<int64_t>(0, run.claimed_ns - run.queued_ns);
  const int64_t ran = std::max<int64_t>(0, run.end_ns - run.claimed_ns);
  MutexLock lock(&mu_);
  ++runs_;
  Entry& e = EntryFor(TaskStatsName(run.function));
  ++e.started;
  ++(run.ok ? e.succeeded : e.failed);
  e.retried += run.attempt > 1;
  ++e.wait[LatencyBucket(wait)];
  ++e.run[LatencyBucket(ran)];
  e.wait_seconds += static_cast<double>(wait) * 1e-9;
  e.run_seconds += static_cast<double>(ran) * 1e-9;
}

uint64_t TaskStats::runs() const {
  MutexLock lock(&mu_);
  return runs_;
}

std::vector<wire::TaskNameStats> TaskStats::Snapshot() const {
  absl::flat_hash_map<std::string, wire::TaskNameStats> m;
  MutexLock lock(&mu_);
  for (const auto& [name, e] : by_name_) {
    wire::TaskNameStats& s = m[name];
    s.set_name(name);
    s.set_started(e.started);
    s.set_succeeded(e.succeeded);
    s.set_failed(e.failed);
    s.set_retried(e.retried);
    for (uint64_t n : e.run) s.add_run_buckets(n);
    for (uint64_t n : e.wait) s.add_wait_buckets(n);
    s.set_run_seconds(e.run_seconds);
    s.set_wait_seconds(e.wait_seconds);
  }
  return Sorted(std::move(m));
}

void AddTaskNameStats(const wire::TaskNameStats& from,
                      wire::TaskNameStats* into) {
  into->set_started(into->started() + from.started());
  into->set_succeeded(into->succeeded() + from.succeeded());
  into->set_failed(into->failed() + from.failed());
  into->set_retried(into->retried() + from.retried());
  into->set_run_seconds(into->run_seconds() + from.run_seconds());
  into->set_wait_seconds(into->wait_seconds() + from.wait_seconds());
  if (into->run_buckets_size() == 0) {
    into->mutable_run_buckets()->Resize(kLatencyBuckets, 0);
    into->mutable_wait_buckets()->Resize(kLatencyBuckets, 0);
  }
  for (size_t i = 0; i < kLatencyBuckets; ++i) {
    into->set_run_buckets(i, into->run_buckets(i) + from.run_buckets(i));
    into->set_wait_buckets(i, into->wait_buckets(i) + from.wait_buckets(i));
  }
}

void TaskStatsSum::Report(uint32_t worker, int32_t pid,
                          const std::vector<wire::TaskNameStats>& stats) {
  if (stats.empty()) return;  // unchanged since its last report
  Process& p = latest_[worker];
  if (p.pid != pid) {  // a new process: the old one's counts are final
    for (const wire::TaskNameStats& s : p.stats) AddInto(&retired_, s);
    p.pid = pid;
  }
  p.stats.clear();
  for (const wire::TaskNameStats& s : stats) {
    if (p.stats.size() >= kMaxTaskNames) break;
    if (WellFormed(s)) p.stats.push_back(s);
  }
}

std::vector<wire::TaskNameStats> TaskStatsSum::Sum() const {
  absl::flat_hash_map<std::string, wire::TaskNameStats> m = retired_;
  for (const auto& [worker, p] : latest_) {
    for (const wire::TaskNameStats& s : p.stats) AddInto(&m, s);
  }
  return Sorted(std::move(m));
}

}  // namespace shoal::observe
