#include "shm/segment.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/sysinfo.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "base/log.h"
#include "base/process_info.h"
#include "base/runtime_dir.h"
#include "base/status_macros.h"
#include "shm/layout.h"

namespace shoal::shm {
namespace {

constexpr char kShmDir[] = "/dev/shm";
constexpr char kPrefix[] = "shoal-";
constexpr char kSuffix[] = "-store";
constexpr char kTaskSuffix[] = "-tasks";
constexpr char kCollSuffix[] = "-coll";

// mremap's flag (Linux 5.7; for shared mappings 5.13), absent from older
// headers. Older kernels refuse it with EINVAL: Remap then falls back.
#ifdef MREMAP_DONTUNMAP
constexpr int kMremapDontUnmap = MREMAP_DONTUNMAP;
#else
constexpr int kMremapDontUnmap = 4;
#endif

std::string HumanBytes(uint64_t b) {
  if (b >= (uint64_t{1} << 30))
    return absl::StrFormat("%.1f GiB", b / 1073741824.0);
  if (b >= (uint64_t{1} << 20))
    return absl::StrFormat("%.1f MiB", b / 1048576.0);
  return absl::StrCat(b, " bytes");
}

// What the header says about a segment's owner. `valid` is false when the
// file is too short or has no magic yet.
struct OwnerInfo {
  bool valid = false;
  pid_t pid = 0;
  uint64_t start_ticks = 0;
};

OwnerInfo ReadOwner(int fd) {
  OwnerInfo info;
  SegmentPrefix h;
  if (pread(fd, &h, sizeof(h), 0) != static_cast<ssize_t>(sizeof(h))) {
    return info;
  }
  if (h.magic == 0) return info;
  info.valid = true;
  info.pid = h.owner_pid;
  info.start_ticks = h.owner_start_ticks;
  return info;
}

// A segment is stale when its owner is gone. One without a header is stale
// once it is older than a few seconds (its creator died before writing one).
bool IsStale(int fd) {
  OwnerInfo owner = ReadOwner(fd);
  if (owner.valid) return !ProcessIsAlive(owner.pid, owner.start_ticks);
  struct stat st;
  if (fstat(fd, &st) != 0) return false;
  return time(nullptr) - st.st_mtime > 10;
}

}  // namespace

absl::StatusOr<std::string> SegmentNameForJob(absl::string_view job_id) {
  SHOAL_RETURN_IF_ERROR(CheckJobId(job_id));
  return absl::StrCat(kPrefix, job_id, kSuffix);
}

absl::StatusOr<uint64_t> ShmFreeBytes() {
  struct statvfs vfs;
  if (statvfs(kShmDir, &vfs) != 0) return SHOAL_ERRNO("statvfs(/dev/shm)");
  return static_cast<uint64_t>(vfs.f_bavail) * vfs.f_frsize;
}

absl::StatusOr<uint64_t> DefaultStoreBytes() {
  struct sysinfo si;
  if (sysinfo(&si) != 0) return SHOAL_ERRNO("sysinfo");
  const uint64_t ram = static_cast<uint64_t>(si.totalram) * si.mem_unit;
  SHOAL_ASSIGN_OR_RETURN(uint64_t shm_free, ShmFreeBytes());
  return std::min(ram / 10 * 3, shm_free / 5 * 4) & ~uint64_t{kPageSize - 1};
}

namespace bip = boost::interprocess;

// Runs a Boost.Interprocess call, turning its exception into a Status.
template <typename Fn>
absl::Status CallBoost(absl::string_view what, Fn fn) {
  try {
    fn();
    return absl::OkStatus();
  } catch (const bip::interprocess_exception& e) {
    const int err = e.get_native_error();
    if (err != 0) return ErrnoStatus(err, what, __FILE__, __LINE__);
    return absl::InternalError(absl::StrCat(what, ": ", e.what()));
  }
}

Segment::Segment(std::string name, bip::shared_memory_object shm,
                 bip::mapped_region region, bool owner)
    : name_(std::move(name)),
      shm_(std::move(shm)),
      region_(std::move(region)),
      owner_(owner) {
  const uint64_t chunks = (size() >> kChunkShift) + 1;
  populated_ = std::make_unique<std::atomic<uint64_t>[]>((chunks + 63) / 64);
}

std::string FallbackSegmentName(absl::string_view name) {
  uint64_t r = 0;
  if (getrandom(&r, sizeof(r), 0) != sizeof(r))
    r = static_cast<uint64_t>(absl::ToUnixNanos(absl::Now()));
  const std::string token = absl::StrFormat("%012x", r & 0xffffffffffffULL);
  size_t cut = name.rfind('-');
  if (cut == absl::string_view::npos || cut == 0)
    return absl::StrCat(name, "-", token);
  const size_t before = name.rfind('-', cut - 1);
  if (before != absl::string_view::npos && before + 1 < cut &&
      std::all_of(name.begin() + before + 1, name.begin() + cut,
                  [](char c) { return c >= '0' && c <= '9'; })) {
    cut = before;
  }
  return absl::StrCat(name.substr(0, cut), "-", token, name.substr(cut));
}

absl::StatusOr<std::unique_ptr<Segment>> Segment::Create(
    const std::string& name, uint64_t bytes) {
  if (bytes < kPageSize) {
    return absl::InvalidArgumentError(
        absl::StrCat("store size ", bytes, " is too small"));
  }
  std::string actual = name;
  for (int attempt = 0;; ++attempt) {
    const std::string file = absl::StrCat(kShmDir, "/", actual);
    struct stat st;
    const bool held = lstat(file.c_str(), &st) == 0 && st.st_uid != geteuid();
    if (!held) {
      absl::StatusOr<std::unique_ptr<Segment>> made =
          CreateNamed(actual, bytes);
      // Another user may take the name between the check and the creation.
      if (!absl::IsAlreadyExists(made.status()) ||
          lstat(file.c_str(), &st) != 0 || st.st_uid == geteuid()) {
        return made;
      }
    }
    if (attempt >= 3) {
      return absl::AlreadyExistsError(absl::StrCat(
          file, " belongs to uid ", st.st_uid,
          ", not to this user, and so did the names tried instead"));
    }
    const std::string next = FallbackSegmentName(name);
    SHOAL_LOG(WARNING,
              "%s belongs to uid %d, not to this user (uid %d): someone else "
              "made it, so it is not used; this segment is /dev/shm/%s "
              "instead",
              file, st.st_uid, geteuid(), next);
    actual = next;
  }
}

absl::StatusOr<std::unique_ptr<Segment>> Segment::CreateNamed(
    const std::string& name, uint64_t bytes) {
  const std::string path = absl::StrCat("/", name);
  // A segment left by a dead owner is removed; a live owner's is an error.
  if (int old = shm_open(path.c_str(), O_RDONLY, 0); old >= 0) {
    const bool stale = IsStale(old);
    const OwnerInfo owner = ReadOwner(old);
    close(old);
    if (!stale) {
      return absl::AlreadyExistsError(
          absl::StrCat("store segment /dev/shm/", name, " is in use by pid ",
                       owner.pid, "; stop that store or use another job id"));
    }
    bip::shared_memory_object::remove(name.c_str());
  }
  SHOAL_ASSIGN_OR_RETURN(uint64_t shm_free, ShmFreeBytes());
  if (bytes > shm_free) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "the store needs ", HumanBytes(bytes), " but /dev/shm has only ",
        HumanBytes(shm_free),
        " free. Pass a smaller --store-bytes, or give /dev/shm more room: "
        "under Docker run with --shm-size=8g (the default is 64 MiB); on a "
        "host, "
        "`mount -o remount,size=8G /dev/shm`."));
  }
  bip::shared_memory_object shm;
  bip::mapped_region region;
  bip::permissions owner_only(0600);
  absl::Status s = CallBoost(absl::StrCat("creating /dev/shm/", name), [&] {
    shm = bip::shared_memory_object(bip::create_only, name.c_str(),
                                    bip::read_write, owner_only);
  });
  if (!s.ok()) return s;
  s = CallBoost(absl::StrCat("sizing and mapping /dev/shm/", name), [&] {
    shm.truncate(static_cast<bip::offset_t>(bytes));
    region = bip::mapped_region(shm, bip::read_write);
  });
  if (!s.ok()) {
    bip::shared_memory_object::remove(name.c_str());
    return s;
  }
  return std::unique_ptr<Segment>(
      new Segment(name, std::move(shm), std::move(region), /*owner=*/true));
}

