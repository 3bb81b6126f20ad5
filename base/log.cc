#include "base/log.h"

#include <sys/syscall.h>
#include <sys/time.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <ctime>

#include "absl/strings/ascii.h"

namespace shoal {
namespace {

LogLevel Threshold() {
  static const LogLevel level = [] {
    const char* env = std::getenv("SHOAL_LOG_LEVEL");
    if (env == nullptr) return LogLevel::kINFO;
    const std::string v = absl::AsciiStrToLower(env);
    if (v == "debug") return LogLevel::kDEBUG;
    if (v == "warning" || v == "warn") return LogLevel::kWARNING;
    if (v == "error") return LogLevel::kERROR;
    return LogLevel::kINFO;
  }();
  return level;
}

}  // namespace

bool LogEnabled(LogLevel level) { return level >= Threshold(); }

void LogLine(LogLevel level, const char* file, int line,
             const std::string& text) {
  static constexpr char kLetters[] = {'D', 'I', 'W', 'E'};
  timeval tv;
  gettimeofday(&tv, nullptr);
  tm t;
  localtime_r(&tv.tv_sec, &t);
  const char* base = std::strrchr(file, '/');
  // One write() per line so lines from many processes do not interleave.
  std::string out = absl::StrFormat(
      "%c%02d%02d %02d:%02d:%02d.%06d %d %s:%d] %s\n",
      kLetters[static_cast<int>(level)], t.tm_mon + 1, t.tm_mday, t.tm_hour,
      t.tm_min, t.tm_sec, static_cast<int>(tv.tv_usec),
      static_cast<int>(getpid()), base ? base + 1 : file, line, text);
  ssize_t unused = write(STDERR_FILENO, out.data(), out.size());
  (void)unused;
}

}  // namespace shoal
