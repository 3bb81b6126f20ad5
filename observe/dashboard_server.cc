#include "observe/dashboard_server.h"

#include <arpa/inet.h>
#include <sys/random.h>

#include <cerrno>
#include <cstring>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/mutex.h"
#include "civetweb.h"

namespace shoal::observe {
namespace {

// The page, from observe/dashboard_page.html (//observe:dashboard_page_inc).
constexpr char kPage[] =
#include "observe/dashboard_page.inc"
    ;

// What the page may do: its own inline script and style, requests to this
// server only, no frames, forms or other origins' resources.
constexpr char kPagePolicy[] =
    "default-src 'none'; script-src 'unsafe-inline'; style-src "
    "'unsafe-inline'; img-src data:; connect-src 'self'; base-uri 'none'; "
    "form-action 'none'; frame-ancestors 'none'";

constexpr size_t kTokenBytes = 32;
constexpr size_t kMinTokenChars = 32;

// "127.0.0.1" or "[::1]": how a URL (and a Host header) names `address`.
std::string UrlHost(absl::string_view address) {
  if (absl::StrContains(address, ':') && !absl::StartsWith(address, "[")) {
    return absl::StrCat("[", address, "]");
  }
  return std::string(address);
}

bool IsIpLiteral(absl::string_view host) {
  unsigned char buf[sizeof(in6_addr)];
  if (absl::StartsWith(host, "[") && absl::EndsWith(host, "]")) {
    const std::string inner(host.substr(1, host.size() - 2));
    return inet_pton(AF_INET6, inner.c_str(), buf) == 1;
  }
  const std::string h(host);
  return inet_pton(AF_INET, h.c_str(), buf) == 1;
}

const char* Reason(int code) {
  switch (code) {
    case 200:
      return "OK";
    case 400:
      return "Bad Request";
    case 403:
      return "Forbidden";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 413:
      return "Content Too Large";
    default:
      return "Error";
  }
}

// Writes a whole reply: status line, headers (no caching, no sniffing, no
// referrer, no framing; the page's policy for HTML) and, unless `head`, the
// body. The connection closes after it.
int Reply(mg_connection* conn, bool head, int code, const char* type,
          absl::string_view body) {
  std::string h = absl::StrFormat(
      "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %u\r\n"
      "Cache-Control: no-store\r\nX-Content-Type-Options: nosniff\r\n"
      "Referrer-Policy: no-referrer\r\nX-Frame-Options: DENY\r\n",
      code, Reason(code), type, body.size());
  if (absl::StartsWith(type, "text/html")) {
    absl::StrAppend(&h, "Content-Security-Policy: ", kPagePolicy, "\r\n");
  }
  h += "Connection: close\r\n\r\n";
  mg_write(conn, h.data(), h.size());
  if (!head && !body.empty()) mg_write(conn, body.data(), body.size());
  return code;
}

int ReplyText(mg_connection* conn, bool head, int code,
              absl::string_view text) {
  return Reply(conn, head, code, "text/plain; charset=utf-8",
               absl::StrCat(text, "\n"));
}

// The value of query parameter `name`, or nullopt (absent, or longer than
// 255 bytes).
std::optional<std::string> QueryVar(const mg_request_info* ri,
                                    const char* name) {
  if (ri->query_string == nullptr) return std::nullopt;
  char buf[256];
  const int n = mg_get_var(ri->query_string, std::strlen(ri->query_string),
                           name, buf, sizeof(buf));
  if (n < 0) return std::nullopt;
  return std::string(buf, static_cast<size_t>(n));
}

// The token a request carries: `?token=` or `Authorization: token <t>`.
std::string GivenToken(mg_connection* conn, const mg_request_info* ri) {
  if (std::optional<std::string> q = QueryVar(ri, "token")) return *q;
  const char* auth = mg_get_header(conn, "Authorization");
  if (auth == nullptr) return "";
  absl::string_view a(auth);
  if (a.size() > 6 && absl::EqualsIgnoreCase(a.substr(0, 6), "token ")) {
    return std::string(absl::StripAsciiWhitespace(a.substr(6)));
  }
  return "";
}

int SuppressLog(const mg_connection*, const char*) { return 1; }

}  // namespace

struct DashboardServer::State {
  std::string address;  // as given
  std::string token;
  Mutex status_mu;    // one status call at a time
  Mutex timeline_mu;  // one timeline call at a time
  std::function<std::string()> status ABSL_GUARDED_BY(status_mu);
  std::function<std::string(absl::Duration)> timeline
      ABSL_GUARDED_BY(timeline_mu);
  mg_context* ctx = nullptr;

