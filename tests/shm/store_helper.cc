// A store client in its own process, driven by the store tests. Each mode does
// one thing, reports on stdout, and (where the test needs it to hold state)
// waits for stdin to close or for a signal.
//
//   put ENDPOINT NBYTES SEED
//       → "<id> <offset>", holds its reference
//   get ENDPOINT ID NBYTES SEED MS
//       → "ok <offset>" or "error <code> <message>"
//   hold ENDPOINT ID...
//       → "held", holds a reference to each id
//   create ENDPOINT ID NBYTES [ACCOUNT]
//       → "created" (or "error <code> <message>"), leaves the object
//         unsealed, charged to ACCOUNT if given
//   die-in-lock ENDPOINT ID
//       → dies (SIGKILL) inside the table lock, halfway through taking a
//         reference
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "shm/object_table.h"
#include "shm/robust_lock.h"
#include "shm/store_client.h"
#include "tools/bench/bench_util.h"

namespace shoal {
namespace {

std::unique_ptr<shm::StoreClient> ConnectOrDie(const std::string& endpoint) {
  shm::StoreClientOptions o;
  o.endpoint = endpoint;
  o.name = "store_helper";
  auto c = shm::StoreClient::Connect(o);
  if (!c.ok()) {
    std::printf("error %d %s\n", static_cast<int>(c.status().code()),
                std::string(c.status().message()).c_str());
    std::exit(3);
  }
  return *std::move(c);
}

ObjectId IdOrDie(const std::string& hex) {
  auto id = ObjectId::FromHex(hex);
  if (!id.ok()) std::exit(4);
  return *id;
}

void Say(const std::string& line) {
  std::printf("%s\n", line.c_str());
  std::fflush(stdout);
}

void WaitForStdinClose() {
  std::string line;
  while (std::getline(std::cin, line)) {
  }
}

int Run(int argc, char** argv) {
  if (argc < 3) return 2;
  const std::string mode = argv[1];
  auto client = ConnectOrDie(argv[2]);
  if (mode == "put" && argc == 5) {
    uint64_t nbytes = std::strtoull(argv[3], nullptr, 10);
    uint64_t seed = std::strtoull(argv[4], nullptr, 10);
    std::vector<uint8_t> data(nbytes);
    bench::FillPattern(data.data(), nbytes, seed);
    ObjectId id = ObjectId::Random();
    absl::Status s = client->Put(
        id, TensorMeta::Bytes(static_cast<int64_t>(nbytes)), data.data());
    if (!s.ok()) {
      Say(absl::StrCat("error ", static_cast<int>(s.code()), " ", s.message()));
      return 1;
    }
    auto view = client->Get(id);
    Say(absl::StrCat(id.ToHex(), " ", view->data - client->segment_base()));
    WaitForStdinClose();
    return 0;
  }
  if (mode == "get" && argc == 7) {
    ObjectId id = IdOrDie(argv[3]);
    uint64_t nbytes = std::strtoull(argv[4], nullptr, 10);
    uint64_t seed = std::strtoull(argv[5], nullptr, 10);
    int64_t ms = std::strtoll(argv[6], nullptr, 10);
    auto view = client->Get(id, absl::Milliseconds(ms));
    if (!view.ok()) {
      Say(absl::StrCat("error ", static_cast<int>(view.status().code()), " ",
                       view.status().message()));
      return 0;
    }
    std::vector<uint8_t> want(nbytes);
    bench::FillPattern(want.data(), nbytes, seed);
    if (view->nbytes != nbytes ||
        std::memcmp(view->data, want.data(), nbytes) != 0) {
      Say("mismatch");
      return 1;
    }
    Say(absl::StrCat("ok ", view->data - client->segment_base()));
    (void)client->Release(id);
    return 0;
  }
  if (mode == "hold") {
    for (int i = 3; i < argc; ++i) {
      auto view = client->Get(IdOrDie(argv[i]));
      if (!view.ok()) {
        Say(absl::StrCat("error ", static_cast<int>(view.status().code()), " ",
                         view.status().message()));
        return 1;
      }
    }
    Say("held");
    WaitForStdinClose();
    return 0;
  }
  if (mode == "create" && (argc == 5 || argc == 6)) {
    ObjectId id = IdOrDie(argv[3]);
    uint64_t nbytes = std::strtoull(argv[4], nullptr, 10);
    shm::CreateOptions options;
    if (argc == 6) options.account = std::strtoul(argv[5], nullptr, 10);
    auto buf = client->CreateBytes(id, nbytes, options);
    if (!buf.ok()) {
      Say(absl::StrCat("error ", static_cast<int>(buf.status().code()), " ",
                       buf.status().message()));
      return 1;
    }
    std::memset(buf->data, 0xab, nbytes / 2);
    Say("created");
    WaitForStdinClose();
    return 0;
  }
  if (mode == "die-in-lock" && argc == 4) {
    ObjectId id = IdOrDie(argv[3]);
    uint8_t* base = const_cast<uint8_t*>(client->segment_base());
    shm::ObjectTable table(base);
    auto lock =
        shm::LockGuard::Acquire(base, &table.header()->lock, absl::Seconds(5));
    if (!lock.ok()) return 1;
    auto e = table.Find(id);
    if (!e) return 1;
    shm::JournaledWriter journal(base, &table.header()->lock.journal);
    // The first half of taking a reference: the object's count goes up, but
    // the client's own record of it is never written. Left like this, the
    // object could never be freed.
    shm::ObjectEntry* x = table.entry(*e);
    journal.Write32(&x->refcount, x->refcount + 1);
    Say("dying");
    raise(SIGKILL);
  }
  return 2;
}

}  // namespace
}  // namespace shoal

int main(int argc, char** argv) { return shoal::Run(argc, argv); }
