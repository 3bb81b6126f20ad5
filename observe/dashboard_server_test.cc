// The dashboard's HTTP server on loopback, spoken to as an attacker on the
// same machine would: raw requests over TCP, with and without the token,
// with foreign Host headers, other methods, bodies and oversized headers.
#include "observe/dashboard_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace shoal::observe {
namespace {

struct Reply {
  int status = 0;  // 0: no HTTP reply (connection refused, closed, garbage)
  std::string headers;
  std::string body;
};

// Sends `request` as it is to ip:port and reads until the server closes.
Reply Exchange(const std::string& ip, int port, const std::string& request) {
  Reply r;
  sockaddr_in a = {};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  if (inet_pton(AF_INET, ip.c_str(), &a.sin_addr) != 1) return r;
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return r;
  std::string got;
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0) {
    size_t sent = 0;
    while (sent < request.size()) {
      const ssize_t n =
          send(fd, request.data() + sent, request.size() - sent, MSG_NOSIGNAL);
      if (n <= 0) break;
      sent += static_cast<size_t>(n);
    }
    // Nothing more comes (a body announced and not sent ends here).
    shutdown(fd, SHUT_WR);
    for (;;) {
      pollfd p = {fd, POLLIN, 0};
      if (poll(&p, 1, 10000) <= 0) break;
      char buf[8192];
      const ssize_t n = read(fd, buf, sizeof(buf));
      if (n <= 0) break;
      got.append(buf, static_cast<size_t>(n));
    }
  }
  close(fd);
  const size_t end = got.find("\r\n\r\n");
  if (!absl::StartsWith(got, "HTTP/1.") || end == std::string::npos ||
      got.size() < 12 || !absl::SimpleAtoi(got.substr(9, 3), &r.status)) {
    return r;
  }
  r.headers = got.substr(0, end);
  r.body = got.substr(end + 4);
  return r;
}

class DashboardServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    DashboardSources s;
    s.status = [this] {
      ++status_calls_;
      return std::string("{\"ok\":true,\"workers\":[]}");
    };
    s.timeline = [this](absl::Duration window) {
      last_window_s_ = absl::ToInt64Seconds(window);
      return std::string("{\"ok\":true,\"processes\":[]}");
    };
    absl::StatusOr<std::unique_ptr<DashboardServer>> server =
        DashboardServer::Start(DashboardServerOptions{}, std::move(s));
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
    host_ = absl::StrCat("127.0.0.1:", server_->port());
  }

  // GET `target` with Host `host` (default: the server's) and `extra`
  // header lines.
  Reply Get(const std::string& target, const std::string& extra = "",
            const std::string& host = "") {
    return Exchange(
        "127.0.0.1", server_->port(),
        absl::StrCat("GET ", target, " HTTP/1.1\r\nHost: ",
                     host.empty() ? host_ : host, "\r\n", extra, "\r\n"));
  }
  std::string WithToken(const std::string& path) {
    return absl::StrCat(path, absl::StrContains(path, '?') ? "&" : "?",
                        "token=", server_->token());
  }

  std::unique_ptr<DashboardServer> server_;
  std::string host_;
  std::atomic<int> status_calls_{0};
  std::atomic<int64_t> last_window_s_{0};
};

TEST_F(DashboardServerTest, ThePageAndEndpointsWithTheToken) {
  EXPECT_EQ(server_->url(),
            absl::StrCat("http://", host_, "/?token=", server_->token()));
  Reply page = Get(WithToken("/"));
  ASSERT_EQ(page.status, 200) << page.body;
  EXPECT_TRUE(absl::StrContains(page.body, "<title>shoal dashboard</title>"));
  EXPECT_TRUE(absl::StrContains(page.headers, "Content-Security-Policy: "));
  EXPECT_TRUE(absl::StrContains(page.headers, "Cache-Control: no-store"));
  EXPECT_FALSE(absl::StrContains(page.headers, "Access-Control-Allow-Origin"));
  // The page's own way: the token in an Authorization header.
  Reply st = Get("/api/status", absl::StrCat("Authorization: token ",
                                             server_->token(), "\r\n"));
  ASSERT_EQ(st.status, 200);
  EXPECT_EQ(st.body, "{\"ok\":true,\"workers\":[]}");
  EXPECT_TRUE(absl::StrContains(st.headers, "application/json"));
  EXPECT_EQ(status_calls_.load(), 1);
  Reply tl = Get(WithToken("/api/timeline?seconds=5"));
  ASSERT_EQ(tl.status, 200);
  EXPECT_EQ(last_window_s_.load(), 5);
  EXPECT_EQ(Get(WithToken("/api/timeline")).status, 200);
  EXPECT_EQ(last_window_s_.load(), 60);  // the default window
}

