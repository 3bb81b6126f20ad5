// TimelineRing: one process's record of what it did, a bounded ring of
// fixed-size events in a shared-memory file that other processes of the same
// user read (`shoal timeline`), also after the writer died.
//
//   /dev/shm/shoal-<job>-<pid>-<12 random hex digits>-timeline
//   [TimelineHeader: magic, layout, capacity, pid, job, label, head,
//    the collective tallies]
//   [TimelineSlot × capacity]  (capacity a power of two)
//
// Writing takes no lock and makes no system call: a writer takes the next
// index with one atomic add, claims the index's slot by moving its sequence
// word from even to odd with a compare-and-swap (dropping the event if a
// writer of an older lap still holds it), copies the event in and publishes
// the sequence word 2 * index + 2. A reader copies a slot and keeps it only
// if the sequence word was 2 * index + 2 before and after the copy, so a
// slot overwritten mid-read is skipped, never returned torn.
//
// The file is made O_CREAT|O_EXCL|O_NOFOLLOW, mode 0600, under a name with
// fresh randomness (no one can take it first), and never grows. A reader
// maps it read-only, only if it is a regular file of its own user with no
// group or other permissions and exactly the size its header's capacity
// gives; everything it copies out is checked (lengths, terminators), since
// a file is only as trustworthy as its writer.
#ifndef SHOAL_OBSERVE_TIMELINE_RING_H_
#define SHOAL_OBSERVE_TIMELINE_RING_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace shoal::observe {

inline constexpr uint64_t kTimelineMagic = 0x4c4e4c54414f4853ULL;  // SHOALTLN
inline constexpr uint32_t kTimelineLayoutVersion = 3;
inline constexpr uint32_t kTimelineNameBytes = 56;    // including the NUL
inline constexpr uint32_t kTimelineDetailBytes = 16;  // including the NUL
inline constexpr uint32_t kTimelineLabelBytes = 64;   // including the NUL
inline constexpr uint32_t kTimelineJobBytes = 64;     // including the NUL
// Bounds a reader accepts for a ring's capacity.
inline constexpr uint64_t kTimelineMinEvents = 64;
inline constexpr uint64_t kTimelineMaxEvents = uint64_t{1} << 20;

// What an event records. The numbers are part of the layout.
enum class EventKind : uint16_t {
  kSpan = 1,        // a region of user code (shoal.span, ScopedSpan)
  kTask = 2,        // a task: claimed → done on its worker
  kActorCall = 3,   // a task that is an actor's call
  kStorePut = 4,    // a store object created and written
  kStoreGet = 5,    // a store object mapped for reading
  kCollective = 6,  // one collective call on its rank
  kLauncher = 7,    // a launcher's step (rendezvous, a start of the ranks)
  kInstant = 8,     // a moment: a restart, the first failure
};

// One event as written. 120 bytes: with its sequence word a slot is 128.
struct TimelineEvent {
  int64_t start_ns = 0;  // CLOCK_MONOTONIC
  int64_t end_ns = 0;    // == start_ns for an instant
  // A task: when it was queued (0: unknown). A collective: nanoseconds it
  // waited for its peers (0: not measured).
  int64_t aux_ns = 0;
  uint64_t id = 0;     // a task's id; a collective's sequence number
  uint64_t bytes = 0;  // a store object's or a collective's bytes
  uint32_t tid = 0;    // the writing thread
  uint16_t kind = 0;   // EventKind
  int16_t code = 0;    // absl::StatusCode of the outcome (0: ok)
  char name[kTimelineNameBytes] = {};
  char detail[kTimelineDetailBytes] = {};  // a backend, an op, a role
};
static_assert(sizeof(TimelineEvent) == 120);

// An event's numbers: the first part of TimelineEvent, word for word, for
// TimelineRing::Write with the names apart.
struct TimelineEventHead {
  int64_t start_ns = 0;
  int64_t end_ns = 0;
  int64_t aux_ns = 0;
  uint64_t id = 0;
  uint64_t bytes = 0;
  uint32_t tid = 0;
  uint16_t kind = 0;
  int16_t code = 0;
};
static_assert(sizeof(TimelineEventHead) == offsetof(TimelineEvent, name));

struct alignas(64) TimelineSlot {
  std::atomic<uint64_t> seq;  // 2 * index + 2 once event `index` is whole
  TimelineEvent event;
};
static_assert(sizeof(TimelineSlot) == 128);

// What one kind of collective call came to in one thread of a process: its
// calls, bytes, time in the calls and time waiting for peers, by (op,
// backend). Kept in the ring's header, so that the launcher reads them for
// its metrics without the process (and after it ended); the reader sums a
// process's entries of one kind. Named once (state 0 → 1 → 2 by the thread
// that claims it), then added to by that thread only: plain loads and stores,
// no read-modify-write on a call's path.
inline constexpr uint32_t kCollectiveTallies = 32;
inline constexpr uint32_t kTallyOpBytes = 24;       // including the NUL
inline constexpr uint32_t kTallyBackendBytes = 16;  // including the NUL
struct CollectiveTally {
  std::atomic<uint32_t> state;  // 0: free; 1: being named; 2: named
  char op[kTallyOpBytes];
  char backend[kTallyBackendBytes];
  uint32_t writer_tid;  // the one thread that adds to it
  std::atomic<uint64_t> calls;
  std::atomic<uint64_t> bytes;
  std::atomic<uint64_t> busy_ns;  // in the calls
  std::atomic<uint64_t> wait_ns;  // of that, waiting for peers
};
static_assert(sizeof(CollectiveTally) == 80);

