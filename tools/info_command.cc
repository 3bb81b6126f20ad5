// `shoal info`: what this build and this machine offer, without starting
// anything (and without initialising CUDA, unless --devices asks).
#include <unistd.h>

#include <cstdio>

#include "base/runtime_dir.h"
#include "gpu/cuda_ipc.h"
#include "gpu/device_visibility.h"
#include "gpu/gpu_info.h"
#include "ipc/messages.h"
#include "shm/segment.h"
#include "tools/cli/args.h"
#include "tools/commands.h"

namespace shoal::cli {

int InfoCommand(int argc, char** argv) {
  ArgParser p("shoal info", "Prints what this build and this machine offer.");
  bool& devices = p.Bool("devices", false,
                         "also list the GPUs this process sees (ordinal, "
                         "physical device, UUID); initialises CUDA");
  if (absl::Status s = p.Parse(argc, argv); !s.ok()) return Fail(s);
  const gpu::BuildInfo build = gpu::GetBuildInfo();
  std::printf("protocol      %u.%u\n", ipc::kProtocolMajor,
              ipc::kProtocolMinor);
  if (build.cuda) {
    std::printf("cuda          built with CUDA runtime %s, NCCL %s\n",
                build.cuda_runtime.c_str(),
                build.nccl.empty() ? "(not loaded)" : build.nccl.c_str());
  } else {
    std::printf(
        "cuda          built without CUDA (GPU features return "
        "FailedPrecondition)\n");
  }
  std::printf("gpus          %d listed by the NVIDIA driver\n",
              gpu::DriverGpuCount());
  std::printf("cpus          %ld online\n", sysconf(_SC_NPROCESSORS_ONLN));
  if (auto free = shm::ShmFreeBytes(); free.ok()) {
    std::printf("/dev/shm      %s free\n", FormatBytes(*free).c_str());
  }
  if (auto def = shm::DefaultStoreBytes(); def.ok()) {
    std::printf("store default %s (min of 30%% RAM, 80%% of free /dev/shm)\n",
                FormatBytes(*def).c_str());
  }
  std::printf("runtime dir   %s\n", RuntimeRoot().c_str());
  if (devices) {
    std::unique_ptr<gpu::CudaIpc> cuda = gpu::MakeCudaIpc();
    absl::StatusOr<gpu::DeviceMap> map = gpu::DeviceMap::Read(*cuda);
    if (!map.ok()) return Fail(map.status());
    for (int i = 0; i < map->count(); ++i) {
      std::printf("cuda:%-8d physical %s, %s\n", i, map->physical(i).c_str(),
                  map->uuid(i).ToString().c_str());
    }
    if (map->count() == 0) std::printf("devices       none visible\n");
  }
  return 0;
}

}  // namespace shoal::cli
