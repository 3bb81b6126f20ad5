// The metrics of `shoal launch --metrics-port N`: what the launcher of one
// node knows (its job, its ranks, the restarts so far) and the collective
// tallies of the job's processes on its machine, read from their timeline
// rings' headers at each scrape (observe/timeline_ring.h): nothing is counted
// for the endpoint, and a rank that ended keeps its counts while its ring
// is there.
#ifndef SHOAL_OBSERVE_LAUNCH_METRICS_H_
#define SHOAL_OBSERVE_LAUNCH_METRICS_H_

#include <string>
#include <vector>

#include "observe/timeline_read.h"
#include "prometheus/metric_family.h"

namespace shoal::observe {

struct LaunchFigures {
  std::string job_id;
  int node_rank = 0;
  int local_ranks = 0;  // ranks this launcher starts per generation
  int restarts = 0;     // times it started its ranks again
  // The job's rings on this machine, with their tallies
  // (GatherCollectiveTallies).
  Timeline tallies;
};

// The metric families of `f` (names in docs/observability.md).
std::vector<prometheus::MetricFamily> LaunchFamiliesOf(const LaunchFigures& f);

}  // namespace shoal::observe

#endif  // SHOAL_OBSERVE_LAUNCH_METRICS_H_