TEST_F(DashboardServerTest, AWrongOrMissingTokenGets403Everywhere) {
  const std::string wrong(server_->token().size(), '0');
  const std::string shorter = server_->token().substr(1);
  for (const std::string path :
       {"/", "/index.html", "/api/status", "/api/timeline?seconds=60",
        "/nothing", "/../../etc/passwd"}) {
    SCOPED_TRACE(path);
    EXPECT_EQ(Get(path).status, 403);
    const std::string sep = absl::StrContains(path, '?') ? "&" : "?";
    EXPECT_EQ(Get(absl::StrCat(path, sep, "token=", wrong)).status, 403);
    EXPECT_EQ(Get(absl::StrCat(path, sep, "token=", shorter)).status, 403);
    EXPECT_EQ(
        Get(absl::StrCat(path, sep, "token=", server_->token(), "0")).status,
        403);
    EXPECT_EQ(
        Get(path, absl::StrCat("Authorization: token ", wrong, "\r\n")).status,
        403);
  }
  EXPECT_EQ(status_calls_.load(), 0);  // no source ran
}

TEST_F(DashboardServerTest, OnlyLoopbackHostsAgainstDnsRebinding) {
  const std::string port = absl::StrCat(server_->port());
  EXPECT_EQ(Get(WithToken("/"), "", "localhost:" + port).status, 200);
  EXPECT_EQ(Get(WithToken("/"), "", "LOCALHOST:" + port).status, 200);
  EXPECT_EQ(Get(WithToken("/"), "", "[::1]:" + port).status, 200);
  for (const std::string& host : std::vector<std::string>{
           "evil.example:" + port, "127.0.0.1.evil.example:" + port,
           "localhost.evil.example", "10.0.0.1:" + port, "[::1", "x"}) {
    SCOPED_TRACE(host);
    EXPECT_EQ(Get(WithToken("/api/status"), "", host).status, 403);
  }
  // No Host header at all (HTTP/1.0).
  Reply r = Exchange("127.0.0.1", server_->port(),
                     absl::StrCat("GET ", WithToken("/"), " HTTP/1.0\r\n\r\n"));
  EXPECT_EQ(r.status, 403);
  EXPECT_EQ(status_calls_.load(), 0);
}

TEST_F(DashboardServerTest, OnlyGetAndHeadWithoutABody) {
  for (const char* method : {"POST", "PUT", "DELETE", "OPTIONS", "PATCH"}) {
    SCOPED_TRACE(method);
    Reply r = Exchange("127.0.0.1", server_->port(),
                       absl::StrCat(method, " ", WithToken("/api/status"),
                                    " HTTP/1.1\r\nHost: ", host_,
                                    "\r\nContent-Length: 0\r\n\r\n"));
    EXPECT_EQ(r.status, 405);
  }
  Reply head = Exchange("127.0.0.1", server_->port(),
                        absl::StrCat("HEAD ", WithToken("/"),
                                     " HTTP/1.1\r\nHost: ", host_, "\r\n\r\n"));
  EXPECT_EQ(head.status, 200);
  EXPECT_TRUE(head.body.empty());
  EXPECT_EQ(Get(WithToken("/api/status"), "Content-Length: 5\r\n").status, 413);
  EXPECT_EQ(status_calls_.load(), 0);
}

TEST_F(DashboardServerTest, NoFilesNoListingsNoOtherPaths) {
  for (const std::string path :
       {"/api", "/api/", "/api/status/x", "/etc/passwd", "/../../etc/passwd",
        "/%2e%2e/%2e%2e/etc/passwd", "/dashboard_page.html", "/favicon.ico"}) {
    SCOPED_TRACE(path);
    Reply r = Get(WithToken(path));
    EXPECT_EQ(r.status, 404);
    EXPECT_FALSE(absl::StrContains(r.body, "root:"));
  }
}

