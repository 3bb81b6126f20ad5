// Collectives under `shoal launch`, checked against references each rank
// computes itself. Modes:
//   all       every op × dtype × size (and in-place forms); prints
//             "rank R ok N checks"
//   async     async forms interleaved with blocking ones
//   group     a sub-communicator of the even ranks
//   stall     rank 1 stays away; the others' all_reduce must fail within ~1 s
//   die       rank 1 SIGKILLs itself; the others must see it (Unavailable)
//   mismatch  ranks disagree on the count; every rank must say so
//   leave     rank 0 exits; the others exchange messages in a ring
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "collectives/communicator.h"
#include "collectives/reference_data.h"
#include "gpu/device_buffer.h"
#include "launch/job.h"

namespace {

using shoal::DType;
using shoal::collectives::ReduceOp;

int failures = 0;
int checks = 0;
int g_rank = 0;

void Check(bool ok, const std::string& what) {
  ++checks;
  if (!ok) {
    ++failures;
    if (failures < 20)
      std::fprintf(stderr, "rank %d FAILED: %s\n", g_rank, what.c_str());
  }
}

void CheckOk(const absl::Status& s, const std::string& what) {
  Check(s.ok(), absl::StrCat(what, ": ", s.ToString()));
}

using shoal::collectives::testing::Expected;
using shoal::collectives::testing::Fill;
using shoal::collectives::testing::LoadElement;
using shoal::collectives::testing::StoreElement;
using shoal::collectives::testing::Value;

size_t Size(DType t) { return shoal::DTypeSize(t); }

const DType kTypes[] = {DType::kF16, DType::kBF16, DType::kF32,
                        DType::kF64, DType::kI32,  DType::kI64};
const int64_t kSizes[] = {0, 1, 7, 63, 1000, 4099, 70001, 300001};
const ReduceOp kOps[] = {ReduceOp::kSum, ReduceOp::kProd, ReduceOp::kMin,
                         ReduceOp::kMax, ReduceOp::kAvg};

std::string Name(const char* op, DType t, int64_t n,
                 const std::string& extra = "") {
  return absl::StrCat(op, " ", shoal::DTypeName(t), " n=", n, extra);
}

void TestAll(shoal::collectives::Communicator& c) {
  const int R = c.rank(), W = c.size();
  for (DType t : kTypes) {
    for (int64_t n : kSizes) {
      // all_reduce: every op, out of place and in place.
      for (ReduceOp op : kOps) {
        std::vector<uint8_t> in = Fill(t, R, n, op), out(n * Size(t) + 1);
        CheckOk(c.AllReduce(in.data(), out.data(), n, t, op),
                Name("all_reduce", t, n));
        bool ok = true;
        int64_t bad = -1;
        for (int64_t i = 0; i < n && ok; ++i) {
          ok = LoadElement(t, out.data(), i) == Expected(t, op, W, i);
          if (!ok) bad = i;
        }
        Check(ok, Name("all_reduce", t, n,
                       absl::StrCat(
                           " ", shoal::collectives::ReduceOpName(op),
                           bad >= 0
                               ? absl::StrCat(" [", bad, "] got ",
                                              LoadElement(t, out.data(), bad),
                                              " want ", Expected(t, op, W, bad),
                                              " mine ", Value(R, bad, op))
                               : "")));
        CheckOk(c.AllReduce(in.data(), in.data(), n, t, op),
                Name("all_reduce in place", t, n));
        ok = std::memcmp(in.data(), out.data(), n * Size(t)) == 0;
        Check(ok,
              Name("all_reduce in place", t, n,
                   absl::StrCat(" ", shoal::collectives::ReduceOpName(op))));
      }
      // reduce to the last rank.
      {
        const int root = W - 1;
        std::vector<uint8_t> in = Fill(t, R, n, ReduceOp::kMax),
                             out(n * Size(t) + 1, 0xee);
        CheckOk(c.Reduce(in.data(), out.data(), n, t, ReduceOp::kMax, root),
                Name("reduce", t, n));
        if (R == root) {
          bool ok = true;
          for (int64_t i = 0; i < n && ok; ++i)
            ok = LoadElement(t, out.data(), i) ==
                 Expected(t, ReduceOp::kMax, W, i);
          Check(ok, Name("reduce", t, n));
        }
      }
      // broadcast from rank 1 % W, out of place and in place.
      {
        const int root = 1 % W;
        std::vector<uint8_t> in = Fill(t, R, n, ReduceOp::kSum),
                             out(n * Size(t) + 1);
        const std::vector<uint8_t> want = Fill(t, root, n, ReduceOp::kSum);
        CheckOk(c.Broadcast(in.data(), out.data(), n, t, root),
                Name("broadcast", t, n));
        Check(std::memcmp(out.data(), want.data(), n * Size(t)) == 0,
              Name("broadcast", t, n));
        CheckOk(c.Broadcast(in.data(), in.data(), n, t, root),
                Name("broadcast in place", t, n));
        Check(std::memcmp(in.data(), want.data(), n * Size(t)) == 0,
              Name("broadcast in place", t, n));
      }
      // all_gather and reduce_scatter.
      {
        std::vector<uint8_t> in = Fill(t, R, n, ReduceOp::kSum),
                             out(W * n * Size(t) + 1);
        CheckOk(c.AllGather(in.data(), out.data(), n, t),
                Name("all_gather", t, n));
        bool ok = true;
        for (int r = 0; r < W && ok; ++r) {
          const std::vector<uint8_t> want = Fill(t, r, n, ReduceOp::kSum);
          ok = std::memcmp(out.data() + r * n * Size(t), want.data(),
                           n * Size(t)) == 0;
        }
        Check(ok, Name("all_gather", t, n));
        // in: W blocks; block k of rank r = Fill(r) shifted by k.
        std::vector<uint8_t> blocks(W * n * Size(t) + 1), mine(n * Size(t) + 1);
        for (int k = 0; k < W; ++k) {
          for (int64_t i = 0; i < n; ++i)
            StoreElement(t, blocks.data(), k * n + i,
                         Value(R, i + k, ReduceOp::kSum));
        }
        CheckOk(
            c.ReduceScatter(blocks.data(), mine.data(), n, t, ReduceOp::kSum),
            Name("reduce_scatter", t, n));
        ok = true;
        for (int64_t i = 0; i < n && ok; ++i)
          ok = LoadElement(t, mine.data(), i) ==
               Expected(t, ReduceOp::kSum, W, i + R);
        Check(ok, Name("reduce_scatter", t, n));
        // all_to_all: block k of rank r carries r*1000 + k*100 + small i.
        std::vector<uint8_t> a2a(W * n * Size(t) + 1), got(W * n * Size(t) + 1);
        for (int k = 0; k < W; ++k) {
          for (int64_t i = 0; i < n; ++i)
            StoreElement(t, a2a.data(), k * n + i, (R * 4 + k + i) % 50);
        }
        CheckOk(c.AllToAll(a2a.data(), got.data(), n, t),
                Name("all_to_all", t, n));
        ok = true;
        for (int r = 0; r < W && ok; ++r) {
          for (int64_t i = 0; i < n && ok; ++i)
            ok = LoadElement(t, got.data(), r * n + i) == (r * 4 + R + i) % 50;
        }
        Check(ok, Name("all_to_all", t, n));
      }
    }
  }
  // send/recv around the ring, with sizes above and below the p2p chunk.
  for (int64_t n : {int64_t{1}, int64_t{1000}, int64_t{300001}}) {
    if (W < 2) break;
    std::vector<uint8_t> out = Fill(DType::kF32, R, n, ReduceOp::kSum),
                         in(n * 4 + 1);
    const int next = (R + 1) % W, prev = (R + W - 1) % W;
    if (R % 2 == 0) {
      CheckOk(c.Send(out.data(), n, DType::kF32, next), "send");
      CheckOk(c.Recv(in.data(), n, DType::kF32, prev), "recv");
    } else {
      CheckOk(c.Recv(in.data(), n, DType::kF32, prev), "recv");
      CheckOk(c.Send(out.data(), n, DType::kF32, next), "send");
    }
    const std::vector<uint8_t> want =
        Fill(DType::kF32, prev, n, ReduceOp::kSum);
    Check(std::memcmp(in.data(), want.data(), n * 4) == 0,
          absl::StrCat("send/recv n=", n));
  }
  CheckOk(c.Barrier(), "barrier");
}

void TestAsync(shoal::collectives::Communicator& c) {
  const int W = c.size();
  std::vector<std::vector<uint8_t>> bufs;
  std::vector<shoal::collectives::Work> works;
  for (int k = 0; k < 8; ++k)
    bufs.push_back(Fill(DType::kF32, c.rank(), 100000 + k, ReduceOp::kSum));
  for (int k = 0; k < 8; ++k) {
    auto w = c.AllReduceAsync(bufs[k].data(), bufs[k].data(), 100000 + k,
                              DType::kF32, ReduceOp::kSum);
    CheckOk(w.status(), "all_reduce async");
    if (w.ok()) works.push_back(*w);
    if (k == 3) {
      // A blocking op in between runs after the queued ones.
      std::vector<uint8_t> x = Fill(DType::kI32, c.rank(), 17, ReduceOp::kSum),
                           y(17 * 4 + 1);
      CheckOk(c.AllReduce(x.data(), y.data(), 17, DType::kI32, ReduceOp::kSum),
              "blocking between async");
      Check(LoadElement(DType::kI32, y.data(), 5) ==
                Expected(DType::kI32, ReduceOp::kSum, W, 5),
            "blocking result");
    }
  }
  for (size_t k = 0; k < works.size(); ++k) {
    CheckOk(works[k].Wait(absl::Seconds(60)), "wait");
    Check(works[k].Test(), "test after wait");
    bool ok = true;
    for (int64_t i = 0; i < 100000 && ok; i += 997) {
      ok = LoadElement(DType::kF32, bufs[k].data(), i) ==
           Expected(DType::kF32, ReduceOp::kSum, W, i);
    }
    Check(ok, absl::StrCat("async result ", k));
  }
  // A posted send beside a blocking receive: a ring exchange of messages much
  // bigger than the point-to-point buffers must not deadlock.
  if (W >= 2) {
    const int64_t n = 1 << 20;
    const int next = (c.rank() + 1) % W, prev = (c.rank() + W - 1) % W;
    std::vector<uint8_t> out = Fill(DType::kF32, c.rank(), n, ReduceOp::kSum),
                         in(n * 4 + 1);
    auto w = c.SendAsync(out.data(), n, DType::kF32, next);
    CheckOk(w.status(), "send async");
    CheckOk(c.Recv(in.data(), n, DType::kF32, prev),
            "recv beside a posted send");
    if (w.ok()) CheckOk(w->Wait(absl::Seconds(60)), "posted send");
    const std::vector<uint8_t> want =
        Fill(DType::kF32, prev, n, ReduceOp::kSum);
    Check(std::memcmp(in.data(), want.data(), n * 4) == 0, "ring exchange");
  }
}

// Device buffers: the same Communicator calls go through NCCL. One rank per
// GPU (shoal launch --nproc-per-node gpu).
void TestGpu(shoal::collectives::Communicator& c) {
  const int R = c.rank(), W = c.size();
  const int64_t n = 1 << 20;
  auto in = shoal::gpu::DeviceBuffer::Allocate(n * 4 * W, 0);
  auto out = shoal::gpu::DeviceBuffer::Allocate(n * 4 * W, 0);
  if (!in.ok() || !out.ok()) {
    std::printf("rank %d gpu skipped: %s\n", R,
                (in.ok() ? out.status() : in.status()).ToString().c_str());
    std::exit(0);
  }
  const std::vector<uint8_t> mine = Fill(DType::kF32, R, n, ReduceOp::kSum);
  CheckOk((*in)->CopyFromHost(mine.data(), n * 4), "copy in");
  // all_reduce, blocking (backend chosen by the pointer).
  CheckOk(c.AllReduce((*in)->data(), (*out)->data(), n, DType::kF32,
                      ReduceOp::kSum),
          "nccl all_reduce");
  std::vector<uint8_t> got(n * 4 * W);
  CheckOk((*out)->CopyToHost(got.data(), n * 4), "copy out");
  bool ok = true;
  for (int64_t i = 0; i < n && ok; i += 101) {
    ok = LoadElement(DType::kF32, got.data(), i) ==
         Expected(DType::kF32, ReduceOp::kSum, W, i);
  }
  Check(ok, "nccl all_reduce result");
  // async all_gather, then Wait.
  auto w = c.AllGatherAsync((*in)->data(), (*out)->data(), n, DType::kF32);
  CheckOk(w.status(), "nccl all_gather async");
  if (w.ok()) CheckOk(w->Wait(absl::Seconds(60)), "nccl all_gather wait");
  CheckOk((*out)->CopyToHost(got.data(), n * 4 * W), "copy out");
  ok = true;
  for (int r = 0; r < W && ok; ++r) {
    const std::vector<uint8_t> want = Fill(DType::kF32, r, n, ReduceOp::kSum);
    ok = std::memcmp(got.data() + r * n * 4, want.data(), n * 4) == 0;
  }
  Check(ok, "nccl all_gather result");
  // broadcast in place from the last rank.
  CheckOk(c.Broadcast((*in)->data(), (*in)->data(), n, DType::kF32, W - 1),
          "nccl broadcast");
  CheckOk((*in)->CopyToHost(got.data(), n * 4), "copy out");
  const std::vector<uint8_t> root = Fill(DType::kF32, W - 1, n, ReduceOp::kSum);
  Check(std::memcmp(got.data(), root.data(), n * 4) == 0,
        "nccl broadcast result");
  std::printf("rank %d gpu %s\n", R, failures ? "FAILED" : "ok");
}
}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "all";
  if (mode == "die" || mode == "stall")
    signal(SIGTERM, SIG_IGN);  // outlive the launcher's stop
  auto job = shoal::launch::Init();
  if (!job.ok()) {
    std::fprintf(stderr, "init: %s\n", job.status().ToString().c_str());
    return 3;
  }
  g_rank = (*job)->rank();
  shoal::collectives::CommunicatorOptions o;
  if (mode == "stall" || mode == "die") o.timeout = absl::Seconds(30);
  auto comm = shoal::collectives::Communicator::Create(**job, o);
  if (!comm.ok()) {
    std::fprintf(stderr, "communicator: %s\n",
                 comm.status().ToString().c_str());
    return 4;
  }
  shoal::collectives::Communicator& c = **comm;
  if (mode == "all") {
    TestAll(c);
  } else if (mode == "async") {
    TestAsync(c);
  } else if (mode == "gpu") {
    TestGpu(c);
  } else if (mode == "group") {
    std::vector<int> evens;
    for (int r = 0; r < c.size(); r += 2) evens.push_back(r);
    if (c.rank() % 2 == 0) {
      auto g = shoal::collectives::Communicator::CreateGroup(**job, evens);
      CheckOk(g.status(), "create group");
      if (g.ok()) {
        Check((*g)->size() == static_cast<int>(evens.size()), "group size");
        std::vector<uint8_t> x = Fill(DType::kI64, c.rank(), 33,
                                      ReduceOp::kSum),
                             y(33 * 8 + 1);
        CheckOk((*g)->AllReduce(x.data(), y.data(), 33, DType::kI64,
                                ReduceOp::kSum),
                "group all_reduce");
        double want = 0;
        for (int r : evens) want += Value(r, 9, ReduceOp::kSum);
        Check(LoadElement(DType::kI64, y.data(), 9) == want, "group result");
      }
    }
    CheckOk(c.Barrier(), "world barrier after group");
  } else if (mode == "stall" || mode == "die") {
    if (c.rank() == 1) {
      if (mode == "die") raise(SIGKILL);
      absl::SleepFor(absl::Seconds(4));  // stays away from the all_reduce
      return 0;
    }
    std::vector<float> x(1000, 1.0f);
    shoal::collectives::CallOptions call;
    call.timeout = absl::Seconds(mode == "stall" ? 1 : 30);
    const absl::Time t0 = absl::Now();
    absl::Status s = c.AllReduce(x.data(), x.data(), 1000, DType::kF32,
                                 ReduceOp::kSum, call);
    std::printf(
        "rank %d: %s after %lld ms: %s\n", c.rank(), mode.c_str(),
        static_cast<long long>(absl::ToInt64Milliseconds(absl::Now() - t0)),
        s.ToString().c_str());
    std::fflush(stdout);
    // Afterwards the communicator refuses work.
    absl::Status again = c.Barrier();
    std::printf("rank %d: then %s\n", c.rank(), again.ToString().c_str());
    return 0;
  } else if (mode == "leave") {
    // Rank 0 leaves after a barrier while the others still exchange
    // messages: a send or receive depends on its peer only, so rank 0's exit
    // must fail none of them (the last rank sends to rank 1 only after rank
    // 1 has slept in its receive well past the 20 ms health check).
    CheckOk(c.Barrier(), "barrier before leaving");
    if (c.rank() == 0) {
      std::printf("rank 0 left\n");
      return 0;
    }
    absl::SleepFor(absl::Milliseconds(200));  // rank 0 is gone by now
    const int64_t n = 1 << 20;
    const int W = c.size();
    const int next = c.rank() == W - 1 ? 1 : c.rank() + 1;
    const int prev = c.rank() == 1 ? W - 1 : c.rank() - 1;
    std::vector<uint8_t> out = Fill(DType::kF32, c.rank(), n, ReduceOp::kSum),
                         in(n * 4 + 1);
    if (c.rank() == W - 1) absl::SleepFor(absl::Milliseconds(300));
    auto w = c.SendAsync(out.data(), n, DType::kF32, next);
    CheckOk(w.status(), "send async");
    CheckOk(c.Recv(in.data(), n, DType::kF32, prev), "recv after rank 0 left");
    if (w.ok()) CheckOk(w->Wait(absl::Seconds(60)), "send after rank 0 left");
    const std::vector<uint8_t> want =
        Fill(DType::kF32, prev, n, ReduceOp::kSum);
    Check(std::memcmp(in.data(), want.data(), n * 4) == 0,
          "ring exchange after rank 0 left");
  } else if (mode == "mismatch") {
    const int64_t n = 10 + c.rank();
    std::vector<float> x(n, 1.0f);
    absl::Status s =
        c.AllReduce(x.data(), x.data(), n, DType::kF32, ReduceOp::kSum);
    std::printf("rank %d: mismatch: %s\n", c.rank(), s.ToString().c_str());
    return 0;
  }
  std::printf("rank %d %s %d checks %d failed\n", c.rank(),
              failures ? "FAILED" : "ok", checks, failures);
  return failures ? 1 : 0;
}
