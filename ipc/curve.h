// ZeroMQ CURVE security for shoal's TCP frontend: key pairs and key files,
// server/client socket configuration, and a ZAP handler that admits only
// allow-listed client keys.
//
// Why the ZAP handler is not optional: a CURVE server without a ZAP handler
// encrypts the connection but accepts ANY client key (see docs/architecture.md,
// "ZeroMQ and the wire"). Bind a CURVE server only while a ZapAuthenticator is
// running in this process.
//
//   auto auth = ZapAuthenticator::Start({client_keys.public_key});
//   auto server = Socket::Create(ZMQ_ROUTER);
//   ConfigureCurveServer(*server, server_keys);   // before Bind
//   server->Bind("tcp://0.0.0.0:5555");
//
//   auto client = Socket::Create(ZMQ_DEALER);
//   ConfigureCurveClient(*client, server_keys.public_key, client_keys);
//   client->Connect(endpoint);                     // after configuring
//
// A denied client's socket sees no error: ZeroMQ drops the connection for
// good (a DEALER then blocks on send), and with a wrong server key it
// retries in the background with its messages queued unsent. RpcChannel
// turns both into an error within the call's timeout (PermissionDenied for
// a refused key, from a socket monitor's handshake events).
#ifndef SHOAL_IPC_CURVE_H_
#define SHOAL_IPC_CURVE_H_

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "base/mutex.h"
#include "ipc/socket.h"

namespace shoal::ipc {

// The ZAP domain that ConfigureCurveServer sets on server sockets.
inline constexpr absl::string_view kCurveZapDomain = "shoal";

// A CURVE key pair as Z85 text (40 characters each, no terminator).
struct CurveKeyPair {
  std::string public_key;
  std::string secret_key;
};

// Whether `key` is a 40-character Z85 encoding of a 32-byte key: only
// characters of the Z85 alphabet, and no 5-character group above 2^32 - 1.
bool IsValidZ85Key(absl::string_view key);

// A fresh random key pair (zmq_curve_keypair).
// Errors: FailedPrecondition if libzmq was built without CURVE (libsodium);
// other codes from ZmqStatus if key generation fails.
absl::StatusOr<CurveKeyPair> GenerateCurveKeyPair();

// Writes `keys` to `path` as two lines, "public=<z85>" and "secret=<z85>",
// in a file with mode 0600. The file is written under a temporary name in the
// same directory and renamed into place, so readers never see half a file.
// Errors: InvalidArgument if either key is not valid Z85; FailedPrecondition
// if `path` exists and is not a regular file or has any group/other permission
// bit set (a secret that may already have leaked is not silently reused);
// errno-derived codes (NotFound, PermissionDenied, ...) from the file system.
absl::Status WriteKeyPair(const std::string& path, const CurveKeyPair& keys);

// Reads a file written by WriteKeyPair. Lines may come in either order and may
// end in "\n" or "\r\n"; blank lines are ignored.
// Errors: NotFound if `path` does not exist; FailedPrecondition if it is not a
// regular file or has any group/other permission bit set (group/world
// readable); InvalidArgument if the content is malformed (unknown or repeated
// line, missing key, invalid Z85, file over 4 KiB) or the public key does not
// belong to the secret key; other errno-derived codes from the file system.
absl::StatusOr<CurveKeyPair> ReadKeyPair(const std::string& path);

// Reads a file of admitted client public keys (`shoal start --client-keys`):
// one per line, either the bare Z85 key or the `public=<key>` line of a
// key-pair file; blank lines and lines starting with '#' are skipped.
// Errors: NotFound (unreadable), InvalidArgument naming the line (not a key,
// or a `secret=` line: a secret key must never be handed over).
absl::StatusOr<std::vector<std::string>> ReadPublicKeys(
    const std::string& path);

// Makes `socket` a CURVE server with `server`'s secret key, sets the ZAP
// domain to kCurveZapDomain and ZMQ_ZAP_ENFORCE_DOMAIN, so that without a ZAP
// handler no client is admitted. Call before Bind (ZeroMQ applies security
// options to connections made afterwards). Run a ZapAuthenticator in this
// process, or every handshake fails.
// Errors: InvalidArgument if `server.secret_key` is not valid Z85 or the socket
// is empty; FailedPrecondition if libzmq lacks CURVE; ZmqStatus codes if a
// zmq_setsockopt fails.
absl::Status ConfigureCurveServer(Socket& socket, const CurveKeyPair& server);

// Makes `socket` a CURVE client that expects the server key
// `server_public_key` and authenticates with `client`. Call before Connect.
// Errors: InvalidArgument if any key is not valid Z85 or the socket is empty;
// FailedPrecondition if libzmq lacks CURVE; ZmqStatus codes if a
// zmq_setsockopt fails.
absl::Status ConfigureCurveClient(Socket& socket,
                                  absl::string_view server_public_key,
                                  const CurveKeyPair& client);

// A ZAP 1.0 handler (rfc.zeromq.org/spec/27) for ProcessContext(): a thread
// bound to "inproc://zeromq.zap.01" that answers "200" only to CURVE requests
// whose client public key is in the allow-list, and "400" to everything else:
// unknown keys, other mechanisms (NULL, PLAIN), malformed requests. The same
// policy applies whatever the ZAP domain, so a socket with another domain
// cannot widen access. The user id in an accepted reply is the client's Z85
// public key (readable as the "User-Id" message property).
//
// ZeroMQ consults the handler during the handshake of every CURVE connection
// on this context (and of NULL connections whose socket sets a ZAP domain).
// Sockets on other contexts are not covered.
class ZapAuthenticator {
 public:
  // The ZAP endpoint libzmq connects to.
  static constexpr char kEndpoint[] = "inproc://zeromq.zap.01";

