#include "tools/bench/tasks_bench_clients.h"

#include <deque>
#include <memory>
#include <set>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "coordinator/client.h"
#include "coordinator/discovery.h"
#include "tools/bench/bench_util.h"

namespace shoal::bench {
namespace {

struct ClientRun {
  absl::Status status;
  std::vector<double> latencies;
  std::vector<uint64_t> task_ids;
  int64_t wrong = 0;
};

void RunOne(const std::string& job, const std::string& tcp, int tag,
            int per_client, int window, ClientRun* out) {
  coordinator::ClientOptions o;
  o.job_id = job;
  o.endpoint = tcp;
  o.force_remote = true;
  o.window = static_cast<size_t>(window);
  o.rpc_timeout = absl::Seconds(60);
  absl::StatusOr<std::unique_ptr<coordinator::Client>> c =
      coordinator::Client::Connect(o);
  if (!c.ok()) {
    out->status = c.status();
    return;
  }
  out->latencies.reserve(per_client);
  // (value, when sent, handle) of the tasks in flight, oldest first.
  struct Sent {
    int64_t value;
    double t0;
    coordinator::PendingTask task;
  };
  std::deque<Sent> sent;
  auto take_oldest = [&] {
    Sent s = sent.front();
    sent.pop_front();
    absl::StatusOr<ipc::TaskResult> r = (*c)->Await(s.task, absl::Minutes(2));
    out->latencies.push_back(NowSeconds() - s.t0);
    const int64_t* got = r.ok() && r->outputs.size() == 1
                             ? std::get_if<int64_t>(&r->outputs[0])
                             : nullptr;
    if (!r.ok() || !r->status.ok() || got == nullptr || *got != s.value) {
      ++out->wrong;
      return;
    }
    out->task_ids.push_back(r->task_id);
  };
  for (int i = 0; i < per_client; ++i) {
    if (static_cast<int>(sent.size()) >= window) take_oldest();
    ipc::TaskSpec t;
    t.function = "echo";
    const int64_t value = int64_t{tag} * 10000000 + i;
    t.args = {value};
    const double t0 = NowSeconds();
    absl::StatusOr<coordinator::PendingTask> p =
        (*c)->SubmitAsync(std::move(t));
    if (!p.ok()) {
      out->status = p.status();
      return;
    }
    sent.push_back(Sent{value, t0, *p});
  }
  while (!sent.empty()) take_oldest();
}

}  // namespace

absl::StatusOr<ManyClients> MeasureManyClients(const std::string& job,
                                               int clients, int per_client,
                                               int window) {
  absl::StatusOr<coordinator::Discovery> d = coordinator::ReadDiscovery(job);
  if (!d.ok()) return d.status();
  std::vector<ClientRun> runs(clients);
  std::vector<std::thread> threads;
  const double t0 = NowSeconds();
  for (int k = 0; k < clients; ++k) {
    threads.emplace_back(
        [&, k] { RunOne(job, d->tcp, k + 1, per_client, window, &runs[k]); });
  }
  for (std::thread& t : threads) t.join();
  const double elapsed = NowSeconds() - t0;
  ManyClients out;
  std::vector<double> all;
  std::set<uint64_t> ids;
  for (ClientRun& r : runs) {
    if (!r.status.ok()) return r.status;
    all.insert(all.end(), r.latencies.begin(), r.latencies.end());
    ids.insert(r.task_ids.begin(), r.task_ids.end());
    out.tasks += static_cast<int64_t>(r.latencies.size());
  }
  const int64_t expected = int64_t{clients} * per_client;
  // A failed, missing or wrong result adds no id; a repeated id adds none.
  out.wrong = expected - static_cast<int64_t>(ids.size());
  out.tasks_per_s = expected / elapsed;
  out.p50_us = Median(all) * 1e6;
  out.p99_us = Quantile(all, 0.99) * 1e6;
  return out;
}

}  // namespace shoal::bench
