// shm/'s store tests' processes: a store service and clients, each a
// store_test_helper process (store_test_helper.cc has its commands).
#ifndef SHOAL_SHM_STORE_TEST_PROCESS_H_
#define SHOAL_SHM_STORE_TEST_PROCESS_H_

#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "base/subprocess.h"

namespace shoal::shm {

class HelperProcess {
 public:
  // Starts `store_test_helper args...` and reads its first line, which must
  // start with `expect` ("endpoint ", "slot "); *rest gets what follows.
  static absl::StatusOr<std::unique_ptr<HelperProcess>> Start(
      std::vector<std::string> args, absl::string_view expect,
      std::string* rest) {
    const char* srcdir = std::getenv("TEST_SRCDIR");
    const char* ws = std::getenv("TEST_WORKSPACE");
    std::string path =
        srcdir != nullptr && ws != nullptr
            ? absl::StrCat(srcdir, "/", ws, "/shm/store_test_helper")
            : absl::StrCat(SelfExePath(),
                           ".runfiles/shoal/shm/"
                           "store_test_helper");
    args.insert(args.begin(), path);
    SubprocessOptions o;
    o.pipe_stdin = true;
    o.pipe_stdout = true;
    o.parent_death_signal = SIGKILL;
    auto p = std::make_unique<HelperProcess>();
    auto sub = Subprocess::Start(args, o);
    if (!sub.ok()) return sub.status();
    p->process_ = *std::move(sub);
    auto line = p->process_.ReadLine(absl::Seconds(60));
    if (!line.ok()) return line.status();
    absl::string_view v = *line;
    if (!absl::ConsumePrefix(&v, expect)) {
      return absl::InternalError(absl::StrCat("helper said: ", *line));
    }
    *rest = std::string(v);
    return p;
  }

  // A store service; `spill_dir` "-" for none.
  static absl::StatusOr<std::unique_ptr<HelperProcess>> Serve(
      uint64_t bytes, uint32_t initial_refs, const std::string& spill_dir,
      std::string* endpoint) {
    static std::atomic<int> n{0};
    return Start({"serve", absl::StrCat("shmtest", getpid(), "-", n++),
                  absl::StrCat(bytes), absl::StrCat(initial_refs), spill_dir},
                 "endpoint ", endpoint);
  }

  // A client of the store at `endpoint`, in slot *slot.
  static absl::StatusOr<std::unique_ptr<HelperProcess>> Client(
      const std::string& endpoint, uint32_t* slot) {
    std::string rest;
    auto p = Start({"client", endpoint}, "slot ", &rest);
    if (p.ok()) *slot = static_cast<uint32_t>(std::stoul(rest));
    return p;
  }

  // Sends a command line; Finish reads its answer ("ok <ms>" or an error).
  absl::Status Send(const std::string& command) {
    return process_.WriteLine(command);
  }
  absl::StatusOr<double> Finish(absl::Duration timeout = absl::Seconds(120)) {
    auto line = process_.ReadLine(timeout);
    if (!line.ok()) return line.status();
    absl::string_view v = *line;
    if (!absl::ConsumePrefix(&v, "ok ")) return absl::InternalError(*line);
    return std::stod(std::string(v));
  }
  absl::StatusOr<double> Run(const std::string& command) {
    absl::Status s = Send(command);
    if (!s.ok()) return s;
    return Finish();
  }
  // Whether an answer is waiting to be read.
  bool Answered() {
    pollfd p{process_.stdout_fd(), POLLIN, 0};
    return poll(&p, 1, 0) == 1;
  }
  // Closes stdin (the helper ends) and waits for it.
  void End() {
    process_.CloseStdin();
    (void)process_.Wait(absl::Seconds(30));
  }

 private:
  Subprocess process_;
};

}  // namespace shoal::shm

#endif  // SHOAL_SHM_STORE_TEST_PROCESS_H_
