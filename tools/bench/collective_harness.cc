// `shoal bench collective` under `shoal launch` (workload W3): every rank
// runs this harness; rank 0 prints an nccl-tests-style table. Times are
// taken per repetition as the mean over -n back-to-back operations (NCCL:
// enqueued, then one wait), the slowest rank's counts, and the reported time
// is the median over --reps repetitions (this machine is noisy).
#include <sched.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/status_macros.h"
#include "collectives/communicator.h"
#include "collectives/reduce/reduce_kernels.h"
#include "gpu/device_buffer.h"
#include "launch/job.h"
#include "tools/bench/bench_util.h"
#include "tools/bench/collective_bench.h"
#include "tools/cli/args.h"

namespace shoal::bench {
namespace {

// -n 0: the batch time that fixes the iteration count (see Time()).
constexpr double kCalibrationSeconds = 0.002;

// ---- element access, for filling and checking ----------------------------

void StoreElem(DType t, void* base, int64_t i, double v) {
  auto* p = static_cast<uint8_t*>(base);
  switch (t) {
    case DType::kF16:
      reinterpret_cast<uint16_t*>(p)[i] =
          collectives::FloatToHalf(static_cast<float>(v));
      break;
    case DType::kBF16:
      reinterpret_cast<uint16_t*>(p)[i] =
          collectives::FloatToBF16(static_cast<float>(v));
      break;
    case DType::kF32:
      reinterpret_cast<float*>(p)[i] = static_cast<float>(v);
      break;
    case DType::kF64:
      reinterpret_cast<double*>(p)[i] = v;
      break;
    case DType::kI32:
      reinterpret_cast<int32_t*>(p)[i] = static_cast<int32_t>(v);
      break;
    default:
      reinterpret_cast<int64_t*>(p)[i] = static_cast<int64_t>(v);
      break;
  }
}

double LoadElem(DType t, const void* base, int64_t i) {
  const auto* p = static_cast<const uint8_t*>(base);
  switch (t) {
    case DType::kF16:
      return collectives::HalfToFloat(reinterpret_cast<const uint16_t*>(p)[i]);
    case DType::kBF16:
      return collectives::BF16ToFloat(reinterpret_cast<const uint16_t*>(p)[i]);
    case DType::kF32:
      return reinterpret_cast<const float*>(p)[i];
    case DType::kF64:
      return reinterpret_cast<const double*>(p)[i];
    case DType::kI32:
      return reinterpret_cast<const int32_t*>(p)[i];
    default:
      return static_cast<double>(reinterpret_cast<const int64_t*>(p)[i]);
  }
}

// Rank `r`'s input element `i`: small integers, exact in every dtype and
// after any reduction of up to 64 ranks (prod stays within 2^ranks).
double Pattern(collectives::ReduceOp op, int r, int64_t i) {
  if (op == collectives::ReduceOp::kProd) return 1 + ((i + r) % 2);
  return static_cast<double>((i * 7 + r * 3) % 5) + 1;
}

double Reduced(collectives::ReduceOp op, DType t, int n, int64_t i) {
  double acc = Pattern(op, 0, i);
  for (int r = 1; r < n; ++r) {
    const double v = Pattern(op, r, i);
    switch (op) {
      case collectives::ReduceOp::kProd:
        acc *= v;
        break;
      case collectives::ReduceOp::kMin:
        acc = std::min(acc, v);
        break;
      case collectives::ReduceOp::kMax:
        acc = std::max(acc, v);
        break;
      default:
        acc += v;
    }
  }
  if (op == collectives::ReduceOp::kAvg) {
    acc =
        (t == DType::kI32 || t == DType::kI64) ? std::trunc(acc / n) : acc / n;
  }
  return acc;
}

bool Close(DType t, double got, double want) {
  double tol = 0;
  if (t == DType::kF16) tol = 1e-3;
  if (t == DType::kBF16) tol = 8e-3;
  if (t == DType::kF32) tol = 1e-6;
  if (t == DType::kF64) tol = 1e-12;
  return std::fabs(got - want) <= tol * std::max(1.0, std::fabs(want));
}

// ---- buffers
// -----------------------------------------------------------------

// Host memory (page-aligned, touched) or device memory, with staging copies.
class Buffer {
 public:
  static absl::StatusOr<std::unique_ptr<Buffer>> Make(uint64_t bytes,
                                                      bool device) {
    auto b = std::unique_ptr<Buffer>(new Buffer);
    b->bytes_ = bytes;
    if (device) {
      SHOAL_ASSIGN_OR_RETURN(b->dev_, gpu::DeviceBuffer::Allocate(bytes, 0));
      b->data_ = b->dev_->data();
    } else {
      b->host_ = static_cast<uint8_t*>(std::aligned_alloc(
          4096, std::max<uint64_t>(4096, (bytes + 4095) / 4096 * 4096)));
      if (b->host_ == nullptr)
        return absl::ResourceExhaustedError("out of memory");
      std::memset(b->host_, 0, bytes);
      b->data_ = b->host_;
    }
    return b;
  }
  ~Buffer() { std::free(host_); }

