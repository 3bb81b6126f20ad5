#include "observe/metrics.h"

#include <exception>
#include <limits>
#include <map>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "base/mutex.h"
#include "observe/task_stats.h"
#include "prometheus/collectable.h"
#include "prometheus/exposer.h"

namespace shoal::observe {

using prometheus::ClientMetric;
using prometheus::MetricFamily;
using prometheus::MetricType;

namespace {

// Appends a family of one unlabelled sample.
void One(std::vector<MetricFamily>* out, std::string name, std::string help,
         MetricType type, double value) {
  MetricFamily f{std::move(name), std::move(help), type, {}};
  ClientMetric m;
  if (type == MetricType::Counter) {
    m.counter.value = value;
  } else {
    m.gauge.value = value;
  }
  f.metric.push_back(std::move(m));
  out->push_back(std::move(f));
}

// "pool" or "actor" from WorkerStatus.role ("" or "actor <id> <class>").
std::string RoleOf(const ipc::WorkerStatus& w) {
  return absl::StartsWith(w.role(), "actor") ? "actor" : "pool";
}

// A histogram sample of `buckets` (one count per bound of kLatencyBoundsUs,
// then one above the last) and their sum of seconds.
ClientMetric Histogram(const google::protobuf::RepeatedField<uint64_t>& buckets,
                       double sum, std::vector<ClientMetric::Label> labels) {
  ClientMetric m;
  m.label = std::move(labels);
  uint64_t cumulative = 0;
  for (size_t i = 0; i < kLatencyBoundsUs.size(); ++i) {
    cumulative += i < static_cast<size_t>(buckets.size()) ? buckets[i] : 0;
    m.histogram.bucket.push_back(
        {cumulative, static_cast<double>(kLatencyBoundsUs[i]) * 1e-6});
  }
  if (buckets.size() > static_cast<int>(kLatencyBoundsUs.size()))
    cumulative += buckets[kLatencyBoundsUs.size()];
  m.histogram.bucket.push_back(
      {cumulative, std::numeric_limits<double>::infinity()});
  m.histogram.sample_count = cumulative;
  m.histogram.sample_sum = sum;
  return m;
}

// The families of the runs by task function (NodeStatus.tasks_by_name).
void AppendTaskNameFamilies(const Figures& f, std::vector<MetricFamily>* out) {
  const auto C = MetricType::Counter;
  MetricFamily started{"shoal_task_runs_started_total",
                       "Runs of a task function that a worker started",
                       C,
                       {}};
  MetricFamily succeeded{"shoal_task_runs_succeeded_total",
                         "Runs of a task function that finished without an "
                         "error",
                         C,
                         {}};
  MetricFamily failed{"shoal_task_runs_failed_total",
                      "Runs of a task function that finished with an error "
                      "(cancelled and timed out included)",
                      C,
                      {}};
  MetricFamily retried{"shoal_task_runs_retried_total",
                       "Runs of a task function that were a task's second "
                       "attempt or later",
                       C,
                       {}};
  MetricFamily run{"shoal_task_run_seconds",
                   "How long runs of a task function ran on a worker",
                   MetricType::Histogram,
                   {}};
  MetricFamily wait{"shoal_task_queue_wait_seconds",
                    "How long runs of a task function waited in the queue",
                    MetricType::Histogram,
                    {}};
  for (const wire::TaskNameStats& t : f.tasks_by_name()) {
    std::vector<ClientMetric::Label> labels = {{"name", t.name()}};
    started.metric.push_back(
        MetricSample(C, static_cast<double>(t.started()), labels));
    succeeded.metric.push_back(
        MetricSample(C, static_cast<double>(t.succeeded()), labels));
    failed.metric.push_back(
        MetricSample(C, static_cast<double>(t.failed()), labels));
    retried.metric.push_back(
        MetricSample(C, static_cast<double>(t.retried()), labels));
    run.metric.push_back(Histogram(t.run_buckets(), t.run_seconds(), labels));
    wait.metric.push_back(
        Histogram(t.wait_buckets(), t.wait_seconds(), labels));
  }
  for (MetricFamily* family :
       {&started, &succeeded, &failed, &retried, &run, &wait}) {
    out->push_back(std::move(*family));
  }
}

// The families of the frontend's figures (NodeStatus.frontend_stats).
void AppendFrontendFamilies(const Figures& f, std::vector<MetricFamily>* out) {
  const ipc::FrontendStats& s = f.frontend_stats();
  const auto G = MetricType::Gauge;
  const auto C = MetricType::Counter;
  One(out, "shoal_frontend_sessions",
      "Client sessions the frontend holds (attached, or within their resume "
      "grace)",
      G, s.sessions());
  One(out, "shoal_frontend_principals",
      "Distinct clients of the frontend (a key, the local owner, a peer)", G,
      s.principals());
  One(out, "shoal_frontend_tcp_connections", "Open TCP connections", G,
      s.tcp_connections());
  One(out, "shoal_frontend_requests_total", "Requests read from clients", C,
      static_cast<double>(s.requests()));
  One(out, "shoal_frontend_request_bytes_total", "Bytes of requests read", C,
      static_cast<double>(s.request_bytes()));
  One(out, "shoal_frontend_parked_requests_total",
      "Requests that waited their turn in fair admission (parked)", C,
      static_cast<double>(s.parked_requests()));
  One(out, "shoal_frontend_shared_turns_total",
      "Turns of the event loop shared by several clients (short turns)", C,
      static_cast<double>(s.shared_turns()));
  One(out, "shoal_frontend_reply_bytes_total",
      "Bytes of replies and pushed results queued for clients", C,
      static_cast<double>(s.reply_bytes()));
  MetricFamily errors{"shoal_frontend_errors_total",
                      "Requests the frontend answered with an error (a "
                      "refusal: a quota, a permission, bad input), by status "
                      "code",
                      C,
                      {}};
  for (int code = 1; code <= 16; ++code) {
    const double n =
        code < s.errors_by_code_size() ? s.errors_by_code(code) : 0;
    errors.metric.push_back(MetricSample(
        C, n,
        {{"code",
          absl::StatusCodeToString(static_cast<absl::StatusCode>(code))}}));
  }
  out->push_back(std::move(errors));
}

// The states a worker shows in `shoal status`, listed so that each has a
// series (0 included) from the first scrape.
constexpr const char* kWorkerStates[] = {"idle", "busy", "running",
                                         "restarting", "stopped"};

}  // namespace

ClientMetric MetricSample(MetricType type, double value,
                          std::vector<ClientMetric::Label> labels) {
  ClientMetric m;
  m.label = std::move(labels);
  if (type == MetricType::Counter) {
    m.counter.value = value;
  } else {
    m.gauge.value = value;
  }
  return m;
}

std::vector<MetricFamily> DownFamilies() {
  std::vector<MetricFamily> out;
  One(&out, "shoal_up",
      "1 when the node's figures were gathered for this scrape, else 0",
      MetricType::Gauge, 0);
  return out;
}

std::vector<MetricFamily> FamiliesOf(const Figures& f) {
  std::vector<MetricFamily> out;
  const auto G = MetricType::Gauge;
  const auto C = MetricType::Counter;
  One(&out, "shoal_up",
      "1 when the node's figures were gathered for this scrape, else 0", G, 1);
  {
    MetricFamily info{"shoal_node_info",
                      "The node's job id and coordinator pid (value 1)",
                      G,
                      {}};
    info.metric.push_back(
        MetricSample(G, 1,
                     {{"job_id", f.job_id()},
                      {"coordinator_pid", absl::StrCat(f.coordinator_pid())}}));
    out.push_back(std::move(info));
  }
  One(&out, "shoal_uptime_seconds", "Seconds since the node started", G,
      f.uptime_ms() / 1000.0);

  // Tasks: the task table's counters.
  One(&out, "shoal_tasks_submitted_total", "Tasks submitted to the node", C,
      static_cast<double>(f.submitted()));
  One(&out, "shoal_tasks_completed_total",
      "Tasks that finished (succeeded, failed or cancelled)", C,
      static_cast<double>(f.completed()));
  One(&out, "shoal_tasks_queued", "Tasks waiting for a worker (queue depth)", G,
      f.queued());
  One(&out, "shoal_tasks_running", "Tasks a worker runs now", G, f.running());
  One(&out, "shoal_task_results_held",
      "Finished tasks whose results are not yet taken", G, f.results_held());
  AppendTaskNameFamilies(f, &out);
  AppendFrontendFamilies(f, &out);

  // Workers: the supervisor's, with their task-table slots' counters.
  MetricFamily by_state{"shoal_workers", "Worker processes by state", G, {}};
  std::map<std::string, int> states;
  for (const char* s : kWorkerStates) states[s] = 0;
  MetricFamily done{"shoal_worker_tasks_succeeded_total",
                    "Tasks a worker finished without an error",
                    C,
                    {}};
  MetricFamily failed{
      "shoal_worker_tasks_failed_total",
      "Tasks a worker finished with an error, or lost when its process "
      "died (such a task may be retried)",
      C,
      {}};
  MetricFamily restarts{"shoal_worker_restarts_total",
                        "Times a worker's process was started again",
                        C,
                        {}};
  MetricFamily rss{"shoal_worker_resident_bytes",
                   "A worker process's resident memory",
                   G,
                   {}};
  int actors = 0;
  for (const ipc::WorkerStatus& w : f.workers()) {
    ++states[w.state()];
    const std::string role = RoleOf(w);
    actors += role == "actor" && w.state() != "stopped";
    std::vector<ClientMetric::Label> labels = {{"worker", absl::StrCat(w.id())},
                                               {"role", role}};
    done.metric.push_back(
        MetricSample(C, static_cast<double>(w.tasks_done()), labels));
    failed.metric.push_back(
        MetricSample(C, static_cast<double>(w.tasks_failed()), labels));
    restarts.metric.push_back(MetricSample(C, w.restarts(), labels));
    rss.metric.push_back(
        MetricSample(G, static_cast<double>(w.rss_bytes()), labels));
  }
  for (const auto& [state, n] : states)
    by_state.metric.push_back(MetricSample(G, n, {{"state", state}}));
  out.push_back(std::move(by_state));
  out.push_back(std::move(done));
  out.push_back(std::move(failed));
  out.push_back(std::move(restarts));
  out.push_back(std::move(rss));
  One(&out, "shoal_actors", "Live actors (each a worker process of its own)", G,
      actors);

  // The store's Stats.
  const ipc::StoreStats& s = f.store();
  One(&out, "shoal_store_capacity_bytes", "The store's size", G,
      static_cast<double>(s.capacity_bytes()));
  One(&out, "shoal_store_used_bytes", "Store bytes held by objects", G,
      static_cast<double>(s.used_bytes()));
  One(&out, "shoal_store_free_bytes", "Store bytes not held by objects", G,
      static_cast<double>(s.capacity_bytes() >= s.used_bytes()
                              ? s.capacity_bytes() - s.used_bytes()
                              : 0));
  One(&out, "shoal_store_objects", "Objects in the store", G,
      static_cast<double>(s.objects()));
  One(&out, "shoal_store_sealed_objects",
      "Objects in the store that are sealed (readable)", G,
      static_cast<double>(s.sealed_objects()));
  One(&out, "shoal_store_referenced_objects",
      "Objects some client holds a reference to", G,
      static_cast<double>(s.referenced_objects()));
  One(&out, "shoal_store_max_objects", "Objects the store's table can hold", G,
      static_cast<double>(s.max_objects()));
  One(&out, "shoal_store_evictions_total", "Objects evicted to make room", C,
      static_cast<double>(s.evictions()));
  One(&out, "shoal_store_evicted_bytes_total", "Bytes evicted to make room", C,
      static_cast<double>(s.evicted_bytes()));
  One(&out, "shoal_store_clients", "Processes connected to the store", G,
      static_cast<double>(s.clients()));
  One(&out, "shoal_store_prefaulted_bytes",
      "Store bytes whose pages are already mapped in", G,
      static_cast<double>(s.prefaulted_bytes()));
  One(&out, "shoal_store_lock_repairs_total",
      "Store operations of dead lock holders rolled back", C,
      static_cast<double>(s.lock_repairs()));
  One(&out, "shoal_store_creates_total",
      "Objects created in the store (a put is one)", C,
      static_cast<double>(s.creates()));
  One(&out, "shoal_store_created_bytes_total",
      "Bytes of the objects created in the store", C,
      static_cast<double>(s.created_bytes()));
  One(&out, "shoal_store_gets_total",
      "Objects read from the store by gets, every client's", C,
      static_cast<double>(s.gets()));
  One(&out, "shoal_store_get_bytes_total",
      "Bytes of the objects read from the store by gets", C,
      static_cast<double>(s.get_bytes()));
  One(&out, "shoal_store_spills_total", "Objects written to the spill folder",
      C, static_cast<double>(s.spills()));
  One(&out, "shoal_store_spilled_bytes_total",
      "Bytes written to the spill folder", C,
      static_cast<double>(s.spilled_bytes()));
  One(&out, "shoal_store_restores_total",
      "Spilled objects read back into the store", C,
      static_cast<double>(s.restores()));
  One(&out, "shoal_store_restored_bytes_total",
      "Bytes of spilled objects read back into the store", C,
      static_cast<double>(s.restored_bytes()));
  MetricFamily device_capacity{
      "shoal_store_device_capacity_bytes",
      "GPU memory the store holds for device objects, by GPU",
      G,
      {}};
  MetricFamily device_used{"shoal_store_device_used_bytes",
                           "GPU memory device objects take, by GPU",
                           G,
                           {}};
  for (const ipc::StoreDeviceStats& d : s.devices()) {
    std::vector<ClientMetric::Label> gpu = {
        {"gpu", std::to_string(d.ordinal())}};
    device_capacity.metric.push_back(
        MetricSample(G, static_cast<double>(d.capacity_bytes()), gpu));
    device_used.metric.push_back(
        MetricSample(G, static_cast<double>(d.used_bytes()), gpu));
  }
  out.push_back(std::move(device_capacity));
  out.push_back(std::move(device_used));
  return out;
}

// The Exposer's view of the endpoint: the families of each scrape, made then.
class MetricsServer::Collector : public prometheus::Collectable {
 public:
  explicit Collector(FamilySource source) : source_(std::move(source)) {}

