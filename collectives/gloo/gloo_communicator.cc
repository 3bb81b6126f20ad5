#include "collectives/gloo/gloo_communicator.h"

#include <signal.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <exception>
#include <initializer_list>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "collectives/gloo/gloo_admission.h"
#include "collectives/reduce/reduce_kernels.h"
#include "gloo/common/error.h"
#include "gloo/context.h"
#include "gloo/transport/tcp/device.h"
#include "gloo/transport/unbound_buffer.h"

namespace shoal::collectives {

namespace {

// gloo writes to its sockets with writev, without MSG_NOSIGNAL: a write to
// a peer whose process died (its connection reset) raises SIGPIPE, whose
// default action ends this process silently — a surviving rank vanished
// instead of reporting the lost peer (the "hang" of tests/nodes' killed-node
// case). Ignored, the write fails with EPIPE and gloo reports the closed
// connection. A handler the program installed is left alone. (Python
// ignores SIGPIPE already.)
void IgnoreSigpipeUnlessHandled() {
  struct sigaction now = {};
  if (sigaction(SIGPIPE, nullptr, &now) != 0) return;
  if ((now.sa_flags & SA_SIGINFO) == 0 && now.sa_handler == SIG_DFL) {
    signal(SIGPIPE, SIG_IGN);
  }
}

std::chrono::milliseconds Millis(absl::Duration d) {
  return std::chrono::milliseconds(absl::ToInt64Milliseconds(d));
}

}  // namespace

GlooCommunicator::GlooCommunicator(int rank, int world, GlooCommOptions options)
    : rank_(rank), world_(world), o_(std::move(options)) {}

GlooCommunicator::~GlooCommunicator() {
  {
    MutexLock lock(&mu_);
    stop_watching_ = true;
    watch_cv_.SignalAll();
  }
  if (watcher_.joinable()) watcher_.join();
}

void GlooCommunicator::StartWatching() {
  MutexLock lock(&mu_);
  if (watcher_.joinable()) return;
  watcher_ = std::thread([this] { Watch(); });
}

void GlooCommunicator::Watch() {
  // As HierarchicalCommunicator's watcher: often enough to fail well within
  // any timeout, with the same grace for a call that succeeded just as its
  // peer closed.
  constexpr absl::Duration kPoll = absl::Milliseconds(10);
  constexpr absl::Duration kLostGrace = absl::Milliseconds(200);
  while (true) {
    {
      MutexLock lock(&mu_);
      while (!stop_watching_ && calls_running_ == 0) {
        watcher_idle_ = true;
        watch_cv_.Wait(&mu_);
      }
      watcher_idle_ = false;
      if (stop_watching_) return;
      watch_cv_.WaitWithDeadline(&mu_, absl::Now() + kPoll);
      if (stop_watching_) return;
    }
    CheckConnections(kLostGrace).IgnoreError();
  }
}

void GlooCommunicator::WakeRunning() {
  for (gloo::transport::UnboundBuffer* b : running_) {
    b->abortWaitSend();
    b->abortWaitRecv();
  }
}

absl::StatusOr<std::unique_ptr<GlooCommunicator>> GlooCommunicator::Create(
    Rendezvous& rendezvous, const std::string& name, int rank, int world,
    const GlooCommOptions& options) {
  if (world < 1 || rank < 0 || rank >= world) {
    return absl::InvalidArgumentError(absl::StrCat(
        "gloo communicator '", name, "': rank ", rank, " of world ", world));
  }
  if (options.hostname.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "gloo communicator '", name, "': no address to listen on"));
  }
  IgnoreSigpipeUnlessHandled();
  std::unique_ptr<GlooCommunicator> comm(
      new GlooCommunicator(rank, world, options));
  auto where = [&](const absl::Status& s) {
    return absl::Status(
        s.code(),
        absl::StrCat("gloo communicator '", name, "' (rank ", rank, " of ",
                     world, " at ", options.hostname, "): ", s.message()));
  };
  // Only the job's ranks get onto the pairs (gloo_admission.h).
  GlooAdmission admission(rendezvous, absl::StrCat("__shoal/gloo/", name, "/"),
                          rank, world, options.hostname, options.timeout,
                          options.peer_names);
  try {
    gloo::transport::tcp::attr attr(options.hostname.c_str());
    comm->device_ = gloo::transport::tcp::CreateDevice(attr);
  } catch (const std::exception& e) {
    return where(admission.Fail(absl::UnavailableError(e.what())));
  }
  absl::StatusOr<std::shared_ptr<gloo::Context>> context =
      admission.Connect(comm->device_, "");
  if (!context.ok()) return where(context.status());
  comm->connections_ = GlooConnections::Find(**context, rank);
  comm->context_ = std::move(*context);
  if (options.sync_exchange && world > 1) {
    absl::StatusOr<std::shared_ptr<gloo::Context>> sync =
        admission.Connect(comm->device_, "sync/");
    if (!sync.ok()) return where(sync.status());
    try {
      comm->CreateSyncExchange(std::move(*sync));
    } catch (const std::exception& e) {
      return where(admission.Fail(absl::UnavailableError(e.what())));
    }
  }
  return comm;
}

