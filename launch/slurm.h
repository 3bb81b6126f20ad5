// Slurm support for `shoal launch`: when a job runs inside a Slurm allocation,
// the node count, this node's rank and the host list come from the
// environment Slurm sets (SLURM_JOB_ID, SLURM_NNODES, SLURM_NODEID,
// SLURM_JOB_NODELIST, ...) rather than from flags.
#ifndef SHOAL_LAUNCH_SLURM_H_
#define SHOAL_LAUNCH_SLURM_H_

#include <cstddef>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace shoal::launch {

// The most hosts ExpandSlurmNodelist produces for one list.
inline constexpr size_t kMaxSlurmHosts = 100000;

// Expands Slurm's compressed hostlist syntax, as in SLURM_JOB_NODELIST, into
// host names in order.
//
// The list is comma-separated items (a comma inside brackets belongs to the
// bracket group). An item is literal text with zero or more bracket groups;
// a group holds comma-separated numbers ("3") or ranges ("01-04"):
//   "node[01-04,07],gpu3" -> node01 node02 node03 node04 node07 gpu3
//   "n[008-011]"          -> n008 n009 n010 n011   (width of the range start)
//   "r[1-2]n[1-2]"        -> r1n1 r1n2 r2n1 r2n2   (cartesian product, the
//                                                   leftmost group slowest)
//   "a[1-2]-ib"           -> a1-ib a2-ib           (text after a group kept)
// Numbers are zero-padded to the number of digits written for the range's
// start (or the single number). Duplicates are kept as written.
//
// Whitespace: leading and trailing ASCII whitespace of each top-level item
// (hence of the whole list) is trimmed, so "a, b\n" is {a, b}; whitespace
// anywhere else (inside an item or a bracket group) is an error.
//
// Errors (all InvalidArgument, naming the offending text): an empty list or
// an empty item ("a,,b", "a,"); unbalanced or nested brackets ("n[1-2",
// "n1]", "n[[1]]"); an empty bracket group or empty element ("n[]",
// "n[1,,2]"); a bound that is not plain decimal digits ("n[a-b]", "n[-3]",
// "n[1-2-3]") or has more than 18 digits; a range whose end is below its
// start ("n[5-3]"); interior whitespace; an expansion of more than
// kMaxSlurmHosts hosts in total (checked before any host is built).
absl::StatusOr<std::vector<std::string>> ExpandSlurmNodelist(
    absl::string_view list);

// Where this process sits in a Slurm job.
struct SlurmJob {
  int nnodes = 0;                  // nodes in the job (>= 1)
  int node_rank = 0;               // this node, in [0, nnodes)
  std::string head_host;           // hosts[0]: where rank 0 runs
  std::vector<std::string> hosts;  // the expanded node list, nnodes long
  std::string job_id;              // SLURM_JOB_ID, as written
  int ntasks_per_node = 0;         // SLURM_NTASKS_PER_NODE; 0 when unset
};

// Reads the Slurm job this process runs in from the environment.
//
// Returns nullopt when SLURM_JOB_ID is unset (not inside Slurm). Otherwise
// reads:
//   SLURM_JOB_ID                             required, non-empty
//   SLURM_NNODES, else SLURM_JOB_NUM_NODES   required, an integer >= 1
//   SLURM_NODEID                             required, an integer
//   SLURM_JOB_NODELIST, else SLURM_NODELIST  required, see ExpandSlurmNodelist
//   SLURM_NTASKS_PER_NODE                    optional; its leading number is
//                                            taken ("4" or "4(x2)" -> 4), and
//                                            must be >= 1
// Where both names of a pair are set, the first wins. Integers may carry
// surrounding whitespace.
//
// Errors (all InvalidArgument, naming the variable and its value): a required
// variable missing or empty; a value that is not a valid integer (or, for
// SLURM_NTASKS_PER_NODE, does not start with one, or has text after the
// number other than "(..." or ",..."); a node list that does not expand;
// SLURM_NODEID outside [0, nnodes); nnodes different from the number of
// expanded hosts.
absl::StatusOr<std::optional<SlurmJob>> SlurmJobFromEnvironment();

// As above, reading variables through `getenv` (nullopt: unset) instead of
// the process environment; for tests and callers with their own environment.
absl::StatusOr<std::optional<SlurmJob>> SlurmJobFromEnvironment(
    const std::function<std::optional<std::string>(absl::string_view)>& getenv);

}  // namespace shoal::launch

#endif  // SHOAL_LAUNCH_SLURM_H_
