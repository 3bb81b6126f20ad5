#include "base/process_info.h"

#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <fstream>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "base/status_macros.h"

namespace shoal {
namespace {

// Returns the fields of /proc/<pid>/stat after the "(comm)" field, which may
// itself contain spaces and parentheses. fields[0] is field 3 (state).
absl::StatusOr<std::vector<std::string>> StatFields(pid_t pid) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/stat"));
  if (!in) return absl::NotFoundError(absl::StrCat("no process ", pid));
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string stat = ss.str();
  const size_t close = stat.rfind(')');
  if (close == std::string::npos || close + 2 > stat.size()) {
    return absl::InternalError(absl::StrCat("unreadable /proc/", pid, "/stat"));
  }
  return absl::StrSplit(stat.substr(close + 2), ' ', absl::SkipEmpty());
}

}  // namespace

absl::StatusOr<uint64_t> ProcessStartTicks(pid_t pid) {
  auto fields = StatFields(pid);
  if (!fields.ok()) return fields.status();
  uint64_t ticks;
  if (fields->size() < 20 || !absl::SimpleAtoi((*fields)[19], &ticks)) {
    return absl::InternalError(absl::StrCat("unreadable /proc/", pid, "/stat"));
  }
  return ticks;
}

bool ProcessIsAlive(pid_t pid, uint64_t start_ticks) {
  if (pid <= 0) return false;
  if (kill(pid, 0) != 0 && errno == ESRCH) return false;
  auto fields = StatFields(pid);
  if (!fields.ok()) return false;
  if (!fields->empty() && ((*fields)[0] == "Z" || (*fields)[0] == "X"))
    return false;
  if (start_ticks != 0) {
    uint64_t ticks;
    if (fields->size() < 20 || !absl::SimpleAtoi((*fields)[19], &ticks))
      return false;
    return ticks == start_ticks;
  }
  return true;
}

absl::StatusOr<uint64_t> ProcessRssBytes(pid_t pid) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/statm"));
  uint64_t size_pages, rss_pages;
  if (!(in >> size_pages >> rss_pages)) {
    return absl::NotFoundError(absl::StrCat("no process ", pid));
  }
  return rss_pages * static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
}

absl::StatusOr<int> OpenPidFd(pid_t pid) {
  const long fd = syscall(SYS_pidfd_open, pid, 0);
  if (fd < 0) return SHOAL_ERRNO(absl::StrCat("pidfd_open(", pid, ")"));
  return static_cast<int>(fd);
}

std::string BootId() {
  std::ifstream in("/proc/sys/kernel/random/boot_id");
  std::string id;
  std::getline(in, id);
  return std::string(absl::StripAsciiWhitespace(id));
}

}  // namespace shoal