// ---- failure ---------------------------------------------------------------

absl::Status GlooCommunicator::Usable() {
  MutexLock lock(&mu_);
  if (failure_.ok()) return absl::OkStatus();
  return absl::FailedPreconditionError(
      absl::StrCat("this communicator failed earlier and cannot be used: ",
                   failure_.message()));
}

absl::Status GlooCommunicator::Abort(absl::Status why) {
  {
    MutexLock lock(&mu_);
    if (!failure_.ok()) return failure_;
    failure_ = why;
    if (calls_running_ > 0) {
      // A call runs on another thread. Closing the pairs under it would
      // take away the end of file a dead peer's socket still delivers to
      // the waits gloo keeps internally (they would last until the
      // timeout); instead wake its waits on its own output buffer (gloo
      // forgets a send queued on a connection that then broke) and let the
      // call close the pairs as it returns the failure (Guarded).
      WakeRunning();
      // A sync-mode exchange blocks in the socket itself.
      ShutdownSync();
      return why;
    }
  }
  CloseConnections();
  return why;
}

absl::Status GlooCommunicator::CheckConnections(absl::Duration grace) {
  {
    MutexLock lock(&mu_);
    // Failed with a call still inside gloo: an algorithm whose wait was
    // woken may wait again (each abort wakes one wait).
    if (!failure_.ok() && calls_running_ > 0) WakeRunning();
    if (calls_running_ == 0 || !failure_.ok()) {
      lost_since_ = absl::InfiniteFuture();
      return absl::OkStatus();
    }
  }
  std::optional<GlooConnections::Socket> lost = connections_.FirstLost();
  if (!lost.has_value()) lost = sync_connections_.FirstLost();
  const absl::Time now = absl::Now();
  {
    MutexLock lock(&mu_);
    if (!lost.has_value() || lost_under_call_ != calls_started_ ||
        lost_since_ == absl::InfiniteFuture()) {
      lost_since_ = lost.has_value() ? now : absl::InfiniteFuture();
      lost_under_call_ = calls_started_;
      return absl::OkStatus();
    }
    if (now - lost_since_ < grace || calls_running_ == 0) {
      return absl::OkStatus();
    }
  }
  std::string who = absl::StrCat("rank ", lost->peer);
  auto name = o_.peer_names.find(lost->address);
  if (name != o_.peer_names.end()) {
    absl::StrAppend(&who, " — the peer at ", lost->address, " is ",
                    name->second);
  } else if (!lost->address.empty()) {
    absl::StrAppend(&who, " at ", lost->address);
  }
  return Abort(absl::UnavailableError(absl::StrCat(
      "over gloo: lost the connection to ", who,
      " while a call waited on it: it died, or its rank gave up")));
}