absl::StatusOr<std::unique_ptr<Segment>> Segment::Open(
    const std::string& name, uint64_t magic, uint32_t layout_version) {
  bip::shared_memory_object shm;
  bip::mapped_region region;
  absl::Status s = CallBoost(absl::StrCat("opening /dev/shm/", name), [&] {
    shm = bip::shared_memory_object(bip::open_only, name.c_str(),
                                    bip::read_write);
  });
  if (absl::IsNotFound(s)) {
    return absl::NotFoundError(
        absl::StrCat("no segment /dev/shm/", name,
                     " (is its store or coordinator running?)"));
  }
  if (!s.ok()) return s;
  // Checked on the descriptor opened, not the name: a segment planted by
  // another user under the expected name is never mapped.
  struct stat st;
  if (fstat(shm.get_mapping_handle().handle, &st) != 0)
    return SHOAL_ERRNO(absl::StrCat("fstat /dev/shm/", name));
  if (st.st_uid != geteuid()) {
    return absl::PermissionDeniedError(absl::StrCat(
        "/dev/shm/", name, " belongs to uid ", st.st_uid,
        ", not to this user (uid ", geteuid(), "): refusing to map it"));
  }
  bip::offset_t size = 0;
  if (!shm.get_size(size) || static_cast<uint64_t>(size) < kPageSize) {
    return absl::FailedPreconditionError(
        absl::StrCat("/dev/shm/", name, " is not a shoal segment"));
  }
  s = CallBoost(absl::StrCat("mapping /dev/shm/", name),
                [&] { region = bip::mapped_region(shm, bip::read_write); });
  if (!s.ok()) return s;
  std::unique_ptr<Segment> seg(
      new Segment(name, std::move(shm), std::move(region), /*owner=*/false));
  const auto* h = reinterpret_cast<const SegmentPrefix*>(seg->base());
  if (h->magic != magic || h->segment_bytes != seg->size()) {
    return absl::FailedPreconditionError(
        absl::StrCat("/dev/shm/", name, " is not the shoal segment expected"));
  }
  if (h->layout_version != layout_version) {
    return absl::FailedPreconditionError(absl::StrCat(
        "/dev/shm/", name, " has layout version ", h->layout_version,
        ", this build speaks ", layout_version, "; use matching shoal builds"));
  }
  if (h->ready.load(std::memory_order_acquire) == 0) {
    return absl::FailedPreconditionError(
        "the segment's owner is still initialising it");
  }
  if (h->closed.load(std::memory_order_acquire) != 0) {
    return absl::FailedPreconditionError("the segment's owner has shut down");
  }
  return seg;
}

