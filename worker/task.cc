#include "worker/task.h"

#include "absl/strings/str_cat.h"

namespace shoal::worker {
namespace {

absl::Status WrongKind(size_t i, const Value& v, absl::string_view want) {
  return absl::InvalidArgumentError(
      absl::StrCat("argument ", i, " must be ", want, ", got ",
                   ValueKindName(v), " ", ValueToString(v)));
}

}  // namespace

absl::StatusOr<int64_t> TaskContext::IntArg(size_t i) const {
  if (i >= num_args()) {
    return absl::InvalidArgumentError(
        absl::StrCat("missing argument ", i, " (an int)"));
  }
  if (const int64_t* v = std::get_if<int64_t>(&arg(i))) return *v;
  return WrongKind(i, arg(i), "an int");
}

absl::StatusOr<double> TaskContext::FloatArg(size_t i) const {
  if (i >= num_args()) {
    return absl::InvalidArgumentError(
        absl::StrCat("missing argument ", i, " (a number)"));
  }
  if (const double* v = std::get_if<double>(&arg(i))) return *v;
  if (const int64_t* v = std::get_if<int64_t>(&arg(i)))
    return static_cast<double>(*v);
  return WrongKind(i, arg(i), "a number");
}

absl::StatusOr<std::string> TaskContext::StringArg(size_t i) const {
  if (i >= num_args()) {
    return absl::InvalidArgumentError(
        absl::StrCat("missing argument ", i, " (a string)"));
  }
  if (const std::string* v = std::get_if<std::string>(&arg(i))) return *v;
  if (const BytesValue* v = std::get_if<BytesValue>(&arg(i))) return v->data;
  return WrongKind(i, arg(i), "a string");
}

}  // namespace shoal::worker
