// Remote tasks' results and output objects: taking them for a session,
// charging their bytes to its principal, and letting them go.
//
// Deleting is reserved: an object id is a capability to read, not to
// delete. A worker's new output reaches the coordinator's store client with
// its creatorship (StoreClient::Transfer), before any result names it, so the
// first result that names an object the coordinator's client created tells
// whose task made it (produced_by_). Only that principal's release deletes
// it; the node's owner may delete any; for anyone else, an object its task
// only passed along (an argument returned unchanged) is left alone: the
// result brought no reference of its own.
#include "absl/strings/str_cat.h"
#include "coordinator/frontend.h"
#include "tasks/task_results.h"

namespace shoal::coordinator {
namespace {

uint64_t ObjectBytes(const std::vector<Value>& outputs) {
  uint64_t bytes = 0;
  for (const Value& v : outputs) {
    if (const auto* o = std::get_if<ObjectValue>(&v)) bytes += o->nbytes;
  }
  return bytes;
}

}  // namespace

ipc::TaskResult Frontend::ResultOf(uint64_t id, bool release) {
  ipc::TaskResult r =
      tasks::ToResult(id, table_->Take(own_client_, id, release));
  auto task = tasks_.find(id);
  if (task == tasks_.end()) return r;
  Session* s = sessions_.BySerial(task->second.session);
  if (s == nullptr) return r;
  for (const Value& v : r.outputs) {
    const auto* o = std::get_if<ObjectValue>(&v);
    if (o == nullptr || produced_by_.count(o->id) != 0) continue;
    absl::StatusOr<bool> ours = store_->Created(o->id);
    if (ours.ok() && *ours) produced_by_.emplace(o->id, s->principal->key);
  }
  return r;
}

ipc::TaskResult Frontend::TakeFor(Session& s, uint64_t id, bool release) {
  ipc::TaskResult r = ResultOf(id, release);
  if (!release) return r;
  ForgetTask(id);
  const absl::Time now = absl::Now();
  for (const Value& v : r.outputs) {
    const auto* o = std::get_if<ObjectValue>(&v);
    if (o == nullptr) continue;
    auto [it, fresh] = s.outputs.try_emplace(o->id, o->nbytes, now);
    if (fresh) s.principal->held_bytes += o->nbytes;
  }
  return r;
}

void Frontend::CountFinished(uint64_t id) {
  auto it = tasks_.find(id);
  if (it == tasks_.end()) return;
  Session* s = sessions_.BySerial(it->second.session);
  if (s == nullptr) return;
  // Read without taking: the client collects it later.
  const uint64_t bytes = ObjectBytes(ResultOf(id, /*release=*/false).outputs);
  it->second.held_bytes = bytes;
  s->principal->held_bytes += bytes;
}

void Frontend::ReleaseOutputs(const Principal& p,
                              const std::vector<Value>& outputs) {
  for (const Value& v : outputs) {
    const auto* o = std::get_if<ObjectValue>(&v);
    if (o == nullptr) continue;
    auto made = produced_by_.find(o->id);
    if (made != produced_by_.end() && made->second == p.key) {
      // Without waiting for the store service (a round trip per object).
      (void)store_->ReleaseAndDelete(o->id);
      produced_by_.erase(made);
    } else if (p.owner) {
      (void)store_->Delete(o->id);
    }
  }
}

void Frontend::ForgetTask(uint64_t id) {
  auto it = tasks_.find(id);
  if (it == tasks_.end()) return;
  RemoteTask& t = it->second;
  // Its waits are answered later: this task is then unknown to them.
  for (uint64_t serial : t.waits) orphaned_waits_.push_back(serial);
  if (Session* s = sessions_.BySerial(t.session)) {
    s->tasks.erase(id);
    Principal& p = *s->principal;
    --p.tasks;
    if (t.done) {
      --p.finished;
      p.held_bytes -= std::min(p.held_bytes, t.held_bytes);
    } else {
      --s->unfinished;
    }
  }
  if (!t.done) --unfinished_;
  tasks_.erase(it);
}

void Frontend::DropTask(uint64_t id) {
  absl::StatusOr<tasks::TaskState> st = table_->Poll(id);
  auto task = tasks_.find(id);
  const Session* s =
      task == tasks_.end() ? nullptr : sessions_.BySerial(task->second.session);
  if (st.ok() && *st == tasks::TaskState::kDone) {
    ipc::TaskResult r = ResultOf(id, /*release=*/true);
    if (s != nullptr) ReleaseOutputs(*s->principal, r.outputs);
  } else {
    (void)table_->Release(own_client_, id);
  }
  ForgetTask(id);
}

void Frontend::ExpireResults(absl::Time now) {
  for (auto& [serial, s] : sessions_.all()) {
    for (auto it = s->outputs.begin(); it != s->outputs.end();) {
      if (now - it->second.second <= options_.remote_result_ttl) {
        ++it;
        continue;
      }
      ReleaseOutputs(*s->principal,
                     {Value{ObjectValue{it->first, TensorMeta{}, 0}}});
      s->principal->held_bytes -=
          std::min(s->principal->held_bytes, it->second.first);
      it = s->outputs.erase(it);
    }
  }
  std::vector<uint64_t> expired;
  for (const auto& [id, t] : tasks_) {
    if (t.done && now - t.finished > options_.remote_result_ttl)
      expired.push_back(id);
  }
  for (uint64_t id : expired) DropTask(id);
}

}  // namespace shoal::coordinator
