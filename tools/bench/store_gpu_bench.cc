// `shoal bench store --device cuda` (workload W1 on a GPU): a producer
// process puts a float32 tensor into GPU 0's part of the store (from host
// memory, through pinned staging), a consumer process gets it twice — the
// first get maps the store's chunk (cudaIpcOpenMemHandle), the second, while
// the first reference is held, finds it mapped — and reads it with a
// device-to-device copy into its own buffer. In the same consumer, the same
// copy between two of its own buffers is the in-process bound. Figures per
// size (medians over -n iterations after -w warm-ups):
//   put GB/s        Put from host memory (Create + staged copy + Seal)
//   first get µs    Get that maps the chunk
//   cached get µs   Get of a chunk already mapped
//   read GB/s       the consumer's copy out of the shared object
//   local GB/s      the same copy between the consumer's own buffers
//   read/local      the ratio the target is stated in (≥ 0.9)
//   #wrong          iterations whose checksum differed
// Exit status 1 when any iteration read wrong data (after the table), so a
// run that measured garbage never passes.
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "base/runtime_dir.h"
#include "base/subprocess.h"
#include "gpu/device_buffer.h"
#include "gpu/device_visibility.h"
#include "gpu/gpu_info.h"
#include "shm/store_client.h"
#include "tools/bench/bench_util.h"
#include "tools/bench/role_process.h"
#include "tools/cli/args.h"

