#include "ipc/curve.h"

#include <sys/stat.h>
#include <unistd.h>
#include <zmq.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "base/temp_dir.h"
#include "gtest/gtest.h"
#include "ipc/socket.h"

namespace shoal::ipc {
namespace {

// How long a denied client waits to be sure no reply comes.
constexpr absl::Duration kDenyWait = absl::Milliseconds(300);

// A path in this process's own folder (mkdtemp, under $TEST_TMPDIR when
// set), removed at exit.
std::string TempPath(const std::string& name) {
  static std::atomic<int> counter{0};
  static const TempDir dir = [] {
    const char* parent = getenv("TEST_TMPDIR");
    absl::StatusOr<TempDir> made =
        TempDir::Create("curve_test.", parent != nullptr ? parent : "");
    if (!made.ok()) {
      std::fprintf(stderr, "%s\n", made.status().ToString().c_str());
      std::abort();
    }
    return *std::move(made);
  }();
  return dir.File(absl::StrCat(counter.fetch_add(1), ".", name));
}

void WriteRaw(const std::string& path, const std::string& content,
              mode_t mode) {
  unlink(path.c_str());
  {
    std::ofstream out(path);
    out << content;
  }
  ASSERT_EQ(chmod(path.c_str(), mode), 0);
}

mode_t ModeOf(const std::string& path) {
  struct stat st;
  EXPECT_EQ(stat(path.c_str(), &st), 0);
  return st.st_mode & 07777;
}

// A CURVE ROUTER on tcp://127.0.0.1:* that echoes every request back, run on a
// thread of its own until destroyed.
class EchoServer {
 public:
  explicit EchoServer(const CurveKeyPair& keys) {
    auto socket = Socket::Create(ZMQ_ROUTER);
    EXPECT_TRUE(socket.ok()) << socket.status();
    EXPECT_TRUE(ConfigureCurveServer(*socket, keys).ok());
    EXPECT_TRUE(socket->Bind("tcp://127.0.0.1:*").ok());
    endpoint_ = *socket->LastEndpoint();
    thread_ = std::thread([this, s = std::move(*socket)]() mutable {
      std::vector<std::string> frames;
      while (!stop_.load()) {
        absl::Status st = s.Recv(&frames, absl::Milliseconds(20));
        if (absl::IsDeadlineExceeded(st)) continue;
        if (!st.ok()) break;
        std::vector<absl::string_view> reply(frames.begin(), frames.end());
        (void)s.Send(reply);
      }
    });
  }
  ~EchoServer() {
    stop_.store(true);
    thread_.join();
  }
  const std::string& endpoint() const { return endpoint_; }

