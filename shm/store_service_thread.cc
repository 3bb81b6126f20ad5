#include "shm/store_service_thread.h"

#include <utility>

#include "base/status_macros.h"

namespace shoal::shm {

StoreServiceThread::StoreServiceThread(std::unique_ptr<StoreService> service)
    : service_(std::move(service)),
      thread_([s = service_.get()] { (void)s->Run(); }) {}

StoreServiceThread::~StoreServiceThread() {
  service_->Stop();
  thread_.join();
}

absl::StatusOr<std::unique_ptr<StoreServiceThread>> StoreServiceThread::Start(
    StoreOptions options) {
  SHOAL_ASSIGN_OR_RETURN(std::unique_ptr<StoreService> service,
                         StoreService::Create(std::move(options)));
  return std::unique_ptr<StoreServiceThread>(
      new StoreServiceThread(std::move(service)));
}

absl::StatusOr<std::unique_ptr<StoreClient>> StoreServiceThread::Connect(
    const std::string& name, StoreClientOptions options) const {
  options.endpoint = service_->endpoint();
  options.name = name;
  return StoreClient::Connect(std::move(options));
}

}  // namespace shoal::shm