struct TimelineHeader {
  uint64_t magic;
  uint32_t layout_version;
  uint32_t slot_bytes;
  uint64_t capacity;  // slots
  int32_t pid;
  uint32_t reserved;
  int64_t created_ns;  // CLOCK_MONOTONIC
  char job[kTimelineJobBytes];
  char label[kTimelineLabelBytes];         // "worker 3", "rank 1", "launcher"
  alignas(64) std::atomic<uint64_t> head;  // the next index
  alignas(64) std::atomic<uint64_t> dropped;
  // Collectives of kinds beyond kCollectiveTallies (not counted).
  std::atomic<uint64_t> tallies_full;
  alignas(64) CollectiveTally tallies[kCollectiveTallies];
};
inline constexpr uint64_t kTimelineHeaderBytes = 4096;
static_assert(sizeof(TimelineHeader) <= kTimelineHeaderBytes);

// The writer's side: owns the mapping; never unlinks the file (a ring
// outlives its process: the node or launcher removes it).
class TimelineRing {
 public:
  // Creates /dev/shm/<TimelineSegmentName(job, pid, random)> with
  // `capacity` events (rounded up to a power of two, clamped to the reader's
  // bounds). Errors: InvalidArgument (a job id SegmentNameForJob refuses),
  // Internal (the file or mapping could not be made).
  static absl::StatusOr<std::unique_ptr<TimelineRing>> Create(
      absl::string_view job_id, absl::string_view label, uint64_t capacity);
  ~TimelineRing();
  TimelineRing(const TimelineRing&) = delete;
  TimelineRing& operator=(const TimelineRing&) = delete;

  // Appends an event of `head`'s numbers named `name` and `detail` (cut to
  // their fields), built in its slot (lock-free, no system call). Drops it,
  // counting it in the header, when a writer of an older lap still holds
  // its slot.
  void Write(const TimelineEventHead& head, absl::string_view name,
             absl::string_view detail);
  // The same for a whole event (its names up to their first NUL).
  void Write(const TimelineEvent& e);
  // Adds one collective call to the calling thread's (op, backend) tally
  // (lock-free; names are cut to the tally's fields). `tid` is the calling
  // thread's id (TimelineThreadId).
  void CountCollective(absl::string_view op, absl::string_view backend,
                       uint64_t bytes, int64_t busy_ns, int64_t wait_ns,
                       uint32_t tid);

  const std::string& name() const { return name_; }
  uint64_t capacity() const { return header_->capacity; }

 private:
  TimelineRing(std::string name, void* base, uint64_t bytes);
  // Claims the slot of the next event (its index in `index`); null when a
  // writer of an older lap still holds it (the event is dropped, counted).
  TimelineSlot* Claim(uint64_t* index);
  // Makes the claimed slot's event readable and prefetches the next slot.
  void Publish(TimelineSlot* slot, uint64_t index);
  // Thread `tid`'s tally of (op, backend), named now if it has none; null
  // when every tally is taken.
  CollectiveTally* TallyFor(absl::string_view op, absl::string_view backend,
                            uint32_t tid);

  std::string name_;
  void* base_;
  uint64_t bytes_;
  TimelineHeader* header_;
  TimelineSlot* slots_;
  uint64_t mask_;
};

// Copies `from` into the fixed field `to` of `size` bytes: at most size - 1
// bytes of it, the rest zeros (always NUL-terminated).
// REQUIRES: size > 0.
void CopyString(char* to, size_t size, absl::string_view from);

// "shoal-<job>-<pid>-<random>-timeline" for the given parts.
std::string TimelineSegmentName(absl::string_view job_id, int pid,
                                absl::string_view random_hex);
// True when `name` (a /dev/shm entry) is a ring of job `job_id`; `pid` gets
// its writer's pid.
bool IsTimelineSegmentOf(absl::string_view name, absl::string_view job_id,
                         int* pid);
// True when `name` is a ring's name; `job_id` and `pid` get its parts.
bool ParseTimelineSegmentName(absl::string_view name, std::string* job_id,
                              int* pid);

// Removes this user's rings of jobs that have ended: no ring of the job has
// a live writer, and `job_lives(job_id)` is false. `job_lives` names what
// else keeps a job's rings wanted (a node's store, whose node reads its dead
// workers' rings). A ring outlives its writer, so without this the rings of
// a job killed whole (node and workers) stay in /dev/shm. `folder` holds
// the rings and ends in '/' (tests name one of their own). Returns the
// names removed.
std::vector<std::string> RemoveEndedJobsRings(
    const std::function<bool(const std::string& job_id)>& job_lives,
    const std::string& folder = "/dev/shm/");

// A tally as a reader copied it.
struct CollectiveCount {
  std::string op;
  std::string backend;
  uint64_t calls = 0;
  uint64_t bytes = 0;
  uint64_t busy_ns = 0;
  uint64_t wait_ns = 0;
};

// A ring's contents as a reader copied them.
struct RingSnapshot {
  std::string segment;  // its /dev/shm name
  std::string label;
  int pid = 0;
  uint64_t capacity = 0;
  uint64_t written = 0;  // events ever written (the head)
  uint64_t dropped = 0;
  std::vector<TimelineEvent> events;         // whole events, oldest first
  std::vector<CollectiveCount> collectives;  // the named tallies
};

// Copies the events of the ring in /dev/shm/<segment> whose end is at or
// after `since_ns` (0: all; with `events` false, none), and its tallies.
// Errors: NotFound, PermissionDenied (another user's file, a link, or one
// others may read or write), DataLoss (not a ring of this layout, or a size
// that does not match its header).
absl::StatusOr<RingSnapshot> ReadRing(const std::string& segment,
                                      int64_t since_ns, bool events = true);

}  // namespace shoal::observe

#endif  // SHOAL_OBSERVE_TIMELINE_RING_H_