 private:
  std::string endpoint_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

// Sends "ping" from `client` and waits up to `timeout` for the echo.
absl::Status PingThrough(Socket& client, absl::Duration timeout) {
  absl::Status st = client.Send("ping");
  if (!st.ok()) return st;
  std::vector<std::string> frames;
  st = client.Recv(&frames, timeout);
  if (!st.ok()) return st;
  if (frames.size() != 1 || frames[0] != "ping") {
    return absl::InternalError("unexpected reply");
  }
  return absl::OkStatus();
}

Socket CurveClient(const std::string& endpoint, const CurveKeyPair& server,
                   const CurveKeyPair& client) {
  auto socket = Socket::Create(ZMQ_DEALER);
  EXPECT_TRUE(socket.ok());
  EXPECT_TRUE(ConfigureCurveClient(*socket, server.public_key, client).ok());
  EXPECT_TRUE(socket->Connect(endpoint).ok());
  return std::move(*socket);
}

TEST(CurveKeysTest, GeneratedKeysAreValidZ85) {
  auto keys = GenerateCurveKeyPair();
  ASSERT_TRUE(keys.ok()) << keys.status();
  EXPECT_EQ(keys->public_key.size(), 40u);
  EXPECT_EQ(keys->secret_key.size(), 40u);
  EXPECT_TRUE(IsValidZ85Key(keys->public_key));
  EXPECT_TRUE(IsValidZ85Key(keys->secret_key));
  EXPECT_NE(keys->public_key, keys->secret_key);
  auto other = GenerateCurveKeyPair();
  ASSERT_TRUE(other.ok());
  EXPECT_NE(keys->public_key, other->public_key);
}

TEST(CurveKeysTest, IsValidZ85Key) {
  EXPECT_TRUE(IsValidZ85Key("rq:rM>}U?@Lns47E1%kR.o@n%FcmmsL/@{H8]yf7"));
  EXPECT_FALSE(IsValidZ85Key(""));
  EXPECT_FALSE(IsValidZ85Key("rq:rM>}U?@Lns47E1%kR.o@n%FcmmsL/@{H8]yf"));
  EXPECT_FALSE(IsValidZ85Key("rq:rM>}U?@Lns47E1%kR.o@n%FcmmsL/@{H8]yf7x"));
  // '~' and '"' are not in the Z85 alphabet.
  EXPECT_FALSE(IsValidZ85Key("rq:rM>}U?@Lns47E1%kR.o@n%FcmmsL/@{H8]yf~"));
  EXPECT_FALSE(IsValidZ85Key("\"q:rM>}U?@Lns47E1%kR.o@n%FcmmsL/@{H8]yf7"));
  // "#####" is 85^5 - 1 > 2^32 - 1: no 4-byte group encodes to it.
  EXPECT_FALSE(IsValidZ85Key("#####Lns47E1%kR.o@n%FcmmsL/@{H8]yf7rq:rM"));
  // 40 characters, but a space, a control character, a byte past ASCII or a
  // NUL (which would end the key for C code) inside.
  EXPECT_FALSE(IsValidZ85Key("rq:rM>}U?@Lns47E1%kR o@n%FcmmsL/@{H8]yf7"));
  EXPECT_FALSE(IsValidZ85Key("rq:rM>}U?@Lns47E1%kR\to@n%FcmmsL/@{H8]yf7"));
  EXPECT_FALSE(IsValidZ85Key("rq:rM>}U?@Lns47E1%kR\xffo@n%FcmmsL/@{H8]yf7"));
  EXPECT_FALSE(IsValidZ85Key(
      absl::string_view("rq:rM>}U?@Lns47E1%kR.o@n%FcmmsL/@{H\0]yf7", 40)));
}

TEST(CurveKeysTest, WriteReadRoundTripWithMode0600) {
  auto keys = GenerateCurveKeyPair();
  ASSERT_TRUE(keys.ok());
  const std::string path = TempPath("keys");
  ASSERT_TRUE(WriteKeyPair(path, *keys).ok());
  EXPECT_EQ(ModeOf(path), 0600u);
  std::ifstream in(path);
  std::string content((std::istreambuf_iterator<char>(in)),
                      std::istreambuf_iterator<char>());
  EXPECT_EQ(content, absl::StrCat("public=", keys->public_key,
                                  "\nsecret=", keys->secret_key, "\n"));
  auto read = ReadKeyPair(path);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->public_key, keys->public_key);
  EXPECT_EQ(read->secret_key, keys->secret_key);

