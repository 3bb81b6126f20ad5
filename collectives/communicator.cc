#include "collectives/communicator.h"

#include <algorithm>
#include <deque>
#include <map>
#include <optional>
#include <set>
#include <thread>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/mutex.h"
#include "base/status_macros.h"
#include "collectives/communicator_impl.h"
#include "collectives/rendezvous/kv_rendezvous.h"
#include "gpu/device_pointer.h"
#include "observe/timeline.h"

namespace shoal::collectives {

absl::Status Work::Wait(absl::Duration timeout) {
  if (state_ == nullptr) return absl::FailedPreconditionError("an empty Work");
  if (state_->wait_device) return state_->wait_device(timeout);
  MutexLock lock(&state_->mu);
  const absl::Time deadline = timeout == absl::InfiniteDuration()
                                  ? absl::InfiniteFuture()
                                  : absl::Now() + timeout;
  while (!state_->done) {
    if (deadline == absl::InfiniteFuture()) {
      state_->cv.Wait(&state_->mu);
    } else if (state_->cv.WaitWithDeadline(&state_->mu, deadline) &&
               !state_->done) {
      return absl::DeadlineExceededError("the collective has not finished");
    }
  }
  return state_->status;
}

bool Work::Test() {
  if (state_ == nullptr) return true;
  if (state_->test_device) {
    absl::StatusOr<bool> done = state_->test_device();
    return !done.ok() || *done;
  }
  MutexLock lock(&state_->mu);
  return state_->done;
}

// ---- dispatch ----------------------------------------------------------

Communicator::Impl::~Impl() {
  {
    MutexLock lock(&mu_);
    stop_ = true;
    cv_.SignalAll();
  }
  for (auto& [id, lane] : lanes_) {
    if (lane.worker.joinable()) lane.worker.join();
  }
}

namespace {

// One collective call, `start_ns` to now, on the calling thread's track.
void RecordCall(const Communicator::Impl::Op& op, const char* backend,
                int64_t start_ns, const absl::Status& s) {
  observe::RecordCollective(start_ns, op.name, backend, op.bytes,
                            static_cast<int>(s.code()));
}

}  // namespace

absl::StatusOr<Work> Communicator::Impl::Run(Op op, const CallOptions& call,
                                             bool async) {
  CollectiveBackend backend = call.backend;
  if (backend == CollectiveBackend::kAuto && op.locate != nullptr &&
      gpu::DeviceOfPointer(op.locate) >= 0) {
    backend = CollectiveBackend::kNccl;
  }
  const absl::Duration timeout = call.timeout.value_or(o_.timeout);
  if (backend == CollectiveBackend::kNccl) {
    const int64_t start_ns =
        observe::TimelineOn() ? observe::TimelineNowNs() : 0;
    absl::StatusOr<Work> work = RunNccl(op, call, timeout, async);
    // Synchronous: the call until the stream finished; asynchronous: its
    // enqueueing.
    if (start_ns != 0) RecordCall(op, "nccl", start_ns, work.status());
    return work;
  }
  HostCollectives* host = nullptr;
  const char* backend_name = "shm";
  SHOAL_ASSIGN_OR_RETURN(host, HostBackend(backend, &backend_name));
  op.backend_name = backend_name;
  // The host backends read and write with the CPU: a device pointer (asked
  // for explicitly, or missed by the automatic choice) is refused, never
  // touched.
  SHOAL_RETURN_IF_ERROR(gpu::CheckHostMemory("collective on a host backend",
                                             {op.locate, op.other}));
  auto state = std::make_shared<internal::WorkState>();
  {
    MutexLock lock(&mu_);
    Lane& lane = lanes_[op.lane];
    if (!async && lane.queue.empty() && !lane.busy) {
      // Nothing queued: run on the caller's thread (no hand-off latency).
      lane.busy = true;
      mu_.Unlock();
      const int64_t start_ns =
          observe::TimelineOn() ? observe::TimelineNowNs() : 0;
      observe::TakePeerWait();          // this call's waits only
      observe::SetCallStart(start_ns);  // its deadline counts from it
      absl::Status s = op.shm(*host, timeout);
      observe::SetCallStart(0);
      if (start_ns != 0) RecordCall(op, backend_name, start_ns, s);
      mu_.Lock();
      lane.busy = false;
      cv_.SignalAll();
      state->Finish(s);
      if (!s.ok()) return s;
      return Work(state);
    }
    if (!lane.worker.joinable()) {
      lane.worker = std::thread([this, &lane] { Worker(lane); });
    }
    lane.queue.push_back({std::move(op), state, timeout, host});
    cv_.SignalAll();
  }
  Work work(state);
  if (!async) SHOAL_RETURN_IF_ERROR(work.Wait());
  return work;
}

void Communicator::Impl::Worker(Lane& lane) {
  while (true) {
    Queued q;
    {
      MutexLock lock(&mu_);
      while (!stop_ && (lane.queue.empty() || lane.busy)) cv_.Wait(&mu_);
      if (lane.queue.empty()) return;  // stopping, and everything ran
      q = std::move(lane.queue.front());
      lane.queue.pop_front();
      lane.busy = true;
    }
    const int64_t start_ns =
        observe::TimelineOn() ? observe::TimelineNowNs() : 0;
    observe::TakePeerWait();          // this call's waits only
    observe::SetCallStart(start_ns);  // its deadline counts from it
    absl::Status s = q.op.shm(*q.host, q.timeout);
    observe::SetCallStart(0);
    if (start_ns != 0) RecordCall(q.op, q.op.backend_name, start_ns, s);
    {
      MutexLock lock(&mu_);
      lane.busy = false;
      cv_.SignalAll();
    }
    q.state->Finish(std::move(s));
  }
}

absl::StatusOr<HostCollectives*> Communicator::Impl::HostBackend(
    CollectiveBackend backend, const char** name) {
  const char* unused;
  if (name == nullptr) name = &unused;
  *name = "shm";
  MutexLock lock(&backends_mu_);
  if (backend == CollectiveBackend::kAuto && force_gloo_)
    backend = CollectiveBackend::kGloo;
  if (backend == CollectiveBackend::kGloo) {
    if (gloo_ == nullptr) {
      if (job_ == nullptr) {
        return absl::FailedPreconditionError(
            "the gloo backend needs a launched job's communicator");
      }
      collectives::KvRendezvous rendezvous(job_->kv());
      SHOAL_RETURN_IF_ERROR(CreateFlatGloo(rendezvous));
    }
    *name = "gloo";
    return gloo_.get();
  }
  if (backend == CollectiveBackend::kAuto && hierarchical_ != nullptr) {
    *name = "hierarchical";
    return hierarchical_.get();
  }
  if (backend == CollectiveBackend::kAuto && shm_ == nullptr &&
      gloo_ != nullptr) {
    *name = "gloo";
    return gloo_.get();  // across nodes in blocks of unequal size
  }
  if (shm_ == nullptr) return shm_error_;
  if (!shm_host_.has_value()) shm_host_.emplace(shm_.get());
  return &*shm_host_;
}

absl::StatusOr<Work> Communicator::Impl::RunNccl(Op& op,
                                                 const CallOptions& call,
                                                 absl::Duration timeout,
                                                 bool async) {
  if (nccl_ == nullptr) {
    SHOAL_RETURN_IF_ERROR(nccl_failed_);
    collectives::NcclOptions no;
    no.timeout = o_.timeout;
    std::optional<collectives::KvRendezvous> job_kv;
    Rendezvous* rendezvous = rendezvous_.get();
    if (job_ != nullptr) rendezvous = &job_kv.emplace(job_->kv());
    absl::StatusOr<std::unique_ptr<collectives::NcclCommunicator>> made =
        collectives::NcclCommunicator::Create(*rendezvous, o_.name, rank_,
                                              size(), o_.cuda_device, no);
    if (!made.ok()) {
      nccl_failed_ = made.status();
      return nccl_failed_;
    }
    nccl_ = *std::move(made);
  }
  void* stream = call.stream;
  SHOAL_RETURN_IF_ERROR(op.nccl(*nccl_, stream));
  auto state = std::make_shared<internal::WorkState>();
  collectives::NcclCommunicator* nccl = nccl_.get();
  state->wait_device = [nccl, stream, timeout](absl::Duration t) {
    return nccl->Synchronize(stream, std::min(t, timeout));
  };
  state->test_device = [nccl, stream] { return nccl->Test(stream); };
  Work work(state);
  if (!async) SHOAL_RETURN_IF_ERROR(work.Wait());
  return work;
}

// ---- creation
// ----------------------------------------------------------------------

absl::StatusOr<std::unique_ptr<Communicator>> Communicator::Create(
    launch::Job& job, CommunicatorOptions options) {
  std::vector<int> ranks(job.world_size());
  for (int r = 0; r < job.world_size(); ++r) ranks[r] = r;
  if (options.name.empty()) options.name = "world";
  auto impl = std::make_unique<Impl>(&job, nullptr, std::move(ranks),
                                     job.rank(), std::move(options));
  SHOAL_RETURN_IF_ERROR(impl->Init());
  return std::unique_ptr<Communicator>(new Communicator(std::move(impl)));
}

absl::StatusOr<std::unique_ptr<Communicator>> Communicator::CreateGroup(
    launch::Job& job, std::vector<int> ranks, CommunicatorOptions options) {
  std::set<int> unique(ranks.begin(), ranks.end());
  if (unique.size() != ranks.size() || ranks.empty()) {
    return absl::InvalidArgumentError(
        "a group's ranks must be distinct and not empty");
  }
  for (int r : ranks) {
    if (r < 0 || r >= job.world_size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("rank ", r, " is not in the job"));
    }
  }
  std::sort(ranks.begin(), ranks.end());
  auto me = std::find(ranks.begin(), ranks.end(), job.rank());
  if (me == ranks.end()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "rank ", job.rank(), " is not a member of the group it creates"));
  }
  if (options.name.empty()) {
    // The same members create their groups in the same order: a per-process
    // count of groups with these members names each one.
    static Mutex mu;
    static std::map<std::vector<int>, int>* counts ABSL_PT_GUARDED_BY(mu) =
        new std::map<std::vector<int>, int>;
    MutexLock lock(&mu);
    options.name = absl::StrCat("group-", absl::StrJoin(ranks, "."), "-",
                                (*counts)[ranks]++);
  }
  const int rank = static_cast<int>(me - ranks.begin());
  auto impl = std::make_unique<Impl>(&job, nullptr, std::move(ranks), rank,
                                     std::move(options));
  SHOAL_RETURN_IF_ERROR(impl->Init());
  return std::unique_ptr<Communicator>(new Communicator(std::move(impl)));
}

