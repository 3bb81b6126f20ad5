// StoreServiceThread: a store service on a thread of the calling process, for
// tests that run the service and its clients side by side (ThreadSanitizer
// then sees both sides).
//
//   auto store = StoreServiceThread::Start(options);
//   auto client = (*store)->Connect("producer");
//   ...                     // clients go before the StoreServiceThread does
#ifndef SHOAL_SHM_STORE_SERVICE_THREAD_H_
#define SHOAL_SHM_STORE_SERVICE_THREAD_H_

#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "shm/store_client.h"
#include "shm/store_service.h"

namespace shoal::shm {

class StoreServiceThread {
 public:
  // Creates the service and starts serving on a new thread.
  // Errors: StoreService::Create's.
  static absl::StatusOr<std::unique_ptr<StoreServiceThread>> Start(
      StoreOptions options);
  // Stops the service and waits for its thread.
  ~StoreServiceThread();
  StoreServiceThread(const StoreServiceThread&) = delete;
  StoreServiceThread& operator=(const StoreServiceThread&) = delete;

  StoreService& service() { return *service_; }
  const std::string& endpoint() const { return service_->endpoint(); }

  // A client of the service named `name`, with `options` otherwise (their
  // endpoint and name are set here). Errors: StoreClient::Connect's.
  absl::StatusOr<std::unique_ptr<StoreClient>> Connect(
      const std::string& name, StoreClientOptions options = {}) const;

 private:
  explicit StoreServiceThread(std::unique_ptr<StoreService> service);

  std::unique_ptr<StoreService> service_;
  std::thread thread_;
};

}  // namespace shoal::shm

#endif  // SHOAL_SHM_STORE_SERVICE_THREAD_H_