void GlooCommunicator::CloseConnections() {
  // Peers' pending operations with this rank fail with "connection closed"
  // now.
  try {
    if (context_ != nullptr) context_->closeConnections();
    if (sync_context_ != nullptr) sync_context_->closeConnections();
  } catch (const std::exception&) {
    // Already closed or broken: nothing more to do.
  }
}

absl::Status GlooCommunicator::Translate(const char* what,
                                         const std::string& message,
                                         absl::Duration timeout) const {
  // gloo's sync-mode pairs say "Read timeout" / "Write timeout".
  const bool late = absl::StrContains(message, "Timed out") ||
                    absl::StrContains(message, "timed out") ||
                    absl::StrContains(message, " timeout ");
  std::string who;
  for (const auto& [address, name] : o_.peer_names) {
    if (absl::StrContains(message, absl::StrCat("[", address, "]")) ||
        absl::StrContains(message, absl::StrCat(address, ":"))) {
      who = absl::StrCat(" — the peer at ", address, " is ", name);
      break;
    }
  }
  if (late) {
    return absl::DeadlineExceededError(
        absl::StrCat(what, " over gloo: a peer did not answer within ",
                     absl::FormatDuration(timeout), who, " (", message, ")"));
  }
  return absl::UnavailableError(
      absl::StrCat(what, " over gloo: lost a peer", who, " (", message,
                   "): it died, or its rank gave up"));
}

absl::Status GlooCommunicator::CheckArgs(const char* what, int64_t count,
                                         DType dtype, bool reduces) {
  if (count < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": negative count ", count));
  }
  if (reduces ? !IsReducible(dtype) : DTypeSize(dtype) == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, ": dtype ", DTypeName(dtype), " is not supported here"));
  }
  return absl::OkStatus();
}

absl::Status GlooCommunicator::Guarded(
    const char* what, absl::Duration timeout,
    absl::FunctionRef<void(std::chrono::milliseconds)> body) {
  SHOAL_RETURN_IF_ERROR(Usable());
  if (timeout == absl::ZeroDuration()) timeout = o_.timeout;
  {
    MutexLock lock(&mu_);
    ++calls_running_;
    ++calls_started_;
    // Only a watcher with nothing to watch waits for a call: one in its
    // 10 ms poll wait is left alone (waking it at every call of a burst of
    // small ones put one more thread on the cores per call).
    if (watcher_idle_) watch_cv_.SignalAll();
  }
  absl::Status thrown;
  try {
    body(Millis(timeout));
  } catch (const std::exception& e) {
    thrown = Translate(what, e.what(), timeout);
  }
  absl::Status failure;
  {
    MutexLock lock(&mu_);
    --calls_running_;
    if (!thrown.ok() && failure_.ok()) failure_ = thrown;
    // Aborted from another thread meanwhile, a step may have returned
    // without its data: the call failed too.
    failure = failure_;
  }
  if (!failure.ok()) CloseConnections();
  return failure;
}

GlooCommunicator::RunningBuffers::RunningBuffers(
    GlooCommunicator* comm,
    std::initializer_list<gloo::transport::UnboundBuffer*> bufs)
    : comm_(comm) {
  for (gloo::transport::UnboundBuffer* b : bufs) {
    if (b != nullptr) bufs_.push_back(b);
  }
  MutexLock lock(&comm_->mu_);
  comm_->running_.insert(comm_->running_.end(), bufs_.begin(), bufs_.end());
}

GlooCommunicator::RunningBuffers::~RunningBuffers() {
  MutexLock lock(&comm_->mu_);
  for (gloo::transport::UnboundBuffer* b : bufs_) {
    auto it = std::find(comm_->running_.begin(), comm_->running_.end(), b);
    if (it != comm_->running_.end()) comm_->running_.erase(it);
  }
}

}  // namespace shoal::collectives
