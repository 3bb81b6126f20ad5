// TcpProxy: a TCP forwarder between clients and a node's frontend, run on a
// thread of the test, that can cut every connection it carries and hold new
// ones off for a while: a network that breaks, for the session tests.
#ifndef SHOAL_TESTS_REMOTE_TCP_PROXY_H_
#define SHOAL_TESTS_REMOTE_TCP_PROXY_H_

#include <atomic>
#include <cstdint>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace shoal::remote {

class TcpProxy {
 public:
  // Listens on 127.0.0.1 (a free port) and forwards each connection to
  // `target` ("tcp://host:port", a numeric IPv4 host). Errors: a bad target,
  // socket failures.
  static absl::StatusOr<std::unique_ptr<TcpProxy>> Start(
      const std::string& target);
  ~TcpProxy();
  TcpProxy(const TcpProxy&) = delete;
  TcpProxy& operator=(const TcpProxy&) = delete;

  // "tcp://127.0.0.1:<port>": where clients connect.
  std::string endpoint() const;
  // Closes every connection carried now (both sides: a reset, as a broken
  // network or a NAT that forgot them shows it). Returns once done, with
  // the number it closed.
  uint64_t CutAll();
  // Waits up to `timeout` until a connection is carried (clients reconnect
  // on their own), then CutAll. Returns the number closed.
  uint64_t CutOnceConnected(absl::Duration timeout);
  // Connections carried now.
  uint64_t live() const { return live_.load(); }
  // While down, new connections are accepted and closed at once (the
  // client sees a connection refused in effect, and retries).
  void SetDown(bool down) { down_.store(down); }
  // Connections accepted and forwarded so far.
  uint64_t forwarded() const { return forwarded_.load(); }
  // Connections cut by CutAll so far.
  uint64_t cut() const { return cut_.load(); }

 private:
  TcpProxy() = default;
  void Run();

  int listen_fd_ = -1;
  int port_ = 0;
  uint32_t target_addr_ = 0;  // network order
  uint16_t target_port_ = 0;  // network order
  std::atomic<bool> stop_{false};
  std::atomic<bool> down_{false};
  std::atomic<uint64_t> cut_requests_{0};
  std::atomic<uint64_t> cuts_done_{0};
  std::atomic<uint64_t> forwarded_{0};
  std::atomic<uint64_t> cut_{0};
  std::atomic<uint64_t> live_{0};
  std::atomic<uint64_t> last_cut_{0};
  std::thread thread_;
};

}  // namespace shoal::remote

#endif  // SHOAL_TESTS_REMOTE_TCP_PROXY_H_
