#include "worker/registry.h"

#include <dlfcn.h>

#include <algorithm>
#include <map>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "base/log.h"

namespace shoal::worker {
namespace {

struct Registry {
  std::mutex mu;
  std::map<std::string, TaskFunction, std::less<>> functions;
};

Registry& GlobalRegistry() {
  static Registry* r =
      new Registry;  // never destroyed: plugins outlive exit order
  return *r;
}

}  // namespace

bool RegisterTask(absl::string_view name, TaskFunction fn) {
  Registry& r = GlobalRegistry();
  std::lock_guard<std::mutex> lock(r.mu);
  auto [it, inserted] =
      r.functions.insert_or_assign(std::string(name), std::move(fn));
  if (!inserted)
    SHOAL_LOG(WARNING, "task function '%s' registered twice; the last wins",
              name);
  return true;
}

const TaskFunction* FindTask(absl::string_view name) {
  Registry& r = GlobalRegistry();
  std::lock_guard<std::mutex> lock(r.mu);
  auto it = r.functions.find(name);
  return it == r.functions.end() ? nullptr : &it->second;
}

std::vector<std::string> RegisteredTasks() {
  Registry& r = GlobalRegistry();
  std::lock_guard<std::mutex> lock(r.mu);
  std::vector<std::string> names;
  for (const auto& [name, fn] : r.functions) names.push_back(name);
  return names;
}

absl::Status LoadPlugin(const std::string& path) {
  // RTLD_NOW: a plugin with a missing symbol fails here, not mid-task.
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* err = dlerror();
    return absl::FailedPreconditionError(absl::StrCat(
        "cannot load plugin ", path, ": ", err ? err : "unknown error"));
  }
  return absl::OkStatus();
}

}  // namespace shoal::worker
