// The launchers' agreement through node 0's key-value store: the rendezvous
// (launcher_internal.h), and after each generation the decision every node
// follows. A single node decides alone.
#include <string.h>

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "base/status_macros.h"
#include "launch/launcher_internal.h"

namespace shoal::launch {
namespace launcher_internal {
namespace {

std::string EncodeDecision(const Decision& d) {
  const char* kind = d.kind == Decision::kDone      ? "done"
                     : d.kind == Decision::kRestart ? "restart"
                                                    : "exit";
  return absl::StrCat(kind, " ", d.code, "\n", d.cause);
}

Decision DecodeDecision(absl::string_view text) {
  Decision d;
  std::pair<absl::string_view, absl::string_view> head_rest =
      absl::StrSplit(text, absl::MaxSplits('\n', 1));
  std::vector<absl::string_view> words = absl::StrSplit(head_rest.first, ' ');
  d.kind = words[0] == "done"      ? Decision::kDone
           : words[0] == "restart" ? Decision::kRestart
                                   : Decision::kExit;
  if (words.size() > 1) (void)absl::SimpleAtoi(words[1], &d.code);
  d.cause = std::string(head_rest.second);
  return d;
}

}  // namespace

// Every node announces itself; node 0 waits for all (or names the missing
// after --start-timeout), assigns rank offsets and publishes them.
absl::Status Launcher::Rendezvous() {
  SHOAL_RETURN_IF_ERROR(kv_->Set(absl::StrCat(kPrefix, "node/", o_.node_rank),
                                 absl::StrCat(nproc_, " ", host_)));
  const std::string ready_key = absl::StrCat(kPrefix, "ready");
  if (o_.node_rank == 0) {
    std::vector<std::string> keys;
    for (int k = 0; k < o_.nnodes; ++k)
      keys.push_back(absl::StrCat(kPrefix, "node/", k));
    absl::Status joined = kv_->Wait(keys, o_.start_timeout);
    if (!joined.ok()) {
      std::vector<std::string> missing;
      for (int k = 0; k < o_.nnodes; ++k) {
        if (!kv_->Get(keys[k]).ok()) missing.push_back(absl::StrCat(k));
      }
      const std::string why = absl::StrCat(
          "nodes ", absl::StrJoin(missing, ", "), " (of ", o_.nnodes,
          ") did not join within ", absl::FormatDuration(o_.start_timeout));
      (void)kv_->Set(ready_key, absl::StrCat("error ", why));
      return absl::DeadlineExceededError(why);
    }
    std::vector<int> offsets;
    int total = 0;
    for (int k = 0; k < o_.nnodes; ++k) {
      SHOAL_ASSIGN_OR_RETURN(std::string v, kv_->Get(keys[k]));
      int n = 0;
      (void)absl::SimpleAtoi(v.substr(0, v.find(' ')), &n);
      offsets.push_back(total);
      total += n;
    }
    SHOAL_RETURN_IF_ERROR(
        kv_->Set(ready_key, absl::StrCat("ok ", total, " ", FreePort(), " ",
                                         absl::StrJoin(offsets, " "))));
  }
  SHOAL_ASSIGN_OR_RETURN(
      std::string ready,
      kv_->Get(ready_key, o_.start_timeout + absl::Seconds(30)));
  if (absl::StartsWith(ready, "error "))
    return absl::DeadlineExceededError(ready.substr(6));
  std::vector<std::string> w = absl::StrSplit(ready, ' ');
  if (w.size() != static_cast<size_t>(3 + o_.nnodes) ||
      !absl::SimpleAtoi(w[1], &world_size_) ||
      !absl::SimpleAtoi(w[2], &master_port_) ||
      !absl::SimpleAtoi(w[3 + o_.node_rank], &rank_offset_)) {
    return absl::InternalError(
        absl::StrCat("malformed rendezvous record '", ready, "'"));
  }
  return absl::OkStatus();
}

Decision Launcher::Decide(int generation, const LocalOutcome& outcome) {
  if (o_.nnodes == 1) return DecideAlone(generation, outcome);
  if (lost_node_ == 0 && o_.node_rank != 0) {
    // Node 0 decides, and it is gone with the key-value store.
    return Decision{Decision::kExit, 1,
                    absl::StrCat("lost node 0: ", lost_cause_)};
  }
  // Every node reports how its part ended; node 0 decides for all.
  (void)kv_->Set(Key(generation, absl::StrCat("ended/", o_.node_rank)),
                 outcome.ok ? "ok" : "failed");
  if (o_.node_rank == 0) return DecideForAll(generation);
  return AwaitDecision(generation);
}

Decision Launcher::DecideAlone(int generation,
                               const LocalOutcome& outcome) const {
  Decision d;
  if (outcome.ok) return d;
  if (outcome.interrupted) {
    d.kind = Decision::kExit;
    d.code = 128 + outcome.interrupted;
    d.cause =
        absl::StrCat("interrupted by SIG", sigabbrev_np(outcome.interrupted));
    return d;
  }
  d.code = outcome.failure ? ExitCodeOf(outcome.failure->wait_status) : 1;
  d.cause = RootCause(outcome);
  d.kind = generation < o_.max_restarts ? Decision::kRestart : Decision::kExit;
  return d;
}

Decision Launcher::DecideForAll(int generation) {
  std::vector<std::string> ended;
  for (int k = 0; k < o_.nnodes; ++k) {
    // A lost node will not report.
    if (lost_node_ != k)
      ended.push_back(Key(generation, absl::StrCat("ended/", k)));
  }
  absl::Status all = kv_->Wait(ended, o_.stop_grace + o_.start_timeout);
  Decision d;
  absl::StatusOr<std::string> stop = kv_->Get(Key(generation, "stop"));
  if (stop.ok()) {
    std::pair<std::string, std::string> code_cause =
        absl::StrSplit(*stop, absl::MaxSplits('\n', 1));
    (void)absl::SimpleAtoi(code_cause.first, &d.code);
    d.cause = code_cause.second;
    const bool interrupted =
        d.code > 128 && absl::StrContains(d.cause, "the launcher on node");
    d.kind = !interrupted && generation < o_.max_restarts ? Decision::kRestart
                                                          : Decision::kExit;
  } else if (!all.ok()) {
    d.kind = Decision::kExit;
    d.code = 1;
    d.cause =
        absl::StrCat("a node's launcher stopped answering: ", all.message());
  }
  if (d.kind == Decision::kRestart) {
    // A fresh group starts with the job's own keys cleared.
    auto entries = kv_->List("");
    if (entries.ok()) {
      for (const auto& [key, value] : *entries) {
        if (!absl::StartsWith(key, "__shoal/")) (void)kv_->Delete(key);
      }
    }
  }
  (void)kv_->Set(Key(generation, "next"), EncodeDecision(d));
  if (d.kind != Decision::kRestart) {
    // Keep the key-value store up until every node has read the decision.
    std::vector<std::string> byes;
    for (int k = 1; k < o_.nnodes; ++k) {
      if (lost_node_ != k)
        byes.push_back(Key(generation, absl::StrCat("bye/", k)));
    }
    if (!byes.empty()) (void)kv_->Wait(byes, absl::Seconds(10));
  }
  return d;
}

Decision Launcher::AwaitDecision(int generation) {
  absl::StatusOr<std::string> next =
      kv_->Get(Key(generation, "next"),
               o_.stop_grace + o_.start_timeout + absl::Seconds(30));
  if (!next.ok()) {
    return Decision{Decision::kExit, 1,
                    absl::StrCat("lost node 0: ", next.status().message())};
  }
  Decision d = DecodeDecision(*next);
  if (d.kind != Decision::kRestart)
    (void)kv_->Set(Key(generation, absl::StrCat("bye/", o_.node_rank)), "");
  return d;
}

}  // namespace launcher_internal
}  // namespace shoal::launch
