// spill_bench: the rate at which a full store spills held objects to disk and
// reads them back, beside the rate of the same puts into a store with room.
//
//   bazel build --config=opt //shm:spill_bench
//   bazel-bin/shm/spill_bench --spill-dir /var/tmp/x --store-bytes 512M
//
// A store service runs on a thread of this process; a producer client puts
// objects and hands each to a holder client (Transfer: held, not mapped, so
// spillable), as a worker hands a task's output to its client.
//   in memory   puts while the arena has room
//   spilling    puts into the full arena: each one spills as many bytes
//   restoring   the oldest objects (on disk) read back by a reader client,
//               each then released and deleted so the next has room
// Each phase prints MB/s of object bytes and the wall time.
#include <sys/statfs.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "ipc/object_id.h"
#include "ipc/tensor_meta.h"
#include "shm/store_client.h"
#include "shm/store_service.h"

namespace shoal::shm {
namespace {

double Now() {
  return std::chrono::duration<double>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

struct Flags {
  uint64_t store_bytes = uint64_t{512} << 20;
  uint64_t object_bytes = uint64_t{1} << 20;
  double overfill = 2.0;  // bytes spilled, in store sizes
  std::string spill_dir;
};

bool ParseSize(const std::string& v, uint64_t* out) {
  uint64_t mult = 1;
  std::string n = v;
  if (!n.empty() && (n.back() == 'M' || n.back() == 'G')) {
    mult = n.back() == 'M' ? uint64_t{1} << 20 : uint64_t{1} << 30;
    n.pop_back();
  }
  uint64_t x = 0;
  if (!absl::SimpleAtoi(n, &x)) return false;
  *out = x * mult;
  return true;
}

int Run(const Flags& f) {
  StoreOptions o;
  o.job_id = absl::StrCat("spillbench", getpid());
  o.store_bytes = f.store_bytes;
  o.spill_dir = f.spill_dir;
  o.max_clients = 8;
  auto service = StoreService::Create(o);
  if (!service.ok()) {
    std::fprintf(stderr, "%s\n", service.status().ToString().c_str());
    return 1;
  }
  std::thread loop([&] { (void)(*service)->Run(); });
  StoreClientOptions co;
  co.endpoint = (*service)->endpoint();
  auto producer = StoreClient::Connect(co);
  auto holder = StoreClient::Connect(co);
  auto reader = StoreClient::Connect(co);
  if (!producer.ok() || !holder.ok() || !reader.ok()) return 1;
  const auto stats = (*producer)->Stats();
  const uint64_t capacity = stats->capacity_bytes();
  const uint64_t n = f.object_bytes;
  const uint64_t resident = capacity / n * 9 / 10;
  const uint64_t spilling =
      static_cast<uint64_t>(f.overfill * static_cast<double>(capacity) / n);
  std::vector<uint8_t> data(n);
  for (uint64_t i = 0; i < n; ++i) data[i] = static_cast<uint8_t>(i * 31);
  std::vector<ObjectId> ids;
  auto put = [&](uint64_t count) {
    const double t0 = Now();
    for (uint64_t i = 0; i < count; ++i) {
      const ObjectId id = ObjectId::Random();
      std::memcpy(data.data(), &i, sizeof(i));
      absl::Status s = (*producer)->Put(
          id, TensorMeta::Bytes(static_cast<int64_t>(n)), data.data());
      if (s.ok()) s = (*producer)->Transfer(id, (*holder)->client_slot());
      if (!s.ok()) {
        std::fprintf(stderr, "put %llu: %s\n", (unsigned long long)i,
                     s.ToString().c_str());
        return -1.0;
      }
      ids.push_back(id);
    }
    return Now() - t0;
  };
  auto report = [&](const char* what, uint64_t count, double s) {
    std::printf("%-10s %6llu objects  %8.1f MB/s  %7.3f s\n", what,
                (unsigned long long)count, count * n / s / 1e6, s);
  };
  std::printf("store arena %llu MiB, objects of %llu KiB\n",
              (unsigned long long)(capacity >> 20),
              (unsigned long long)(n >> 10));
  const double in_memory = put(resident);
  if (in_memory < 0) return 1;
  report("in memory", resident, in_memory);
  // Fill to the brim first (untimed), then each put spills.
  if (put(capacity / n - resident) < 0) return 1;
  const size_t before = ids.size();
  const double spilled = put(spilling);
  if (spilled < 0) return 1;
  report("spilling", spilling, spilled);
  // Room for the restores: the newest objects (in memory) go.
  for (size_t i = before; i < ids.size(); ++i) {
    (void)(*holder)->Release(ids[i]);
    (void)(*holder)->Delete(ids[i]);
  }
  const uint64_t restores = std::min<uint64_t>(spilling, before);
  const double t0 = Now();
  for (uint64_t i = 0; i < restores; ++i) {
    auto view = (*reader)->Get(ids[i]);
    if (!view.ok() || view->nbytes != n) {
      std::fprintf(stderr, "restore %llu: %s\n", (unsigned long long)i,
                   view.status().ToString().c_str());
      return 1;
    }
    (void)(*reader)->Release(ids[i]);
    (void)(*holder)->Release(ids[i]);
    (void)(*holder)->Delete(ids[i]);
  }
  report("restoring", restores, Now() - t0);
  producer->reset();
  holder->reset();
  reader->reset();
  (*service)->Stop();
  loop.join();
  return 0;
}

}  // namespace
}  // namespace shoal::shm

int main(int argc, char** argv) {
  shoal::shm::Flags f;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    bool ok = true;
    if (k == "--store-bytes") {
      ok = shoal::shm::ParseSize(v, &f.store_bytes);
    } else if (k == "--object-bytes") {
      ok = shoal::shm::ParseSize(v, &f.object_bytes);
    } else if (k == "--overfill") {
      ok = absl::SimpleAtod(v, &f.overfill);
    } else if (k == "--spill-dir") {
      f.spill_dir = v;
    } else {
      ok = false;
    }
    if (!ok) {
      std::fprintf(stderr,
                   "usage: spill_bench [--store-bytes 512M] [--object-bytes "
                   "1M] [--overfill 2] [--spill-dir DIR]\n");
      return 2;
    }
  }
  return shoal::shm::Run(f);
}
