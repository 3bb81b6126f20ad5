#include "observe/launch_metrics.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "observe/metrics.h"

namespace shoal::observe {

using prometheus::ClientMetric;
using prometheus::MetricFamily;
using prometheus::MetricType;

namespace {

MetricFamily Family(std::string name, std::string help, MetricType type) {
  return MetricFamily{std::move(name), std::move(help), type, {}};
}

}  // namespace

std::vector<MetricFamily> LaunchFamiliesOf(const LaunchFigures& f) {
  const auto G = MetricType::Gauge;
  const auto C = MetricType::Counter;
  std::vector<MetricFamily> out;
  MetricFamily up =
      Family("shoal_up",
             "1 when the launcher's figures were gathered for this scrape", G);
  up.metric.push_back(MetricSample(G, 1, {}));
  out.push_back(std::move(up));
  MetricFamily info =
      Family("shoal_launch_info",
             "The launched job's id and this node's rank (value 1)", G);
  info.metric.push_back(MetricSample(
      G, 1, {{"job_id", f.job_id}, {"node_rank", absl::StrCat(f.node_rank)}}));
  out.push_back(std::move(info));
  MetricFamily ranks = Family("shoal_launch_local_ranks",
                              "Ranks this launcher starts on its node", G);
  ranks.metric.push_back(MetricSample(G, f.local_ranks, {}));
  out.push_back(std::move(ranks));
  MetricFamily restarts =
      Family("shoal_launch_restarts_total",
             "Times this launcher started its ranks again", C);
  restarts.metric.push_back(MetricSample(C, f.restarts, {}));
  out.push_back(std::move(restarts));

  MetricFamily calls =
      Family("shoal_collective_calls_total",
             "Collective calls of a process of the job, by op and backend", C);
  MetricFamily bytes =
      Family("shoal_collective_bytes_total",
             "Bytes of those calls' inputs, by op and backend", C);
  MetricFamily seconds = Family("shoal_collective_seconds_total",
                                "Time in those calls, by op and backend", C);
  MetricFamily wait = Family(
      "shoal_collective_wait_seconds_total",
      "Of that time, the time the shared-memory backend waited for peers "
      "(0 for gloo and NCCL)",
      C);
  for (const ProcessTimeline& p : f.tallies.processes) {
    for (const CollectiveCount& c : p.collectives) {
      std::vector<ClientMetric::Label> labels = {
          {"process", p.label}, {"op", c.op}, {"backend", c.backend}};
      calls.metric.push_back(
          MetricSample(C, static_cast<double>(c.calls), labels));
      bytes.metric.push_back(
          MetricSample(C, static_cast<double>(c.bytes), labels));
      seconds.metric.push_back(
          MetricSample(C, static_cast<double>(c.busy_ns) * 1e-9, labels));
      wait.metric.push_back(
          MetricSample(C, static_cast<double>(c.wait_ns) * 1e-9, labels));
    }
  }
  for (MetricFamily* family : {&calls, &bytes, &seconds, &wait})
    out.push_back(std::move(*family));
  return out;
}

}  // namespace shoal::observe
