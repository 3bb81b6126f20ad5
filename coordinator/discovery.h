// The discovery file: how clients on a node find its coordinator without
// flags. `shoal start` writes <runtime dir>/<job>/coordinator and points
// <runtime dir>/current at the job; clients read them.
#ifndef SHOAL_COORDINATOR_DISCOVERY_H_
#define SHOAL_COORDINATOR_DISCOVERY_H_

#include <sys/types.h>

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace shoal::coordinator {

struct Discovery {
  std::string job_id;
  std::string frontend;    // ipc:// socket in the job folder (local clients)
  std::string tcp;         // tcp://host:port (CURVE) for remote clients
  std::string store;       // the store's ipc:// endpoint
  std::string tasks;       // the task segment's name
  pid_t pid = 0;           // the coordinator
  std::string server_key;  // CURVE public key (Z85), empty when off
  // The owner's CURVE key-pair file (mode 0600 in the job folder): what a
  // client of the node's owner uses to reach `tcp`.
  std::string client_key_file;
};

// Writes the job's discovery file (atomically) and points `current` at it.
absl::Status WriteDiscovery(const Discovery& d);

// Reads a job's discovery file; with an empty job id, the one `current`
// names (or SHOAL_JOB_ID's). Errors: NotFound with a hint to start a node.
absl::StatusOr<Discovery> ReadDiscovery(absl::string_view job_id = "");

// Removes the job's discovery file, and `current` if it names the job.
void RemoveDiscovery(absl::string_view job_id);

// Removes the runtime folders of jobs whose coordinator is dead (a SIGKILLed
// coordinator leaves its sockets and discovery file). Returns the job ids.
std::vector<std::string> RemoveStaleJobDirs();

}  // namespace shoal::coordinator

#endif  // SHOAL_COORDINATOR_DISCOVERY_H_
