// A process on a GPU for tests/gpu/gpu_store_test.cc: reads commands on stdin,
// answers one line each on stdout.
//   put SIZE SEED     Put a float32 tensor from host memory to cuda:0
//                     → "put ID CHECKSUM"
//   slow SIZE         Create on cuda:0, queue 40 memsets of the whole object
//                     on a stream (the last one to 0x5A), Seal on that stream
//                     without waiting → "slow ID"
//   read ID           CopyToHost (a fresh Get: NotFound once the object is
//                     deleted) → "read CHECKSUM ALL_5A(0|1)"
//   readheld ID       Copies through the buffer `hold ID` took, which stays
//                     valid after a Delete until its Release → "read CHECKSUM
//                     ALL_5A(0|1)"
//   twice ID          Get, Get again while holding → "twice FIRST_US SECOND_US"
//                     (holds both references until "release ID ID")
//   hold ID           Get and keep the buffer → "held"
//   release ID        Release once → "released"
//   delete ID         → "deleted"
//   contains ID       → "contains 0|1" (a sealed, not deleted object)
//   stats             → "stats OBJECTS REFERENCED"
#include <cstdio>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "shm/store_client.h"
#include "tools/bench/bench_util.h"

#ifdef SHOAL_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

namespace {

using shoal::DType;
using shoal::ObjectId;
using shoal::TensorMeta;

int Fail(const absl::Status& s) {
  std::printf("error %s\n", s.ToString().c_str());
  std::fflush(stdout);
  return 1;
}

TensorMeta OnGpu(uint64_t bytes) {
  return TensorMeta::Contiguous(DType::kF32, {static_cast<int64_t>(bytes / 4)},
                                shoal::Device::Cuda(0));
}

std::string ReadReply(const uint8_t* host, uint64_t n) {
  bool all5a = true;
  for (uint64_t i = 0; i < n; ++i) all5a = all5a && host[i] == 0x5A;
  return "read " + std::to_string(shoal::bench::Checksum(host, n)) + " " +
         (all5a ? "1" : "0");
}

}  // namespace

int main() {
  auto client = shoal::shm::StoreClient::Connect();
  if (!client.ok()) return Fail(client.status());
  shoal::shm::StoreClient& c = **client;
  std::map<std::string, shoal::shm::ObjectBuffer> held;  // by `hold`
  std::string line;
  while (std::getline(std::cin, line)) {
    std::vector<std::string> w = absl::StrSplit(line, ' ');
    uint64_t size = 0, seed = 0;
    if (w[0] == "put" && w.size() == 3 && absl::SimpleAtoi(w[1], &size) &&
        absl::SimpleAtoi(w[2], &seed)) {
      std::vector<uint8_t> host(size);
      shoal::bench::FillPattern(host.data(), size, seed);
      const ObjectId id = ObjectId::Random();
      if (auto s = c.Put(id, OnGpu(size), host.data()); !s.ok()) return Fail(s);
      if (auto s = c.Release(id); !s.ok()) return Fail(s);
      std::printf("put %s %llu\n", id.ToHex().c_str(),
                  static_cast<unsigned long long>(
                      shoal::bench::Checksum(host.data(), size)));
    } else if (w[0] == "slow" && w.size() == 2 &&
               absl::SimpleAtoi(w[1], &size)) {
#ifdef SHOAL_WITH_CUDA
      const ObjectId id = ObjectId::Random();
      auto buf = c.Create(id, OnGpu(size));
      if (!buf.ok()) return Fail(buf.status());
      cudaStream_t stream;
      cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
      for (int i = 0; i < 40; ++i) {
        cudaMemsetAsync(buf->data, i == 39 ? 0x5A : i, size, stream);
      }
      if (auto s = c.Seal(id, stream); !s.ok()) return Fail(s);
      if (auto s = c.Release(id); !s.ok()) return Fail(s);
      std::printf("slow %s\n", id.ToHex().c_str());
#else
      return Fail(absl::FailedPreconditionError("built without CUDA"));
#endif
    } else if (w[0] == "read" && w.size() == 2) {
      auto id = ObjectId::FromHex(w[1]);
      if (!id.ok()) return Fail(id.status());
      auto view = c.Get(*id);
      if (!view.ok()) return Fail(view.status());
      const uint64_t n = view->nbytes;
      (void)c.Release(*id);
      std::vector<uint8_t> host(n);
      if (auto s = c.CopyToHost(*id, host.data(), n); !s.ok()) return Fail(s);
      std::printf("%s\n", ReadReply(host.data(), n).c_str());
    } else if (w[0] == "readheld" && w.size() == 2) {
      auto it = held.find(w[1]);
      if (it == held.end()) {
        return Fail(absl::FailedPreconditionError("readheld: not held"));
      }
#ifdef SHOAL_WITH_CUDA
      // Get made the legacy default stream wait for the producer's writes; a
      // synchronous copy on it sees them.
      std::vector<uint8_t> host(it->second.nbytes);
      if (cudaMemcpy(host.data(), it->second.data, host.size(),
                     cudaMemcpyDeviceToHost) != cudaSuccess) {
        return Fail(
            absl::InternalError(std::string("cudaMemcpy: ") +
                                cudaGetErrorString(cudaGetLastError())));
      }
      std::printf("%s\n", ReadReply(host.data(), host.size()).c_str());
#else
      return Fail(absl::FailedPreconditionError("built without CUDA"));
#endif
    } else if (w[0] == "twice" && w.size() == 2) {
      auto id = ObjectId::FromHex(w[1]);
      if (!id.ok()) return Fail(id.status());
      double t0 = shoal::bench::NowSeconds();
      auto a = c.Get(*id);
      const double first = shoal::bench::NowSeconds() - t0;
      if (!a.ok()) return Fail(a.status());
      t0 = shoal::bench::NowSeconds();
      auto b = c.Get(*id);
      const double second = shoal::bench::NowSeconds() - t0;
      if (!b.ok()) return Fail(b.status());
      std::printf("twice %.1f %.1f\n", first * 1e6, second * 1e6);
    } else if (w[0] == "hold" && w.size() == 2) {
      auto id = ObjectId::FromHex(w[1]);
      if (!id.ok()) return Fail(id.status());
      auto v = c.Get(*id);
      if (!v.ok()) return Fail(v.status());
      held[w[1]] = *v;
      std::printf("held\n");
    } else if (w[0] == "release" && w.size() == 2) {
      auto id = ObjectId::FromHex(w[1]);
      if (!id.ok()) return Fail(id.status());
      if (auto s = c.Release(*id); !s.ok()) return Fail(s);
      held.erase(w[1]);
      std::printf("released\n");
    } else if (w[0] == "delete" && w.size() == 2) {
      auto id = ObjectId::FromHex(w[1]);
      if (!id.ok()) return Fail(id.status());
      if (auto s = c.Delete(*id); !s.ok()) return Fail(s);
      std::printf("deleted\n");
    } else if (w[0] == "contains" && w.size() == 2) {
      auto id = ObjectId::FromHex(w[1]);
      if (!id.ok()) return Fail(id.status());
      auto has = c.Contains(*id);
      if (!has.ok()) return Fail(has.status());
      std::printf("contains %d\n", *has ? 1 : 0);
    } else if (w[0] == "stats") {
      auto st = c.Stats();
      if (!st.ok()) return Fail(st.status());
      std::printf("stats %llu %llu\n",
                  static_cast<unsigned long long>(st->objects()),
                  static_cast<unsigned long long>(st->referenced_objects()));
    } else {
      std::printf("error bad command '%s'\n", line.c_str());
    }
    std::fflush(stdout);
  }
  return 0;
}
