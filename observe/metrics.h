// The Prometheus endpoint of a node: `shoal start --metrics-port N` serves
// GET /metrics in Prometheus' text format (prometheus-cpp's Exposer, on the
// civetweb server it brings).
//
// Nothing is counted for the endpoint: each scrape asks a FigureSource for
// what the node already keeps (the coordinator's NodeStatus: the task table's
// counters, the supervisor's workers, the store's Stats) and turns it into
// metric families. A node without a scraper pays nothing; a scrape costs one
// status request of the coordinator's event loop.
#ifndef SHOAL_OBSERVE_METRICS_H_
#define SHOAL_OBSERVE_METRICS_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "ipc/messages.h"
#include "prometheus/metric_family.h"

namespace shoal::observe {

// What one scrape reports: the node's status as `shoal status` sees it.
using Figures = ipc::NodeStatus;

// Gathers the figures; called on the HTTP server's threads, one call at a
// time. An error makes the scrape report shoal_up 0 and nothing else.
using FigureSource = std::function<absl::StatusOr<Figures>()>;

// A sample of a counter or a gauge (by `type`) with `labels`.
prometheus::ClientMetric MetricSample(
    prometheus::MetricType type, double value,
    std::vector<prometheus::ClientMetric::Label> labels = {});

// The metric families of `f` (names in docs/observability.md). Every family
// is present even where its value is 0, so that a series exists from the
// first scrape.
std::vector<prometheus::MetricFamily> FamiliesOf(const Figures& f);

// The families of a scrape whose figures could not be gathered: shoal_up 0.
std::vector<prometheus::MetricFamily> DownFamilies();

// Any endpoint's families, made at each scrape (a launcher's:
// launch_metrics.h). Called on the HTTP server's threads, one call at a time.
using FamilySource = std::function<std::vector<prometheus::MetricFamily>()>;

struct MetricsServerOptions {
  // The address to listen on (an IPv4 or IPv6 literal). Default loopback:
  // the figures name the job, its workers' pids and its functions' load, and
  // the endpoint has no authentication (docs/security.md).
  std::string address = "127.0.0.1";
  // The TCP port; 0 picks a free one (see MetricsServer::port).
  int port = 0;
};

class MetricsServer {
 public:
  // Listens on options.address:options.port and serves /metrics from
  // `source` until destroyed.
  // REQUIRES: `source` may be called on the server's threads until the
  // server is destroyed.
  // Errors: InvalidArgument (a port outside 0..65535, an empty address or one
  // with a ':' that is not a bracketed IPv6 literal), Unavailable (the
  // address cannot be listened on: in use, not this machine's; the message
  // names it).
  static absl::StatusOr<std::unique_ptr<MetricsServer>> Start(
      const MetricsServerOptions& options, FigureSource source);
  // The same for any families (errors as above).
  static absl::StatusOr<std::unique_ptr<MetricsServer>> Start(
      const MetricsServerOptions& options, FamilySource source);
  ~MetricsServer();

  MetricsServer(const MetricsServer&) = delete;
  MetricsServer& operator=(const MetricsServer&) = delete;

  // The port it listens on (the picked one when options.port was 0).
  int port() const { return port_; }
  // HOST:PORT as a URL names it ("127.0.0.1:9464", "[::1]:9464").
  const std::string& address() const { return address_; }

  class Collector;

 private:
  MetricsServer() = default;
  struct State;
  std::unique_ptr<State> state_;
  int port_ = 0;
  std::string address_;
};

}  // namespace shoal::observe

#endif  // SHOAL_OBSERVE_METRICS_H_
