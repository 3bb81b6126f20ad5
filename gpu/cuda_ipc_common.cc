// The parts of cuda_ipc.h that do not call CUDA.
#include <cstdlib>

#include "absl/strings/str_format.h"
#include "base/status_macros.h"
#include "gpu/cuda_ipc.h"
#include "gpu/device_visibility.h"

namespace shoal::gpu {

std::string GpuUuid::ToString() const {
  const auto& b = bytes;
  return absl::StrFormat(
      "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%"
      "02x",
      b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11],
      b[12], b[13], b[14], b[15]);
}

absl::StatusOr<DeviceMap> DeviceMap::Read(CudaIpc& cuda) {
  DeviceMap map;
  SHOAL_ASSIGN_OR_RETURN(int n, cuda.DeviceCount());
  std::vector<std::string> visible;
  if (const char* env = std::getenv("CUDA_VISIBLE_DEVICES")) {
    absl::StatusOr<std::vector<std::string>> parsed = ParseVisibleDevices(env);
    if (parsed.ok()) visible = *std::move(parsed);
  }
  for (int i = 0; i < n; ++i) {
    SHOAL_ASSIGN_OR_RETURN(GpuUuid u, cuda.DeviceUuid(i));
    map.uuids_.push_back(u);
    map.physical_.push_back(
        i < static_cast<int>(visible.size()) ? visible[i] : std::to_string(i));
  }
  return map;
}

std::optional<int> DeviceMap::OrdinalOf(const GpuUuid& uuid) const {
  for (int i = 0; i < count(); ++i) {
    if (uuids_[i] == uuid) return i;
  }
  return std::nullopt;
}

}  // namespace shoal::gpu
