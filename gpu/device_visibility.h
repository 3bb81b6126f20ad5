// Which GPUs a process may use, and which of them each worker gets, expressed
// as CUDA_VISIBLE_DEVICES strings.
//
// The coordinator's and the launcher's own code never initialise CUDA (see
// gpu_info.h; the store service inside them does, at its first device
// object): they learn their GPUs from their own CUDA_VISIBLE_DEVICES (or
// --gpus, or the driver's entries: /proc/driver/nvidia/gpus, else
// /dev/nvidia<N>), split them between workers by logical index, and
// gives each worker process its share by setting CUDA_VISIBLE_DEVICES in the
// child's environment, translated through the parent's own list: a parent with
// "3,5" that gives a worker its logical GPU 1 sets "5" for the child.
//
// Everything here is string and procfs logic: it never touches the CUDA driver
// or runtime and builds identically with and without CUDA.
//
// Syntax of a device list (CUDA_VISIBLE_DEVICES, and --gpus which uses the
// same syntax): entries separated by ",", ASCII whitespace around each entry
// ignored. Each entry is one of
//   - a non-negative decimal index: "0", "3" (kept in canonical form, so
//     "007" becomes "7");
//   - a GPU UUID: "GPU-" followed by hex digits and dashes, with at least one
//     hex digit ("GPU-8f6c3a2e-1b2c-4d5e-9f00-112233445566");
//   - a MIG device: "MIG-" followed by hex digits and dashes
//     ("MIG-8f6c3a2e-...") or the older "MIG-GPU-<uuid>/<gi>/<ci>" with
//     decimal GPU-instance and compute-instance ids.
// UUID and MIG entries are kept verbatim. As in CUDA, a negative index ("-1";
// any "-" followed by digits) ends the list: it and every entry after it are
// ignored, unparsed.
#ifndef SHOAL_GPU_DEVICE_VISIBILITY_H_
#define SHOAL_GPU_DEVICE_VISIBILITY_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace shoal::gpu {

// Parses a CUDA_VISIBLE_DEVICES value into its entries, in order (syntax in
// the file comment). An empty or all-whitespace value means zero devices: an
// empty vector and an OK status.
//
// Errors: InvalidArgument, naming the entry and the whole value, for an
// entry of none of the accepted forms (including an empty entry, as in "0,,1"
// or "0,"), an index too large for an int, or a duplicate entry (indices
// compared by value, UUID and MIG entries case-insensitively).
absl::StatusOr<std::vector<std::string>> ParseVisibleDevices(
    absl::string_view value);

// The GPUs this process may hand out, in order:
//   - if `gpus_flag` is set (the --gpus flag), its parsed entries (it
//     overrides the environment; "" means no GPU);
//   - else if `cuda_visible_devices` is set (the process's own
//     CUDA_VISIBLE_DEVICES), its parsed entries ("" means no GPU, as in CUDA);
//   - else "0" .. "<driver_gpu_count - 1>" (empty when the count is 0).
// REQUIRES: driver_gpu_count >= 0.
//
// Errors: InvalidArgument when the list chosen does not parse (the message
// starts with "--gpus: " or "CUDA_VISIBLE_DEVICES: " to name the source), or
// when driver_gpu_count is negative.
absl::StatusOr<std::vector<std::string>> DiscoverGpus(
    const std::optional<std::string>& cuda_visible_devices,
    const std::optional<std::string>& gpus_flag, int driver_gpu_count);

// GPUs the NVIDIA driver shows on this machine, never initialising CUDA (safe
// in the coordinator): the entries of /proc/driver/nvidia/gpus, or, where that
// folder is missing or empty (some sandboxed kernels hide /proc/driver while
// the GPUs work), the /dev/nvidia<N> device nodes. 0 without a driver.
int DriverGpuCount();
// The same under other roots ("/proc" and "/dev" above), for tests.
int DriverGpuCountAt(absl::string_view proc_root, absl::string_view dev_root);

// DiscoverGpus with this process's getenv("CUDA_VISIBLE_DEVICES") and the
// DriverGpuCount() (0 without an NVIDIA driver). Never initialises CUDA; safe
// in the coordinator. Reads the environment, so it must not race with
// setenv/unsetenv in another thread.
//
// Errors: those of DiscoverGpus.
absl::StatusOr<std::vector<std::string>> DiscoverGpusFromEnvironment(
    const std::optional<std::string>& gpus_flag);

// Splits `available` logical GPUs (indices 0 .. available - 1 into the list
// from DiscoverGpus) between `workers` workers: worker i gets
// [i * gpus_per_worker, (i + 1) * gpus_per_worker). With gpus_per_worker == 0
// every worker gets an empty list. The result has exactly `workers` entries.
// REQUIRES: workers >= 0, gpus_per_worker >= 0, available >= 0.
//
// Errors: InvalidArgument when a REQUIRES clause is violated, or when
// workers * gpus_per_worker > available; the latter's message says what was
// asked and what is visible, e.g. "asked for 4 workers x 2 GPUs = 8 GPUs but
// only 3 are visible (CUDA_VISIBLE_DEVICES / --gpus)".
absl::StatusOr<std::vector<std::vector<int>>> AssignGpus(int workers,
                                                         int gpus_per_worker,
                                                         int available);

// The CUDA_VISIBLE_DEVICES value for a child process that gets the parent's
// GPUs at `logical` (indices into `parent`, the list from DiscoverGpus): the
// parent's entries at those positions, in the order given, joined with ",".
// Parent {"3", "5"}, logical {1} -> "5"; UUID and MIG entries are copied
// verbatim. An empty `logical` gives "" (the child sees no GPU).
// REQUIRES: every index in `logical` is in [0, parent.size()), and none
// appears twice.
//
// Errors: InvalidArgument when a REQUIRES clause is violated (the message
// names the index and the parent's list).
absl::StatusOr<std::string> ChildVisibleDevices(
    const std::vector<std::string>& parent, absl::Span<const int> logical);

// The CUDA_DEVICE_ORDER for a process the launcher or coordinator starts:
// this process's own value when it has one, else "PCI_BUS_ID". CUDA's default
// (FASTEST_FIRST) may number GPUs differently from the driver's /proc and
// /dev entries and from nvidia-smi, which the indices handed out here follow;
// in PCI bus order they agree. (On a machine of identical GPUs the two orders
// are the same.) Reads the environment: must not race with setenv.
std::string ChildCudaDeviceOrder();

}  // namespace shoal::gpu

#endif  // SHOAL_GPU_DEVICE_VISIBILITY_H_
