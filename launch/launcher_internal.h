// Internal to the launcher: the Launcher class, split across launcher.cc
// (setup, and this node's group: started, watched and stopped each
// generation) and launcher_nodes.cc (what the launchers agree on through node
// 0's key-value store: the rendezvous, and after each generation whether the
// job is done, restarts or exits). Not part of the public API.
#ifndef SHOAL_LAUNCH_LAUNCHER_INTERNAL_H_
#define SHOAL_LAUNCH_LAUNCHER_INTERNAL_H_

#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "launch/kv_client.h"
#include "launch/kv_service.h"
#include "launch/launcher.h"
#include "launch/local_group.h"
#include "launch/node_keepalive.h"
#include "observe/launch_metrics.h"
#include "shm/store_service.h"

namespace shoal::launch {
namespace launcher_internal {

// The launchers' keys in the job's key-value store start with this.
inline constexpr char kPrefix[] = "__shoal/launch/";

std::string Hostname();
// A free TCP port for torch.distributed's own store (MASTER_PORT).
int FreePort();
// A launcher's exit code for a process's wait status: its exit code, or 128 +
// the signal that killed it.
int ExitCodeOf(int status);
// The job secret of the key-value service (launcher_secret.cc):
// $SHOAL_KV_SECRET; else for one node a fresh key; else the user's key file
// ($SHOAL_KV_SECRET_FILE, default ~/.shoal/kv_secret, without HOME
// <runtime root>/kv_secret; created if missing).
// Errors: InvalidArgument (a malformed $SHOAL_KV_SECRET), FailedPrecondition
// (a key file or folder that is a link, someone else's or open to others),
// errno-derived codes from the file system.
absl::StatusOr<std::string> JobSecret(int nnodes);

// How the group's processes on this node ended.
struct LocalOutcome {
  bool ok = false;      // every process exited 0
  int interrupted = 0;  // a signal the launcher received (0: none)
  std::optional<RankExit> failure;
};

// What the job does next, as node 0 decides and every node reads.
struct Decision {
  enum Kind { kDone, kRestart, kExit } kind = kDone;
  int code = 0;
  std::string cause;  // the root-cause summary (for kExit / kRestart)
};

class Launcher {
 public:
  explicit Launcher(LaunchOptions o) : o_(std::move(o)) {}
  ~Launcher();

  absl::Status Setup();
  absl::StatusOr<int> Run();
  // Empty until Setup gave the job one.
  const std::string& job_id() const { return o_.job_id; }
  // What its metrics endpoint reports (observe/launch_metrics.h); safe on
  // another thread once Setup returned.
  observe::LaunchFigures Figures() const;

 private:
  absl::Status ResolveProcesses();
  // launcher_nodes.cc: every node announces itself; node 0 assigns ranks.
  absl::Status Rendezvous();
  std::vector<RankSpec> Specs(int generation) const;
  LocalOutcome Monitor(int generation);
  // Monitor's reactions: to SIGINT/SIGTERM, and to the group's first failed
  // process. Each stops the group (once) and publishes the stop key.
  void OnSignal(int generation, LocalGroup& group, LocalOutcome* outcome,
                bool* stopping);
  void OnFirstFailure(int generation, LocalGroup& group, LocalOutcome* outcome,
                      bool* stopping);
  // A node lost (NodeKeepAlive): stop this node's group, say which node,
  // and record it so that the decision does not wait for it.
  void OnLostNode(int generation, const NodeKeepAlive& keepalive,
                  LocalGroup& group, bool* stopping);
  // launcher_nodes.cc: what the job does after a generation ended.
  Decision Decide(int generation, const LocalOutcome& outcome);
  Decision DecideAlone(int generation, const LocalOutcome& outcome) const;
  // Multi-node, node 0: waits for every node's end, decides and publishes.
  Decision DecideForAll(int generation);
  // Multi-node, other nodes: node 0's decision.
  Decision AwaitDecision(int generation);
  std::string RootCause(const LocalOutcome& outcome) const;
  // The key-value store key of `what` in generation `generation`.
  std::string Key(int generation, absl::string_view what) const {
    return absl::StrCat(kPrefix, generation, "/", what);
  }

  LaunchOptions o_;
  int nproc_ = 1;
  std::vector<std::string> gpus_;  // per local rank, "" when not per-GPU
  int world_size_ = 1;
  int rank_offset_ = 0;
  std::string master_addr_ = "127.0.0.1";
  int master_port_ = 0;
  std::string host_ = Hostname();

  std::unique_ptr<shm::StoreService> store_;
  std::thread store_thread_;
  std::unique_ptr<KvService> kv_service_;
  std::thread kv_thread_;
  std::string kv_endpoint_;
  std::string kv_secret_;                 // the job secret (JobSecret)
  std::unique_ptr<launch::KvClient> kv_;  // this launcher's (multi-node only)
  // The node NodeKeepAlive found lost this generation, and why.
  std::optional<int> lost_node_;
  std::string lost_cause_;
  // Times Run started the group again (read by the metrics endpoint).
  std::atomic<int> restarts_{0};
};

}  // namespace launcher_internal
}  // namespace shoal::launch

#endif  // SHOAL_LAUNCH_LAUNCHER_INTERNAL_H_