void Segment::InitPrefix(absl::string_view job_id, uint32_t layout_version,
                         uint32_t header_bytes) {
  auto* h = reinterpret_cast<SegmentPrefix*>(base());
  h->magic = 0;  // written last: a half-initialised segment is never valid
  h->layout_version = layout_version;
  h->header_bytes = header_bytes;
  h->segment_bytes = size();
  h->owner_pid = getpid();
  h->owner_start_ticks = ProcessStartTicks(getpid()).value_or(0);
  snprintf(h->job_id, sizeof(h->job_id), "%s", std::string(job_id).c_str());
}

void Segment::Publish(uint64_t magic) {
  auto* h = reinterpret_cast<SegmentPrefix*>(base());
  std::atomic_thread_fence(std::memory_order_release);
  h->magic = magic;
  h->ready.store(1, std::memory_order_release);
}

void Segment::Unlink() {
  bip::shared_memory_object::remove(name_.c_str());
  owner_ = false;
}

void Segment::MarkClosed() {
  reinterpret_cast<SegmentPrefix*>(base())->closed.store(
      1, std::memory_order_release);
}

std::vector<std::string> Segment::RemoveStale() {
  std::vector<std::string> removed;
  DIR* dir = opendir(kShmDir);
  if (dir == nullptr) return removed;
  const uid_t uid = getuid();
  while (dirent* ent = readdir(dir)) {
    const std::string name = ent->d_name;
    if (!absl::StartsWith(name, kPrefix) ||
        !(absl::EndsWith(name, kSuffix) || absl::EndsWith(name, kTaskSuffix) ||
          absl::EndsWith(name, kCollSuffix))) {
      continue;
    }
    const std::string path = absl::StrCat("/", name);
    int fd = shm_open(path.c_str(), O_RDONLY, 0);
    if (fd < 0) continue;
    struct stat st;
    const bool mine = fstat(fd, &st) == 0 && st.st_uid == uid;
    const bool stale = mine && IsStale(fd);
    close(fd);
    if (stale && shm_unlink(path.c_str()) == 0) removed.push_back(name);
  }
  closedir(dir);
  return removed;
}

