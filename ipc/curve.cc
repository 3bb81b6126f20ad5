#include "ipc/curve.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zmq.h>

#include <cerrno>
#include <cstdint>
#include <fstream>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "base/log.h"
#include "base/status_macros.h"

namespace shoal::ipc {

// ZMQ_ZAP_ENFORCE_DOMAIN: libzmq 4.3 implements it but declares it only in
// its draft API.
#ifdef ZMQ_ZAP_ENFORCE_DOMAIN
constexpr int kZapEnforceDomainOption = ZMQ_ZAP_ENFORCE_DOMAIN;
#else
constexpr int kZapEnforceDomainOption = 93;
#endif
namespace {

constexpr size_t kZ85KeyChars = 40;
constexpr size_t kBinaryKeyBytes = 32;
// Key files are two short lines; anything much longer is not one.
constexpr off_t kMaxKeyFileBytes = 4096;

absl::Status RequireCurve() {
  if (!zmq_has("curve")) {
    return absl::FailedPreconditionError(
        "libzmq lacks CURVE support (built without libsodium)");
  }
  return absl::OkStatus();
}

absl::Status RequireKey(absl::string_view key, absl::string_view what) {
  if (!IsValidZ85Key(key)) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " is not a 40-character Z85 CURVE key"));
  }
  return absl::OkStatus();
}

// Sets a CURVE key option from Z85 text (passed with its terminator, the form
// zmq_setsockopt documents for Z85 keys).
absl::Status SetKey(void* s, int option, const std::string& z85,
                    const char* name) {
  if (zmq_setsockopt(s, option, z85.c_str(), z85.size() + 1) < 0) {
    return ZmqStatus(absl::StrCat("zmq_setsockopt(", name, ")"), __FILE__,
                     __LINE__);
  }
  return absl::OkStatus();
}

// Whether the public key belongs to the secret key.
absl::StatusOr<bool> KeysMatch(const CurveKeyPair& keys) {
  char derived[kZ85KeyChars + 1];
  SHOAL_ZMQ_CHECK(zmq_curve_public(derived, keys.secret_key.c_str()));
  return absl::string_view(derived, kZ85KeyChars) == keys.public_key;
}

absl::Status CheckPrivateFile(const struct stat& st, const std::string& path) {
  if (!S_ISREG(st.st_mode)) {
    return absl::FailedPreconditionError(
        absl::StrCat(path, " is not a regular file"));
  }
  if ((st.st_mode & 077) != 0) {
    char mode[8];
    snprintf(mode, sizeof(mode), "%04o", st.st_mode & 07777);
    return absl::FailedPreconditionError(absl::StrCat(
        path, " has mode ", mode,
        ": a CURVE key file must not be accessible to group or others "
        "(expected 0600)"));
  }
  return absl::OkStatus();
}

absl::Status WriteAll(int fd, absl::string_view data) {
  while (!data.empty()) {
    const ssize_t n = write(fd, data.data(), data.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return SHOAL_ERRNO("write key file");
    }
    data.remove_prefix(static_cast<size_t>(n));
  }
  return absl::OkStatus();
}

// Strict dotted decimal: four parts of 1-3 digits, no leading zeros, each at
// most 255. Stricter than inet_aton, which reads "0127.0.0.1" as octal.
bool ParseIpv4(absl::string_view host, uint8_t out[4]) {
  std::vector<absl::string_view> parts = absl::StrSplit(host, '.');
  if (parts.size() != 4) return false;
  for (int i = 0; i < 4; ++i) {
    absl::string_view p = parts[i];
    if (p.empty() || p.size() > 3) return false;
    if (p.size() > 1 && p[0] == '0') return false;
    int value = 0;
    for (char c : p) {
      if (!absl::ascii_isdigit(static_cast<unsigned char>(c))) return false;
      value = value * 10 + (c - '0');
    }
    if (value > 255) return false;
    out[i] = static_cast<uint8_t>(value);
  }
  return true;
}

