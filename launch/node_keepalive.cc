#include "launch/node_keepalive.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <map>
#include <memory>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "launch/kv_client.h"

namespace shoal::launch {

NodeKeepAlive::NodeKeepAlive(KeepAliveOptions o)
    : o_(std::move(o)), fd_(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {
  if (o_.nnodes <= 1 || o_.kv_endpoint.empty()) return;
  thread_ = std::thread([this] { Run(); });
}

NodeKeepAlive::~NodeKeepAlive() {
  running_.store(false);
  if (thread_.joinable()) thread_.join();
  close(fd_);
}

std::optional<NodeKeepAlive::Lost> NodeKeepAlive::lost() const {
  MutexLock lock(&mu_);
  return lost_;
}

void NodeKeepAlive::Report(Lost lost) {
  {
    MutexLock lock(&mu_);
    lost_ = std::move(lost);
  }
  const uint64_t one = 1;
  ssize_t unused = write(fd_, &one, sizeof(one));
  (void)unused;
}

void NodeKeepAlive::Run() {
  KvClientOptions ko;
  ko.secret = o_.secret;
  // A call must not outlast the time after which node 0 counts as lost.
  ko.rpc_timeout = std::max(o_.period, o_.dead_after / 4);
  std::unique_ptr<KvClient> kv;
  const std::string mine = absl::StrCat(o_.prefix, o_.node);
  // Per other node: its last counter and when it last moved. A node not
  // heard of yet counts from now (every launcher starts this after the
  // rendezvous, within moments of the others).
  std::map<int, std::pair<std::string, absl::Time>> seen;
  const absl::Time start = absl::Now();
  for (int k = 0; k < o_.nnodes; ++k) {
    if (k != o_.node) seen[k] = {"", start};
  }
  absl::Time kv_answered = start;
  while (running_.load()) {
    const absl::Time now = absl::Now();
    bool answered = false;
    if (kv == nullptr) {
      auto connected = KvClient::Connect(o_.kv_endpoint, ko);
      if (connected.ok()) kv = *std::move(connected);
    }
    if (kv != nullptr && kv->Add(mine, 1).ok()) {
      auto entries = kv->List(o_.prefix);
      if (entries.ok()) {
        answered = true;
        for (const auto& [key, value] : *entries) {
          int node = -1;
          if (!absl::SimpleAtoi(key.substr(o_.prefix.size()), &node)) continue;
          auto it = seen.find(node);
          if (it == seen.end()) continue;
          if (value == "done") {
            seen.erase(it);  // finished normally: not watched any more
          } else if (value != it->second.first) {
            it->second = {value, now};
          }
        }
      }
    }
    if (answered) {
      kv_answered = now;
    } else {
      kv.reset();  // reconnect: a failed call may leave the channel unusable
    }
    if (o_.node != 0 && now - kv_answered >= o_.dead_after) {
      Report({0, absl::StrCat("node 0's key-value service (in its launcher) "
                              "has not answered for ",
                              absl::FormatDuration(now - kv_answered))});
      return;
    }
    for (const auto& [node, last] : seen) {
      if (answered && now - last.second >= o_.dead_after) {
        Report({node, absl::StrCat("node ", node,
                                   "'s launcher has not renewed its "
                                   "keep-alive for ",
                                   absl::FormatDuration(now - last.second))});
        return;
      }
    }
    const absl::Time next = now + o_.period;
    while (running_.load() && absl::Now() < next) {
      absl::SleepFor(std::min(absl::Milliseconds(100), next - absl::Now()));
    }
  }
  // A normal end: the others stop watching this node.
  if (kv != nullptr) (void)kv->Set(mine, "done");
}

}  // namespace shoal::launch