  // Overwriting a private file is fine.
  auto other = GenerateCurveKeyPair();
  ASSERT_TRUE(WriteKeyPair(path, *other).ok());
  EXPECT_EQ(ReadKeyPair(path)->public_key, other->public_key);
  unlink(path.c_str());
}

TEST(CurveKeysTest, LoosePermissionsAreRefused) {
  auto keys = GenerateCurveKeyPair();
  ASSERT_TRUE(keys.ok());
  const std::string path = TempPath("loose");
  ASSERT_TRUE(WriteKeyPair(path, *keys).ok());
  ASSERT_EQ(chmod(path.c_str(), 0644), 0);
  EXPECT_EQ(ReadKeyPair(path).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(WriteKeyPair(path, *keys).code(),
            absl::StatusCode::kFailedPrecondition);
  ASSERT_EQ(chmod(path.c_str(), 0640), 0);
  EXPECT_EQ(ReadKeyPair(path).status().code(),
            absl::StatusCode::kFailedPrecondition);
  ASSERT_EQ(chmod(path.c_str(), 0600), 0);
  EXPECT_TRUE(ReadKeyPair(path).ok());
  unlink(path.c_str());
}

TEST(CurveKeysTest, MissingAndMalformedFiles) {
  EXPECT_EQ(ReadKeyPair(TempPath("absent")).status().code(),
            absl::StatusCode::kNotFound);
  auto keys = GenerateCurveKeyPair();
  auto other = GenerateCurveKeyPair();
  ASSERT_TRUE(keys.ok() && other.ok());
  const std::string path = TempPath("bad");
  const std::string pub = "public=" + keys->public_key + "\n";
  const std::string sec = "secret=" + keys->secret_key + "\n";
  for (const std::string& content : {
           std::string(""),
           pub,                                         // no secret
           pub + sec + sec,                             // repeated
           pub + sec + "extra=1\n",                     // unknown line
           "public=short\n" + sec,                      // bad Z85
           "public=" + other->public_key + "\n" + sec,  // mismatched pair
           pub + sec + std::string(5000, '\n'),         // too large
       }) {
    WriteRaw(path, content, 0600);
    EXPECT_EQ(ReadKeyPair(path).status().code(),
              absl::StatusCode::kInvalidArgument)
        << content.substr(0, 100);
  }
  // Either order, CRLF and blank lines are accepted.
  WriteRaw(path,
           "\nsecret=" + keys->secret_key + "\r\npublic=" + keys->public_key +
               "\r\n",
           0600);
  auto read = ReadKeyPair(path);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->public_key, keys->public_key);
  unlink(path.c_str());
  EXPECT_EQ(WriteKeyPair(path, {"nope", keys->secret_key}).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(ZapAuthenticatorTest, OnlyOnePerContextAndRestartable) {
  auto first = ZapAuthenticator::Start({});
  ASSERT_TRUE(first.ok()) << first.status();
  auto second = ZapAuthenticator::Start({});
  EXPECT_EQ(second.status().code(), absl::StatusCode::kAlreadyExists);
  first->reset();
  auto third = ZapAuthenticator::Start({});
  EXPECT_TRUE(third.ok()) << third.status();
  EXPECT_EQ(ZapAuthenticator::Start({"not a key"}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// Talks ZAP 1.0 to the handler directly, as libzmq would.
TEST(ZapAuthenticatorTest, SpeaksZap10) {
  auto allowed = GenerateCurveKeyPair();
  auto denied = GenerateCurveKeyPair();
  ASSERT_TRUE(allowed.ok() && denied.ok());
  auto auth = ZapAuthenticator::Start({allowed->public_key});
  ASSERT_TRUE(auth.ok()) << auth.status();
  auto req = Socket::Create(ZMQ_REQ);
  ASSERT_TRUE(req.ok());
  ASSERT_TRUE(req->Connect(ZapAuthenticator::kEndpoint).ok());

  auto ask = [&](const std::string& version, const std::string& mechanism,
                 const std::string& z85_key) {
    std::string binary(32, '\0');
    if (!z85_key.empty()) {
      EXPECT_NE(zmq_z85_decode(reinterpret_cast<uint8_t*>(&binary[0]),
                               z85_key.c_str()),
                nullptr);
    }
    std::vector<absl::string_view> request = {version,     "42", "shoal",
                                              "127.0.0.1", "",   mechanism};
    if (mechanism == "CURVE") request.push_back(binary);
    EXPECT_TRUE(req->Send(request).ok());
    std::vector<std::string> reply;
    EXPECT_TRUE(req->Recv(&reply, absl::Seconds(5)).ok());
    return reply;
  };

  std::vector<std::string> reply = ask("1.0", "CURVE", allowed->public_key);
  ASSERT_EQ(reply.size(), 6u);
  EXPECT_EQ(reply[0], "1.0");
  EXPECT_EQ(reply[1], "42");
  EXPECT_EQ(reply[2], "200");
  EXPECT_EQ(reply[4], allowed->public_key);
  EXPECT_EQ(reply[5], "");

  reply = ask("1.0", "CURVE", denied->public_key);
  ASSERT_EQ(reply.size(), 6u);
  EXPECT_EQ(reply[1], "42");
  EXPECT_EQ(reply[2], "400");
  EXPECT_EQ(reply[4], "");

  reply = ask("1.0", "NULL", "");
  ASSERT_EQ(reply.size(), 6u);
  EXPECT_EQ(reply[2], "400");
  reply = ask("1.0", "PLAIN", "");
  ASSERT_EQ(reply.size(), 6u);
  EXPECT_EQ(reply[2], "400");
  reply = ask("2.0", "CURVE", allowed->public_key);
  ASSERT_EQ(reply.size(), 6u);
  EXPECT_EQ(reply[0], "1.0");
  EXPECT_EQ(reply[2], "400");
}

TEST(ZapAuthenticatorTest, CurveServerAdmitsOnlyAllowedClients) {
  auto server_keys = GenerateCurveKeyPair();
  auto key_a = GenerateCurveKeyPair();
  auto key_b = GenerateCurveKeyPair();
  ASSERT_TRUE(server_keys.ok() && key_a.ok() && key_b.ok());
  auto auth = ZapAuthenticator::Start({key_a->public_key});
  ASSERT_TRUE(auth.ok()) << auth.status();
  EchoServer server(*server_keys);

  // Allowed key: echoed.
  Socket a = CurveClient(server.endpoint(), *server_keys, *key_a);
  EXPECT_TRUE(PingThrough(a, absl::Seconds(5)).ok());

  // Denied key, a plain client and a client expecting another server key: no
  // reply. Checked concurrently so the test waits kDenyWait once.
  Socket b = CurveClient(server.endpoint(), *server_keys, *key_b);
  auto plain = Socket::Create(ZMQ_DEALER);
  ASSERT_TRUE(plain.ok());
  ASSERT_TRUE(plain->Connect(server.endpoint()).ok());
  auto impostor_server = GenerateCurveKeyPair();
  Socket wrong_server =
      CurveClient(server.endpoint(), *impostor_server, *key_a);
  for (Socket* s : {&b, &*plain, &wrong_server}) {
    ASSERT_TRUE(s->Send("ping").ok());
  }
  absl::SleepFor(kDenyWait);
  for (Socket* s : {&b, &*plain, &wrong_server}) {
    auto ready = s->Poll(absl::ZeroDuration());
    ASSERT_TRUE(ready.ok());
    EXPECT_FALSE(*ready);
  }
  // The allowed client is still served.
  EXPECT_TRUE(PingThrough(a, absl::Seconds(5)).ok());

  // B becomes allowed: a new B client gets through. (The old one, still
  // reconnecting in the background, would too; close it first.)
  b.Close();
  (*auth)->Allow(key_b->public_key);
  EXPECT_TRUE((*auth)->IsAllowed(key_b->public_key));
  Socket b2 = CurveClient(server.endpoint(), *server_keys, *key_b);
  EXPECT_TRUE(PingThrough(b2, absl::Seconds(5)).ok());
}

// Left to itself, ZeroMQ would admit any client key when no ZAP handler
// answers; ConfigureCurveServer sets ZMQ_ZAP_ENFORCE_DOMAIN, so nobody is.
TEST(ZapAuthenticatorTest, WithoutAuthenticatorNoKeyIsAccepted) {
  auto server_keys = GenerateCurveKeyPair();
  auto stranger = GenerateCurveKeyPair();
  ASSERT_TRUE(server_keys.ok() && stranger.ok());
  EchoServer server(*server_keys);
  Socket client = CurveClient(server.endpoint(), *server_keys, *stranger);
  EXPECT_FALSE(PingThrough(client, absl::Seconds(2)).ok());
}

TEST(IsLoopbackEndpointTest, Cases) {
  EXPECT_TRUE(IsLoopbackEndpoint("ipc:///run/shoal/store.sock"));
  EXPECT_TRUE(IsLoopbackEndpoint("inproc://zeromq.zap.01"));
  EXPECT_TRUE(IsLoopbackEndpoint("tcp://127.0.0.1:5555"));
  EXPECT_TRUE(IsLoopbackEndpoint("tcp://127.1.2.3:5555"));
  EXPECT_TRUE(IsLoopbackEndpoint("tcp://127.0.0.1:*"));
  EXPECT_TRUE(IsLoopbackEndpoint("tcp://localhost:5555"));
  EXPECT_TRUE(IsLoopbackEndpoint("tcp://[::1]:5555"));

  EXPECT_FALSE(IsLoopbackEndpoint("tcp://0.0.0.0:5555"));
  EXPECT_FALSE(IsLoopbackEndpoint("tcp://*:5555"));
  EXPECT_FALSE(IsLoopbackEndpoint("tcp://10.0.0.1:5555"));
  EXPECT_FALSE(IsLoopbackEndpoint("tcp://128.0.0.1:5555"));
  EXPECT_FALSE(IsLoopbackEndpoint("tcp://[::]:5555"));
  EXPECT_FALSE(IsLoopbackEndpoint("tcp://[::ffff:10.0.0.1]:5555"));
  EXPECT_FALSE(IsLoopbackEndpoint("tcp://example.com:5555"));
  EXPECT_FALSE(IsLoopbackEndpoint("tcp://localhost.example.com:5555"));
  EXPECT_FALSE(IsLoopbackEndpoint("tcp://eth0:5555"));
  // Octal in inet_aton's eyes: 0127 is 87.
  EXPECT_FALSE(IsLoopbackEndpoint("tcp://0127.0.0.1:5555"));
  EXPECT_FALSE(IsLoopbackEndpoint("tcp://127.0.0.256:5555"));
  EXPECT_FALSE(IsLoopbackEndpoint("tcp://127.0.0:5555"));
  EXPECT_FALSE(IsLoopbackEndpoint("tcp://127.0.0.1"));
  EXPECT_FALSE(IsLoopbackEndpoint("tcp://127.0.0.1:"));
  EXPECT_FALSE(IsLoopbackEndpoint("tcp://127.0.0.1:99999"));
  EXPECT_FALSE(IsLoopbackEndpoint("tcp://[::1]"));
  EXPECT_FALSE(IsLoopbackEndpoint("tcp://10.0.0.1;127.0.0.1:5555"));
  EXPECT_FALSE(IsLoopbackEndpoint("udp://127.0.0.1:5555"));
  EXPECT_FALSE(IsLoopbackEndpoint("ws://127.0.0.1:5555"));
  EXPECT_FALSE(IsLoopbackEndpoint("127.0.0.1:5555"));
  EXPECT_FALSE(IsLoopbackEndpoint(""));
}

}  // namespace
}  // namespace shoal::ipc