bool IsValidPort(absl::string_view port) {
  if (port == "*") return true;
  if (port.empty() || port.size() > 5) return false;
  for (char c : port) {
    if (!absl::ascii_isdigit(static_cast<unsigned char>(c))) return false;
  }
  int value = 0;
  return absl::SimpleAtoi(port, &value) && value <= 65535;
}

}  // namespace

bool IsValidZ85Key(absl::string_view key) {
  // zmq_z85_decode reads a C string: a NUL inside would end the key early.
  if (key.size() != kZ85KeyChars || absl::StrContains(key, '\0')) return false;
  // It refuses characters outside the alphabet and groups above 2^32 - 1.
  const std::string text(key);
  uint8_t binary[kBinaryKeyBytes];
  return zmq_z85_decode(binary, text.c_str()) != nullptr;
}

absl::StatusOr<CurveKeyPair> GenerateCurveKeyPair() {
  SHOAL_RETURN_IF_ERROR(RequireCurve());
  char public_key[kZ85KeyChars + 1];
  char secret_key[kZ85KeyChars + 1];
  SHOAL_ZMQ_CHECK(zmq_curve_keypair(public_key, secret_key));
  return CurveKeyPair{std::string(public_key, kZ85KeyChars),
                      std::string(secret_key, kZ85KeyChars)};
}

absl::Status WriteKeyPair(const std::string& path, const CurveKeyPair& keys) {
  SHOAL_RETURN_IF_ERROR(RequireKey(keys.public_key, "public key"));
  SHOAL_RETURN_IF_ERROR(RequireKey(keys.secret_key, "secret key"));
  struct stat st;
  if (lstat(path.c_str(), &st) == 0) {
    SHOAL_RETURN_IF_ERROR(CheckPrivateFile(st, path));
  } else if (errno != ENOENT) {
    return SHOAL_ERRNO(absl::StrCat("lstat ", path));
  }

  static std::atomic<uint64_t> counter{0};
  const std::string tmp =
      absl::StrCat(path, ".tmp.", getpid(), ".", counter.fetch_add(1));
  const int fd =
      open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) return SHOAL_ERRNO(absl::StrCat("create ", tmp));
  absl::Status status;
  // The umask can only remove bits; fchmod makes the mode exactly 0600.
  if (fchmod(fd, 0600) != 0) status = SHOAL_ERRNO("fchmod key file");
  if (status.ok()) {
    status = WriteAll(fd, absl::StrCat("public=", keys.public_key,
                                       "\nsecret=", keys.secret_key, "\n"));
  }
  if (status.ok() && fsync(fd) != 0) status = SHOAL_ERRNO("fsync key file");
  if (close(fd) != 0 && status.ok()) status = SHOAL_ERRNO("close key file");
  if (status.ok() && rename(tmp.c_str(), path.c_str()) != 0) {
    status = SHOAL_ERRNO(absl::StrCat("rename to ", path));
  }
  if (!status.ok()) unlink(tmp.c_str());
  return status;
}

