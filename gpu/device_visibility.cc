#include "gpu/device_visibility.h"

#include <dirent.h>

#include <cstdint>
#include <cstdlib>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace shoal::gpu {
namespace {

bool IsAllDigits(absl::string_view s) {
  if (s.empty()) return false;
  for (char c : s) {
    if (!absl::ascii_isdigit(static_cast<unsigned char>(c))) return false;
  }
  return true;
}

// Hex digits and dashes, with at least one hex digit.
bool IsUuidBody(absl::string_view s) {
  bool any_hex = false;
  for (char c : s) {
    if (absl::ascii_isxdigit(static_cast<unsigned char>(c))) {
      any_hex = true;
    } else if (c != '-') {
      return false;
    }
  }
  return any_hex;
}

// "<uuid>/<gi>/<ci>", the part after "MIG-GPU-".
bool IsLegacyMigBody(absl::string_view s) {
  std::vector<absl::string_view> parts = absl::StrSplit(s, '/');
  return parts.size() == 3 && IsUuidBody(parts[0]) && IsAllDigits(parts[1]) &&
         IsAllDigits(parts[2]);
}

// Entries after the whitespace is stripped.
enum class EntryKind { kIndex, kNegative, kUuid, kInvalid };

EntryKind Classify(absl::string_view entry) {
  if (IsAllDigits(entry)) return EntryKind::kIndex;
  absl::string_view rest = entry;
  if (absl::ConsumePrefix(&rest, "-") && IsAllDigits(rest)) {
    return EntryKind::kNegative;
  }
  rest = entry;
  if (absl::ConsumePrefix(&rest, "MIG-GPU-")) {
    return IsLegacyMigBody(rest) ? EntryKind::kUuid : EntryKind::kInvalid;
  }
  rest = entry;
  if (absl::ConsumePrefix(&rest, "GPU-") ||
      absl::ConsumePrefix(&rest, "MIG-")) {
    return IsUuidBody(rest) ? EntryKind::kUuid : EntryKind::kInvalid;
  }
  return EntryKind::kInvalid;
}

// Entries of `dir` whose names `counts` accepts; 0 when `dir` cannot be read.
template <typename Pred>
int CountEntries(const std::string& dir_name, Pred counts) {
  DIR* dir = opendir(dir_name.c_str());
  if (dir == nullptr) return 0;
  int n = 0;
  while (dirent* e = readdir(dir)) {
    if (counts(absl::string_view(e->d_name))) ++n;
  }
  closedir(dir);
  return n;
}

absl::Status WithSource(absl::string_view source, const absl::Status& s) {
  if (s.ok()) return s;
  return absl::Status(s.code(), absl::StrCat(source, ": ", s.message()));
}

}  // namespace

int DriverGpuCount() { return DriverGpuCountAt("/proc", "/dev"); }

int DriverGpuCountAt(absl::string_view proc_root, absl::string_view dev_root) {
  // One entry per GPU (named by PCI address) in the driver's folder.
  const int from_proc =
      CountEntries(absl::StrCat(proc_root, "/driver/nvidia/gpus"),
                   [](absl::string_view name) { return name[0] != '.'; });
  if (from_proc > 0) return from_proc;
  // One node per GPU: nvidia0, nvidia1 ...; not nvidiactl, nvidia-uvm,
  // nvidia-modeset or the nvidia-caps folder.
  return CountEntries(std::string(dev_root), [](absl::string_view name) {
    absl::string_view rest = name;
    return absl::ConsumePrefix(&rest, "nvidia") && IsAllDigits(rest);
  });
}

absl::StatusOr<std::vector<std::string>> ParseVisibleDevices(
    absl::string_view value) {
  std::vector<std::string> devices;
  if (absl::StripAsciiWhitespace(value).empty()) return devices;
  absl::flat_hash_set<std::string> seen;
  for (absl::string_view piece : absl::StrSplit(value, ',')) {
    absl::string_view entry = absl::StripAsciiWhitespace(piece);
    std::string device;
    std::string key;  // what duplicates are compared by
    switch (Classify(entry)) {
      case EntryKind::kNegative:
        return devices;  // CUDA stops at a negative index.
      case EntryKind::kIndex: {
        int index = 0;
        if (!absl::SimpleAtoi(entry, &index)) {
          return absl::InvalidArgumentError(absl::StrCat(
              "GPU index \"", entry, "\" in \"", value, "\" is too large"));
        }
        device = absl::StrCat(index);
        key = device;
        break;
      }
      case EntryKind::kUuid:
        device = std::string(entry);
        key = absl::AsciiStrToLower(entry);
        break;
      case EntryKind::kInvalid:
        return absl::InvalidArgumentError(absl::StrCat(
            "unrecognised GPU entry \"", entry, "\" in \"", value,
            "\": expected a non-negative index, GPU-<uuid>, MIG-<uuid> or "
            "MIG-GPU-<uuid>/<gi>/<ci>, separated by commas"));
    }
    if (!seen.insert(std::move(key)).second) {
      return absl::InvalidArgumentError(absl::StrCat(
          "duplicate GPU entry \"", entry, "\" in \"", value, "\""));
    }
    devices.push_back(std::move(device));
  }
  return devices;
}

