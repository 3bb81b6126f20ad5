// A plain HTTP/1.0 GET over loopback TCP, for tests of the node's HTTP
// endpoints (no client library: the request is what curl would send).
#ifndef SHOAL_TESTS_OBSERVE_HTTP_GET_H_
#define SHOAL_TESTS_OBSERVE_HTTP_GET_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace shoal::testing {

struct HttpResponse {
  int status = 0;    // 200, 403, ...
  std::string body;  // after the headers
};

// GET http://HOST:PORT`path`, where `host_port` is "127.0.0.1:PORT".
// Errors: Unavailable (connect or I/O failed, or no reply within `timeout`),
// DataLoss (not an HTTP reply).
absl::StatusOr<HttpResponse> HttpGet(
    const std::string& host_port, const std::string& path,
    absl::Duration timeout = absl::Seconds(10));

}  // namespace shoal::testing

#endif  // SHOAL_TESTS_OBSERVE_HTTP_GET_H_