absl::StatusOr<std::unique_ptr<Communicator>>
Communicator::CreateWithRendezvous(std::shared_ptr<Rendezvous> rendezvous,
                                   const std::string& job_id, int rank,
                                   int world, CommunicatorOptions options) {
  if (rendezvous == nullptr) {
    return absl::InvalidArgumentError("no rendezvous");
  }
  if (world < 1 || rank < 0 || rank >= world) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank ", rank, " of a world of ", world));
  }
  if (job_id.empty() || !std::all_of(job_id.begin(), job_id.end(), [](char c) {
        return absl::ascii_isalnum(c) || c == '-' || c == '_';
      })) {
    return absl::InvalidArgumentError(absl::StrCat(
        "job id '", job_id, "': letters, digits, '-' and '_' only"));
  }
  std::vector<int> ranks(world);
  for (int r = 0; r < world; ++r) ranks[r] = r;
  if (options.name.empty()) options.name = "world";
  auto impl =
      std::make_unique<Impl>(nullptr, std::move(rendezvous), std::move(ranks),
                             rank, std::move(options));
  SHOAL_RETURN_IF_ERROR(impl->InitWithRendezvous(job_id));
  return std::unique_ptr<Communicator>(new Communicator(std::move(impl)));
}

Communicator::Communicator(std::unique_ptr<Impl> impl)
    : impl_(std::move(impl)) {}