  uint8_t* data() const { return static_cast<uint8_t*>(data_); }
  // Copies host bytes in / out (a plain memcpy for host memory).
  absl::Status Write(const std::vector<uint8_t>& src, uint64_t offset) {
    if (dev_ != nullptr)
      return dev_->CopyFromHost(src.data(), src.size(), offset);
    std::memcpy(host_ + offset, src.data(), src.size());
    return absl::OkStatus();
  }
  absl::StatusOr<std::vector<uint8_t>> Read(uint64_t offset, uint64_t n) const {
    std::vector<uint8_t> out(n);
    if (dev_ != nullptr) {
      SHOAL_RETURN_IF_ERROR(dev_->CopyToHost(out.data(), n, offset));
    } else {
      std::memcpy(out.data(), host_ + offset, n);
    }
    return out;
  }

 private:
  Buffer() = default;
  uint64_t bytes_ = 0;
  void* data_ = nullptr;
  uint8_t* host_ = nullptr;
  std::unique_ptr<gpu::DeviceBuffer> dev_;
};

// ---- the harness
// ---------------------------------------------------------------

class Harness {
 public:
  Harness(launch::Job& job, collectives::Communicator& comm,
          const CollectiveBenchConfig& c, bool device)
      : job_(job), comm_(comm), c_(c), device_(device) {
    n_ = comm.size();
    rank_ = comm.rank();
    ts_ = DTypeSize(c.dtype);
    call_.backend = device               ? collectives::CollectiveBackend::kNccl
                    : c.backend == "shm" ? collectives::CollectiveBackend::kShm
                    : c.backend == "gloo"
                        ? collectives::CollectiveBackend::kGloo
                        : collectives::CollectiveBackend::kAuto;
  }

  absl::Status Allocate() {
    // The largest send and receive buffers any size needs.
    SHOAL_ASSIGN_OR_RETURN(in_, Buffer::Make(c_.max_bytes, device_));
    SHOAL_ASSIGN_OR_RETURN(out_, Buffer::Make(c_.max_bytes, device_));
    return absl::OkStatus();
  }

  // Measures one size: out-of-place and in-place.
  absl::StatusOr<CollectiveRow> Measure(uint64_t bytes) {
    CollectiveRow row;
    row.system = "shoal";
    const uint64_t unit = ts_ * (PerRankSplit() ? n_ : 1);
    row.bytes = bytes / unit * unit;
    row.count = static_cast<int64_t>(row.bytes / ts_);
    for (bool in_place : {false, true}) {
      if (in_place && c_.coll == Collective::kSendRecv) continue;
      SHOAL_ASSIGN_OR_RETURN(Times t, Time(row.count, in_place));
      int64_t wrong = -1;
      if (c_.check) {
        SHOAL_ASSIGN_OR_RETURN(wrong, Check(row.count, in_place));
      }
      (in_place ? row.ip_us : row.oop_us) = t.median_us;
      (in_place ? row.ip_lo_us : row.oop_lo_us) = t.lo_us;
      (in_place ? row.ip_hi_us : row.oop_hi_us) = t.hi_us;
      (in_place ? row.ip_wrong : row.oop_wrong) = wrong;
    }
    return row;
  }

 private:
  // Whether the size is split among the ranks (per-rank blocks).
  bool PerRankSplit() const {
    return c_.coll == Collective::kAllGather ||
           c_.coll == Collective::kReduceScatter ||
           c_.coll == Collective::kAllToAll;
  }
  // The send and receive pointers, nccl-tests' in-place conventions.
  std::pair<const void*, void*> Pointers(int64_t count, bool in_place) const {
    const int64_t block = count / n_ * ts_;
    if (!in_place) return {in_->data(), out_->data()};
    switch (c_.coll) {
      case Collective::kAllGather:
        return {out_->data() + rank_ * block, out_->data()};
      case Collective::kReduceScatter:
        return {in_->data(), in_->data() + rank_ * block};
      default:
        return {in_->data(), in_->data()};
    }
  }

