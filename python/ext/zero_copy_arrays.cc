#include "python/ext/zero_copy_arrays.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"

namespace shoal::pyext {
namespace {

constexpr uint64_t kPage = 4096;

uint64_t RoundUpToPage(uint64_t n) { return (n + kPage - 1) & ~(kPage - 1); }

// pagemap entry bits (Documentation/admin-guide/mm/pagemap.rst).
constexpr uint64_t kPagePresent = uint64_t{1} << 63;
constexpr uint64_t kPageSwapped = uint64_t{1} << 62;
constexpr uint64_t kPageFileOrSharedAnon = uint64_t{1} << 61;

}  // namespace

bool ArrayStore::Reachable() const {
  return client != nullptr && !client->closed() &&
         !unreachable.load(std::memory_order_relaxed) &&
         (service_gone == nullptr ||
          !service_gone->load(std::memory_order_relaxed)) &&
         (quiet == nullptr || !quiet());
}

void ArrayStore::Saw(const absl::Status& s) {
  if (absl::IsUnavailable(s) || absl::IsDeadlineExceeded(s)) {
    unreachable.store(true, std::memory_order_relaxed);
  }
}

SealedArrayObject::~SealedArrayObject() {
  // Releasing is local (the shared table); deleting asks the service, which
  // is skipped once it is gone (the segment went with it).
  (void)store_->client->Release(id_);
  if (store_->Reachable()) store_->Saw(store_->client->Delete(id_));
}

absl::StatusOr<bool> PagesWrittenPrivately(const uint8_t* addr,
                                           uint64_t bytes) {
  const int fd = open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    return absl::InternalError(
        absl::StrCat("/proc/self/pagemap: ", strerror(errno)));
  }
  const uint64_t first = reinterpret_cast<uintptr_t>(addr) / kPage;
  const uint64_t pages = RoundUpToPage(bytes) / kPage;
  std::vector<uint64_t> entries(std::min<uint64_t>(pages, 8192));
  bool written = false;
  absl::Status error;
  for (uint64_t done = 0; done < pages && !written;) {
    const uint64_t n = std::min<uint64_t>(pages - done, entries.size());
    const ssize_t got =
        pread(fd, entries.data(), n * sizeof(uint64_t),
              static_cast<off_t>((first + done) * sizeof(uint64_t)));
    if (got != static_cast<ssize_t>(n * sizeof(uint64_t))) {
      error = absl::InternalError("/proc/self/pagemap: short read");
      break;
    }
    for (uint64_t i = 0; i < n; ++i) {
      const uint64_t e = entries[i];
      // A written page of a private file mapping is an anonymous page: present
      // without the file bit, or swapped out. An unwritten one is absent or
      // the file's (shared memory's) page.
      if ((e & kPageSwapped) ||
          ((e & kPagePresent) && !(e & kPageFileOrSharedAnon))) {
        written = true;
        break;
      }
    }
    done += n;
  }
  close(fd);
  if (!error.ok()) return error;
  return written;
}

void ZeroCopyArrays::SetStore(std::shared_ptr<ArrayStore> store,
                              uint64_t threshold_bytes) {
  std::shared_ptr<ArrayStore> old;
  std::vector<Allocation> spares;
  {
    MutexLock lock(&mu_);
    old = std::exchange(store_, std::move(store));
    threshold_ = std::max<uint64_t>(threshold_bytes, 1);
    spares = TakeSparesLocked();
  }
  for (Allocation& a : spares) Release(std::move(a));
}

void ZeroCopyArrays::ClearStore(const ArrayStore* store) {
  std::shared_ptr<ArrayStore> old;
  std::vector<Allocation> spares;
  {
    MutexLock lock(&mu_);
    if (store_.get() != store) return;
    old = std::move(store_);
    spares = TakeSparesLocked();
  }
  for (Allocation& a : spares) Release(std::move(a));
}

