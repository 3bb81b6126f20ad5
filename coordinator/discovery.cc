#include "coordinator/discovery.h"

#include <dirent.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "base/process_info.h"
#include "base/runtime_dir.h"
#include "base/status_macros.h"

namespace shoal::coordinator {
namespace {

std::string FilePath(absl::string_view job_id) {
  return absl::StrCat(RuntimeRoot(), "/", job_id, "/coordinator");
}

std::string CurrentPath() { return absl::StrCat(RuntimeRoot(), "/current"); }

absl::Status WriteAtomically(const std::string& path, const std::string& text) {
  return WriteRuntimeFile(path, text);
}

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("no ", path));
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

absl::Status WriteDiscovery(const Discovery& d) {
  SHOAL_ASSIGN_OR_RETURN(const std::string dir, JobDir(d.job_id));
  (void)dir;
  const std::string text =
      absl::StrCat("job=", d.job_id, "\nfrontend=", d.frontend, "\ntcp=", d.tcp,
                   "\nstore=", d.store, "\ntasks=", d.tasks, "\npid=", d.pid,
                   "\nserver_key=", d.server_key,
                   "\nclient_key_file=", d.client_key_file, "\n");
  SHOAL_RETURN_IF_ERROR(WriteAtomically(FilePath(d.job_id), text));
  return WriteAtomically(CurrentPath(), absl::StrCat(d.job_id, "\n"));
}

absl::StatusOr<Discovery> ReadDiscovery(absl::string_view job_id) {
  std::string job(job_id);
  if (job.empty()) {
    if (const char* env = std::getenv("SHOAL_JOB_ID"); env != nullptr && *env)
      job = env;
  }
  if (job.empty()) {
    absl::StatusOr<std::string> current = ReadFile(CurrentPath());
    if (!current.ok()) {
      return absl::NotFoundError(
          absl::StrCat("no shoal node is running here (no ", CurrentPath(),
                       "); start one with `shoal start`, or pass an endpoint / "
                       "set SHOAL_COORDINATOR"));
    }
    job = std::string(absl::StripAsciiWhitespace(*current));
  }
  absl::StatusOr<std::string> text = ReadFile(FilePath(job));
  if (!text.ok()) {
    return absl::NotFoundError(
        absl::StrCat("job '", job, "' has no discovery file (", FilePath(job),
                     "); is its node running?"));
  }
  Discovery d;
  for (absl::string_view line :
       absl::StrSplit(*text, '\n', absl::SkipEmpty())) {
    std::pair<std::string, std::string> kv =
        absl::StrSplit(line, absl::MaxSplits('=', 1));
    if (kv.first == "job") d.job_id = kv.second;
    if (kv.first == "frontend") d.frontend = kv.second;
    if (kv.first == "store") d.store = kv.second;
    if (kv.first == "tasks") d.tasks = kv.second;
    if (kv.first == "pid") (void)absl::SimpleAtoi(kv.second, &d.pid);
    if (kv.first == "server_key") d.server_key = kv.second;
    if (kv.first == "tcp") d.tcp = kv.second;
    if (kv.first == "client_key_file") d.client_key_file = kv.second;
  }
  if (d.frontend.empty() || d.job_id.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat(FilePath(job), " is incomplete"));
  }
  if (d.pid > 0 && !ProcessIsAlive(d.pid)) {
    return absl::UnavailableError(
        absl::StrCat("job '", job, "''s coordinator (pid ", d.pid,
                     ") is not running; start a node with `shoal start`"));
  }
  return d;
}

void RemoveDiscovery(absl::string_view job_id) {
  unlink(FilePath(job_id).c_str());
  absl::StatusOr<std::string> current = ReadFile(CurrentPath());
  if (current.ok() && absl::StripAsciiWhitespace(*current) == job_id) {
    unlink(CurrentPath().c_str());
  }
}

std::vector<std::string> RemoveStaleJobDirs() {
  std::vector<std::string> removed;
  const std::string root = RuntimeRoot();
  DIR* dir = opendir(root.c_str());
  if (dir == nullptr) return removed;
  std::vector<std::string> names;
  while (dirent* e = readdir(dir)) {
    if (e->d_name[0] != '.') names.push_back(e->d_name);
  }
  closedir(dir);
  for (const std::string& name : names) {
    const std::string path = absl::StrCat(root, "/", name);
    struct stat st;
    if (stat(path.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) continue;
    absl::StatusOr<std::string> text =
        ReadFile(absl::StrCat(path, "/coordinator"));
    if (!text.ok()) continue;  // not a coordinator's (a bare store's, a test's)
    pid_t pid = 0;
    for (absl::string_view line :
         absl::StrSplit(*text, '\n', absl::SkipEmpty())) {
      if (absl::ConsumePrefix(&line, "pid="))
        (void)absl::SimpleAtoi(line, &pid);
    }
    if (pid > 0 && ProcessIsAlive(pid)) continue;
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
    if (!ec) removed.push_back(name);
  }
  return removed;
}

}  // namespace shoal::coordinator
