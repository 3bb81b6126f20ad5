// `shoal store`: runs a StoreService in the foreground until SIGINT/SIGTERM.
#include <signal.h>
#include <unistd.h>

#include <cstdio>

#include "absl/strings/str_cat.h"
#include "base/log.h"
#include "base/runtime_dir.h"
#include "shm/store_service.h"
#include "tools/cli/args.h"
#include "tools/commands.h"

namespace shoal::cli {
namespace {

shm::StoreService* g_service = nullptr;

void OnSignal(int) {
  if (g_service != nullptr) g_service->Stop();
}

}  // namespace

SpillFlags AddSpillFlags(ArgParser& p) {
  std::string& dir = p.String(
      "spill-dir", "",
      "where objects go when the store is full (a folder of this user, "
      "made 0700 if missing; default: the job's runtime folder)");
  std::string& bytes =
      p.String("spill-bytes", "auto",
               "most bytes spilled to disk (auto: half the free space of "
               "--spill-dir's file system at start; 0: no spilling)");
  return SpillFlags{dir, bytes};
}

absl::Status ReadSpillFlags(const SpillFlags& flags, std::string* dir,
                            uint64_t* bytes) {
  *dir = flags.dir;
  if (flags.bytes == "auto") {
    *bytes = shm::StoreOptions::kSpillBytesAuto;
    return absl::OkStatus();
  }
  absl::StatusOr<uint64_t> n = ParseBytes(flags.bytes);
  if (!n.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--spill-bytes ", flags.bytes, ": ", n.status().message()));
  }
  *bytes = *n;
  return absl::OkStatus();
}

int StoreCommand(int argc, char** argv) {
  ArgParser p(
      "shoal store [flags]",
      "Runs a node's shared-memory tensor store in the foreground. Clients\n"
      "connect to the printed endpoint (also exported to children as\n"
      "SHOAL_STORE_ENDPOINT). Stops cleanly on SIGINT or SIGTERM and removes\n"
      "its /dev/shm segment.");
  std::string& job_id = p.String("job-id", "", "job id (default: a fresh one)");
  std::string& endpoint = p.String(
      "endpoint", "",
      "where to listen (default: ipc://<runtime dir>/<job>/store.sock)");
  uint64_t& bytes =
      p.Bytes("store-bytes", 0,
              "segment size (default: min(30% of RAM, 80% of free /dev/shm))");
  int64_t& max_objects =
      p.Int("max-objects", 0, "object table size (default: from the size)");
  int64_t& max_clients = p.Int("max-clients", 256, "most connected clients");
  uint64_t& ahead = p.Bytes("prefault-ahead", uint64_t{512} << 20,
                            "arena kept allocated ahead of use (0: off)");
  uint64_t& device_bytes =
      p.Bytes("device-bytes", 0,
              "most device memory held per GPU for device objects (0: as much "
              "as the GPU has)");
  uint64_t& device_chunk = p.Bytes("device-chunk-bytes", uint64_t{256} << 20,
                                   "device memory is taken in chunks of this");
  const SpillFlags spill = AddSpillFlags(p);
  if (absl::Status s = p.Parse(argc, argv); !s.ok()) return Fail(s);
  if (!p.positional().empty()) {
    return Fail(absl::InvalidArgumentError(
        absl::StrCat("unexpected argument '", p.positional()[0], "'")));
  }
  if (max_objects < 0 || max_clients <= 0) {
    return Fail(absl::InvalidArgumentError(
        "--max-objects and --max-clients must be positive"));
  }
  shm::StoreOptions options;
  options.job_id = job_id.empty() ? NewJobId() : job_id;
  options.endpoint = endpoint;
  options.store_bytes = bytes;
  options.max_objects = static_cast<uint32_t>(max_objects);
  options.max_clients = static_cast<uint32_t>(max_clients);
  options.prefault_ahead_bytes = ahead;
  if (device_bytes > 0) options.device.limit_bytes = device_bytes;
  options.device.chunk_bytes = device_chunk;
  if (absl::Status s =
          ReadSpillFlags(spill, &options.spill_dir, &options.spill_bytes);
      !s.ok()) {
    return Fail(s);
  }
  absl::StatusOr<std::unique_ptr<shm::StoreService>> service =
      shm::StoreService::Create(options);
  if (!service.ok()) return Fail(service.status());
  g_service = service->get();
  struct sigaction sa = {};
  sa.sa_handler = OnSignal;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  std::printf(
      "store ready: job %s, %s at /dev/shm/%s, endpoint %s\n",
      options.job_id.c_str(), FormatBytes((*service)->segment_bytes()).c_str(),
      (*service)->segment_name().c_str(), (*service)->endpoint().c_str());
  std::fflush(stdout);
  absl::Status s = (*service)->Run();
  g_service = nullptr;
  service->reset();
  if (!s.ok()) return Fail(s);
  return 0;
}

}  // namespace shoal::cli