absl::StatusOr<CurveKeyPair> ReadKeyPair(const std::string& path) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return SHOAL_ERRNO(absl::StrCat("open ", path));
  std::string content;
  absl::Status status;
  struct stat st;
  if (fstat(fd, &st) != 0) {
    status = SHOAL_ERRNO(absl::StrCat("fstat ", path));
  } else {
    status = CheckPrivateFile(st, path);
  }
  if (status.ok() && st.st_size > kMaxKeyFileBytes) {
    status = absl::InvalidArgumentError(
        absl::StrCat(path, " is too large for a CURVE key file"));
  }
  if (status.ok()) {
    char buf[kMaxKeyFileBytes + 1];
    while (true) {
      const ssize_t n = read(fd, buf, sizeof(buf));
      if (n < 0) {
        if (errno == EINTR) continue;
        status = SHOAL_ERRNO(absl::StrCat("read ", path));
        break;
      }
      if (n == 0) break;
      content.append(buf, static_cast<size_t>(n));
      if (content.size() > static_cast<size_t>(kMaxKeyFileBytes)) {
        status = absl::InvalidArgumentError(
            absl::StrCat(path, " is too large for a CURVE key file"));
        break;
      }
    }
  }
  close(fd);
  if (!status.ok()) return status;

  CurveKeyPair keys;
  bool have_public = false;
  bool have_secret = false;
  for (absl::string_view line : absl::StrSplit(content, '\n')) {
    absl::ConsumeSuffix(&line, "\r");
    if (line.empty()) continue;
    std::string* target;
    bool* seen;
    if (absl::ConsumePrefix(&line, "public=")) {
      target = &keys.public_key;
      seen = &have_public;
    } else if (absl::ConsumePrefix(&line, "secret=")) {
      target = &keys.secret_key;
      seen = &have_secret;
    } else {
      return absl::InvalidArgumentError(absl::StrCat(
          path, ": expected lines \"public=<z85>\" and \"secret=<z85>\""));
    }
    if (*seen) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": key given twice"));
    }
    if (!IsValidZ85Key(line)) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": not a 40-character Z85 CURVE key"));
    }
    *seen = true;
    *target = std::string(line);
  }
  if (!have_public || !have_secret) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": needs both a public= and a secret= line"));
  }
  if (zmq_has("curve")) {
    SHOAL_ASSIGN_OR_RETURN(bool match, KeysMatch(keys));
    if (!match) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": the public key does not match the secret key"));
    }
  }
  return keys;
}

absl::Status ConfigureCurveServer(Socket& socket, const CurveKeyPair& server) {
  SHOAL_RETURN_IF_ERROR(RequireCurve());
  if (!socket) return absl::InvalidArgumentError("empty socket");
  SHOAL_RETURN_IF_ERROR(RequireKey(server.secret_key, "server secret key"));
  const int one = 1;
  SHOAL_ZMQ_CHECK(
      zmq_setsockopt(socket.raw(), ZMQ_CURVE_SERVER, &one, sizeof(one)));
  SHOAL_RETURN_IF_ERROR(SetKey(socket.raw(), ZMQ_CURVE_SECRETKEY,
                               server.secret_key, "CURVE_SECRETKEY"));
  SHOAL_ZMQ_CHECK(zmq_setsockopt(socket.raw(), ZMQ_ZAP_DOMAIN,
                                 kCurveZapDomain.data(),
                                 kCurveZapDomain.size()));
  // Without this, libzmq admits every client when no ZAP handler answers
  // (for compatibility with ZeroMQ < 4.3); with it, nobody.
  SHOAL_ZMQ_CHECK(
      zmq_setsockopt(socket.raw(), kZapEnforceDomainOption, &one, sizeof(one)));
  return absl::OkStatus();
}

absl::Status ConfigureCurveClient(Socket& socket,
                                  absl::string_view server_public_key,
                                  const CurveKeyPair& client) {
  SHOAL_RETURN_IF_ERROR(RequireCurve());
  if (!socket) return absl::InvalidArgumentError("empty socket");
  SHOAL_RETURN_IF_ERROR(RequireKey(server_public_key, "server public key"));
  SHOAL_RETURN_IF_ERROR(RequireKey(client.public_key, "client public key"));
  SHOAL_RETURN_IF_ERROR(RequireKey(client.secret_key, "client secret key"));
  SHOAL_RETURN_IF_ERROR(SetKey(socket.raw(), ZMQ_CURVE_SERVERKEY,
                               std::string(server_public_key),
                               "CURVE_SERVERKEY"));
  SHOAL_RETURN_IF_ERROR(SetKey(socket.raw(), ZMQ_CURVE_PUBLICKEY,
                               client.public_key, "CURVE_PUBLICKEY"));
  SHOAL_RETURN_IF_ERROR(SetKey(socket.raw(), ZMQ_CURVE_SECRETKEY,
                               client.secret_key, "CURVE_SECRETKEY"));
  return absl::OkStatus();
}

// --- ZapAuthenticator ------------------------------------------------------

