#include "tests/observe/http_get.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace shoal::testing {

absl::StatusOr<HttpResponse> HttpGet(const std::string& host_port,
                                     const std::string& path,
                                     absl::Duration timeout) {
  const std::vector<std::string> parts = absl::StrSplit(host_port, ':');
  int port = 0;
  if (parts.size() != 2 || !absl::SimpleAtoi(parts[1], &port))
    return absl::InvalidArgumentError(absl::StrCat("bad address ", host_port));
  sockaddr_in a = {};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  if (inet_pton(AF_INET, parts[0].c_str(), &a.sin_addr) != 1)
    return absl::InvalidArgumentError(absl::StrCat("bad host ", host_port));
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return absl::UnavailableError("socket failed");
  const absl::Time deadline = absl::Now() + timeout;
  std::string got;
  absl::Status failed;
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    failed = absl::UnavailableError(
        absl::StrCat("connect ", host_port, ": ", std::strerror(errno)));
  } else {
    const std::string req = absl::StrCat(
        "GET ", path, " HTTP/1.0\r\nHost: ", host_port, "\r\n\r\n");
    if (write(fd, req.data(), req.size()) != static_cast<ssize_t>(req.size())) {
      failed = absl::UnavailableError(absl::StrCat("write to ", host_port));
    }
    while (failed.ok()) {
      const int64_t left = absl::ToInt64Milliseconds(deadline - absl::Now());
      pollfd p = {fd, POLLIN, 0};
      if (left <= 0 || poll(&p, 1, static_cast<int>(left)) <= 0) {
        failed = absl::UnavailableError(
            absl::StrCat("no reply from ", host_port, path, " in time"));
        break;
      }
      char buf[8192];
      const ssize_t n = read(fd, buf, sizeof(buf));
      if (n < 0) {
        failed = absl::UnavailableError(absl::StrCat("read ", host_port));
      } else if (n == 0) {
        break;
      } else {
        got.append(buf, static_cast<size_t>(n));
      }
    }
  }
  close(fd);
  if (!failed.ok()) return failed;
  HttpResponse r;
  const size_t space = got.find(' ');
  const size_t end = got.find("\r\n\r\n");
  if (!absl::StartsWith(got, "HTTP/") || space == std::string::npos ||
      end == std::string::npos ||
      !absl::SimpleAtoi(got.substr(space + 1, 3), &r.status)) {
    return absl::DataLossError(absl::StrCat(
        "not an HTTP reply from ", host_port, ": ", got.substr(0, 200)));
  }
  r.body = got.substr(end + 4);
  return r;
}

}  // namespace shoal::testing