TEST_F(DashboardServerTest, BadWindowsAndOversizedRequests) {
  for (const char* s : {"0", "-1", "nan", "601", "x", "1e9"}) {
    SCOPED_TRACE(s);
    EXPECT_EQ(Get(WithToken(absl::StrCat("/api/timeline?seconds=", s))).status,
              400);
  }
  // Headers past civetweb's max_request_size: no page, whatever the token.
  Reply big = Get(WithToken("/"),
                  absl::StrCat("X-Pad: ", std::string(20000, 'a'), "\r\n"));
  EXPECT_NE(big.status, 200);
  // The server still serves afterwards.
  EXPECT_EQ(Get(WithToken("/")).status, 200);
}

TEST_F(DashboardServerTest, ListensOnLoopbackOnly) {
  // 127.0.0.2 is this machine too, but not the address listened on.
  EXPECT_EQ(Exchange("127.0.0.2", server_->port(),
                     absl::StrCat("GET ", WithToken("/"),
                                  " HTTP/1.1\r\nHost: ", host_, "\r\n\r\n"))
                .status,
            0);
}

TEST(DashboardServerStartTest, RefusesBadOptions) {
  DashboardServerOptions o;
  o.port = 70000;
  EXPECT_EQ(DashboardServer::Start(o, {}).status().code(),
            absl::StatusCode::kInvalidArgument);
  o = {};
  o.address = "localhost";  // a name, not a literal
  EXPECT_EQ(DashboardServer::Start(o, {}).status().code(),
            absl::StatusCode::kInvalidArgument);
  o = {};
  o.token = "short";
  EXPECT_EQ(DashboardServer::Start(o, {}).status().code(),
            absl::StatusCode::kInvalidArgument);
  // A port in use.
  absl::StatusOr<std::unique_ptr<DashboardServer>> first =
      DashboardServer::Start({}, {});
  ASSERT_TRUE(first.ok()) << first.status();
  o = {};
  o.port = (*first)->port();
  EXPECT_EQ(DashboardServer::Start(o, {}).status().code(),
            absl::StatusCode::kUnavailable);
}

TEST(DashboardTokenTest, FreshHexTokens) {
  absl::StatusOr<std::string> a = NewDashboardToken();
  absl::StatusOr<std::string> b = NewDashboardToken();
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->size(), 64u);
  EXPECT_EQ(a->find_first_not_of("0123456789abcdef"), std::string::npos);
  EXPECT_NE(*a, *b);
}

TEST(DashboardTokenTest, MatchesOnlyTheSameToken) {
  EXPECT_TRUE(DashboardTokenMatches("abcdef", "abcdef"));
  EXPECT_FALSE(DashboardTokenMatches("abcdef", "abcdeF"));
  EXPECT_FALSE(DashboardTokenMatches("abcdef", "abcde"));
  EXPECT_FALSE(DashboardTokenMatches("abcdef", "abcdefa"));
  EXPECT_FALSE(DashboardTokenMatches("abcdef", ""));
  EXPECT_FALSE(DashboardTokenMatches("", ""));  // no token is no match
}

TEST(DashboardHostTest, LoopbackTheAddressAndLiteralsOnAWildcard) {
  EXPECT_TRUE(DashboardHostAllowed("127.0.0.1:80", "127.0.0.1"));
  EXPECT_TRUE(DashboardHostAllowed("localhost", "127.0.0.1"));
  EXPECT_TRUE(DashboardHostAllowed("[::1]:9", "127.0.0.1"));
  EXPECT_TRUE(DashboardHostAllowed("10.1.2.3:9", "10.1.2.3"));
  EXPECT_TRUE(DashboardHostAllowed("[fd00::1]:9", "fd00::1"));
  EXPECT_FALSE(DashboardHostAllowed("10.1.2.3:9", "127.0.0.1"));
  EXPECT_FALSE(DashboardHostAllowed("", "127.0.0.1"));
  EXPECT_FALSE(DashboardHostAllowed(":80", "127.0.0.1"));
  EXPECT_FALSE(DashboardHostAllowed("[::1]x", "127.0.0.1"));
  EXPECT_FALSE(DashboardHostAllowed("rebound.example:80", "127.0.0.1"));
  // Listening everywhere: any IP literal names this machine; a name does not.
  EXPECT_TRUE(DashboardHostAllowed("10.1.2.3:9", "0.0.0.0"));
  EXPECT_TRUE(DashboardHostAllowed("[fd00::1]:9", "::"));
  EXPECT_FALSE(DashboardHostAllowed("rebound.example:9", "0.0.0.0"));
}

}  // namespace
}  // namespace shoal::observe
