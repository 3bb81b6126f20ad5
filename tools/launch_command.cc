// `shoal launch [flags] -- COMMAND ARGS...`
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "launch/launcher.h"
#include "tools/cli/args.h"
#include "tools/commands.h"

namespace shoal::cli {

int LaunchCommand(int argc, char** argv) {
  ArgParser p(
      "shoal launch [flags] -- COMMAND ARGS...",
      "Runs COMMAND as an SPMD job: --nproc-per-node processes on each "
      "of --nnodes\n"
      "nodes, each with RANK, LOCAL_RANK, WORLD_SIZE, "
      "LOCAL_WORLD_SIZE, GROUP_RANK,\n"
      "MASTER_ADDR, MASTER_PORT (torch.distributed's env://), SHOAL_* "
      "endpoints and\n"
      "its own CUDA_VISIBLE_DEVICES (--nproc-per-node gpu). Programs "
      "join with\n"
      "shoal::launch::Init() (C++) or shoal.init() (Python). The first process "
      "to fail stops\n"
      "the group; the launcher exits with its code and says why. Under "
      "Slurm the\n"
      "node count, node rank and head host come from SLURM_*.");
  std::string& nproc =
      p.String("nproc-per-node", "1", "processes per node: N, gpu or auto");
  int64_t& nnodes = p.Int("nnodes", 1, "nodes in the job");
  int64_t& node_rank =
      p.Int("node-rank", 0, "this node's rank (0 hosts the key-value store)");
  std::string& coordinator =
      p.String("coordinator", "", "HOST:PORT of node 0's key-value store");
  bool& standalone = p.Bool("standalone", false, "one node, any free port");
  std::string& gpus =
      p.String("gpus", "", "GPUs to use (default: all visible)");
  int64_t& max_restarts =
      p.Int("max-restarts", 0, "restarts of the group after a failure");
  bool& tee = p.Bool("tee", false, "prefix each output line with [rank]");
  std::string& log_dir =
      p.String("log-dir", "", "also write rank<R>.stdout/.stderr here");
  std::string& timeline =
      p.String("timeline", "",
               "at the end, write the job's timeline here (Chrome trace JSON)");
  absl::Duration& start_timeout =
      p.Duration("start-timeout", absl::Minutes(5),
                 "how long to wait for all nodes to join (300, 5m, ...)");
  absl::Duration& grace =
      p.Duration("stop-grace", absl::Seconds(5),
                 "time between SIGTERM and SIGKILL on stop");
  absl::Duration& keepalive_timeout = p.Duration(
      "keepalive-timeout", absl::Seconds(10),
      "multi-node: stop this node's ranks when another node (or node 0's "
      "key-value store) is silent this long");
  uint64_t& store_bytes =
      p.Bytes("store-bytes", 0, "each node's store (default: 30% RAM)");
  std::string& job_id = p.String("job-id", "", "job id (default: a fresh one)");
  int64_t& metrics_port =
      p.Int("metrics-port", -1,
            "serve Prometheus metrics (the ranks' collectives, restarts) on "
            "this port at /metrics while the job runs (0: any free one; "
            "default: none)");
  std::string& metrics_address =
      p.String("metrics-address", "127.0.0.1",
               "the address --metrics-port listens on (the endpoint has no "
               "authentication: see docs/security.md before widening it)");
  if (absl::Status s = p.Parse(argc, argv); !s.ok()) return Fail(s);
  if (!p.positional().empty()) {
    return Fail(absl::InvalidArgumentError(
        absl::StrCat("put the command after `--`: shoal launch [flags] -- ",
                     p.positional()[0], " ...")));
  }
  launch::LaunchOptions o;
  o.command = p.rest();
  o.nproc_per_node = nproc;
  o.nnodes = static_cast<int>(nnodes);
  o.node_rank = static_cast<int>(node_rank);
  o.coordinator = coordinator;
  o.standalone = standalone;
  if (p.seen("gpus")) o.gpus = gpus;
  o.max_restarts = static_cast<int>(max_restarts);
  o.tee = tee;
  o.log_dir = log_dir;
  o.timeline_out = timeline;
  o.start_timeout = start_timeout;
  o.stop_grace = grace;
  if (keepalive_timeout <= absl::ZeroDuration()) {
    return Fail(
        absl::InvalidArgumentError("--keepalive-timeout must be more than 0"));
  }
  o.keepalive_timeout = keepalive_timeout;
  o.store_bytes = store_bytes;
  o.job_id = job_id;
  if (metrics_port > 65535 || (metrics_port < 0 && p.seen("metrics-port"))) {
    return Fail(absl::InvalidArgumentError(
        absl::StrCat("--metrics-port ", metrics_port, " is outside 0..65535")));
  }
  if (metrics_port < 0 && p.seen("metrics-address")) {
    return Fail(
        absl::InvalidArgumentError("--metrics-address needs --metrics-port"));
  }
  o.metrics_port = static_cast<int>(metrics_port);
  o.metrics_address = metrics_address;
  if (standalone && (nnodes != 1 || !coordinator.empty())) {
    return Fail(absl::InvalidArgumentError(
        "--standalone is for one node without --coordinator"));
  }
  if (!standalone) {
    absl::Status s = launch::ApplySlurmDefaults(
        &o, p.seen("nnodes"), p.seen("node-rank"), p.seen("coordinator"));
    if (!s.ok()) return Fail(s);
  }
  absl::StatusOr<int> code = launch::Launch(std::move(o));
  if (!code.ok()) return Fail(code.status());
  return *code;
}

}  // namespace shoal::cli