absl::StatusOr<std::unique_ptr<ZapAuthenticator>> ZapAuthenticator::Start(
    std::vector<std::string> allowed_client_public_keys) {
  for (const std::string& key : allowed_client_public_keys) {
    SHOAL_RETURN_IF_ERROR(RequireKey(key, "allowed client public key"));
  }
  SHOAL_ASSIGN_OR_RETURN(Socket zap, Socket::Create(ZMQ_REP));
  if (zmq_bind(zap.raw(), kEndpoint) < 0) {
    if (zmq_errno() == EADDRINUSE) {
      return absl::AlreadyExistsError(
          "a ZAP handler is already bound on this process's ZeroMQ context "
          "(only one ZapAuthenticator may run at a time)");
    }
    return ZmqStatus(absl::StrCat("bind ", kEndpoint), __FILE__, __LINE__);
  }
  // The stop channel: a PAIR per authenticator, on a name of its own.
  static std::atomic<uint64_t> counter{0};
  const std::string stop_endpoint =
      absl::StrCat("inproc://shoal.zap.stop.", counter.fetch_add(1));
  SHOAL_ASSIGN_OR_RETURN(Socket stop_sender, Socket::Create(ZMQ_PAIR));
  SHOAL_ASSIGN_OR_RETURN(Socket stop_receiver, Socket::Create(ZMQ_PAIR));
  absl::Status status = stop_receiver.Bind(stop_endpoint);
  if (status.ok()) status = stop_sender.Connect(stop_endpoint);
  if (!status.ok()) {
    zmq_unbind(zap.raw(), kEndpoint);  // Best effort; status already failed.
    return status;
  }

  std::unique_ptr<ZapAuthenticator> auth(
      new ZapAuthenticator(allowed_client_public_keys));
  auth->stop_sender_ = std::move(stop_sender);
  // The sockets move to the handler thread, which alone uses them from now
  // on (thread creation is the memory barrier ZeroMQ requires for that).
  auth->thread_ = std::thread([self = auth.get(), zap = std::move(zap),
                               stop = std::move(stop_receiver)]() mutable {
    absl::Status st = self->Run(zap, stop);
    if (!st.ok()) {
      SHOAL_LOG(ERROR,
                "ZAP handler stopped: %s; CURVE handshakes in this process "
                "will now fail",
                st.ToString());
    }
  });
  return auth;
}

ZapAuthenticator::ZapAuthenticator(const std::vector<std::string>& keys)
    : allowed_(keys.begin(), keys.end()) {}

ZapAuthenticator::~ZapAuthenticator() {
  stopping_.store(true);
  absl::Status st = stop_sender_.Send("", /*dontwait=*/true);
  if (!st.ok()) {
    SHOAL_LOG(WARNING,
              "ZAP handler stop message not sent (%s); waiting for "
              "its poll timeout",
              st.ToString());
  }
  if (thread_.joinable()) thread_.join();
  stop_sender_.Close();
}

void ZapAuthenticator::Allow(const std::string& key) {
  MutexLock lock(&mu_);
  allowed_.insert(key);
}

bool ZapAuthenticator::IsAllowed(const std::string& key) const {
  MutexLock lock(&mu_);
  return allowed_.contains(key);
}

void ZapAuthenticator::Decide(const std::vector<std::string>& request,
                              std::string* code, std::string* text,
                              std::string* user_id) const {
  *code = "400";
  user_id->clear();
  // ZAP 1.0 request: version, request id, domain, address, identity,
  // mechanism, credentials...
  if (request.size() < 6) {
    *text = "malformed ZAP request";
    return;
  }
  if (request[0] != "1.0") {
    *text = "unsupported ZAP version";
    return;
  }
  const std::string& mechanism = request[5];
  if (mechanism != "CURVE") {
    *text = absl::StrCat("mechanism ", mechanism, " not allowed");
    return;
  }
  if (request.size() != 7 || request[6].size() != kBinaryKeyBytes) {
    *text = "malformed CURVE credentials";
    return;
  }
  char z85[kZ85KeyChars + 1];
  if (zmq_z85_encode(z85, reinterpret_cast<const uint8_t*>(request[6].data()),
                     kBinaryKeyBytes) == nullptr) {
    *text = "cannot encode client key";
    return;
  }
  const std::string key(z85, kZ85KeyChars);
  if (!IsAllowed(key)) {
    SHOAL_LOG(DEBUG, "ZAP: denied CURVE key %s from %s (domain \"%s\")", key,
              request[3], request[2]);
    *text = "client key not allowed";
    return;
  }
  *code = "200";
  *text = "OK";
  *user_id = key;
}