  // Issues one operation; with `async` returns its Work (NCCL), else waits.
  absl::StatusOr<collectives::Work> Issue(int64_t count, bool in_place,
                                          bool async) {
    auto [in, out] = Pointers(count, in_place);
    const int64_t per = count / n_;
    const DType t = c_.dtype;
    auto done = [&](absl::Status s) -> absl::StatusOr<collectives::Work> {
      if (!s.ok()) return s;
      return collectives::Work();
    };
    switch (c_.coll) {
      case Collective::kAllReduce:
        if (async) return comm_.AllReduceAsync(in, out, count, t, c_.op, call_);
        return done(comm_.AllReduce(in, out, count, t, c_.op, call_));
      case Collective::kBroadcast:
        if (async)
          return comm_.BroadcastAsync(in, out, count, t, c_.root, call_);
        return done(comm_.Broadcast(in, out, count, t, c_.root, call_));
      case Collective::kReduce:
        if (async)
          return comm_.ReduceAsync(in, out, count, t, c_.op, c_.root, call_);
        return done(comm_.Reduce(in, out, count, t, c_.op, c_.root, call_));
      case Collective::kAllGather:
        if (async) return comm_.AllGatherAsync(in, out, per, t, call_);
        return done(comm_.AllGather(in, out, per, t, call_));
      case Collective::kReduceScatter:
        if (async)
          return comm_.ReduceScatterAsync(in, out, per, t, c_.op, call_);
        return done(comm_.ReduceScatter(in, out, per, t, c_.op, call_));
      case Collective::kAllToAll:
        if (async) return comm_.AllToAllAsync(in, out, per, t, call_);
        return done(comm_.AllToAll(in, out, per, t, call_));
      case Collective::kSendRecv: {
        // Each rank sends to the next and receives from the previous one.
        SHOAL_ASSIGN_OR_RETURN(
            collectives::Work send,
            comm_.SendAsync(in, count, t, (rank_ + 1) % n_, call_));
        SHOAL_RETURN_IF_ERROR(
            comm_.Recv(out, count, t, (rank_ + n_ - 1) % n_, call_));
        SHOAL_RETURN_IF_ERROR(send.Wait());
        return collectives::Work();
      }
    }
    return absl::InternalError("unknown collective");
  }

  // `k` operations back to back (NCCL: enqueued, then one wait).
  absl::Status RunMany(int64_t count, bool in_place, int64_t k) {
    const bool async = device_ && c_.coll != Collective::kSendRecv;
    collectives::Work last;
    for (int64_t i = 0; i < k; ++i) {
      SHOAL_ASSIGN_OR_RETURN(last, Issue(count, in_place, async));
    }
    if (async && k > 0) return last.Wait();
    return absl::OkStatus();
  }

  // The largest of every rank's values (element-wise), through the host
  // backend (shm, or hierarchical across nodes); on a failure this rank's
  // own.
  std::vector<double> MaxOverRanks(std::vector<double> v) {
    collectives::CallOptions host;
    (void)comm_.AllReduce(v.data(), v.data(), static_cast<int64_t>(v.size()),
                          DType::kF64, collectives::ReduceOp::kMax, host);
    return v;
  }
  absl::Status Barrier() {
    collectives::CallOptions host;
    absl::Status s = comm_.Barrier(host);
    if (s.ok()) return s;
    return job_.Barrier();  // ranks on several nodes
  }

  // A barrier, then one untimed operation: the timer starts with every
  // rank out of the barrier. Ranks leave a barrier at different times (a
  // rank asleep in it wakes late), and a timed batch that begins with that
  // skew counts it as the first operation's time. The -n 0 calibration
  // below times one operation first: a skew of 2 ms there (say the
  // process's first barrier) gives ~10 iterations a repetition, and every
  // repetition then carries a barrier's skew over those few operations.
  // Measured with -n 10 across 2 nodes: 4 KiB 33.5 / 44.1 us without this,
  // 22.7 / 28.6 us with it; the slow first size of some rounds (one run of
  // 11 gave 385 us for a 4 KiB all_reduce that took 17-44 us in the others)
  // fits it. The MPI and gloo programs (collective_peers.cc) do the same.
  absl::Status Align(int64_t count, bool in_place) {
    SHOAL_RETURN_IF_ERROR(Barrier());
    return RunMany(count, in_place, 1);
  }