  // Binds the ZAP endpoint and starts the handler thread, allowing the given
  // Z85 client public keys.
  // Errors: InvalidArgument if a key is not valid Z85; AlreadyExists if a ZAP
  // handler is already bound on ProcessContext() (only one per context);
  // ZmqStatus codes if a socket cannot be created or bound.
  static absl::StatusOr<std::unique_ptr<ZapAuthenticator>> Start(
      std::vector<std::string> allowed_client_public_keys);

  ZapAuthenticator(const ZapAuthenticator&) = delete;
  ZapAuthenticator& operator=(const ZapAuthenticator&) = delete;

  // Unbinds the endpoint and joins the handler thread. Handshakes in flight
  // afterwards get no ZAP answer and fail; a new authenticator may be started.
  ~ZapAuthenticator();

  // Adds a Z85 client public key to the allow-list; connections whose
  // handshake starts afterwards are admitted (including background reconnects
  // of a client denied earlier). An invalid key never matches. Thread-safe.
  void Allow(const std::string& key) ABSL_LOCKS_EXCLUDED(mu_);

  // Whether `key` is in the allow-list. Thread-safe.
  bool IsAllowed(const std::string& key) const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  explicit ZapAuthenticator(const std::vector<std::string>& keys);

  // The handler loop: answers requests until a message arrives on `stop` or
  // stopping_ is set. Unbinds the ZAP endpoint before returning.
  absl::Status Run(Socket& zap, Socket& stop);
  // Builds the reply frames (status code, text, user id) for one request.
  void Decide(const std::vector<std::string>& request, std::string* code,
              std::string* text, std::string* user_id) const
      ABSL_LOCKS_EXCLUDED(mu_);

  mutable Mutex mu_;
  absl::flat_hash_set<std::string> allowed_ ABSL_GUARDED_BY(mu_);
  // Checked by the handler thread at least every 100 ms: a fallback in case
  // the stop message cannot be sent.
  std::atomic<bool> stopping_{false};
  // The owner's end of the stop channel; the thread owns the other end and the
  // ZAP socket.
  Socket stop_sender_;
  std::thread thread_;
};

// Whether `endpoint` only reaches this machine: ipc://, inproc://, and tcp://
// to 127.a.b.c (strict dotted decimal), localhost or [::1], each with a port
// (digits or "*"). False for wildcard or other addresses (tcp://0.0.0.0:...,
// tcp://*:...), interface names, source-address forms ("tcp://a;b:port") and
// other transports. Use it to require CURVE for anything non-loopback.
bool IsLoopbackEndpoint(absl::string_view endpoint);

}  // namespace shoal::ipc

#endif  // SHOAL_IPC_CURVE_H_
