// Communicator::Impl's creation: which node each rank is on, and the
// backends for host buffers (shm on one node; flat gloo and the hierarchical
// backend across nodes, or flat gloo forced). The dispatch of calls is in
// communicator.cc.
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "collectives/communicator_impl.h"
#include "collectives/rendezvous/kv_rendezvous.h"

namespace shoal::collectives {

namespace {

// The shm backend's tuning knobs, like NCCL's NCCL_* variables: every rank
// must see the same values (shoal launch passes its environment to all).
absl::Status ApplyTuningEnv(collectives::ShmCommOptions& o) {
  const std::pair<const char*, uint64_t*> knobs[] = {
      {"SHOAL_COLL_SLOT_BYTES", &o.slot_bytes},
      {"SHOAL_COLL_ONE_STEP_BYTES", &o.one_step_bytes},
      {"SHOAL_COLL_STREAM_BYTES", &o.stream_bytes},
      {"SHOAL_COLL_P2P_BYTES", &o.p2p_bytes},
  };
  for (const auto& [name, value] : knobs) {
    const char* text = std::getenv(name);
    if (text == nullptr || *text == '\0') continue;
    if (!absl::SimpleAtoi(text, value)) {
      return absl::InvalidArgumentError(
          absl::StrCat(name, "=", text, ": expected a number of bytes"));
    }
  }
  const char* spin = std::getenv("SHOAL_COLL_SPIN_US");
  if (spin != nullptr && *spin != '\0') {
    int64_t us = 0;
    if (!absl::SimpleAtoi(spin, &us) || us < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "SHOAL_COLL_SPIN_US=", spin, ": expected microseconds (>= 0)"));
    }
    o.spin = absl::Microseconds(us);
  }
  const char* pauses = std::getenv("SHOAL_COLL_SPIN_PAUSES");
  if (pauses != nullptr && *pauses != '\0') {
    if (!absl::SimpleAtoi(pauses, &o.spin_pauses) || o.spin_pauses < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "SHOAL_COLL_SPIN_PAUSES=", pauses, ": expected a count (>= 0)"));
    }
  }
  return absl::OkStatus();
}

// This machine, as the ranks of a rendezvous compare it: the host name (the
// UTS namespace, for containers) and the boot id (the kernel).
std::string MachineId() {
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  std::ifstream in("/proc/sys/kernel/random/boot_id");
  std::string boot;
  std::getline(in, boot);
  return absl::StrCat(host, "/", boot);
}

}  // namespace

absl::Status Communicator::Impl::Init() {
  // The shm backend needs every member on this node.
  const std::string node_key = absl::StrCat("__shoal/coll/", o_.name, "/node/");
  SHOAL_RETURN_IF_ERROR(job_->kv().Set(absl::StrCat(node_key, rank_),
                                       absl::StrCat(job_->node_rank())));
  bool one_node = true;
  for (int r = 0; r < size(); ++r) {
    SHOAL_ASSIGN_OR_RETURN(
        std::string node,
        job_->kv().Get(absl::StrCat(node_key, r), o_.timeout));
    if (node != absl::StrCat(job_->node_rank())) one_node = false;
  }
  collectives::ShmCommOptions so;
  so.slot_bytes = o_.shm_slot_bytes;
  so.timeout = o_.timeout;
  SHOAL_RETURN_IF_ERROR(ApplyTuningEnv(so));
  SHOAL_ASSIGN_OR_RETURN(force_gloo_, ForceGlooFromEnv());
  collectives::KvRendezvous rendezvous(job_->kv());
  if (!one_node) {
    shm_error_ = absl::FailedPreconditionError(absl::StrCat(
        "communicator '", o_.name,
        "' spans nodes: the shm backend needs all its ranks on one node "
        "(host buffers go through the hierarchical or gloo backend)"));
    std::vector<int> node_of;
    for (int r = 0; r < size(); ++r) {
      SHOAL_ASSIGN_OR_RETURN(
          std::string node,
          job_->kv().Get(absl::StrCat(node_key, r), o_.timeout));
      int id = 0;
      if (!absl::SimpleAtoi(node, &id)) {
        return absl::InternalError(
            absl::StrCat("rank ", r, " recorded node '", node, "'"));
      }
      node_of.push_back(id);
    }
    return InitAcrossNodes(rendezvous, std::move(node_of), job_->job_id(), so);
  }
  SHOAL_ASSIGN_OR_RETURN(
      shm_, collectives::ShmCommunicator::Create(rendezvous, job_->job_id(),
                                                 o_.name, rank_, size(), so));
  if (force_gloo_) SHOAL_RETURN_IF_ERROR(CreateFlatGloo(rendezvous));
  return absl::OkStatus();
}