  // One placement's repetitions: the median, the fastest and the slowest.
  struct Times {
    double median_us = 0, lo_us = 0, hi_us = 0;
  };

  absl::StatusOr<Times> Time(int64_t count, bool in_place) {
    SHOAL_RETURN_IF_ERROR(RunMany(count, in_place, c_.warmup));
    int64_t iters = c_.iters;
    // -n 0: batches growing 8x until one takes 2 ms (after the warm-up, so
    // first touches and a slow wake-up from the barrier do not count).
    for (int64_t batch = 1; iters <= 0; batch *= 8) {
      SHOAL_RETURN_IF_ERROR(Align(count, in_place));
      const double start = NowSeconds();
      SHOAL_RETURN_IF_ERROR(RunMany(count, in_place, batch));
      const double took = MaxOverRanks({NowSeconds() - start})[0];
      if (took >= kCalibrationSeconds || batch >= 100000) {
        iters = AutoIters(took / batch);
      }
    }
    std::vector<double> per_rep;
    for (int64_t r = 0; r < c_.reps; ++r) {
      SHOAL_RETURN_IF_ERROR(Align(count, in_place));
      const double start = NowSeconds();
      SHOAL_RETURN_IF_ERROR(RunMany(count, in_place, iters));
      per_rep.push_back((NowSeconds() - start) / iters);
    }
    const std::vector<double> slowest = MaxOverRanks(per_rep);
    return Times{Median(slowest) * 1e6,
                 *std::min_element(slowest.begin(), slowest.end()) * 1e6,
                 *std::max_element(slowest.begin(), slowest.end()) * 1e6};
  }

  // Fills the inputs with the pattern, runs once, counts wrong elements on
  // every rank (summed over ranks).
  absl::StatusOr<int64_t> Check(int64_t count, bool in_place) {
    const int64_t per = count / n_;
    auto [in, out] = Pointers(count, in_place);
    const uint64_t in_off = static_cast<const uint8_t*>(in) - in_->data();
    Buffer& in_buf =
        (in_place && c_.coll == Collective::kAllGather) ? *out_ : *in_;
    const uint64_t in_off_buf =
        (in_place && c_.coll == Collective::kAllGather)
            ? static_cast<const uint8_t*>(in) - out_->data()
            : in_off;
    // The input: `count` elements (per-rank block for all_gather).
    const int64_t in_count = c_.coll == Collective::kAllGather ? per : count;
    std::vector<uint8_t> host(in_count * ts_);
    for (int64_t i = 0; i < in_count; ++i) {
      StoreElem(c_.dtype, host.data(), i, Pattern(c_.op, rank_, i));
    }
    SHOAL_RETURN_IF_ERROR(in_buf.Write(host, in_off_buf));
    SHOAL_RETURN_IF_ERROR(RunMany(count, in_place, 1));
    // Where the result is, and how many elements.
    const uint8_t* base = in_place && c_.coll != Collective::kAllGather
                              ? in_->data()
                              : out_->data();
    const uint64_t out_off = static_cast<const uint8_t*>(out) - base;
    const int64_t out_count =
        c_.coll == Collective::kReduceScatter ? per : count;
    Buffer& out_buf = base == in_->data() ? *in_ : *out_;
    int64_t wrong = 0;
    const bool has_result = c_.coll != Collective::kReduce || rank_ == c_.root;
    if (has_result) {
      SHOAL_ASSIGN_OR_RETURN(std::vector<uint8_t> got,
                             out_buf.Read(out_off, out_count * ts_));
      for (int64_t i = 0; i < out_count; ++i) {
        if (!Close(c_.dtype, LoadElem(c_.dtype, got.data(), i), Want(i, per))) {
          ++wrong;
        }
      }
    }
    std::vector<double> w = {static_cast<double>(wrong)};
    collectives::CallOptions host_call;
    // Every rank learns the sum, and so the run's exit status; a count that
    // could not be summed is an error, not a pass.
    SHOAL_RETURN_IF_ERROR(comm_.AllReduce(w.data(), w.data(), 1, DType::kF64,
                                          collectives::ReduceOp::kSum,
                                          host_call));
    return static_cast<int64_t>(w[0]);
  }