  // Serves every request (civetweb's begin_request: nothing of civetweb's
  // own handling runs after it).
  int Handle(mg_connection* conn);
  int Route(mg_connection* conn, const mg_request_info* ri, bool head);
  absl::StatusOr<int> Listen(const std::string& listen);
};

int DashboardServer::State::Handle(mg_connection* conn) {
  const mg_request_info* ri = mg_get_request_info(conn);
  const char* host = mg_get_header(conn, "Host");
  if (host == nullptr || !DashboardHostAllowed(host, address)) {
    return ReplyText(conn, false, 403, "host not allowed");
  }
  const absl::string_view method =
      ri->request_method != nullptr ? ri->request_method : "";
  const bool head = method == "HEAD";
  if (method != "GET" && !head) {
    return ReplyText(conn, false, 405, "only GET and HEAD");
  }
  if (ri->content_length > 0 ||
      mg_get_header(conn, "Transfer-Encoding") != nullptr) {
    return ReplyText(conn, head, 413, "no request body is accepted");
  }
  if (!DashboardTokenMatches(token, GivenToken(conn, ri))) {
    return ReplyText(conn, head, 403,
                     "a wrong or missing token: open the URL `shoal "
                     "dashboard` printed");
  }
  return Route(conn, ri, head);
}

int DashboardServer::State::Route(mg_connection* conn,
                                  const mg_request_info* ri, bool head) {
  const absl::string_view path = ri->local_uri != nullptr ? ri->local_uri : "";
  if (path == "/" || path == "/index.html") {
    return Reply(conn, head, 200, "text/html; charset=utf-8", kPage);
  }
  if (path == "/api/status") {
    std::string body;
    {
      MutexLock lock(&status_mu);
      body = status();
    }
    return Reply(conn, head, 200, "application/json", body);
  }
  if (path == "/api/timeline") {
    double seconds = 60;
    if (std::optional<std::string> s = QueryVar(ri, "seconds")) {
      if (!absl::SimpleAtod(*s, &seconds) || !(seconds >= 1) ||
          seconds > absl::ToDoubleSeconds(kMaxDashboardWindow)) {
        return ReplyText(
            conn, head, 400,
            absl::StrCat("seconds must be 1 to ",
                         absl::ToDoubleSeconds(kMaxDashboardWindow)));
      }
    }
    std::string body;
    {
      MutexLock lock(&timeline_mu);
      body = timeline(absl::Seconds(seconds));
    }
    return Reply(conn, head, 200, "application/json", body);
  }
  return ReplyText(conn, head, 404, "not found");
}

// Starts civetweb on `listen` (HOST:PORT) with every request going to
// Handle; returns the port it listens on. Errors: Unavailable.
absl::StatusOr<int> DashboardServer::State::Listen(const std::string& listen) {
  // No document root: civetweb serves no file and lists no folder; CORS off.
  const char* config[] = {"listening_ports",
                          listen.c_str(),
                          "num_threads",
                          "4",
                          "max_request_size",
                          "16384",
                          "request_timeout_ms",
                          "5000",
                          "enable_keep_alive",
                          "no",
                          "enable_directory_listing",
                          "no",
                          "access_control_allow_origin",
                          "",
                          nullptr};
  mg_callbacks callbacks = {};
  callbacks.begin_request = [](mg_connection* conn) {
    return static_cast<State*>(mg_get_request_info(conn)->user_data)
        ->Handle(conn);
  };
  callbacks.log_message = SuppressLog;
  char error[256] = {};
  unsigned code = 0;
  mg_error_data err = {&code, error, sizeof(error)};
  mg_init_data init = {&callbacks, this, config};
  ctx = mg_start2(&init, &err);
  if (ctx == nullptr) {
    return absl::UnavailableError(
        absl::StrCat("cannot serve the dashboard on ", listen, ": ", error));
  }
  mg_server_port ports[4] = {};
  const int n = mg_get_server_ports(ctx, 4, ports);
  if (n < 1 || ports[0].port <= 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot serve the dashboard on ", listen, ": no port"));
  }
  return ports[0].port;
}

absl::StatusOr<std::unique_ptr<DashboardServer>> DashboardServer::Start(
    const DashboardServerOptions& options, DashboardSources sources) {
  if (options.port < 0 || options.port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("dashboard port ", options.port, " is outside 0..65535"));
  }
  const std::string host = UrlHost(options.address);
  if (!IsIpLiteral(host)) {
    return absl::InvalidArgumentError(
        absl::StrCat("dashboard address '", options.address,
                     "' is not an IPv4 or IPv6 literal"));
  }
  std::string token = options.token;
  if (token.empty()) {
    absl::StatusOr<std::string> t = NewDashboardToken();
    if (!t.ok()) return t.status();
    token = *std::move(t);
  }
  if (token.size() < kMinTokenChars) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a dashboard token has at least ", kMinTokenChars, " characters"));
  }
  auto server = std::unique_ptr<DashboardServer>(new DashboardServer());
  server->state_ = std::make_unique<State>();
  State& st = *server->state_;
  {
    MutexLock a(&st.status_mu);
    MutexLock b(&st.timeline_mu);
    st.status = std::move(sources.status);
    st.timeline = std::move(sources.timeline);
  }
  st.address = options.address;
  st.token = token;
  const std::string listen = absl::StrCat(host, ":", options.port);
  absl::StatusOr<int> port = st.Listen(listen);
  if (!port.ok()) return port.status();
  server->port_ = *port;
  server->host_ = host;
  server->token_ = std::move(token);
  return server;
}

