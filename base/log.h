// Minimal leveled logging to stderr (Debian's abseil predates absl/log).
//
//   SHOAL_LOG(INFO, "worker %d exited with %s", id, reason);
//
// Lines look like "I1129 21:03:04.123456 12345 store_service.cc:88] text".
// SHOAL_LOG_LEVEL=debug|info|warning|error picks the threshold (default info).
#ifndef SHOAL_BASE_LOG_H_
#define SHOAL_BASE_LOG_H_

#include <string>

#include "absl/strings/str_format.h"

namespace shoal {

enum class LogLevel { kDEBUG = 0, kINFO = 1, kWARNING = 2, kERROR = 3 };

bool LogEnabled(LogLevel level);
void LogLine(LogLevel level, const char* file, int line,
             const std::string& text);

}  // namespace shoal

#define SHOAL_LOG(level, ...)                                           \
  do {                                                                  \
    if (::shoal::LogEnabled(::shoal::LogLevel::k##level)) {             \
      ::shoal::LogLine(::shoal::LogLevel::k##level, __FILE__, __LINE__, \
                       ::absl::StrFormat(__VA_ARGS__));                 \
    }                                                                   \
  } while (0)

#endif  // SHOAL_BASE_LOG_H_
