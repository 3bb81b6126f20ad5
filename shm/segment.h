// Segment: the store's shared-memory file under /dev/shm, mapped into this
// process. The store service creates (and at the end removes) it; clients open
// it by the name the service gives them.
#ifndef SHOAL_SHM_SEGMENT_H_
#define SHOAL_SHM_SEGMENT_H_

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "base/mutex.h"
#include "boost/interprocess/mapped_region.hpp"
#include "boost/interprocess/shared_memory_object.hpp"

namespace shoal::shm {

// "shoal-<job_id>-store", the segment's name under /dev/shm.
// Errors: InvalidArgument if job_id is empty, longer than 48 bytes, or holds
// characters other than [A-Za-z0-9_.-].
absl::StatusOr<std::string> SegmentNameForJob(absl::string_view job_id);

// The name a segment takes when another user holds `name`: `name` with
// "-<12 random hex digits>" put before its last "-<word>", or before the
// "-<digits>" that precedes it (a collective segment's creator pid, which the
// janitor reads), e.g. shoal-j1-store -> shoal-j1-3fa9c0d2e1b4-store,
// shoal-j1-grp-42-coll -> shoal-j1-grp-0c1d2e3f4a5b-42-coll. Fresh randomness
// at each call, so no one can take it first.
std::string FallbackSegmentName(absl::string_view name);

// Bytes free in /dev/shm (statvfs), or the error.
absl::StatusOr<uint64_t> ShmFreeBytes();

// The default store size: min(30% of RAM, 80% of free /dev/shm).
absl::StatusOr<uint64_t> DefaultStoreBytes();

class Segment {
 public:
  // Creates and maps /dev/shm/<name> with `bytes` bytes, mode 0600. A segment
  // of the same name of this user whose owner is dead is removed first. A
  // name held by another user (a file or link of theirs) is never opened,
  // removed or used: the segment is made under FallbackSegmentName(name)
  // instead, with a warning naming the held path and its owner; name() tells
  // the name made.
  // Errors: AlreadyExists (a live process of this user owns it, or other
  // users took three names in a row), ResourceExhausted
  // (/dev/shm has less free space than `bytes`; the message says how to give
  // it more), InvalidArgument, Internal.
  static absl::StatusOr<std::unique_ptr<Segment>> Create(
      const std::string& name, uint64_t bytes);

  // Maps an existing segment read-write and checks its SegmentPrefix.
  // Errors: NotFound (no such segment), PermissionDenied (the segment belongs
  // to another user), FailedPrecondition (another magic or layout version,
  // not yet initialised, or closed), Internal.
  static absl::StatusOr<std::unique_ptr<Segment>> Open(const std::string& name,
                                                       uint64_t magic,
                                                       uint32_t layout_version);

  // Fills the prefix of a freshly created segment (magic stays 0) ...
  void InitPrefix(absl::string_view job_id, uint32_t layout_version,
                  uint32_t header_bytes);
  // ... and, once everything else is initialised, makes it valid.
  void Publish(uint64_t magic);
  // Marks it closed, so clients fail fast (clean shutdown).
  void MarkClosed();

  // Removes every /dev/shm/shoal-* segment of this user whose owner is dead
  // (a store or coordinator killed without cleaning up). Returns the names.
  static std::vector<std::string> RemoveStale();

  // Unmaps; the creator also unlinks the file.
  ~Segment();
  Segment(const Segment&) = delete;
  Segment& operator=(const Segment&) = delete;

  uint8_t* base() const { return static_cast<uint8_t*>(region_.get_address()); }
  uint64_t size() const { return region_.get_size(); }
  int fd() const { return shm_.get_mapping_handle().handle; }
  const std::string& name() const { return name_; }

  // Fills this process's page tables for [offset, offset + bytes) so that
  // writing there does not fault once per 4 KiB page. Work is done once per
  // 2 MiB chunk per process; thread-safe. Best effort: failures are ignored
  // (the pages then fault in on touch).
  void Populate(uint64_t offset, uint64_t bytes);

  // Maps [offset, offset + bytes) of this process's view anew, in place:
  // copy_on_write true maps it MAP_PRIVATE (the same bytes; this process's
  // later writes go to private pages, the segment never changes), false
  // MAP_SHARED again (the segment's current bytes). Marks every 2 MiB chunk
  // it touches populated, so that no later Populate re-maps the range shared
  // behind the caller's back. Other processes' views are untouched.
  //
  // Replacing a mapping drops its page-table entries, which costs time per
  // present 4 KiB page (about a millisecond per 32 MiB). So copy_on_write
  // first moves the range's shared entries aside (mremap MREMAP_DONTUNMAP,
  // Linux >= 5.13: page tables moved, nothing dropped; tens of times faster)
  // into a parking area of this process, and maps the private range with
  // none; sharing the same range again moves them back (mremap). Both ends
  // are then cheap whatever was touched before, and the re-shared range is
  // populated as it was. Where mremap refuses (older kernels, the map count
  // limit) it falls back to replacing the mapping.
  // REQUIRES: offset and bytes are multiples of kPageSize.
  // Errors: InvalidArgument (unaligned, empty or outside the segment),
  // Internal (mmap failed; the range keeps its old mapping).
  absl::Status Remap(uint64_t offset, uint64_t bytes, bool copy_on_write);

  // Ranges whose shared entries are parked now (for tests).
  size_t parked_ranges() const;
  // Off: Remap replaces mappings (the fallback) instead of parking (tests).
  void set_parking_for_testing(bool on) { parking_ = on; }

  // Stops the creator from unlinking at destruction (tests of stale cleanup).
  void LeakForTesting() { owner_ = false; }

  // Removes the name now (the mapping stays valid while mapped): once every
  // user has it open, nothing can be left behind by a crash.
  void Unlink();

 private:
  Segment(std::string name, boost::interprocess::shared_memory_object shm,
          boost::interprocess::mapped_region region, bool owner);

  // Create under exactly `name` (no fallback).
  static absl::StatusOr<std::unique_ptr<Segment>> CreateNamed(
      const std::string& name, uint64_t bytes);

  static constexpr uint64_t kChunkShift = 21;  // 2 MiB populate granularity

  // Where a range's shared page-table entries went (Remap).
  struct Parked {
    uint8_t* at = nullptr;
    uint64_t bytes = 0;
  };
  // Moves the present entries of [offset, +bytes) into a new area of this
  // process, leaving the range mapped shared without entries; nullptr if
  // mremap refused (nothing changed then).
  uint8_t* ParkLocked(uint64_t offset, uint64_t bytes)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(parked_mu_);
  // Whether a parked area overlaps [offset, +bytes).
  bool OverlapsParkedLocked(uint64_t offset, uint64_t bytes) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(parked_mu_);
  // Unmaps every parked area overlapping [offset, +bytes).
  void DropParkedLocked(uint64_t offset, uint64_t bytes)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(parked_mu_);

  std::string name_;
  boost::interprocess::shared_memory_object shm_;
  boost::interprocess::mapped_region region_;
  bool owner_;
  std::unique_ptr<std::atomic<uint64_t>[]> populated_;  // bit per chunk
  std::atomic<bool> parking_{true};
  mutable Mutex parked_mu_;
  std::map<uint64_t, Parked> parked_ ABSL_GUARDED_BY(parked_mu_);  // offset
};

}  // namespace shoal::shm

#endif  // SHOAL_SHM_SEGMENT_H_