  // The expected value of this rank's result element `i`.
  double Want(int64_t i, int64_t per) const {
    auto exact = [&](double v) {
      std::vector<uint8_t> tmp(8);
      StoreElem(c_.dtype, tmp.data(), 0, v);
      return LoadElem(c_.dtype, tmp.data(), 0);
    };
    switch (c_.coll) {
      case Collective::kAllReduce:
      case Collective::kReduce:
        return exact(Reduced(c_.op, c_.dtype, n_, i));
      case Collective::kBroadcast:
        return Pattern(c_.op, c_.root, i);
      case Collective::kAllGather:
        return Pattern(c_.op, static_cast<int>(i / per), i % per);
      case Collective::kReduceScatter:
        return exact(Reduced(c_.op, c_.dtype, n_, rank_ * per + i));
      case Collective::kAllToAll:
        // Block j came from rank j: its elements rank_*per … of j's input.
        return Pattern(c_.op, static_cast<int>(i / per), rank_ * per + i % per);
      case Collective::kSendRecv:
        return Pattern(c_.op, (rank_ + n_ - 1) % n_, i);
    }
    return 0;
  }

  launch::Job& job_;
  collectives::Communicator& comm_;
  const CollectiveBenchConfig c_;
  const bool device_;
  int n_ = 1, rank_ = 0;
  size_t ts_ = 4;
  collectives::CallOptions call_;
  std::unique_ptr<Buffer> in_, out_;
};

std::string Cell(double v, const absl::FormatSpec<double>& fmt) {
  return v < 0 ? "N/A" : absl::StrFormat(fmt, v);
}

void PrintHeader(const CollectiveBenchConfig& c, int n,
                 const std::string& backend) {
  std::printf("# shoal bench collective: %s, %d ranks, backend %s\n",
              std::string(CollectiveName(c.coll)).c_str(), n, backend.c_str());
  std::printf(
      "#  -n %s  -w %lld  --reps %lld  -c %d; time = median over the "
      "repetitions of the slowest rank's mean time per operation\n",
      c.iters > 0 ? absl::StrCat(c.iters).c_str() : "auto (~20 ms/rep)",
      static_cast<long long>(c.warmup), static_cast<long long>(c.reps),
      c.check ? 1 : 0);
  std::printf("#\n# %64s%38s%32s\n", "out-of-place", "in-place",
              "spread over the repetitions");
  std::printf(
      "# %10s %12s %8s %6s %5s %9s %7s %7s %6s %9s %7s %7s %6s %19s %19s\n",
      "size", "count", "type", "redop", "root", "time", "algbw", "busbw",
      "#wrong", "time", "algbw", "busbw", "#wrong", "oop min-max",
      "ip min-max");
  std::printf(
      "# %10s %12s %8s %6s %5s %9s %7s %7s %6s %9s %7s %7s %6s %19s %19s\n",
      "(B)", "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)",
      "(GB/s)", "(GB/s)", "", "(us)", "(us)");
}

void PrintRow(const CollectiveRow& r, const CollectiveBenchConfig& c, int n) {
  const bool has_op = c.coll == Collective::kAllReduce ||
                      c.coll == Collective::kReduce ||
                      c.coll == Collective::kReduceScatter;
  const bool has_root =
      c.coll == Collective::kBroadcast || c.coll == Collective::kReduce;
  auto bw = [&](double us) { return us > 0 ? r.bytes / (us * 1e3) : -1; };
  auto wrong = [](double us, int64_t w) {
    return us < 0 ? std::string("N/A") : w < 0 ? "N/A" : absl::StrCat(w);
  };
  auto spread = [](double lo, double hi) {
    return lo < 0 || hi < 0 ? std::string("N/A")
                            : absl::StrFormat("%.1f-%.1f", lo, hi);
  };
  std::printf(
      "  %10llu %12lld %8s %6s %5d %9s %7s %7s %6s %9s %7s %7s %6s %19s "
      "%19s\n",
      static_cast<unsigned long long>(r.bytes), static_cast<long long>(r.count),
      NcclTypeName(c.dtype),
      has_op ? std::string(collectives::ReduceOpName(c.op)).c_str() : "none",
      has_root ? c.root : -1, Cell(r.oop_us, "%.2f").c_str(),
      Cell(bw(r.oop_us), "%.2f").c_str(),
      Cell(bw(r.oop_us) * BusFactor(c.coll, n), "%.2f").c_str(),
      wrong(r.oop_us, r.oop_wrong).c_str(), Cell(r.ip_us, "%.2f").c_str(),
      Cell(bw(r.ip_us), "%.2f").c_str(),
      Cell(r.ip_us < 0 ? -1 : bw(r.ip_us) * BusFactor(c.coll, n), "%.2f")
          .c_str(),
      wrong(r.ip_us, r.ip_wrong).c_str(),
      spread(r.oop_lo_us, r.oop_hi_us).c_str(),
      spread(r.ip_lo_us, r.ip_hi_us).c_str());
}

// Binds this process to its local rank's CPU (CpuForLocalRank), if any.
void BindToOwnCpu(int local_rank, int local_ranks) {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return;
  std::vector<int> allowed;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (CPU_ISSET(cpu, &set)) allowed.push_back(cpu);
  }
  const int cpu = CpuForLocalRank(allowed, local_rank, local_ranks);
  if (cpu < 0) return;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  if (sched_setaffinity(0, sizeof(set), &set) != 0) {
    std::fprintf(stderr,
                 "shoal bench collective: rank %d not bound to CPU %d: %s\n",
                 local_rank, cpu, std::strerror(errno));
  }
}

}  // namespace

