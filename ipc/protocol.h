// The thin protocol layer: Envelope structs <-> bytes on the wire, with size,
// version and content checks. Nothing here blocks or touches sockets.
#ifndef SHOAL_IPC_PROTOCOL_H_
#define SHOAL_IPC_PROTOCOL_H_

#include <cstddef>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "ipc/messages.h"

namespace shoal::ipc {

// Limits applied while decoding input from another process.
struct DecodeLimits {
  // Largest frame accepted. Default: 1 MiB (inline task values are ≤ 64 KiB).
  size_t max_frame_bytes = size_t{1} << 20;
  // Most object ids in one request. Default: 4096.
  size_t max_ids = 4096;
  // Longest free-form string (names). Default: 4096 bytes.
  size_t max_string_bytes = 4096;
};

// Serialises `envelope` with this build's protocol version.
// Errors: InvalidArgument if a field cannot be represented (an invalid
// TensorMeta, an error reply carrying an OK status).
absl::StatusOr<std::string> Encode(const Envelope& envelope);

// Convenience: Encode({request_id, body}).
absl::StatusOr<std::string> Encode(uint64_t request_id, Message body);

// Whether a request frame of `frame_bytes` may go to a node whose welcome
// said `max_request_bytes` (0: no limit): a client checks before it sends,
// so an oversized request costs neither the connection nor the session.
// Errors: ResourceExhausted naming both sizes.
absl::Status CheckRequestSize(size_t frame_bytes, uint64_t max_request_bytes);

// An ErrorReply frame for `status` (which must not be OK). Never fails: if the
// status cannot be encoded, an INTERNAL error frame is produced instead.
std::string EncodeError(uint64_t request_id, const absl::Status& status);

// Result of Decode: the envelope, or the error to send back. `request_id` is
// filled whenever the frame got far enough to carry one, so the error reply can
// be matched by the peer.
struct DecodeResult {
  absl::StatusOr<Envelope> envelope;
  uint64_t request_id = 0;
};

// Parses and validates one frame.
// Errors: ResourceExhausted (frame above max_frame_bytes, more than max_ids
// ids, a string above max_string_bytes); InvalidArgument (not a protobuf
// Envelope, no body, an id that is not 16 bytes, an invalid TensorMeta or
// status code); FailedPrecondition (another protocol major version).
DecodeResult Decode(absl::string_view frame,
                    const DecodeLimits& limits = DecodeLimits());

// What an Envelope's frame says before its body is decoded: the header
// fields, which body it carries (its field number in shoal.proto's
// Envelope: 62 for submit, ...), and how many items that body lists (tasks
// of a submit; task ids of a wait, cancel or release_tasks; 0 for others).
// The frontend weighs and orders requests by it, and decodes a request's
// body when it serves it.
struct EnvelopeHead {
  uint32_t major = 0;
  uint32_t minor = 0;
  uint64_t request_id = 0;
  uint64_t session = 0;
  uint64_t ack = 0;
  uint64_t seq = 0;
  uint32_t body_field = 0;  // 0: no body
  uint64_t items = 0;
};
inline constexpr uint32_t kSessionAckField = 73;

// Reads the head of a frame without decoding its body (a scan of the wire
// format). nullopt when the frame is not well-formed protobuf as far as the
// scan reads, or repeats its body: Decode then says what is wrong with it.
// A frame whose head reads may still fail Decode.
std::optional<EnvelopeHead> PeekEnvelope(absl::string_view frame);

// The body's case name ("create", "get_reply", ...) for logs and errors.
absl::string_view MessageName(const Message& m);

}  // namespace shoal::ipc

#endif  // SHOAL_IPC_PROTOCOL_H_