  std::vector<MetricFamily> Collect() const override {
    MutexLock lock(&mu_);
    return source_();
  }

 private:
  mutable Mutex mu_;  // one FamilySource call at a time
  FamilySource source_ ABSL_GUARDED_BY(mu_);
};

absl::StatusOr<std::unique_ptr<MetricsServer>> MetricsServer::Start(
    const MetricsServerOptions& options, FigureSource source) {
  return Start(options, FamilySource([source = std::move(source)] {
                 absl::StatusOr<Figures> f = source();
                 return f.ok() ? FamiliesOf(*f) : DownFamilies();
               }));
}

struct MetricsServer::State {
  std::shared_ptr<Collector> collector;
  std::unique_ptr<prometheus::Exposer> exposer;
};

absl::StatusOr<std::unique_ptr<MetricsServer>> MetricsServer::Start(
    const MetricsServerOptions& options, FamilySource source) {
  if (options.port < 0 || options.port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("metrics port ", options.port, " is outside 0..65535"));
  }
  std::string host = options.address;
  if (host.empty())
    return absl::InvalidArgumentError("the metrics address is empty");
  if (absl::StrContains(host, ':') && !absl::StartsWith(host, "[")) {
    host = absl::StrCat("[", host, "]");  // an IPv6 literal
  }
  if (absl::StartsWith(host, "[") != absl::EndsWith(host, "]")) {
    return absl::InvalidArgumentError(
        absl::StrCat("metrics address '", options.address,
                     "' is not an IPv4 or IPv6 literal"));
  }
  const std::string listen = absl::StrCat(host, ":", options.port);
  auto server = std::unique_ptr<MetricsServer>(new MetricsServer());
  server->state_ = std::make_unique<State>();
  server->state_->collector = std::make_shared<Collector>(std::move(source));
  // prometheus-cpp reports a failure to listen by throwing (civetweb's
  // CivetException); it stays inside this function.
  try {
    server->state_->exposer =
        std::make_unique<prometheus::Exposer>(listen, /*num_threads=*/2);
  } catch (const std::exception& e) {
    return absl::UnavailableError(
        absl::StrCat("cannot serve metrics on ", listen, ": ", e.what()));
  }
  server->state_->exposer->RegisterCollectable(server->state_->collector);
  const std::vector<int> ports = server->state_->exposer->GetListeningPorts();
  if (ports.empty()) {
    return absl::UnavailableError(
        absl::StrCat("cannot serve metrics on ", listen, ": no port"));
  }
  server->port_ = ports[0];
  server->address_ = absl::StrCat(host, ":", server->port_);
  return server;
}

MetricsServer::~MetricsServer() {
  // The Exposer joins its threads first: no scrape runs the source after.
  if (state_ != nullptr) state_->exposer.reset();
}

}  // namespace shoal::observe