bool ZeroCopyArrays::KeepSpareLocked(Allocation& a) {
  if (a.sealed || a.forked || a.store != store_ || !a.store->Reachable() ||
      spares_.size() >= kMaxSpares ||
      spare_bytes_ + a.object_bytes > kMaxSpareBytes) {
    return false;
  }
  spare_bytes_ += a.object_bytes;
  spares_.emplace(a.span, std::move(a));
  return true;
}

std::vector<ZeroCopyArrays::Allocation> ZeroCopyArrays::TakeSparesLocked() {
  std::vector<Allocation> out;
  for (auto& [span, a] : spares_) out.push_back(std::move(a));
  spares_.clear();
  spare_bytes_ = 0;
  return out;
}

void* ZeroCopyArrays::Allocate(size_t bytes) {
  std::shared_ptr<ArrayStore> store;
  {
    MutexLock lock(&mu_);
    if (!store_ || bytes < threshold_) return nullptr;
    store = store_;
    auto spare = spares_.find(RoundUpToPage(bytes));
    if (spare != spares_.end() && store_->Reachable()) {
      Allocation a = std::move(spare->second);
      spares_.erase(spare);
      spare_bytes_ -= a.object_bytes;
      a.requested = bytes;
      ++stats_.spares_reused;
      uint8_t* addr = a.addr;
      allocations_.emplace(reinterpret_cast<uintptr_t>(addr), std::move(a));
      return addr;
    }
  }
  Allocation a;
  a.requested = bytes;
  a.span = RoundUpToPage(bytes);
  a.id = ObjectId::Random();
  // One page more than the span: the store aligns objects to 64 bytes, the
  // range must start on a page (whole pages are re-mapped copy-on-write).
  a.object_bytes = a.span + kPage;
  absl::StatusOr<shm::MutableObjectBuffer> created;
  if (store->Reachable()) {
    created = store->client->Create(
        a.id, TensorMeta::Contiguous(DType::kU8,
                                     {static_cast<int64_t>(a.object_bytes)}));
  }
  MutexLock lock(&mu_);
  if (!created.ok()) store->Saw(created.status());
  if (!store->Reachable() || !created.ok()) {
    ++stats_.refused;
    return nullptr;
  }
  a.object_data = created->data;
  a.addr = reinterpret_cast<uint8_t*>(
      RoundUpToPage(reinterpret_cast<uintptr_t>(created->data)));
  a.store = std::move(store);
  ++stats_.placed;
  uint8_t* addr = a.addr;
  allocations_.emplace(reinterpret_cast<uintptr_t>(addr), std::move(a));
  return addr;
}

bool ZeroCopyArrays::Contains(const void* p, size_t bytes) const {
  MutexLock lock(&mu_);
  return FindLocked(p, bytes) != nullptr;
}

size_t ZeroCopyArrays::RequestedSize(const void* p) const {
  MutexLock lock(&mu_);
  auto it = allocations_.find(reinterpret_cast<uintptr_t>(p));
  return it == allocations_.end() ? 0 : it->second.requested;
}

bool ZeroCopyArrays::Free(void* p) {
  Allocation a;
  {
    MutexLock lock(&mu_);
    auto it = allocations_.find(reinterpret_cast<uintptr_t>(p));
    if (it == allocations_.end()) return false;
    a = std::move(it->second);
    allocations_.erase(it);
    if (KeepSpareLocked(a)) return true;
  }
  Release(std::move(a));
  return true;
}

void ZeroCopyArrays::Release(Allocation a) {
  if (a.forked) {
    // A forked child's private copy: share the range again (as it was before
    // the allocation). The parent's objects are the parent's to free.
    (void)a.store->client->RemapLocally(a.addr, a.span, false);
    new std::shared_ptr<ArrayStore>(std::move(a.store));  // never dropped
    return;
  }
  if (!a.sealed) {
    if (a.store->Reachable()) a.store->Saw(a.store->client->Abort(a.id));
    return;
  }
  // The range back to the segment's pages, so that later objects placed
  // there are seen as they are. If that fails the private pages would hide
  // them: the object is then kept (never freed) rather than reused.
  if (!a.store->client->RemapLocally(a.addr, a.span, false).ok()) {
    new std::shared_ptr<SealedArrayObject>(std::move(a.sealed));
  }
}

