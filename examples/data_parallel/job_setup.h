// The parts of a data-parallel run that involve the whole job rather than
// one rank's arithmetic: agreeing on CPU or GPU, and sharing the data set
// through each node's store.
#ifndef SHOAL_EXAMPLES_DATA_PARALLEL_JOB_SETUP_H_
#define SHOAL_EXAMPLES_DATA_PARALLEL_JOB_SETUP_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "examples/data_parallel/backend.h"
#include "examples/data_parallel/model.h"
#include "ipc/object_id.h"
#include "launch/job.h"

namespace shoal::dp {

struct DeviceChoice {
  bool gpu = false;
  int device = 0;   // CUDA ordinal among this process's visible devices
  std::string why;  // one line for the log
};

// `flag`: "auto" (a GPU when this build has CUDA and the process sees a GPU
// of its own: under `shoal launch --nproc-per-node gpu` each process sees
// exactly one; with more visible than local ranks, local rank k takes GPU k),
// "cpu", or "gpu" (an error if there is none). Every rank must choose the
// same kind, since the collectives must match: the choices are compared
// through the key-value store.
// Errors: InvalidArgument (bad flag), FailedPrecondition (gpu forced without
// one; ranks disagree), the key-value store's errors.
absl::StatusOr<DeviceChoice> ChooseDevice(launch::Job& job,
                                          absl::string_view flag,
                                          absl::string_view kv_prefix);

// The data set in the node's store. The first process on each node
// generates it into a store object it creates (no staging copy) and
// publishes the id under <kv_prefix>/dataset/node<k>; every process maps it
// read-only. Deterministic generation gives every node the same bytes.
class SharedDataset {
 public:
  // Errors: the store's (ResourceExhausted when it is too small: the message
  // says how much is needed) and the key-value store's.
  static absl::StatusOr<SharedDataset> Open(launch::Job& job,
                                            const ModelSpec& spec,
                                            int64_t samples, uint64_t seed,
                                            absl::string_view kv_prefix);
  SharedDataset(SharedDataset&& other) noexcept;
  SharedDataset& operator=(SharedDataset&&) = delete;
  // Releases this process's view.
  ~SharedDataset();

  DataView view() const { return view_; }
  // Whether this process generated the object (and should delete it).
  bool owner() const { return owner_; }
  const ObjectId& id() const { return id_; }
  // Releases the view; the owner then deletes the object (call after a
  // barrier, once no process reads it).
  absl::Status Close();

 private:
  SharedDataset(launch::Job* job, ObjectId id, DataView view, bool owner)
      : job_(job), id_(id), view_(view), owner_(owner) {}
  launch::Job* job_;
  ObjectId id_;
  DataView view_;
  bool owner_;
};

}  // namespace shoal::dp

#endif  // SHOAL_EXAMPLES_DATA_PARALLEL_JOB_SETUP_H_