int CollectiveBenchRank(const CollectiveBenchConfig& c, bool json,
                        const std::string& rows_file) {
  auto job = launch::Init();
  if (!job.ok()) return cli::Fail(job.status());
  if (c.bind) BindToOwnCpu((*job)->local_rank(), (*job)->local_world_size());
  collectives::CommunicatorOptions o;
  o.name = "bench";
  auto comm = collectives::Communicator::Create(**job, o);
  if (!comm.ok()) return cli::Fail(comm.status());
  const bool device = c.backend == "nccl";
  Harness h(**job, **comm, c, device);
  if (absl::Status s = h.Allocate(); !s.ok()) return cli::Fail(s);
  const int n = (*comm)->size();
  const bool lead = (*comm)->rank() == 0;
  std::ofstream rows;
  if (lead && !rows_file.empty()) rows.open(rows_file, std::ios::app);
  if (lead && !json) PrintHeader(c, n, c.backend);
  double bus_sum = 0;
  int measured = 0;
  int64_t wrong = 0;
  std::string wrong_sizes;  // "4096 (3), ..." where results were wrong
  for (uint64_t bytes : GeometricSizes(c.min_bytes, c.max_bytes, c.factor)) {
    absl::StatusOr<CollectiveRow> row = h.Measure(bytes);
    if (!row.ok()) return cli::Fail(row.status());
    // Counted on every rank (the counts are summed over ranks): each exits
    // non-zero on a wrong result, not only the one that prints.
    const int64_t row_wrong = std::max<int64_t>(0, row->oop_wrong) +
                              std::max<int64_t>(0, row->ip_wrong);
    if (row_wrong > 0) {
      absl::StrAppend(&wrong_sizes, wrong_sizes.empty() ? "" : ", ", row->bytes,
                      " B (", row_wrong, ")");
    }
    wrong += row_wrong;
    if (!lead) continue;
    const std::string j = RowToJson(*row, c, n);
    if (rows.is_open()) rows << j << "\n" << std::flush;
    if (json) {
      std::printf("%s\n", j.c_str());
    } else {
      PrintRow(*row, c, n);
    }
    std::fflush(stdout);
    bus_sum += row->bytes / (row->oop_us * 1e3) * BusFactor(c.coll, n);
    ++measured;
  }
  if (lead && !json) {
    std::printf("# Out of bounds values : %lld %s\n",
                static_cast<long long>(wrong), wrong == 0 ? "OK" : "FAILED");
    std::printf("# Avg bus bandwidth    : %.3f\n#\n",
                measured ? bus_sum / measured : 0.0);
  }
  if (wrong == 0) return 0;
  std::fflush(stdout);
  std::fprintf(stderr,
               "shoal bench collective: rank %d: FAILED: %lld wrong "
               "element(s), summed over ranks: %s\n",
               (*comm)->rank(), static_cast<long long>(wrong),
               wrong_sizes.c_str());
  return 1;
}

}  // namespace shoal::bench
