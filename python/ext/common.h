// Shared pieces of the `shoal._shoal` extension module: turning a Status into
// the matching shoal.Error exception, waiting interruptibly (Ctrl-C), and the
// store connection every ObjectRef keeps alive.
#ifndef SHOAL_PYTHON_EXT_COMMON_H_
#define SHOAL_PYTHON_EXT_COMMON_H_

#include <pybind11/pybind11.h>

#include <atomic>
#include <functional>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "shm/store_client.h"

namespace shoal::pyext {
namespace py = pybind11;

// Raises the shoal.Error subclass for `s` (shoal._errors.from_status):
// TimeoutError for DeadlineExceeded, NotFoundError, InvalidArgumentError, ...
// REQUIRES: the GIL is held; !s.ok().
[[noreturn]] void ThrowStatus(const absl::Status& s);

inline void Check(const absl::Status& s) {
  if (!s.ok()) ThrowStatus(s);
}

template <typename T>
T Unwrap(absl::StatusOr<T> v) {
  if (!v.ok()) ThrowStatus(v.status());
  return *std::move(v);
}

// How long a blocking call sleeps between checks for Ctrl-C.
inline constexpr absl::Duration kSignalCheckInterval = absl::Milliseconds(50);

// Python's timeout convention (None: forever; seconds otherwise) → Duration.
absl::Duration TimeoutFromPython(const py::object& seconds);

// Raises KeyboardInterrupt (or whatever a signal handler raised) if a signal
// arrived. REQUIRES: the GIL is held.
void CheckSignals();

// Runs `fn` on a helper thread with the GIL released and waits for it,
// checking for Ctrl-C every kSignalCheckInterval. On an interrupt the call
// raises at once; `fn` finishes in the background (it must own, or share
// ownership of, everything it touches). For calls that can block for long
// (barriers, waits on keys); quick calls run inline instead.
absl::Status RunInterruptibly(std::function<absl::Status()> fn);

// A store connection: the client or job that owns the StoreClient, kept
// alive by every ObjectRef made through it.
struct StoreHandle {
  StoreHandle(std::shared_ptr<void> owner, shm::StoreClient* store)
      : owner(std::move(owner)), store(store) {}

  std::shared_ptr<void> owner;
  shm::StoreClient* store = nullptr;
  // Set when a Delete found the store service unreachable (its node
  // stopped): dropping later refs releases them locally and sends no more
  // requests, each of which would wait out the RPC timeout.
  std::atomic<bool> service_gone{false};
};

// True once the interpreter runs its atexit hooks (module.h's
// WatchInterpreterExit registers one): refs collected during finalization
// send the store no requests.
bool InterpreterExiting();

}  // namespace shoal::pyext

#endif  // SHOAL_PYTHON_EXT_COMMON_H_