DashboardServer::~DashboardServer() {
  if (state_ != nullptr && state_->ctx != nullptr) mg_stop(state_->ctx);
}

std::string DashboardServer::url() const {
  return absl::StrCat("http://", host_, ":", port_, "/?token=", token_);
}

absl::StatusOr<std::string> NewDashboardToken() {
  unsigned char bytes[kTokenBytes];
  size_t got = 0;
  while (got < sizeof(bytes)) {
    const ssize_t n = getrandom(bytes + got, sizeof(bytes) - got, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      return absl::InternalError(
          absl::StrCat("getrandom: ", std::strerror(errno)));
    }
    got += static_cast<size_t>(n);
  }
  std::string hex;
  hex.reserve(2 * sizeof(bytes));
  for (unsigned char b : bytes) absl::StrAppendFormat(&hex, "%02x", b);
  return hex;
}

bool DashboardTokenMatches(absl::string_view expected,
                           absl::string_view given) {
  if (expected.empty() || expected.size() != given.size()) return false;
  volatile unsigned char diff = 0;
  for (size_t i = 0; i < expected.size(); ++i) {
    diff = diff | static_cast<unsigned char>(expected[i] ^ given[i]);
  }
  return diff == 0;
}

bool DashboardHostAllowed(absl::string_view host_header,
                          absl::string_view address) {
  absl::string_view h = absl::StripAsciiWhitespace(host_header);
  // The host part: a bracketed IPv6 literal, or up to the port's ':'.
  if (absl::StartsWith(h, "[")) {
    const size_t close = h.find(']');
    if (close == absl::string_view::npos) return false;
    const absl::string_view rest = h.substr(close + 1);
    if (!rest.empty() && rest[0] != ':') return false;
    h = h.substr(0, close + 1);
  } else {
    h = h.substr(0, h.find(':'));
  }
  if (h.empty()) return false;
  const std::string host = absl::AsciiStrToLower(h);
  if (host == "127.0.0.1" || host == "localhost" || host == "[::1]") {
    return true;
  }
  const std::string listening = absl::AsciiStrToLower(UrlHost(address));
  if (host == listening) return true;
  // Listening on every address: any IP literal names this machine (a DNS
  // rebinding attack names a host, never a literal).
  return (listening == "0.0.0.0" || listening == "[::]") && IsIpLiteral(host);
}

}  // namespace shoal::observe
