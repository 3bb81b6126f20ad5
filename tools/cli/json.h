// --json output: a protobuf message (proto/cli.proto) printed on one line by
// protobuf's JSON printer, which escapes every string (a traceback's newlines
// and quotes included).
#ifndef SHOAL_TOOLS_CLI_JSON_H_
#define SHOAL_TOOLS_CLI_JSON_H_

#include <string>

#include "absl/status/statusor.h"
#include "google/protobuf/message.h"

namespace shoal::cli {

// `message` as one JSON object, every field present (zeros and empty lists
// too, so scripts need not know proto3's defaults), named as in the .proto.
absl::StatusOr<std::string> ToJson(const google::protobuf::Message& message);

// Prints ToJson(message) and a newline to stdout.
absl::Status PrintJson(const google::protobuf::Message& message);

}  // namespace shoal::cli

#endif  // SHOAL_TOOLS_CLI_JSON_H_
