// The hostile clients of tests/remote:soak_test, in a process of their own
// at SCHED_IDLE, as if they ran on other machines: on a small test machine
// their threads (and libzmq's, which encrypt their traffic) would otherwise
// take the CPUs from the node and from the honest client, and the honest
// client's latency would measure the kernel's scheduler rather than the
// node. The node's processes serving them run at the normal priority.
//
//   soak_storm ENDPOINT SERVER_KEY MAX_QUEUED KEY_FILE...
//
// Runs until its stdin closes (or says anything), then prints
// "served N wrong N refused N": results the clients checked, results that
// were wrong, quota refusals seen.
#include <pthread.h>
#include <sched.h>
#include <unistd.h>
#include <zmq.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "coordinator/client.h"
#include "ipc/curve.h"
#include "ipc/messages.h"
#include "ipc/protocol.h"
#include "ipc/socket.h"

namespace shoal::remote {
namespace {

struct Storm {
  std::string endpoint;
  std::string server_key;
  int max_queued = 0;
  std::vector<std::string> key_files;
  std::atomic<bool> stop{false};
  std::atomic<int64_t> wrong{0};    // wrong results any client got
  std::atomic<int64_t> served{0};   // results checked
  std::atomic<int64_t> refused{0};  // quota refusals seen
};

ipc::TaskSpec Task(std::string fn, std::vector<Value> args = {}) {
  ipc::TaskSpec t;
  t.function = std::move(fn);
  t.args = std::move(args);
  return t;
}

absl::StatusOr<std::unique_ptr<coordinator::Client>> Connect(
    const Storm& storm, const std::string& key_file) {
  coordinator::ClientOptions o;
  o.endpoint = storm.endpoint;
  o.server_key = storm.server_key;
  o.client_key_file = key_file;
  o.force_remote = true;
  o.rpc_timeout = absl::Seconds(30);
  return coordinator::Client::Connect(o);
}

// Never reads (a receive queue of one message, a 4 KiB kernel buffer):
// pushed fills (64 KiB results) until its sends stop going.
void NeverReads(Storm* storm, const std::string& key_file) {
  ipc::SocketOptions so;
  so.recv_hwm = 1;
  auto s = ipc::Socket::Create(ZMQ_DEALER, so);
  if (!s.ok()) return;
  int small = 4096;
  zmq_setsockopt(s->raw(), ZMQ_RCVBUF, &small, sizeof(small));
  auto keys = ipc::ReadKeyPair(key_file);
  if (!keys.ok() ||
      !ipc::ConfigureCurveClient(*s, storm->server_key, *keys).ok() ||
      !s->Connect(storm->endpoint).ok()) {
    std::cerr << "soak_storm: a never-reading client could not connect\n";
    return;
  }
  for (int i = 0; i < 400 && !storm->stop.load(); ++i) {
    ipc::SubmitRequest req;
    req.tasks = {Task("fill", {int64_t{1} << 14, 1.0, std::string("f32")})};
    req.push = true;
    auto frame = ipc::Encode(1 + i, req);
    if (!frame.ok() || !s->Send(*frame, /*dontwait=*/true).ok())
      absl::SleepFor(absl::Milliseconds(20));
  }
  while (!storm->stop.load()) absl::SleepFor(absl::Milliseconds(50));
}

// Disconnects mid-pipeline, again and again: 200 submits, half of them
// read, then it goes with the rest in flight.
void Disconnects(Storm* storm, const std::string& key_file) {
  int64_t round = 0;
  while (!storm->stop.load()) {
    auto c = Connect(*storm, key_file);
    if (!c.ok()) {
      absl::SleepFor(absl::Milliseconds(100));
      continue;
    }
    std::vector<coordinator::PendingTask> p;
    for (int64_t i = 0; i < 200; ++i) {
      auto t = (*c)->SubmitAsync(Task("echo", {round * 1000 + i}));
      if (t.ok()) p.push_back(*t);
    }
    (void)(*c)->Flush();
    for (size_t i = 0; i < p.size() / 2 && !storm->stop.load(); ++i) {
      auto r = (*c)->Await(p[i], absl::Seconds(30));
      if (!r.ok() || !r->status.ok()) continue;
      ++storm->served;
      if (std::get<int64_t>(r->outputs.at(0)) !=
          round * 1000 + static_cast<int64_t>(i))
        ++storm->wrong;
    }
    ++round;
  }
}

// Over its quotas, round after round: a batch over its queue quota, and
// 16 MiB of fills against an 8 MiB store quota.
void Greedy(Storm* storm, const std::string& key_file) {
  auto c = Connect(*storm, key_file);
  if (!c.ok()) {
    std::cerr << "soak_storm: a greedy client could not connect: "
              << c.status() << "\n";
    return;
  }
  while (!storm->stop.load()) {
    std::vector<ipc::TaskSpec> too_many(storm->max_queued + 1, Task("noop"));
    auto refused = (*c)->Submit(too_many);
    if (absl::IsResourceExhausted(refused.status())) ++storm->refused;
    std::vector<ipc::TaskSpec> fills(4, Task("fill", {int64_t{1} << 20, 3.0}));
    auto ids = (*c)->Submit(fills);
    if (ids.ok()) {
      auto r = (*c)->Wait(*ids, absl::Seconds(30));
      if (r.ok()) {
        for (const ipc::TaskResult& t : *r) {
          if (absl::IsResourceExhausted(t.status)) ++storm->refused;
          if (t.status.ok()) ++storm->served;
          (*c)->ReleaseOutputs(t);
        }
      }
    }
    absl::SleepFor(absl::Milliseconds(50));
  }
}

int Main(int argc, char** argv) {
  // First, so that every thread started after (libzmq's too) inherits it.
  sched_param none{};
  if (pthread_setschedparam(pthread_self(), SCHED_IDLE, &none) != 0) {
    std::cerr << "soak_storm: SCHED_IDLE refused\n";
    return 2;
  }
  if (argc < 5) {
    std::cerr << "usage: soak_storm ENDPOINT SERVER_KEY MAX_QUEUED KEY_FILE...\n";
    return 2;
  }
  Storm storm;
  storm.endpoint = argv[1];
  storm.server_key = argv[2];
  if (!absl::SimpleAtoi(argv[3], &storm.max_queued)) return 2;
  for (int i = 4; i < argc; ++i) storm.key_files.push_back(argv[i]);
  std::vector<std::thread> threads;
  for (size_t who = 0; who < storm.key_files.size(); ++who) {
    const std::string& key = storm.key_files[who];
    switch (who % 3) {
      case 0:
        threads.emplace_back(NeverReads, &storm, key);
        break;
      case 1:
        threads.emplace_back(Disconnects, &storm, key);
        break;
      case 2:
        threads.emplace_back(Greedy, &storm, key);
        break;
    }
  }
  std::cout << "started" << std::endl;
  char c;
  (void)read(STDIN_FILENO, &c, 1);
  storm.stop.store(true);
  for (std::thread& t : threads) t.join();
  std::cout << "served " << storm.served.load() << " wrong "
            << storm.wrong.load() << " refused " << storm.refused.load()
            << std::endl;
  return 0;
}

}  // namespace
}  // namespace shoal::remote

int main(int argc, char** argv) { return shoal::remote::Main(argc, argv); }