Communicator::~Communicator() = default;

int Communicator::rank() const { return impl_->rank(); }
int Communicator::size() const { return impl_->size(); }
int Communicator::job_rank(int rank) const { return impl_->job_rank(rank); }

// ---- ops
// ---------------------------------------------------------------------------

namespace {

using Op = Communicator::Impl::Op;

Op AllReduceOp(const void* in, void* out, int64_t count, DType dtype,
               ReduceOp op) {
  return Op{out, in,
            [=](HostCollectives& c, absl::Duration t) {
              return c.AllReduce(in, out, count, dtype, op, t);
            },
            [=](collectives::NcclCommunicator& c, void* s) {
              return c.AllReduce(in, out, count, dtype, op, s);
            }};
}

Op BroadcastOp(const void* in, void* out, int64_t count, DType dtype,
               int root) {
  return Op{out, in,
            [=](HostCollectives& c, absl::Duration t) {
              return c.Broadcast(in, out, count, dtype, root, t);
            },
            [=](collectives::NcclCommunicator& c, void* s) {
              return c.Broadcast(in, out, count, dtype, root, s);
            }};
}

Op ReduceOpFor(const void* in, void* out, int64_t count, DType dtype,
               ReduceOp op, int root) {
  return Op{in, out,
            [=](HostCollectives& c, absl::Duration t) {
              return c.Reduce(in, out, count, dtype, op, root, t);
            },
            [=](collectives::NcclCommunicator& c, void* s) {
              return c.Reduce(in, out, count, dtype, op, root, s);
            }};
}

Op AllGatherOp(const void* in, void* out, int64_t count, DType dtype) {
  return Op{out, in,
            [=](HostCollectives& c, absl::Duration t) {
              return c.AllGather(in, out, count, dtype, t);
            },
            [=](collectives::NcclCommunicator& c, void* s) {
              return c.AllGather(in, out, count, dtype, s);
            }};
}

Op ReduceScatterOp(const void* in, void* out, int64_t count, DType dtype,
                   ReduceOp op) {
  return Op{out, in,
            [=](HostCollectives& c, absl::Duration t) {
              return c.ReduceScatter(in, out, count, dtype, op, t);
            },
            [=](collectives::NcclCommunicator& c, void* s) {
              return c.ReduceScatter(in, out, count, dtype, op, s);
            }};
}

Op AllToAllOp(const void* in, void* out, int64_t count, DType dtype) {
  return Op{out, in,
            [=](HostCollectives& c, absl::Duration t) {
              return c.AllToAll(in, out, count, dtype, t);
            },
            [=](collectives::NcclCommunicator& c, void* s) {
              return c.AllToAll(in, out, count, dtype, s);
            }};
}

Op SendOp(const void* in, int64_t count, DType dtype, int peer) {
  return Op{in, nullptr,
            [=](HostCollectives& c, absl::Duration t) {
              return c.Send(in, count, dtype, peer, t);
            },
            [=](collectives::NcclCommunicator& c, void* s) {
              return c.Send(in, count, dtype, peer, s);
            },
            Communicator::Impl::kSendLane + 2 * peer};
}

Op RecvOp(void* out, int64_t count, DType dtype, int peer) {
  return Op{out, nullptr,
            [=](HostCollectives& c, absl::Duration t) {
              return c.Recv(out, count, dtype, peer, t);
            },
            [=](collectives::NcclCommunicator& c, void* s) {
              return c.Recv(out, count, dtype, peer, s);
            },
            Communicator::Impl::kRecvLane + 2 * peer};
}

// `op` named for the timeline, with the bytes of `count` elements.
Op Named(Op op, const char* name, int64_t count, DType dtype) {
  op.name = name;
  op.bytes = static_cast<uint64_t>(count) * DTypeSize(dtype);
  return op;
}

}  // namespace

