// `shoal bench store` (workload W1): a producer process puts a float32 tensor,
// a consumer process gets it (request → usable view) and reads every byte.
//
// The orchestrating process starts `shoal store`, a producer and a consumer
// (all fork+exec of this binary) and drives them over their stdin/stdout, so
// each timed operation runs alone. Figures per size (medians over -n
// iterations after -w warm-ups):
//   put GB/s      Create + memcpy into the segment + Seal, in the producer
//   first put     the cold put: first touch of that part of the segment
//   get µs        Get of the sealed object in the consumer, until its view
//   read GB/s     the consumer summing every word of the view
//   memcpy GB/s   plain memcpy between two private, touched buffers of that
//                 size, in the producer, in the same run
//   put/memcpy    the ratio the W1 target is stated in (≥ 0.8)
//   #wrong        iterations whose consumer checksum differed
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
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
#include "shm/store_client.h"
#include "tools/bench/bench_util.h"
#include "tools/bench/role_process.h"
#include "tools/bench/store_peer.h"
#include "tools/cli/args.h"

namespace shoal::bench {

// store_gpu_bench.cc
int GpuStoreBench(const std::vector<uint64_t>& sizes, int warmup, int iters,
                  bool json);
int GpuStoreBenchRole(const std::string& role, const std::string& endpoint);

namespace {

// ---- roles: producer and consumer
// ---------------------------------------------

absl::StatusOr<std::unique_ptr<shm::StoreClient>> ConnectRole(
    const std::string& endpoint, const char* name) {
  shm::StoreClientOptions o;
  o.endpoint = endpoint;
  o.name = name;
  return shm::StoreClient::Connect(o);
}

int Producer(const std::string& endpoint) {
  auto client = ConnectRole(endpoint, "bench-producer");
  if (!client.ok()) return cli::Fail(client.status());
  std::vector<uint8_t> src, dst;
  uint64_t src_size = 0;
  std::string line;
  while (std::getline(std::cin, line)) {
    std::vector<std::string> w = absl::StrSplit(line, ' ');
    if (w.size() == 3 && w[0] == "put") {
      uint64_t size, seed;
      if (!absl::SimpleAtoi(w[1], &size) || !absl::SimpleAtoi(w[2], &seed))
        return 2;
      if (src_size != size) {
        src.assign(size, 0);
        dst.assign(size, 1);  // touched, so memcpy runs at full speed
        src_size = size;
      }
      FillPattern(src.data(), size, seed);
      const uint64_t sum = Checksum(src.data(), size);
      double t0 = NowSeconds();
      std::memcpy(dst.data(), src.data(), size);
      asm volatile("" : : "r"(dst.data()) : "memory");  // keep the copy
      const double memcpy_s = NowSeconds() - t0;
      const ObjectId id = ObjectId::Random();
      const TensorMeta meta =
          TensorMeta::Contiguous(DType::kF32, {static_cast<int64_t>(size / 4)});
      // Put, timed in its three phases: Create (a request to the service),
      // the copy into the segment, Seal (a second request).
      t0 = NowSeconds();
      absl::StatusOr<shm::MutableObjectBuffer> buf =
          (*client)->Create(id, meta);
      if (!buf.ok()) return cli::Fail(buf.status());
      const double t1 = NowSeconds();
      std::memcpy(buf->data, src.data(), size);
      const double t2 = NowSeconds();
      absl::Status s = (*client)->Seal(id);
      const double t3 = NowSeconds();
      if (!s.ok()) return cli::Fail(s);
      std::printf("put %s %.9f %.9f %llu %.9f %.9f %.9f\n", id.ToHex().c_str(),
                  t3 - t0, memcpy_s, static_cast<unsigned long long>(sum),
                  t1 - t0, t2 - t1, t3 - t2);
    } else if (w.size() == 2 && w[0] == "delete") {
      auto id = ObjectId::FromHex(w[1]);
      if (!id.ok()) return cli::Fail(id.status());
      absl::Status s = (*client)->Release(*id);
      if (s.ok()) s = (*client)->Delete(*id);
      if (!s.ok()) return cli::Fail(s);
      std::printf("deleted\n");
    } else {
      std::fprintf(stderr, "producer: bad command '%s'\n", line.c_str());
      return 2;
    }
    std::fflush(stdout);
  }
  return 0;
}

int Consumer(const std::string& endpoint) {
  auto client = ConnectRole(endpoint, "bench-consumer");
  if (!client.ok()) return cli::Fail(client.status());
  std::string line;
  while (std::getline(std::cin, line)) {
    std::vector<std::string> w = absl::StrSplit(line, ' ');
    if (w.size() != 2 || w[0] != "get") {
      std::fprintf(stderr, "consumer: bad command '%s'\n", line.c_str());
      return 2;
    }
    auto id = ObjectId::FromHex(w[1]);
    if (!id.ok()) return cli::Fail(id.status());
    double t0 = NowSeconds();
    absl::StatusOr<shm::ObjectBuffer> view = (*client)->Get(*id);
    const double get_s = NowSeconds() - t0;
    if (!view.ok()) return cli::Fail(view.status());
    t0 = NowSeconds();
    const uint64_t sum = Checksum(view->data, view->nbytes);
    const double read_s = NowSeconds() - t0;
    absl::Status s = (*client)->Release(*id);
    if (!s.ok()) return cli::Fail(s);
    std::printf("got %.9f %.9f %llu\n", get_s, read_s,
                static_cast<unsigned long long>(sum));
    std::fflush(stdout);
  }
  return 0;
}

// ---- orchestration
// ----------------------------------------------------------------

struct Row {
  uint64_t size = 0;
  std::vector<double> put_s, memcpy_s, get_s, read_s, create_s, copy_s, seal_s;
  double first_put_s = 0;
  int wrong = 0;
};

absl::Status RunSize(Subprocess& producer, Subprocess& consumer, uint64_t size,
                     int warmup, int iters, Row* row) {
  row->size = size;
  for (int i = 0; i < warmup + iters; ++i) {
    absl::StatusOr<std::vector<std::string>> put =
        Ask(producer, absl::StrCat("put ", size, " ", 1000 * size + i));
    if (!put.ok()) return put.status();
    if (put->size() < 8 || (*put)[0] != "put")
      return absl::InternalError("bad producer reply");
    const std::string id = (*put)[1];
    double put_s = 0, memcpy_s = 0;
    uint64_t want = 0;
    double create_s = 0, copy_s = 0, seal_s = 0;
    if (!absl::SimpleAtod((*put)[2], &put_s) ||
        !absl::SimpleAtod((*put)[3], &memcpy_s) ||
        !absl::SimpleAtoi((*put)[4], &want) ||
        !absl::SimpleAtod((*put)[5], &create_s) ||
        !absl::SimpleAtod((*put)[6], &copy_s) ||
        !absl::SimpleAtod((*put)[7], &seal_s)) {
      return absl::InternalError("bad producer numbers");
    }
    absl::StatusOr<std::vector<std::string>> got = Ask(consumer, "get " + id);
    if (!got.ok()) return got.status();
    double get_s = 0, read_s = 0;
    uint64_t sum = 0;
    if (got->size() < 4 || !absl::SimpleAtod((*got)[1], &get_s) ||
        !absl::SimpleAtod((*got)[2], &read_s) ||
        !absl::SimpleAtoi((*got)[3], &sum)) {
      return absl::InternalError("bad consumer reply");
    }
    absl::StatusOr<std::vector<std::string>> del =
        Ask(producer, "delete " + id);
    if (!del.ok()) return del.status();
    if (i == 0) row->first_put_s = put_s;
    if (i < warmup) continue;
    row->put_s.push_back(put_s);
    row->memcpy_s.push_back(memcpy_s);
    row->get_s.push_back(get_s);
    row->read_s.push_back(read_s);
    row->create_s.push_back(create_s);
    row->copy_s.push_back(copy_s);
    row->seal_s.push_back(seal_s);
    if (sum != want) ++row->wrong;
  }
  return absl::OkStatus();
}

double GBps(uint64_t bytes, double seconds) {
  return seconds > 0 ? static_cast<double>(bytes) / seconds / 1e9 : 0;
}

// The flags of `shoal bench store`.
struct StoreBenchFlags {
  std::vector<uint64_t> sizes;
  int64_t iters = 0;
  int64_t warmup = 0;
  uint64_t store_bytes = 0;  // 0: 2 x the largest size + 256M
  bool json = false;
  bool peers = true;
  std::string device;
  std::string prefault_ahead;
  double settle = 0;
};

// Errors: InvalidArgument (a bad flag or size list, --iters < 1, --warmup <
// 0); Cancelled after --help.
absl::StatusOr<StoreBenchFlags> ParseFlags(int argc, char** argv) {
  cli::ArgParser p(
      "shoal bench store [flags]",
      "Workload W1: put a float32 tensor in one process, get and read it in\n"
      "another; compares put bandwidth with plain memcpy measured in the same\n"
      "run, and (with --peers) with Python's multiprocessing.shared_memory.");
  std::string& sizes_text = p.String("sizes", "1M,64M,1G", "tensor sizes");
  int64_t& iters = p.Int("iters", 5, "timed iterations per size");
  int64_t& warmup = p.Int("warmup", 1, "untimed iterations per size first");
  uint64_t& store_bytes =
      p.Bytes("store-bytes", 0, "store size (default: 2 x largest + 256M)");
  bool& json = p.Bool("json", false, "print one JSON object per row");
  bool& peers = p.Bool("peers", true,
                       "also measure multiprocessing.shared_memory (python3)");
  std::string& device =
      p.String("device", "cpu",
               "cpu, or cuda: objects on GPU 0 (first/cached get, "
               "device-to-device read vs a local copy)");
  std::string& ahead =
      p.String("prefault-ahead", "512M",
               "the store's background prefault window (0: off)");
  double& settle =
      p.Double("settle", 0, "seconds to wait after the store is ready");
  p.Alias('n', "iters");
  p.Alias('w', "warmup");
  if (absl::Status s = p.Parse(argc, argv); !s.ok()) return s;
  absl::StatusOr<std::vector<uint64_t>> sizes = ParseSizeList(sizes_text);
  if (!sizes.ok()) return sizes.status();
  if (iters < 1 || warmup < 0) {
    return absl::InvalidArgumentError("--iters must be ≥ 1 and --warmup ≥ 0");
  }
  return StoreBenchFlags{*std::move(sizes),
                         iters,
                         warmup,
                         store_bytes,
                         json,
                         peers,
                         device,
                         ahead,
                         settle};
}

// A `shoal store` started for the benchmark, and how long it took to serve.
struct BenchStore {
  Subprocess process;
  std::string endpoint;
  double startup_s = 0;  // from spawn to its "ready" line
  double connect_s = 0;  // the first client's connect
};

absl::StatusOr<BenchStore> StartStore(uint64_t store_bytes,
                                      const std::string& prefault_ahead) {
  BenchStore store;
  const std::string job = absl::StrCat("bench-", getpid());
  absl::StatusOr<std::string> dir = JobDir(job);
  if (!dir.ok()) return dir.status();
  store.endpoint = absl::StrCat("ipc://", *dir, "/store.sock");
  SubprocessOptions so;
  so.pipe_stdout = true;
  so.parent_death_signal = SIGTERM;
  const double t_start = NowSeconds();
  absl::StatusOr<Subprocess> process = Subprocess::Start(
      {SelfExePath(), "store", "--job-id", job, "--endpoint", store.endpoint,
       "--store-bytes", absl::StrCat(store_bytes), "--prefault-ahead",
       prefault_ahead},
      so);
  if (!process.ok()) return process.status();
  store.process = *std::move(process);
  absl::StatusOr<std::string> ready = store.process.ReadLine(absl::Seconds(30));
  if (!ready.ok()) return ready.status();
  store.startup_s = NowSeconds() - t_start;
  const double t_connect = NowSeconds();
  auto probe = ConnectRole(store.endpoint, "bench-probe");
  store.connect_s = NowSeconds() - t_connect;
  if (!probe.ok()) return probe.status();
  return store;
}

// One Row per size, measured by a producer and a consumer process started
// for the purpose and stopped at the end.
absl::StatusOr<std::vector<Row>> RunAllSizes(const std::string& endpoint,
                                             const StoreBenchFlags& f) {
  absl::StatusOr<Subprocess> producer = StartRole("producer", endpoint);
  if (!producer.ok()) return producer.status();
  absl::StatusOr<Subprocess> consumer = StartRole("consumer", endpoint);
  if (!consumer.ok()) return consumer.status();
  std::vector<Row> rows;
  for (uint64_t size : f.sizes) {
    Row row;
    absl::Status s =
        RunSize(*producer, *consumer, size, static_cast<int>(f.warmup),
                static_cast<int>(f.iters), &row);
    if (!s.ok()) return s;
    rows.push_back(std::move(row));
  }
  producer->CloseStdin();
  consumer->CloseStdin();
  (void)producer->Wait(absl::Seconds(10));
  (void)consumer->Wait(absl::Seconds(10));
  return rows;
}

// The shoal rows, the peer rows and the store's startup, one JSON object a
// line.
void PrintJson(const std::vector<Row>& rows,
               const std::vector<PeerRow>& peer_rows, const BenchStore& store,
               const StoreBenchFlags& f) {
  for (const Row& r : rows) {
    const double put = GBps(r.size, Median(r.put_s));
    const double mem = GBps(r.size, Median(r.memcpy_s));
    JsonRow j;
    j.Add("workload", "W1")
        .Add("system", "shoal")
        .Add("size_bytes", r.size)
        .Add("put_gbps", put)
        .Add("first_put_gbps", GBps(r.size, r.first_put_s))
        .Add("get_us", Median(r.get_s) * 1e6)
        .Add("get_p99_us", Quantile(r.get_s, 0.99) * 1e6)
        .Add("read_gbps", GBps(r.size, Median(r.read_s)))
        .Add("memcpy_gbps", mem)
        .Add("put_over_memcpy", mem > 0 ? put / mem : 0)
        .Add("create_us", Median(r.create_s) * 1e6)
        .Add("copy_gbps", GBps(r.size, Median(r.copy_s)))
        .Add("seal_us", Median(r.seal_s) * 1e6)
        .Add("wrong", static_cast<int64_t>(r.wrong))
        .Add("iters", f.iters);
    std::printf("%s\n", j.str().c_str());
  }
  for (const PeerRow& r : peer_rows) std::printf("%s\n", PeerJson(r).c_str());
  JsonRow j;
  j.Add("workload", "W1-startup")
      .Add("system", "shoal")
      .Add("store_ready_ms", store.startup_s * 1e3)
      .Add("client_connect_ms", store.connect_s * 1e3)
      .Add("store_bytes", f.store_bytes);
  std::printf("%s\n", j.str().c_str());
}

// The shoal rows as a table under a header, then the peer's table (or why
// there is none).
void PrintTables(const std::vector<Row>& rows,
                 const std::vector<PeerRow>& peer_rows,
                 const std::string& peer_note, const BenchStore& store,
                 const StoreBenchFlags& f) {
  Table table({"size", "put GB/s", "first put GB/s", "get us", "get p99 us",
               "read GB/s", "memcpy GB/s", "put/memcpy", "#wrong", "create us",
               "copy GB/s", "seal us"});
  for (const Row& r : rows) {
    const double put = GBps(r.size, Median(r.put_s));
    const double mem = GBps(r.size, Median(r.memcpy_s));
    table.AddRow({cli::FormatBytes(r.size), absl::StrFormat("%.2f", put),
                  absl::StrFormat("%.2f", GBps(r.size, r.first_put_s)),
                  absl::StrFormat("%.2f", Median(r.get_s) * 1e6),
                  absl::StrFormat("%.2f", Quantile(r.get_s, 0.99) * 1e6),
                  absl::StrFormat("%.2f", GBps(r.size, Median(r.read_s))),
                  absl::StrFormat("%.2f", mem),
                  absl::StrFormat("%.2f", mem > 0 ? put / mem : 0),
                  absl::StrCat(r.wrong),
                  absl::StrFormat("%.1f", Median(r.create_s) * 1e6),
                  absl::StrFormat("%.2f", GBps(r.size, Median(r.copy_s))),
                  absl::StrFormat("%.1f", Median(r.seal_s) * 1e6)});
  }
  std::printf(
      "# W1 store: float32 tensor, producer → consumer, %lld iterations (+%lld "
      "warm-up)\n",
      static_cast<long long>(f.iters), static_cast<long long>(f.warmup));
  std::printf(
      "# store of %s ready %.1f ms after spawn; client connect %.2f ms; "
      "prefault ahead %s, settle %.1f s\n",
      cli::FormatBytes(f.store_bytes).c_str(), store.startup_s * 1e3,
      store.connect_s * 1e3, f.prefault_ahead.c_str(), f.settle);
  std::fputs(table.Render().c_str(), stdout);
  if (!peer_rows.empty()) {
    std::printf(
        "\n# peer: Python multiprocessing.shared_memory + numpy, same sizes, "
        "same run\n");
    std::fputs(PeerTable(peer_rows).c_str(), stdout);
  } else if (!peer_note.empty()) {
    std::printf("\n# %s\n", peer_note.c_str());
  }
}

int Orchestrate(int argc, char** argv) {
  absl::StatusOr<StoreBenchFlags> flags = ParseFlags(argc, argv);
  if (!flags.ok()) return cli::Fail(flags.status());
  StoreBenchFlags& f = *flags;
  if (f.device == "cuda") {
    return GpuStoreBench(f.sizes, static_cast<int>(f.warmup),
                         static_cast<int>(f.iters), f.json);
  }
  if (f.device != "cpu") {
    return cli::Fail(absl::InvalidArgumentError(
        absl::StrCat("--device ", f.device, ": expected cpu or cuda")));
  }
  const uint64_t largest = *std::max_element(f.sizes.begin(), f.sizes.end());
  if (f.store_bytes == 0) f.store_bytes = 2 * largest + (uint64_t{256} << 20);

  absl::StatusOr<BenchStore> store =
      StartStore(f.store_bytes, f.prefault_ahead);
  if (!store.ok()) return cli::Fail(store.status());
  if (f.settle > 0) absl::SleepFor(absl::Seconds(f.settle));
  absl::StatusOr<std::vector<Row>> rows = RunAllSizes(store->endpoint, f);
  if (!rows.ok()) return cli::Fail(rows.status());
  store->process.Signal(SIGTERM);
  (void)store->process.Wait(absl::Seconds(10));

  std::vector<PeerRow> peer_rows;
  std::string peer_note;
  if (f.peers) {
    absl::StatusOr<std::vector<PeerRow>> pr = RunSharedMemoryPeer(
        f.sizes, static_cast<int>(f.warmup), static_cast<int>(f.iters));
    if (pr.ok()) {
      peer_rows = *std::move(pr);
    } else {
      peer_note = absl::StrCat("peer skipped: ", pr.status().message());
    }
  }
  if (f.json) {
    PrintJson(*rows, peer_rows, *store, f);
  } else {
    PrintTables(*rows, peer_rows, peer_note, *store, f);
  }
  return 0;
}

}  // namespace

int StoreBench(int argc, char** argv) { return Orchestrate(argc, argv); }

int StoreBenchRole(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr,
                 "usage: shoal bench store-role producer|consumer ENDPOINT\n");
    return 2;
  }
  const std::string role = argv[1];
  if (role == "producer") return Producer(argv[2]);
  if (role == "consumer") return Consumer(argv[2]);
  if (role.rfind("gpu-", 0) == 0) return GpuStoreBenchRole(role, argv[2]);
  std::fprintf(stderr, "unknown role '%s'\n", role.c_str());
  return 2;
}

}  // namespace shoal::bench
