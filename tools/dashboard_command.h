// What `shoal dashboard` serves from, also for `shoal start --dashboard`.
#ifndef SHOAL_TOOLS_DASHBOARD_COMMAND_H_
#define SHOAL_TOOLS_DASHBOARD_COMMAND_H_

#include <string>

#include "observe/dashboard_server.h"

namespace shoal::cli {

// The dashboard's endpoints for job `job_id`: its node's status, asked of
// the node (through `endpoint`, else the job's discovery file) as a client
// that connects at the first request and again after a failure, and its
// timeline rings on this machine. A launched job has no node: its status
// is an error the page shows, its timeline holds its ranks.
observe::DashboardSources NodeDashboardSources(std::string job_id,
                                               std::string endpoint);

}  // namespace shoal::cli

#endif  // SHOAL_TOOLS_DASHBOARD_COMMAND_H_
