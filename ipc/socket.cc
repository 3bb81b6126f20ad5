#include "ipc/socket.h"

#include <unistd.h>
#include <zmq.h>

#include <atomic>
#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "base/mutex.h"

namespace shoal::ipc {
namespace {

absl::StatusCode ZmqErrnoToCode(int err) {
  switch (err) {
    case EAGAIN:
    case EHOSTUNREACH:
    case ETERM:
    case ECONNREFUSED:
      return absl::StatusCode::kUnavailable;
    case EINVAL:
    case EPROTONOSUPPORT:
    case ENOCOMPATPROTO:
      return absl::StatusCode::kInvalidArgument;
    case EADDRINUSE:
      return absl::StatusCode::kAlreadyExists;
    case EADDRNOTAVAIL:
    case ENODEV:
      return absl::StatusCode::kNotFound;
    case EMFILE:
    case ENOMEM:
      return absl::StatusCode::kResourceExhausted;
    case EINTR:
      return absl::StatusCode::kCancelled;
    default:
      return absl::StatusCode::kInternal;
  }
}

absl::Status SetInt(void* s, int option, int value, const char* name) {
  if (zmq_setsockopt(s, option, &value, sizeof(value)) < 0) {
    return ZmqStatus(absl::StrCat("zmq_setsockopt(", name, ")"), __FILE__,
                     __LINE__);
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ZmqStatus(absl::string_view what, const char* file, int line) {
  const int err = zmq_errno();
  const char* base = std::strrchr(file, '/');
  return absl::Status(ZmqErrnoToCode(err),
                      absl::StrCat(what, ": ", zmq_strerror(err), " [",
                                   base ? base + 1 : file, ":", line, "]"));
}

namespace {

Mutex g_context_mu;
void* g_context ABSL_GUARDED_BY(g_context_mu) = nullptr;
pid_t g_context_owner ABSL_GUARDED_BY(g_context_mu) = 0;
int g_io_threads ABSL_GUARDED_BY(g_context_mu) = 1;

}  // namespace

void* ProcessContext() {
  MutexLock lock(&g_context_mu);
  const pid_t pid = getpid();
  if (g_context == nullptr || g_context_owner != pid) {
    // In a forked child the parent's context (and its I/O threads) is not
    // ours: leave it untouched and start afresh.
    g_context = zmq_ctx_new();
    g_context_owner = pid;
    zmq_ctx_set(g_context, ZMQ_BLOCKY, 0);
    zmq_ctx_set(g_context, ZMQ_IO_THREADS, g_io_threads);
  }
  return g_context;
}

absl::Status SetProcessIoThreads(int n) {
  if (n < 1 || n > 64) {
    return absl::InvalidArgumentError(
        absl::StrCat("ZeroMQ I/O threads must be between 1 and 64, got ", n));
  }
  MutexLock lock(&g_context_mu);
  if (g_context != nullptr && g_context_owner == getpid()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "this process's ZeroMQ context runs already (with ", g_io_threads,
        " I/O threads): set them before its first socket"));
  }
  g_io_threads = n;
  return absl::OkStatus();
}

absl::StatusOr<Socket> Socket::Create(int type, const SocketOptions& options) {
  void* s = zmq_socket(ProcessContext(), type);
  if (s == nullptr) return ZmqStatus("zmq_socket", __FILE__, __LINE__);
  Socket socket(s);
  absl::Status st = SetInt(s, ZMQ_SNDHWM, options.send_hwm, "SNDHWM");
  if (st.ok()) st = SetInt(s, ZMQ_RCVHWM, options.recv_hwm, "RCVHWM");
  if (st.ok()) st = SetInt(s, ZMQ_LINGER, options.linger_ms, "LINGER");
  if (st.ok()) {
    int64_t max = options.max_msg_bytes;
    if (zmq_setsockopt(s, ZMQ_MAXMSGSIZE, &max, sizeof(max)) < 0) {
      st = ZmqStatus("zmq_setsockopt(MAXMSGSIZE)", __FILE__, __LINE__);
    }
  }
  if (st.ok() && options.tcp_keepalive) {
    st = SetInt(s, ZMQ_TCP_KEEPALIVE, 1, "TCP_KEEPALIVE");
    if (st.ok())
      st = SetInt(s, ZMQ_TCP_KEEPALIVE_IDLE, 30, "TCP_KEEPALIVE_IDLE");
  }
  if (st.ok() && type == ZMQ_ROUTER && options.router_mandatory) {
    st = SetInt(s, ZMQ_ROUTER_MANDATORY, 1, "ROUTER_MANDATORY");
  }
  if (st.ok() && !options.routing_id.empty()) {
    if (zmq_setsockopt(s, ZMQ_ROUTING_ID, options.routing_id.data(),
                       options.routing_id.size()) < 0) {
      st = ZmqStatus("zmq_setsockopt(ROUTING_ID)", __FILE__, __LINE__);
    }
  }
  if (!st.ok()) return st;
  return socket;
}

Socket::Socket(Socket&& other) noexcept : socket_(other.socket_) {
  other.socket_ = nullptr;
}

Socket& Socket::operator=(Socket&& other) noexcept {
  if (this != &other) {
    Close();
    socket_ = other.socket_;
    other.socket_ = nullptr;
  }
  return *this;
}

Socket::~Socket() { Close(); }

void Socket::Close() {
  if (socket_ != nullptr) {
    zmq_close(socket_);
    socket_ = nullptr;
  }
}

absl::Status Socket::Bind(const std::string& endpoint) {
  if (zmq_bind(socket_, endpoint.c_str()) < 0) {
    return ZmqStatus(absl::StrCat("bind ", endpoint), __FILE__, __LINE__);
  }
  return absl::OkStatus();
}

absl::Status Socket::Connect(const std::string& endpoint) {
  if (zmq_connect(socket_, endpoint.c_str()) < 0) {
    return ZmqStatus(absl::StrCat("connect ", endpoint), __FILE__, __LINE__);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> Socket::LastEndpoint() const {
  char buf[1024];
  size_t size = sizeof(buf);
  if (zmq_getsockopt(socket_, ZMQ_LAST_ENDPOINT, buf, &size) < 0) {
    return ZmqStatus("zmq_getsockopt(LAST_ENDPOINT)", __FILE__, __LINE__);
  }
  return std::string(buf, strnlen(buf, size));
}

absl::Status Socket::Send(absl::Span<const absl::string_view> frames,
                          bool dontwait) {
  for (size_t i = 0; i < frames.size(); ++i) {
    int flags = (i + 1 < frames.size() ? ZMQ_SNDMORE : 0) |
                (dontwait ? ZMQ_DONTWAIT : 0);
    int rc;
    do {
      rc = zmq_send(socket_, frames[i].data(), frames[i].size(), flags);
    } while (rc < 0 && zmq_errno() == EINTR);
    if (rc < 0) {
      if (zmq_errno() == EHOSTUNREACH) {
        return absl::UnavailableError("peer gone (unknown routing id)");
      }
      return ZmqStatus("zmq_send", __FILE__, __LINE__);
    }
  }
  return absl::OkStatus();
}

long PollTimeoutMs(absl::Duration timeout) {
  if (timeout == absl::InfiniteDuration()) return -1;
  if (timeout <= absl::ZeroDuration()) return 0;
  return static_cast<long>(absl::ToInt64Milliseconds(
      timeout + absl::Milliseconds(1) - absl::Nanoseconds(1)));
}

absl::StatusOr<bool> Socket::Poll(absl::Duration timeout) {
  zmq_pollitem_t item = {socket_, 0, ZMQ_POLLIN, 0};
  const absl::Time deadline = absl::Now() + timeout;
  while (true) {
    int rc = zmq_poll(&item, 1, PollTimeoutMs(timeout));
    if (rc >= 0) return rc > 0;
    if (zmq_errno() != EINTR) return ZmqStatus("zmq_poll", __FILE__, __LINE__);
    if (timeout != absl::InfiniteDuration()) {
      timeout = std::max(absl::ZeroDuration(), deadline - absl::Now());
    }
  }
}

absl::Status Socket::Recv(std::vector<std::string>* frames,
                          absl::Duration timeout) {
  frames->clear();
  if (timeout != absl::InfiniteDuration()) {
    absl::StatusOr<bool> ready = Poll(timeout);
    if (!ready.ok()) return ready.status();
    if (!*ready)
      return absl::DeadlineExceededError("no reply within the timeout");
  }
  zmq_msg_t msg;
  zmq_msg_init(&msg);
  while (true) {
    int rc = zmq_msg_recv(&msg, socket_, 0);
    if (rc < 0) {
      if (zmq_errno() == EINTR) continue;
      absl::Status s = ZmqStatus("zmq_msg_recv", __FILE__, __LINE__);
      zmq_msg_close(&msg);
      return s;
    }
    frames->emplace_back(static_cast<const char*>(zmq_msg_data(&msg)),
                         zmq_msg_size(&msg));
    if (!zmq_msg_more(&msg)) break;
  }
  zmq_msg_close(&msg);
  return absl::OkStatus();
}

}  // namespace shoal::ipc