Segment::~Segment() {
  {
    // A parked area maps the file too: left mapped, it would keep the
    // unlinked segment's memory alive.
    MutexLock lock(&parked_mu_);
    for (const auto& [offset, p] : parked_) munmap(p.at, p.bytes);
    parked_.clear();
  }
  region_ = bip::mapped_region();
  shm_ = bip::shared_memory_object();
  if (owner_) bip::shared_memory_object::remove(name_.c_str());
}

void Segment::Populate(uint64_t offset, uint64_t bytes) {
  const uint64_t size_ = size();
  if (bytes == 0 || offset >= size_) return;
  const uint64_t end = std::min(size_, offset + bytes);
  for (uint64_t c = offset >> kChunkShift; (c << kChunkShift) < end; ++c) {
    std::atomic<uint64_t>& word = populated_[c / 64];
    const uint64_t bit = uint64_t{1} << (c % 64);
    if (word.load(std::memory_order_relaxed) & bit) continue;
    const uint64_t start = c << kChunkShift;
    const uint64_t len =
        std::min<uint64_t>(uint64_t{1} << kChunkShift, size_ - start);
    // Re-mapping the chunk in place with MAP_POPULATE fills its page tables in
    // one kernel call, about 3x faster than MADV_POPULATE_WRITE and 5-10x
    // faster than taking a fault per page. The pages themselves are the same,
    // so concurrent readers see no change.
    void* p = mmap(base() + start, len, PROT_READ | PROT_WRITE,
                   MAP_SHARED | MAP_FIXED | MAP_POPULATE, fd(),
                   static_cast<off_t>(start));
    if (p != MAP_FAILED) word.fetch_or(bit, std::memory_order_relaxed);
  }
}

size_t Segment::parked_ranges() const {
  MutexLock lock(&parked_mu_);
  return parked_.size();
}

bool Segment::OverlapsParkedLocked(uint64_t offset, uint64_t bytes) const {
  auto it = parked_.lower_bound(offset + bytes);
  if (it == parked_.begin()) return false;
  --it;  // the last area starting before the range's end
  return it->first + it->second.bytes > offset;
}

void Segment::DropParkedLocked(uint64_t offset, uint64_t bytes) {
  while (OverlapsParkedLocked(offset, bytes)) {
    auto it = std::prev(parked_.lower_bound(offset + bytes));
    munmap(it->second.at, it->second.bytes);
    parked_.erase(it);
  }
}