absl::Status Communicator::AllReduce(const void* in, void* out, int64_t count,
                                     DType dtype, ReduceOp op,
                                     const CallOptions& call) {
  return impl_
      ->Run(Named(AllReduceOp(in, out, count, dtype, op), "all_reduce", count,
                  dtype),
            call, false)
      .status();
}
absl::Status Communicator::Broadcast(const void* in, void* out, int64_t count,
                                     DType dtype, int root,
                                     const CallOptions& call) {
  return impl_
      ->Run(Named(BroadcastOp(in, out, count, dtype, root), "broadcast", count,
                  dtype),
            call, false)
      .status();
}
absl::Status Communicator::Reduce(const void* in, void* out, int64_t count,
                                  DType dtype, ReduceOp op, int root,
                                  const CallOptions& call) {
  return impl_
      ->Run(Named(ReduceOpFor(in, out, count, dtype, op, root), "reduce", count,
                  dtype),
            call, false)
      .status();
}
absl::Status Communicator::AllGather(const void* in, void* out, int64_t count,
                                     DType dtype, const CallOptions& call) {
  return impl_
      ->Run(
          Named(AllGatherOp(in, out, count, dtype), "all_gather", count, dtype),
          call, false)
      .status();
}
absl::Status Communicator::ReduceScatter(const void* in, void* out,
                                         int64_t count, DType dtype,
                                         ReduceOp op, const CallOptions& call) {
  return impl_
      ->Run(Named(ReduceScatterOp(in, out, count, dtype, op), "reduce_scatter",
                  count, dtype),
            call, false)
      .status();
}
absl::Status Communicator::AllToAll(const void* in, void* out, int64_t count,
                                    DType dtype, const CallOptions& call) {
  return impl_
      ->Run(
          Named(AllToAllOp(in, out, count, dtype), "all_to_all", count, dtype),
          call, false)
      .status();
}
absl::Status Communicator::Send(const void* in, int64_t count, DType dtype,
                                int peer, const CallOptions& call) {
  return impl_
      ->Run(Named(SendOp(in, count, dtype, peer), "send", count, dtype), call,
            false)
      .status();
}
absl::Status Communicator::Recv(void* out, int64_t count, DType dtype, int peer,
                                const CallOptions& call) {
  return impl_
      ->Run(Named(RecvOp(out, count, dtype, peer), "recv", count, dtype), call,
            false)
      .status();
}
absl::Status Communicator::Barrier(const CallOptions& call) {
  // No buffer: kAuto means the host backend (Run's choice for null).
  const CallOptions& c = call;
  Op op{nullptr, nullptr,
        [](HostCollectives& comm, absl::Duration t) { return comm.Barrier(t); },
        [](collectives::NcclCommunicator& comm, void* s) {
          // A barrier on NCCL: an all_reduce of nothing, synchronised.
          return comm.AllReduce(nullptr, nullptr, 0, DType::kF32,
                                ReduceOp::kSum, s);
        }};
  op.name = "barrier";
  return impl_->Run(std::move(op), c, false).status();
}