absl::Status Communicator::Impl::InitAcrossNodes(
    Rendezvous& rendezvous, std::vector<int> node_of, const std::string& job_id,
    const collectives::ShmCommOptions& so) {
  HierarchicalOptions ho;
  ho.node_of = std::move(node_of);
  SHOAL_RETURN_IF_ERROR(CreateFlatGloo(rendezvous, &ho.node_of));
  if (!HierarchicalCommunicator::Fits(ho.node_of)) return absl::OkStatus();
  ho.job_ranks = ranks_;
  ho.job_id = job_id;
  ho.shm = so;
  ho.gloo = gloo_options_;
  SHOAL_ASSIGN_OR_RETURN(
      hierarchical_, HierarchicalCommunicator::Create(rendezvous, o_.name,
                                                      rank_, gloo_.get(), ho));
  return absl::OkStatus();
}

absl::Status Communicator::Impl::CreateFlatGloo(
    Rendezvous& rendezvous, const std::vector<int>* node_of) {
  gloo_options_.hostname = GlooListenAddress();
  gloo_options_.timeout = o_.timeout;
  const std::string addr_key =
      absl::StrCat("__shoal/coll/", o_.name, "/address/");
  SHOAL_RETURN_IF_ERROR(
      rendezvous.Set(absl::StrCat(addr_key, rank_), gloo_options_.hostname));
  std::map<std::string, std::vector<int>> ranks_at;
  std::map<std::string, int> node_at;
  for (int r = 0; r < size(); ++r) {
    SHOAL_ASSIGN_OR_RETURN(
        std::string address,
        rendezvous.Get(absl::StrCat(addr_key, r), o_.timeout));
    ranks_at[address].push_back(job_rank(r));
    if (node_of != nullptr) node_at[address] = (*node_of)[r];
  }
  for (const auto& [address, ranks] : ranks_at) {
    gloo_options_.peer_names[address] = absl::StrCat(
        node_at.count(address) ? absl::StrCat("node ", node_at[address], " ")
                               : "",
        "(ranks ", absl::StrJoin(ranks, ", "), ")");
  }
  SHOAL_ASSIGN_OR_RETURN(
      gloo_, GlooCommunicator::Create(rendezvous, o_.name + ".flat", rank_,
                                      size(), gloo_options_));
  // Used directly (forced, or ranks that do not form equal blocks by
  // node), flat gloo watches its own connections; under the hierarchical
  // backend, that backend's watcher does.
  if (force_gloo_ || node_of == nullptr ||
      !HierarchicalCommunicator::Fits(*node_of)) {
    gloo_->StartWatching();
  }
  return absl::OkStatus();
}

absl::StatusOr<bool> Communicator::Impl::ForceGlooFromEnv() {
  const char* text = std::getenv("SHOAL_COLLECTIVES_BACKEND");
  const std::string value = text == nullptr ? "" : text;
  if (value.empty() || value == "auto") return false;
  if (value == "gloo") return true;
  return absl::InvalidArgumentError(absl::StrCat(
      "SHOAL_COLLECTIVES_BACKEND=", value, ": expected gloo or auto"));
}

absl::Status Communicator::Impl::InitWithRendezvous(const std::string& job_id) {
  Rendezvous& rendezvous = *rendezvous_;
  const std::string machine_key =
      absl::StrCat("__shoal/coll/", o_.name, "/machine/");
  SHOAL_RETURN_IF_ERROR(
      rendezvous.Set(absl::StrCat(machine_key, rank_), MachineId()));
  std::vector<std::string> machines;
  std::vector<int> node_of;
  for (int r = 0; r < size(); ++r) {
    SHOAL_ASSIGN_OR_RETURN(
        std::string theirs,
        rendezvous.Get(absl::StrCat(machine_key, r), o_.timeout));
    auto known = std::find(machines.begin(), machines.end(), theirs);
    node_of.push_back(static_cast<int>(known - machines.begin()));
    if (known == machines.end()) machines.push_back(std::move(theirs));
  }
  collectives::ShmCommOptions so;
  so.slot_bytes = o_.shm_slot_bytes;
  so.timeout = o_.timeout;
  SHOAL_RETURN_IF_ERROR(ApplyTuningEnv(so));
  SHOAL_ASSIGN_OR_RETURN(force_gloo_, ForceGlooFromEnv());
  if (machines.size() > 1) {
    shm_error_ = absl::FailedPreconditionError(absl::StrCat(
        "communicator '", o_.name, "' spans ", machines.size(),
        " machines: the shm backend needs all its ranks on one (host "
        "buffers go through the hierarchical or gloo backend)"));
    return InitAcrossNodes(rendezvous, std::move(node_of), job_id, so);
  }
  SHOAL_ASSIGN_OR_RETURN(
      shm_, collectives::ShmCommunicator::Create(rendezvous, job_id, o_.name,
                                                 rank_, size(), so));
  if (force_gloo_) SHOAL_RETURN_IF_ERROR(CreateFlatGloo(rendezvous));
  return absl::OkStatus();
}

}  // namespace shoal::collectives
