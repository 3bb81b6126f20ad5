#include "tools/cli/json.h"

#include <cstdio>

#include "absl/strings/str_cat.h"
#include "google/protobuf/util/json_util.h"

namespace shoal::cli {

absl::StatusOr<std::string> ToJson(const google::protobuf::Message& message) {
  google::protobuf::util::JsonPrintOptions options;
  options.always_print_primitive_fields = true;
  options.preserve_proto_field_names = true;
  std::string out;
  const auto status =
      google::protobuf::util::MessageToJsonString(message, &out, options);
  if (!status.ok()) {
    return absl::InternalError(absl::StrCat("printing ", message.GetTypeName(),
                                            " as JSON: ", status.ToString()));
  }
  return out;
}

absl::Status PrintJson(const google::protobuf::Message& message) {
  absl::StatusOr<std::string> json = ToJson(message);
  if (!json.ok()) return json.status();
  std::printf("%s\n", json->c_str());
  return absl::OkStatus();
}

}  // namespace shoal::cli