ZeroCopyArrays::Allocation* ZeroCopyArrays::FindLocked(const void* p,
                                                       size_t bytes) {
  const uintptr_t at = reinterpret_cast<uintptr_t>(p);
  auto it = allocations_.upper_bound(at);
  if (it == allocations_.begin()) return nullptr;
  --it;
  Allocation& a = it->second;
  if (at + bytes > it->first + a.requested || a.forked) return nullptr;
  return &a;
}

absl::Status ZeroCopyArrays::SealLocked(Allocation& a) {
  // Copy-on-write first, then seal: once sealed, no write of this process
  // reaches the object.
  SHOAL_RETURN_IF_ERROR(a.store->client->RemapLocally(a.addr, a.span, true));
  absl::Status sealed = a.store->client->Seal(a.id);
  if (!sealed.ok()) {
    (void)a.store->client->RemapLocally(a.addr, a.span, false);
    return sealed;
  }
  a.sealed = std::make_shared<SealedArrayObject>(a.store, a.id);
  return absl::OkStatus();
}

absl::StatusOr<std::optional<ZeroCopyArrays::Snapshot>>
ZeroCopyArrays::SnapshotOf(const void* data, size_t bytes) {
  MutexLock lock(&mu_);
  Allocation* a = FindLocked(data, bytes);
  if (a == nullptr) return std::nullopt;
  if (!a->sealed) {
    SHOAL_RETURN_IF_ERROR(SealLocked(*a));
  } else {
    absl::StatusOr<bool> written = PagesWrittenPrivately(a->addr, a->span);
    if (!written.ok() || *written) {
      ++stats_.written;
      return std::nullopt;
    }
    ++stats_.reused;
  }
  Snapshot s;
  s.object = a->sealed;
  s.buffer = shm::ObjectBuffer{
      a->id, a->object_data, a->object_bytes,
      TensorMeta::Contiguous(DType::kU8,
                             {static_cast<int64_t>(a->object_bytes)})};
  s.offset =
      static_cast<uint64_t>(static_cast<const uint8_t*>(data) - a->object_data);
  return s;
}

ZeroCopyArrays::Stats ZeroCopyArrays::stats() const {
  MutexLock lock(&mu_);
  Stats s = stats_;
  for (const auto& [at, a] : allocations_) {
    if (a.forked) continue;
    ++s.live;
    s.live_bytes += a.requested;
    if (a.sealed) ++s.sealed;
  }
  s.spares = spares_.size();
  return s;
}

void ZeroCopyArrays::PrepareFork() { mu_.Lock(); }

void ZeroCopyArrays::ParentAfterFork() { mu_.Unlock(); }

void ZeroCopyArrays::ChildAfterFork() {
  // Only this thread runs in the child. The parent's store connection is
  // not ours: drop nothing through it (leak the handles), request nothing.
  if (store_) new std::shared_ptr<ArrayStore>(std::move(store_));
  // Spares are the parent's objects (shared pages): never the child's to
  // reuse or abort. Their store handles are leaked with the rest.
  for (auto& [span, a] : spares_) {
    new std::shared_ptr<ArrayStore>(std::move(a.store));
  }
  spares_.clear();
  spare_bytes_ = 0;
  for (auto& [at, a] : allocations_) {
    if (a.forked) continue;
    void* copy = mmap(nullptr, a.span, PROT_READ | PROT_WRITE,
                      MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (copy != MAP_FAILED) {
      std::memcpy(copy, a.addr, a.span);
      if (mremap(copy, a.span, a.span, MREMAP_MAYMOVE | MREMAP_FIXED, a.addr) ==
          MAP_FAILED) {
        munmap(copy, a.span);
      }
    }
    if (a.sealed) new std::shared_ptr<SealedArrayObject>(std::move(a.sealed));
    a.forked = true;
  }
  mu_.Unlock();
}

}  // namespace shoal::pyext
