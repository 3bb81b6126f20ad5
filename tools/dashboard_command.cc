// `shoal dashboard`: serves one page on 127.0.0.1 (observe/dashboard_page.html)
// that shows a node's workers, a live task stream (a Gantt chart of the last
// minute per worker), its store's use over time and, for a launched job, its
// ranks and collectives. A process of its own: it asks the node's status as a
// client (as `shoal top` does) and reads the job's timeline rings
// (observe::GatherTimeline). The URL it prints carries a random token, as
// Jupyter's does; a request without it gets 403.
#include "tools/dashboard_command.h"

#include <signal.h>

#include <cstdio>
#include <memory>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "coordinator/client.h"
#include "coordinator/discovery.h"
#include "observe/dashboard_data.h"
#include "observe/dashboard_server.h"
#include "observe/timeline_read.h"
#include "tools/cli/args.h"
#include "tools/commands.h"

namespace shoal::cli {

observe::DashboardSources NodeDashboardSources(std::string job_id,
                                               std::string endpoint) {
  struct Node {
    std::string job_id;
    std::string endpoint;
    std::unique_ptr<coordinator::Client> client;
    observe::CpuSampler cpu;
  };
  auto node = std::make_shared<Node>();
  node->job_id = job_id;
  node->endpoint = std::move(endpoint);
  observe::DashboardSources sources;
  // The client connects at the first request and again after a failure (the
  // node may start later, or restart).
  sources.status = [node]() -> std::string {
    if (node->client == nullptr) {
      coordinator::ClientOptions co;
      co.job_id = node->job_id;
      co.endpoint = node->endpoint;
      co.force_remote = true;  // figures only: no fast path
      co.name = "dashboard";
      co.rpc_timeout = absl::Seconds(5);
      absl::StatusOr<std::unique_ptr<coordinator::Client>> c =
          coordinator::Client::Connect(co);
      if (!c.ok()) return observe::DashboardErrorJson(c.status());
      node->client = *std::move(c);
    }
    absl::StatusOr<ipc::NodeStatus> st = node->client->Status();
    if (!st.ok()) {
      node->client.reset();
      return observe::DashboardErrorJson(st.status());
    }
    return observe::DashboardStatusJson(*st, node->cpu.Sample(*st));
  };
  sources.timeline = [job_id](absl::Duration window) -> std::string {
    absl::StatusOr<observe::Timeline> t =
        observe::GatherTimeline(job_id, window);
    if (!t.ok()) return observe::DashboardErrorJson(t.status());
    return observe::DashboardTimelineJson(*t);
  };
  return sources;
}

int DashboardCommand(int argc, char** argv) {
  ArgParser p("shoal dashboard [flags]",
              "Serves a page of a node's workers, a live task stream, its "
              "store's use and,\nfor a launched job, its ranks' "
              "collectives. Prints the page's URL, which\ncarries a random "
              "token (keep it private); runs until Ctrl-C.");
  std::string& job_id = p.String(
      "job-id", "",
      "the node's or launched job's id (default: the node started last)");
  std::string& endpoint =
      p.String("endpoint", "", "the coordinator's frontend (tcp://...)");
  int64_t& port = p.Int("port", 0, "the TCP port (0: any free one)");
  std::string& address =
      p.String("address", "127.0.0.1",
               "the address to listen on (another than loopback: read "
               "docs/security.md first)");
  if (absl::Status s = p.Parse(argc, argv); !s.ok()) return Fail(s);
  if (port < 0 || port > 65535) {
    return Fail(absl::InvalidArgumentError(
        absl::StrCat("--port ", port, " is outside 0..65535")));
  }
  std::string job = job_id;
  if (job.empty()) {
    absl::StatusOr<coordinator::Discovery> d = coordinator::ReadDiscovery();
    if (!d.ok()) return Fail(d.status());
    job = d->job_id;
  }
  // SIGINT and SIGTERM wait for sigwait below: blocked before the server's
  // threads start, so that they inherit the mask.
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGINT);
  sigaddset(&stop, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop, nullptr);
  observe::DashboardServerOptions o;
  o.address = address;
  o.port = static_cast<int>(port);
  absl::StatusOr<std::unique_ptr<observe::DashboardServer>> server =
      observe::DashboardServer::Start(o, NodeDashboardSources(job, endpoint));
  if (!server.ok()) return Fail(server.status());
  std::printf("dashboard of job %s: %s\n", job.c_str(),
              (*server)->url().c_str());
  std::fflush(stdout);
  int sig = 0;
  sigwait(&stop, &sig);
  server->reset();  // its threads end before the sources they call
  return 0;
}

}  // namespace shoal::cli