absl::StatusOr<std::vector<std::string>> DiscoverGpus(
    const std::optional<std::string>& cuda_visible_devices,
    const std::optional<std::string>& gpus_flag, int driver_gpu_count) {
  if (gpus_flag.has_value()) {
    absl::StatusOr<std::vector<std::string>> gpus =
        ParseVisibleDevices(*gpus_flag);
    if (!gpus.ok()) return WithSource("--gpus", gpus.status());
    return gpus;
  }
  if (cuda_visible_devices.has_value()) {
    absl::StatusOr<std::vector<std::string>> gpus =
        ParseVisibleDevices(*cuda_visible_devices);
    if (!gpus.ok()) return WithSource("CUDA_VISIBLE_DEVICES", gpus.status());
    return gpus;
  }
  if (driver_gpu_count < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("driver GPU count ", driver_gpu_count, " is negative"));
  }
  std::vector<std::string> gpus;
  gpus.reserve(driver_gpu_count);
  for (int i = 0; i < driver_gpu_count; ++i) gpus.push_back(absl::StrCat(i));
  return gpus;
}

absl::StatusOr<std::vector<std::string>> DiscoverGpusFromEnvironment(
    const std::optional<std::string>& gpus_flag) {
  std::optional<std::string> env;
  if (const char* v = std::getenv("CUDA_VISIBLE_DEVICES"); v != nullptr) {
    env = v;
  }
  // The driver directory is read only when neither list is set.
  int driver_gpus = 0;
  if (!gpus_flag.has_value() && !env.has_value()) {
    driver_gpus = DriverGpuCount();
  }
  return DiscoverGpus(env, gpus_flag, driver_gpus);
}

std::string ChildCudaDeviceOrder() {
  const char* own = std::getenv("CUDA_DEVICE_ORDER");
  return own != nullptr && *own != '\0' ? own : "PCI_BUS_ID";
}

absl::StatusOr<std::vector<std::vector<int>>> AssignGpus(int workers,
                                                         int gpus_per_worker,
                                                         int available) {
  if (workers < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("number of workers ", workers, " is negative"));
  }
  if (gpus_per_worker < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("GPUs per worker ", gpus_per_worker, " is negative"));
  }
  if (available < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("number of visible GPUs ", available, " is negative"));
  }
  const int64_t needed = int64_t{workers} * gpus_per_worker;
  if (needed > available) {
    return absl::InvalidArgumentError(absl::StrCat(
        "asked for ", workers, workers == 1 ? " worker" : " workers", " x ",
        gpus_per_worker, gpus_per_worker == 1 ? " GPU" : " GPUs", " = ", needed,
        needed == 1 ? " GPU" : " GPUs", " but only ", available,
        available == 1 ? " is" : " are",
        " visible (CUDA_VISIBLE_DEVICES / --gpus)"));
  }
  std::vector<std::vector<int>> assignment(workers);
  for (int w = 0; w < workers; ++w) {
    assignment[w].reserve(gpus_per_worker);
    for (int g = 0; g < gpus_per_worker; ++g) {
      assignment[w].push_back(w * gpus_per_worker + g);
    }
  }
  return assignment;
}

absl::StatusOr<std::string> ChildVisibleDevices(
    const std::vector<std::string>& parent, absl::Span<const int> logical) {
  std::vector<absl::string_view> entries;
  entries.reserve(logical.size());
  absl::flat_hash_set<int> seen;
  for (int i : logical) {
    if (i < 0 || static_cast<size_t>(i) >= parent.size()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "logical GPU ", i, " is out of range: this process sees ",
          parent.size(), " GPU(s) [", absl::StrJoin(parent, ","), "]"));
    }
    if (!seen.insert(i).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("logical GPU ", i, " given twice in [",
                       absl::StrJoin(logical, ","), "]"));
    }
    entries.push_back(parent[i]);
  }
  return absl::StrJoin(entries, ",");
}

}  // namespace shoal::gpu