uint8_t* Segment::ParkLocked(uint64_t offset, uint64_t bytes) {
  // The area is placed at the same offset modulo 2 MiB as the range, so that
  // mremap moves the range's whole page-table pages (one entry per 2 MiB)
  // rather than its 4 KiB entries one by one.
  constexpr uint64_t kAlign = uint64_t{1} << kChunkShift;
  const uint64_t reserve = bytes + kAlign;
  void* r = mmap(nullptr, reserve, PROT_NONE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (r == MAP_FAILED) return nullptr;
  const uintptr_t lo = reinterpret_cast<uintptr_t>(r);
  const uintptr_t phase =
      reinterpret_cast<uintptr_t>(base() + offset) & (kAlign - 1);
  uintptr_t at = ((lo + kAlign - 1) & ~(kAlign - 1)) + phase;
  if (at - lo >= kAlign) at -= kAlign;  // stays inside the reservation
  void* moved = mremap(base() + offset, bytes, bytes,
                       MREMAP_MAYMOVE | MREMAP_FIXED | kMremapDontUnmap,
                       reinterpret_cast<void*>(at));
  if (moved == MAP_FAILED) {
    munmap(r, reserve);
    return nullptr;
  }
  // The reservation's ends are ours: unmapped now, so that no later unmap
  // of the area can hit what another thread mapped there.
  if (at > lo) munmap(r, at - lo);
  if (at + bytes < lo + reserve) {
    munmap(reinterpret_cast<void*>(at + bytes), lo + reserve - (at + bytes));
  }
  return static_cast<uint8_t*>(moved);
}

absl::Status Segment::Remap(uint64_t offset, uint64_t bytes,
                            bool copy_on_write) {
  const uint64_t size_ = size();
  if (bytes == 0 || offset % kPageSize != 0 || bytes % kPageSize != 0 ||
      offset > size_ || bytes > size_ - offset) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cannot remap [", offset, ", +", bytes, ") of a segment of ", size_,
        " bytes: page-aligned, non-empty and inside it only"));
  }
  // Mark first: a concurrent Populate of an overlapping chunk would
  // otherwise re-map it MAP_SHARED after this call.
  for (uint64_t c = offset >> kChunkShift; (c << kChunkShift) < offset + bytes;
       ++c) {
    populated_[c / 64].fetch_or(uint64_t{1} << (c % 64),
                                std::memory_order_relaxed);
  }
  uint8_t* const addr = base() + offset;
  MutexLock lock(&parked_mu_);
  if (!copy_on_write) {
    auto it = parked_.find(offset);
    if (it != parked_.end() && it->second.bytes == bytes) {
      // Replaces the private range (dropping only the entries this process
      // made there since) with the parked shared one, entries and all.
      const Parked p = it->second;
      parked_.erase(it);
      if (mremap(p.at, bytes, bytes, MREMAP_MAYMOVE | MREMAP_FIXED, addr) !=
          MAP_FAILED) {
        return absl::OkStatus();
      }
      munmap(p.at, bytes);  // refused: left in place; mapped anew below
    }
    DropParkedLocked(offset, bytes);
  }
  uint8_t* parked = nullptr;
  if (copy_on_write && parking_.load(std::memory_order_relaxed) &&
      !OverlapsParkedLocked(offset, bytes)) {
    parked = ParkLocked(offset, bytes);
  }
  void* p = mmap(addr, bytes, PROT_READ | PROT_WRITE,
                 MAP_FIXED | (copy_on_write ? MAP_PRIVATE : MAP_SHARED), fd(),
                 static_cast<off_t>(offset));
  if (p == MAP_FAILED) {
    const int err = errno;
    // The range is still mapped shared (without entries, if they were
    // parked: they fault in again).
    if (parked != nullptr) munmap(parked, bytes);
    return absl::InternalError(absl::StrCat("mmap of the store segment (",
                                            bytes, " bytes): ", strerror(err)));
  }
  if (parked != nullptr) parked_[offset] = Parked{parked, bytes};
  return absl::OkStatus();
}

}  // namespace shoal::shm
