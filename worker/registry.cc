#include "worker/registry.h"

#include <dlfcn.h>

#include <algorithm>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/log.h"
#include "base/mutex.h"

namespace shoal::worker {
namespace {

struct Registry {
  Mutex mu;
  std::map<std::string, std::unique_ptr<const TaskFunction>, std::less<>>
      functions ABSL_GUARDED_BY(mu);
  // Functions replaced by a second registration of their name. FindTask hands
  // out pointers that callers use without the lock (a task may be running
  // one while a plugin loads), so a replaced function is kept, never freed.
  std::vector<std::unique_ptr<const TaskFunction>> replaced ABSL_GUARDED_BY(mu);
};

Registry& GlobalRegistry() {
  static Registry* r =
      new Registry;  // never destroyed: plugins outlive exit order
  return *r;
}

}  // namespace

bool RegisterTask(absl::string_view name, TaskFunction fn) {
  Registry& r = GlobalRegistry();
  MutexLock lock(&r.mu);
  auto fn_ptr = std::make_unique<const TaskFunction>(std::move(fn));
  auto it = r.functions.find(name);
  if (it == r.functions.end()) {
    r.functions.emplace(std::string(name), std::move(fn_ptr));
    return true;
  }
  SHOAL_LOG(WARNING, "task function '%s' registered twice; the last wins",
            name);
  r.replaced.push_back(std::exchange(it->second, std::move(fn_ptr)));
  return true;
}

const TaskFunction* FindTask(absl::string_view name) {
  Registry& r = GlobalRegistry();
  MutexLock lock(&r.mu);
  auto it = r.functions.find(name);
  return it == r.functions.end() ? nullptr : it->second.get();
}

std::vector<std::string> RegisteredTasks() {
  Registry& r = GlobalRegistry();
  MutexLock lock(&r.mu);
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
