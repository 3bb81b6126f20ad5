#include "tools/bench/tasks_bench_sync.h"

#include <signal.h>

#include <algorithm>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "base/status_macros.h"
#include "coordinator/client.h"
#include "tools/bench/tasks_bench_zmq.h"

namespace shoal::bench {

absl::StatusOr<EchoProcess> StartEchoProcess() {
  SubprocessOptions so;
  so.pipe_stdout = true;
  so.parent_death_signal = SIGTERM;
  EchoProcess e;
  SHOAL_ASSIGN_OR_RETURN(
      e.process,
      Subprocess::Start(
          {SelfExePath(), "bench", "tasks", "--zmq-echo-server", "curve"}, so));
  SHOAL_ASSIGN_OR_RETURN(std::string line,
                         e.process.ReadLine(absl::Seconds(30)));
  std::vector<std::string> w = absl::StrSplit(line, ' ');
  if (w.size() != 4) {
    return absl::InternalError(
        absl::StrCat("the echo process wrote '", line, "'"));
  }
  e.endpoint = w[0];
  e.server_key = w[1];
  e.client_keys = ipc::CurveKeyPair{w[2], w[3]};
  return e;
}

void StopEchoProcess(EchoProcess& echo) {
  echo.process.Signal(SIGTERM);
  (void)echo.process.Wait(absl::Seconds(10));
}

namespace {

double P50Ratio(const InterleavedLatency& a, const InterleavedLatency& b) {
  return b.p50_us > 0 ? a.p50_us / b.p50_us : 0;
}

absl::StatusOr<InterleavedSync> Measure(coordinator::Client& client,
                                        ZmqEcho& in_process,
                                        ZmqEcho& echo_process, int n_sync,
                                        int blocks) {
  ipc::TaskSpec noop;
  noop.function = "noop";
  // The same calls as SyncPushed in tasks_bench.cc.
  auto shoal_one = [&]() -> absl::Status {
    SHOAL_ASSIGN_OR_RETURN(coordinator::PendingTask p,
                           client.SubmitAsync(noop));
    SHOAL_ASSIGN_OR_RETURN(ipc::TaskResult r,
                           client.Await(p, absl::Minutes(1)));
    if (!r.status.ok()) {
      return absl::InternalError(
          absl::StrCat("a no-op task failed: ", r.status.ToString()));
    }
    return absl::OkStatus();
  };
  InterleaveOptions o;
  o.blocks = blocks;
  o.per_block = std::max(1, n_sync / blocks);
  o.warmup = n_sync / 10;
  SHOAL_ASSIGN_OR_RETURN(
      std::vector<InterleavedLatency> systems,
      MeasureInterleaved(
          {{"shoal remote (ZeroMQ), SubmitAsync+Await (pushed)", shoal_one},
           {"raw ZeroMQ tcp+CURVE", [&] { return in_process.RoundTrip(); }},
           {"raw ZeroMQ tcp+CURVE, echo process",
            [&] { return echo_process.RoundTrip(); }}},
          o));
  InterleavedSync out;
  out.ratio_in_process = P50Ratio(systems[0], systems[1]);
  out.ratio_echo_process = P50Ratio(systems[0], systems[2]);
  out.block_ratios_in_process = BlockRatios(systems[0], systems[1]);
  out.block_ratios_echo_process = BlockRatios(systems[0], systems[2]);
  out.systems = std::move(systems);
  return out;
}

}  // namespace

absl::StatusOr<InterleavedSync> MeasureSyncInterleaved(const std::string& job,
                                                       int n_sync, int blocks) {
  coordinator::ClientOptions co;
  co.job_id = job;
  co.force_remote = true;
  SHOAL_ASSIGN_OR_RETURN(std::unique_ptr<coordinator::Client> client,
                         coordinator::Client::Connect(co));
  SHOAL_ASSIGN_OR_RETURN(std::unique_ptr<ZmqEcho> in_process,
                         ZmqEcho::InProcess(/*curve=*/true,
                                            /*payload_bytes=*/64));
  SHOAL_ASSIGN_OR_RETURN(EchoProcess echo, StartEchoProcess());
  absl::StatusOr<InterleavedSync> out =
      [&]() -> absl::StatusOr<InterleavedSync> {
    SHOAL_ASSIGN_OR_RETURN(
        std::unique_ptr<ZmqEcho> to_echo,
        ZmqEcho::To(echo.endpoint, echo.server_key, echo.client_keys,
                    /*payload_bytes=*/64));
    return Measure(*client, *in_process, *to_echo, n_sync, blocks);
  }();
  StopEchoProcess(echo);
  return out;
}

}  // namespace shoal::bench
