// The dashboard's HTTP server (`shoal dashboard`): one page and the JSON
// endpoints it polls, on civetweb's C API (Debian's libcivetweb, which
// prometheus-cpp-pull already brings).
//
//   GET /                    the page (observe/dashboard_page.html)
//   GET /api/status          the node's status as JSON (DashboardSources)
//   GET /api/timeline?seconds=60   the job's timeline as JSON
//
// Every request must carry the server's token, as `?token=<hex>` or an
// `Authorization: token <hex>` header (the page sends the header); a wrong
// or missing token gets 403 whatever the path. The Host header must name
// loopback (127.0.0.1, localhost, [::1]) or the listening address, so a page
// on another site that a DNS name rebinds to this machine gets 403 too.
// Only GET and HEAD are served, without a body; nothing is read from disk.
// What holds and what does not: docs/security.md ("The dashboard").
#ifndef SHOAL_OBSERVE_DASHBOARD_SERVER_H_
#define SHOAL_OBSERVE_DASHBOARD_SERVER_H_

#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace shoal::observe {

// Where the endpoints' JSON comes from. Each is called on the server's
// threads, one call of each at a time, and returns a JSON object (an error
// is the source's to describe inside it: the page shows it).
struct DashboardSources {
  std::function<std::string()> status;
  // The events of the last `window` (1 s to kMaxDashboardWindow).
  std::function<std::string(absl::Duration window)> timeline;
};

// The longest window /api/timeline serves.
inline constexpr absl::Duration kMaxDashboardWindow = absl::Minutes(10);

struct DashboardServerOptions {
  // The address to listen on (an IPv4 or IPv6 literal). Default loopback:
  // anyone who reaches the port and has the token sees the node's workers,
  // pids and task names (docs/security.md).
  std::string address = "127.0.0.1";
  // The TCP port; 0 picks a free one (see DashboardServer::port).
  int port = 0;
  // The token requests must carry; empty: a fresh one (NewDashboardToken).
  std::string token;
};

class DashboardServer {
 public:
  // Listens on options.address:options.port until destroyed.
  // REQUIRES: the sources may be called on the server's threads until the
  // server is destroyed.
  // Errors: InvalidArgument (a port outside 0..65535, an address that is not
  // an IPv4 or IPv6 literal, a token shorter than 32 characters),
  // Unavailable (the address cannot be listened on; the message names it),
  // Internal (no randomness for the token).
  static absl::StatusOr<std::unique_ptr<DashboardServer>> Start(
      const DashboardServerOptions& options, DashboardSources sources);
  // Stops the server: its threads end (no source runs) before it returns.
  ~DashboardServer();

  DashboardServer(const DashboardServer&) = delete;
  DashboardServer& operator=(const DashboardServer&) = delete;

  int port() const { return port_; }
  const std::string& token() const { return token_; }
  // The page's address with the token: http://127.0.0.1:PORT/?token=...
  std::string url() const;

  struct State;

 private:
  DashboardServer() = default;
  std::unique_ptr<State> state_;
  int port_ = 0;
  std::string host_;  // as a URL names it: "127.0.0.1", "[::1]"
  std::string token_;
};

// 32 bytes from getrandom(2), as 64 lowercase hex digits.
// Errors: Internal (getrandom failed).
absl::StatusOr<std::string> NewDashboardToken();

// Whether `given` equals `expected`, in time that depends only on their
// lengths (the comparison does not stop at the first differing byte).
bool DashboardTokenMatches(absl::string_view expected, absl::string_view given);

// Whether a request's Host header names this server: its host part (the
// port ignored) is 127.0.0.1, localhost, [::1], or `address` (the listening
// address, as given to Start). Case-insensitive; an empty header is refused.
bool DashboardHostAllowed(absl::string_view host_header,
                          absl::string_view address);

}  // namespace shoal::observe

#endif  // SHOAL_OBSERVE_DASHBOARD_SERVER_H_