absl::Status ZapAuthenticator::Run(Socket& zap, Socket& stop) {
  absl::Status status;
  std::vector<std::string> request;
  while (status.ok() && !stopping_.load()) {
    zmq_pollitem_t items[] = {{zap.raw(), 0, ZMQ_POLLIN, 0},
                              {stop.raw(), 0, ZMQ_POLLIN, 0}};
    const int rc = zmq_poll(items, 2, /*timeout=*/100);
    if (rc < 0) {
      if (zmq_errno() == EINTR) continue;
      status = ZmqStatus("zmq_poll", __FILE__, __LINE__);
      break;
    }
    if (items[1].revents & ZMQ_POLLIN) break;
    if (!(items[0].revents & ZMQ_POLLIN)) continue;
    status = zap.Recv(&request);
    if (!status.ok()) break;
    std::string code, text, user_id;
    Decide(request, &code, &text, &user_id);
    const absl::string_view request_id =
        request.size() >= 2 ? absl::string_view(request[1]) : "";
    // ZAP 1.0 reply: version, request id, status code, status text, user id,
    // metadata (empty).
    const absl::string_view reply[] = {"1.0", request_id, code,
                                       text,  user_id,    ""};
    status = zap.Send(reply);
  }
  // Release the endpoint now, not when the reaper gets to the socket, so a
  // new authenticator can bind it as soon as this one is gone.
  if (zmq_unbind(zap.raw(), kEndpoint) < 0 && status.ok()) {
    status = ZmqStatus("zmq_unbind(zap)", __FILE__, __LINE__);
  }
  zap.Close();
  stop.Close();
  return status;
}

// --- Endpoints ---------------------------------------------------------------

bool IsLoopbackEndpoint(absl::string_view endpoint) {
  if (absl::StartsWith(endpoint, "ipc://") ||
      absl::StartsWith(endpoint, "inproc://")) {
    return true;
  }
  if (!absl::ConsumePrefix(&endpoint, "tcp://")) return false;
  // "tcp://source;destination" binds the source side to an address of its
  // own: not something this check reasons about.
  if (absl::StrContains(endpoint, ';')) return false;
  absl::string_view host;
  absl::string_view port;
  if (absl::ConsumePrefix(&endpoint, "[")) {
    const size_t close = endpoint.find("]:");
    if (close == absl::string_view::npos) return false;
    host = endpoint.substr(0, close);
    port = endpoint.substr(close + 2);
    if (!IsValidPort(port)) return false;
    // Only the canonical form; "::1" written out longhand is rare enough to
    // refuse rather than parse.
    return host == "::1";
  }
  const size_t colon = endpoint.rfind(':');
  if (colon == absl::string_view::npos) return false;
  host = endpoint.substr(0, colon);
  port = endpoint.substr(colon + 1);
  if (!IsValidPort(port)) return false;
  if (absl::EqualsIgnoreCase(host, "localhost")) return true;
  uint8_t octets[4];
  return ParseIpv4(host, octets) && octets[0] == 127;
}

absl::StatusOr<std::vector<std::string>> ReadPublicKeys(
    const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read ", path));
  std::vector<std::string> keys;
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    absl::string_view key = absl::StripAsciiWhitespace(line);
    if (key.empty() || key[0] == '#') continue;
    if (absl::StartsWith(key, "secret=")) {
      return absl::InvalidArgumentError(absl::StrCat(
          path, " line ", n,
          " is a secret key: list only public keys (the public= line)"));
    }
    absl::ConsumePrefix(&key, "public=");
    if (!IsValidZ85Key(key)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "not a Z85 public key in ", path, " line ", n, ": ", line));
    }
    keys.emplace_back(key);
  }
  return keys;
}

}  // namespace shoal::ipc