namespace shoal::bench {
namespace {

constexpr int kCopyReps = 5;

absl::StatusOr<std::unique_ptr<shm::StoreClient>> Connect(
    const std::string& endpoint, const char* name) {
  shm::StoreClientOptions o;
  o.endpoint = endpoint;
  o.name = name;
  return shm::StoreClient::Connect(o);
}

// stdin: "put SIZE SEED" → "put ID SECONDS CHECKSUM"; "delete ID" → "ok".
int GpuProducer(const std::string& endpoint) {
  auto client = Connect(endpoint, "gpu-bench-producer");
  if (!client.ok()) return cli::Fail(client.status());
  std::vector<uint8_t> host;
  std::string line;
  while (std::getline(std::cin, line)) {
    std::vector<std::string> w = absl::StrSplit(line, ' ');
    if (w.size() == 3 && w[0] == "put") {
      uint64_t size = 0, seed = 0;
      if (!absl::SimpleAtoi(w[1], &size) || !absl::SimpleAtoi(w[2], &seed)) {
        return 2;
      }
      host.resize(size);
      FillPattern(host.data(), size, seed);
      const ObjectId id = ObjectId::Random();
      const TensorMeta meta = TensorMeta::Contiguous(
          DType::kF32, {static_cast<int64_t>(size / 4)}, Device::Cuda(0));
      const double t0 = NowSeconds();
      absl::Status s = (*client)->Put(id, meta, host.data());
      const double put_s = NowSeconds() - t0;
      if (!s.ok()) return cli::Fail(s);
      if (absl::Status r = (*client)->Release(id); !r.ok()) return cli::Fail(r);
      std::printf("put %s %.9f %llu\n", id.ToHex().c_str(), put_s,
                  static_cast<unsigned long long>(Checksum(host.data(), size)));
    } else if (w.size() == 2 && w[0] == "delete") {
      auto id = ObjectId::FromHex(w[1]);
      if (!id.ok()) return cli::Fail(id.status());
      if (absl::Status s = (*client)->Delete(*id); !s.ok()) return cli::Fail(s);
      std::printf("ok\n");
    } else {
      std::fprintf(stderr, "gpu producer: bad command '%s'\n", line.c_str());
      return 2;
    }
    std::fflush(stdout);
  }
  return 0;
}

// stdin: "get ID" → "got FIRST_S CACHED_S READ_S LOCAL_S CHECKSUM".
int GpuConsumer(const std::string& endpoint) {
  auto client = Connect(endpoint, "gpu-bench-consumer");
  if (!client.ok()) return cli::Fail(client.status());
  std::unique_ptr<gpu::DeviceBuffer> a, b;
  std::vector<uint8_t> host;
  std::string line;
  while (std::getline(std::cin, line)) {
    std::vector<std::string> w = absl::StrSplit(line, ' ');
    if (w.size() != 2 || w[0] != "get") {
      std::fprintf(stderr, "gpu consumer: bad command '%s'\n", line.c_str());
      return 2;
    }
    auto id = ObjectId::FromHex(w[1]);
    if (!id.ok()) return cli::Fail(id.status());
    double t0 = NowSeconds();
    auto first = (*client)->Get(*id);
    const double first_s = NowSeconds() - t0;
    if (!first.ok()) return cli::Fail(first.status());
    t0 = NowSeconds();
    auto cached = (*client)->Get(*id);
    const double cached_s = NowSeconds() - t0;
    if (!cached.ok()) return cli::Fail(cached.status());
    const uint64_t size = first->nbytes;
    if (a == nullptr || a->size() != size) {
      auto na = gpu::DeviceBuffer::Allocate(size, 0);
      auto nb = gpu::DeviceBuffer::Allocate(size, 0);
      if (!na.ok()) return cli::Fail(na.status());
      if (!nb.ok()) return cli::Fail(nb.status());
      a = *std::move(na);
      b = *std::move(nb);
    }
    // Get made the legacy default stream wait for the producer's event;
    // TimeDeviceCopy's stream does not sync with it, so wait here first.
    if (absl::Status s = gpu::SynchronizeDevice(); !s.ok()) return cli::Fail(s);
    auto read_s = gpu::TimeDeviceCopy(a->data(), first->data, size, kCopyReps);
    if (!read_s.ok()) return cli::Fail(read_s.status());
    auto local_s = gpu::TimeDeviceCopy(b->data(), a->data(), size, kCopyReps);
    if (!local_s.ok()) return cli::Fail(local_s.status());
    host.resize(size);
    if (absl::Status s = b->CopyToHost(host.data(), size); !s.ok()) {
      return cli::Fail(s);
    }
    (void)(*client)->Release(*id);
    (void)(*client)->Release(*id);
    std::printf("got %.9f %.9f %.9f %.9f %llu\n", first_s, cached_s, *read_s,
                *local_s,
                static_cast<unsigned long long>(Checksum(host.data(), size)));
    std::fflush(stdout);
  }
  return 0;
}

struct GpuRow {
  uint64_t size = 0;
  std::vector<double> put_s, first_s, cached_s, read_s, local_s;
  int wrong = 0;
};

absl::Status RunGpuSize(Subprocess& producer, Subprocess& consumer,
                        uint64_t size, int warmup, int iters, GpuRow* row) {
  row->size = size;
  for (int i = 0; i < warmup + iters; ++i) {
    auto put = Ask(producer, absl::StrCat("put ", size, " ", 7 * size + i));
    if (!put.ok()) return put.status();
    double put_s = 0;
    uint64_t want = 0;
    if (put->size() != 4 || !absl::SimpleAtod((*put)[2], &put_s) ||
        !absl::SimpleAtoi((*put)[3], &want)) {
      return absl::InternalError("bad producer reply");
    }
    auto got = Ask(consumer, "get " + (*put)[1]);
    if (!got.ok()) return got.status();
    double v[4];
    uint64_t sum = 0;
    if (got->size() != 6 || !absl::SimpleAtoi((*got)[5], &sum)) {
      return absl::InternalError("bad consumer reply");
    }
    for (int k = 0; k < 4; ++k) {
      if (!absl::SimpleAtod((*got)[1 + k], &v[k])) {
        return absl::InternalError("bad consumer numbers");
      }
    }
    auto del = Ask(producer, "delete " + (*put)[1]);
    if (!del.ok()) return del.status();
    if (i < warmup) continue;
    row->put_s.push_back(put_s);
    row->first_s.push_back(v[0]);
    row->cached_s.push_back(v[1]);
    row->read_s.push_back(v[2]);
    row->local_s.push_back(v[3]);
    if (sum != want) ++row->wrong;
  }
  return absl::OkStatus();
}

double GBps(uint64_t bytes, double s) { return s > 0 ? bytes / s / 1e9 : 0; }

// 0 when every iteration read what was put; else 1, saying how many did not.
int ExitStatusOfWrong(const std::vector<GpuRow>& rows) {
  int wrong = 0;
  std::string where;
  for (const GpuRow& r : rows) {
    if (r.wrong == 0) continue;
    wrong += r.wrong;
    absl::StrAppend(&where, where.empty() ? "" : ", ", r.wrong, " at ",
                    cli::FormatBytes(r.size));
  }
  if (wrong == 0) return 0;
  std::fprintf(stderr,
               "shoal bench store --device cuda: FAILED: %d iteration(s) read "
               "other bytes than the producer put (%s)\n",
               wrong, where.c_str());
  return 1;
}

}  // namespace

int GpuStoreBenchRole(const std::string& role, const std::string& endpoint) {
  if (role == "gpu-producer") return GpuProducer(endpoint);
  if (role == "gpu-consumer") return GpuConsumer(endpoint);
  std::fprintf(stderr, "unknown role '%s'\n", role.c_str());
  return 2;
}

int GpuStoreBench(const std::vector<uint64_t>& sizes, int warmup, int iters,
                  bool json) {
  if (!gpu::GetBuildInfo().cuda) {
    return cli::Fail(gpu::BuiltWithoutCuda("shoal bench store --device cuda"));
  }
  if (gpu::DriverGpuCount() == 0) {
    return cli::Fail(absl::FailedPreconditionError(
        "shoal bench store --device cuda: the NVIDIA driver lists no GPU on "
        "this machine"));
  }
  const std::string job = absl::StrCat("benchgpu-", getpid());
  absl::StatusOr<std::string> dir = JobDir(job);
  if (!dir.ok()) return cli::Fail(dir.status());
  const std::string endpoint = absl::StrCat("ipc://", *dir, "/store.sock");
  SubprocessOptions so;
  so.pipe_stdout = true;
  so.parent_death_signal = SIGTERM;
  // The objects live in the store's device memory; the /dev/shm segment
  // holds only the table and the clients' slots.
  absl::StatusOr<Subprocess> store = Subprocess::Start(
      {SelfExePath(), "store", "--job-id", job, "--endpoint", endpoint,
       "--store-bytes", "64M", "--prefault-ahead", "0"},
      so);
  if (!store.ok()) return cli::Fail(store.status());
  if (auto ready = store->ReadLine(absl::Seconds(30)); !ready.ok()) {
    return cli::Fail(ready.status());
  }
  absl::StatusOr<Subprocess> producer = StartRole("gpu-producer", endpoint);
  if (!producer.ok()) return cli::Fail(producer.status());
  absl::StatusOr<Subprocess> consumer = StartRole("gpu-consumer", endpoint);
  if (!consumer.ok()) return cli::Fail(consumer.status());
  std::vector<GpuRow> rows;
  for (uint64_t size : sizes) {
    GpuRow row;
    absl::Status s =
        RunGpuSize(*producer, *consumer, size, warmup, iters, &row);
    if (!s.ok()) return cli::Fail(s);
    rows.push_back(std::move(row));
  }
  producer->CloseStdin();
  consumer->CloseStdin();
  (void)producer->Wait(absl::Seconds(10));
  (void)consumer->Wait(absl::Seconds(10));
  store->Signal(SIGTERM);
  (void)store->Wait(absl::Seconds(10));

  Table t({"size", "put GB/s", "first get us", "cached get us", "cached p99 us",
           "read GB/s", "local GB/s", "read/local", "#wrong"});
  for (const GpuRow& r : rows) {
    const double read = GBps(r.size, Median(r.read_s));
    const double local = GBps(r.size, Median(r.local_s));
    if (json) {
      JsonRow j;
      j.Add("workload", "W1-cuda")
          .Add("size_bytes", r.size)
          .Add("put_gbps", GBps(r.size, Median(r.put_s)))
          .Add("first_get_us", Median(r.first_s) * 1e6)
          .Add("cached_get_us", Median(r.cached_s) * 1e6)
          .Add("cached_get_p99_us", Quantile(r.cached_s, 0.99) * 1e6)
          .Add("read_gbps", read)
          .Add("local_gbps", local)
          .Add("read_over_local", local > 0 ? read / local : 0)
          .Add("wrong", static_cast<int64_t>(r.wrong));
      std::printf("%s\n", j.str().c_str());
      continue;
    }
    t.AddRow({cli::FormatBytes(r.size),
              absl::StrFormat("%.2f", GBps(r.size, Median(r.put_s))),
              absl::StrFormat("%.1f", Median(r.first_s) * 1e6),
              absl::StrFormat("%.2f", Median(r.cached_s) * 1e6),
              absl::StrFormat("%.2f", Quantile(r.cached_s, 0.99) * 1e6),
              absl::StrFormat("%.1f", read), absl::StrFormat("%.1f", local),
              absl::StrFormat("%.3f", local > 0 ? read / local : 0),
              absl::StrCat(r.wrong)});
  }
  if (!json) {
    std::printf(
        "# W1 on cuda:0: producer puts from host, consumer gets (first: maps "
        "the chunk; cached: mapped) and copies device-to-device; %d "
        "iterations (+%d warm-up)\n",
        iters, warmup);
    std::fputs(t.Render().c_str(), stdout);
  }
  std::fflush(stdout);
  return ExitStatusOfWrong(rows);
}

}  // namespace shoal::bench