absl::StatusOr<Work> Communicator::AllReduceAsync(const void* in, void* out,
                                                  int64_t count, DType dtype,
                                                  ReduceOp op,
                                                  const CallOptions& call) {
  return impl_->Run(
      Named(AllReduceOp(in, out, count, dtype, op), "all_reduce", count, dtype),
      call, true);
}
absl::StatusOr<Work> Communicator::BroadcastAsync(const void* in, void* out,
                                                  int64_t count, DType dtype,
                                                  int root,
                                                  const CallOptions& call) {
  return impl_->Run(Named(BroadcastOp(in, out, count, dtype, root), "broadcast",
                          count, dtype),
                    call, true);
}
absl::StatusOr<Work> Communicator::ReduceAsync(const void* in, void* out,
                                               int64_t count, DType dtype,
                                               ReduceOp op, int root,
                                               const CallOptions& call) {
  return impl_->Run(Named(ReduceOpFor(in, out, count, dtype, op, root),
                          "reduce", count, dtype),
                    call, true);
}
absl::StatusOr<Work> Communicator::AllGatherAsync(const void* in, void* out,
                                                  int64_t count, DType dtype,
                                                  const CallOptions& call) {
  return impl_->Run(
      Named(AllGatherOp(in, out, count, dtype), "all_gather", count, dtype),
      call, true);
}
absl::StatusOr<Work> Communicator::ReduceScatterAsync(const void* in, void* out,
                                                      int64_t count,
                                                      DType dtype, ReduceOp op,
                                                      const CallOptions& call) {
  return impl_->Run(Named(ReduceScatterOp(in, out, count, dtype, op),
                          "reduce_scatter", count, dtype),
                    call, true);
}
absl::StatusOr<Work> Communicator::AllToAllAsync(const void* in, void* out,
                                                 int64_t count, DType dtype,
                                                 const CallOptions& call) {
  return impl_->Run(
      Named(AllToAllOp(in, out, count, dtype), "all_to_all", count, dtype),
      call, true);
}
absl::StatusOr<Work> Communicator::SendAsync(const void* in, int64_t count,
                                             DType dtype, int peer,
                                             const CallOptions& call) {
  return impl_->Run(Named(SendOp(in, count, dtype, peer), "send", count, dtype),
                    call, true);
}
absl::StatusOr<Work> Communicator::RecvAsync(void* out, int64_t count,
                                             DType dtype, int peer,
                                             const CallOptions& call) {
  return impl_->Run(
      Named(RecvOp(out, count, dtype, peer), "recv", count, dtype), call, true);
}

}  // namespace shoal::collectives
