// store_test_helper: the processes of shm/'s store tests, so that the store
// service and each client run in a process of their own (as on a node; and
// ThreadSanitizer cannot follow one segment mapped twice in one process).
//
//   store_test_helper serve JOB STORE_BYTES INITIAL_REFS SPILL_DIR|-
//       runs a store service; prints "endpoint <endpoint>", serves until its
//       stdin closes.
//   store_test_helper client ENDPOINT
//       connects; prints "slot <n>", then runs one command per stdin line:
//       put FIRST COUNT BYTES TO_SLOT   puts objects FIRST.. (TestObjectId,
//                                       TestPattern), each handed to client
//                                       slot TO_SLOT unless it is -1
//       create NUMBER BYTES             puts object NUMBER and keeps it
//       and answers each with "ok <milliseconds>" or "error <message>".
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "shm/store_client.h"
#include "shm/store_service.h"
#include "shm/store_test_util.h"

namespace shoal::shm {
namespace {

int Serve(char** argv) {
  StoreOptions o;
  o.job_id = argv[0];
  uint64_t bytes = 0;
  uint32_t refs = 0;
  if (!absl::SimpleAtoi(argv[1], &bytes) || !absl::SimpleAtoi(argv[2], &refs))
    return 2;
  o.store_bytes = bytes;
  o.initial_refs_per_client = refs;
  o.max_clients = 16;
  const std::string spill = argv[3];
  if (spill == "-") {
    o.spill_bytes = 0;
  } else {
    o.spill_dir = spill;
  }
  auto service = StoreService::Create(o);
  if (!service.ok()) {
    std::printf("error %s\n", service.status().ToString().c_str());
    return 1;
  }
  std::thread loop([&] { (void)(*service)->Run(); });
  std::printf("endpoint %s\n", (*service)->endpoint().c_str());
  std::fflush(stdout);
  std::string line;
  while (std::getline(std::cin, line)) {
  }
  (*service)->Stop();
  loop.join();
  return 0;
}

absl::Status Put(StoreClient& c, uint64_t number, uint64_t bytes,
                 int64_t to_slot) {
  std::vector<uint8_t> data = TestPattern(number, bytes);
  const ObjectId id = TestObjectId(number);
  absl::Status s =
      c.Put(id, TensorMeta::Bytes(static_cast<int64_t>(bytes)), data.data());
  if (s.ok() && to_slot >= 0) {
    s = c.Transfer(id, static_cast<uint32_t>(to_slot));
  }
  return s;
}

absl::Status RunCommand(StoreClient& c, const std::vector<std::string>& w) {
  uint64_t a = 0, b = 0, d = 0;
  int64_t slot = -1;
  if (w.size() == 5 && w[0] == "put" && absl::SimpleAtoi(w[1], &a) &&
      absl::SimpleAtoi(w[2], &b) && absl::SimpleAtoi(w[3], &d) &&
      absl::SimpleAtoi(w[4], &slot)) {
    for (uint64_t i = 0; i < b; ++i) {
      absl::Status s = Put(c, a + i, d, slot);
      if (!s.ok()) return s;
    }
    return absl::OkStatus();
  }
  if (w.size() == 3 && w[0] == "create" && absl::SimpleAtoi(w[1], &a) &&
      absl::SimpleAtoi(w[2], &d)) {
    return Put(c, a, d, -1);
  }
  return absl::InvalidArgumentError("unknown command");
}

int Client(const char* endpoint) {
  StoreClientOptions co;
  co.endpoint = endpoint;
  co.rpc_timeout = absl::Seconds(120);
  auto c = StoreClient::Connect(co);
  if (!c.ok()) {
    std::printf("error %s\n", c.status().ToString().c_str());
    return 1;
  }
  std::printf("slot %u\n", (*c)->client_slot());
  std::fflush(stdout);
  std::string line;
  while (std::getline(std::cin, line)) {
    const auto t0 = std::chrono::steady_clock::now();
    absl::Status s =
        RunCommand(**c, absl::StrSplit(line, ' ', absl::SkipEmpty()));
    const double ms = std::chrono::duration<double, std::milli>(
                          std::chrono::steady_clock::now() - t0)
                          .count();
    if (s.ok()) {
      std::printf("ok %.3f\n", ms);
    } else {
      std::printf("error %s\n", s.ToString().c_str());
    }
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace
}  // namespace shoal::shm

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "serve" && argc == 6) return shoal::shm::Serve(argv + 2);
  if (mode == "client" && argc == 3) return shoal::shm::Client(argv[2]);
  std::fprintf(stderr,
               "usage: store_test_helper serve JOB BYTES REFS SPILL_DIR|- | "
               "client ENDPOINT\n");
  return 2;
}
