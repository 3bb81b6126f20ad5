#include "observe/timeline_ring.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "base/monotonic_clock.h"

namespace shoal::observe {
namespace {

constexpr char kShmDir[] = "/dev/shm/";
constexpr char kSuffix[] = "-timeline";
constexpr size_t kRandomHexDigits = 12;
constexpr size_t kMaxJobIdBytes = 48;

bool ValidJobId(absl::string_view job) {
  if (job.empty() || job.size() > kMaxJobIdBytes) return false;
  for (char c : job) {
    if (!absl::ascii_isalnum(c) && c != '_' && c != '.' && c != '-')
      return false;
  }
  return true;
}

uint64_t RoundCapacity(uint64_t n) {
  n = std::max(n, kTimelineMinEvents);
  n = std::min(n, kTimelineMaxEvents);
  uint64_t p = 1;
  while (p < n) p <<= 1;
  return p;
}

uint64_t RingBytes(uint64_t capacity) {
  return kTimelineHeaderBytes + capacity * sizeof(TimelineSlot);
}

// A fixed field as a string: up to its first NUL, never past its end.
absl::string_view FieldView(const char* field, size_t size) {
  return absl::string_view(field, strnlen(field, size));
}
std::string FieldString(const char* field, size_t size) {
  return std::string(FieldView(field, size));
}

// The event's words, written and read as relaxed atomics: the sequence word
// around them orders them, and no access is a data race.
constexpr size_t kEventWords = sizeof(TimelineEvent) / sizeof(uint64_t);
static_assert(sizeof(TimelineEvent) % sizeof(uint64_t) == 0);
// TimelineRing::Write builds the names' words after the head's.
static_assert(offsetof(TimelineEvent, detail) ==
              offsetof(TimelineEvent, name) + kTimelineNameBytes);
static_assert(sizeof(TimelineEventHead) % sizeof(uint64_t) == 0);

void LoadWords(TimelineEvent* to, const TimelineEvent* from) {
  uint64_t words[kEventWords];
  const auto* src = reinterpret_cast<const uint64_t*>(from);
  for (size_t i = 0; i < kEventWords; ++i)
    words[i] = __atomic_load_n(&src[i], __ATOMIC_RELAXED);
  std::memcpy(to, words, sizeof(words));
}

std::string RandomHex() {
  uint8_t bytes[kRandomHexDigits / 2];
  size_t got = 0;
  while (got < sizeof(bytes)) {
    ssize_t n = getrandom(bytes + got, sizeof(bytes) - got, 0);
    if (n > 0) got += static_cast<size_t>(n);
  }
  std::string hex;
  for (uint8_t b : bytes) absl::StrAppendFormat(&hex, "%02x", b);
  return hex;
}

}  // namespace

void CopyString(char* to, size_t size, absl::string_view from) {
  const size_t n = std::min(size - 1, from.size());
  if (n > 0) std::memcpy(to, from.data(), n);  // data() may be null at 0
  std::memset(to + n, 0, size - n);
}

std::string TimelineSegmentName(absl::string_view job_id, int pid,
                                absl::string_view random_hex) {
  return absl::StrCat("shoal-", job_id, "-", pid, "-", random_hex, kSuffix);
}

bool ParseTimelineSegmentName(absl::string_view name, std::string* job_id,
                              int* pid) {
  // Parsed from the end, as a job id may hold '-' and digits itself.
  if (!absl::ConsumeSuffix(&name, kSuffix)) return false;
  if (name.size() < kRandomHexDigits + 1) return false;
  for (char c : name.substr(name.size() - kRandomHexDigits)) {
    if (!absl::ascii_isxdigit(c)) return false;
  }
  name.remove_suffix(kRandomHexDigits);
  if (!absl::ConsumeSuffix(&name, "-")) return false;
  const size_t dash = name.rfind('-');
  if (dash == absl::string_view::npos) return false;
  int p = 0;
  if (!absl::SimpleAtoi(name.substr(dash + 1), &p) || p <= 0) return false;
  absl::string_view job = name.substr(0, dash);
  if (!absl::ConsumePrefix(&job, "shoal-") || !ValidJobId(job)) return false;
  if (job_id != nullptr) *job_id = std::string(job);
  if (pid != nullptr) *pid = p;
  return true;
}

bool IsTimelineSegmentOf(absl::string_view name, absl::string_view job_id,
                         int* pid) {
  std::string job;
  int p = 0;
  if (!ParseTimelineSegmentName(name, &job, &p) || job != job_id) return false;
  if (pid != nullptr) *pid = p;
  return true;
}

std::vector<std::string> RemoveEndedJobsRings(
    const std::function<bool(const std::string& job_id)>& job_lives,
    const std::string& folder) {
  std::vector<std::string> removed;
  DIR* dir = opendir(folder.c_str());
  if (dir == nullptr) return removed;
  // Every ring of this user, by job; a job with one live writer is kept.
  std::map<std::string, std::vector<std::string>> rings;
  std::set<std::string> live;
  const uid_t uid = getuid();
  while (dirent* ent = readdir(dir)) {
    std::string job;
    int pid = 0;
    if (!ParseTimelineSegmentName(ent->d_name, &job, &pid)) continue;
    struct stat st;
    if (fstatat(dirfd(dir), ent->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 ||
        !S_ISREG(st.st_mode) || st.st_uid != uid) {
      continue;
    }
    // A pid reused since keeps the job: a ring kept too long, never one
    // removed under its writer.
    if (kill(pid, 0) == 0 || errno == EPERM) live.insert(job);
    rings[job].push_back(ent->d_name);
  }
  closedir(dir);
  for (const auto& [job, names] : rings) {
    if (live.count(job) != 0 || job_lives(job)) continue;
    for (const std::string& name : names) {
      if (unlink(absl::StrCat(folder, name).c_str()) == 0) {
        removed.push_back(name);
      }
    }
  }
  return removed;
}

absl::StatusOr<std::unique_ptr<TimelineRing>> TimelineRing::Create(
    absl::string_view job_id, absl::string_view label, uint64_t capacity) {
  if (!ValidJobId(job_id)) {
    return absl::InvalidArgumentError(
        absl::StrCat("timeline: job id '", absl::CHexEscape(job_id),
                     "' is not 1-48 of [A-Za-z0-9_.-]"));
  }
  capacity = RoundCapacity(capacity);
  const uint64_t bytes = RingBytes(capacity);
  const std::string name =
      TimelineSegmentName(job_id, static_cast<int>(getpid()), RandomHex());
  const std::string path = absl::StrCat(kShmDir, name);
  const int fd = open(path.c_str(),
                      O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) {
    return absl::InternalError(
        absl::StrCat("timeline: creating ", path, ": ", strerror(errno)));
  }
  // The mode is 0600 whatever the umask; the size never changes again.
  if (fchmod(fd, 0600) != 0 || ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    const int err = errno;
    close(fd);
    unlink(path.c_str());
    return absl::InternalError(
        absl::StrCat("timeline: sizing ", path, ": ", strerror(err)));
  }
  // Populated now: the ring's first lap would otherwise take a page fault
  // every 32 events, on the hot path of whatever records them.
  void* base = mmap(nullptr, bytes, PROT_READ | PROT_WRITE,
                    MAP_SHARED | MAP_POPULATE, fd, 0);
  close(fd);
  if (base == MAP_FAILED) {
    const int err = errno;
    unlink(path.c_str());
    return absl::InternalError(
        absl::StrCat("timeline: mapping ", path, ": ", strerror(err)));
  }
  auto ring =
      std::unique_ptr<TimelineRing>(new TimelineRing(name, base, bytes));
  TimelineHeader* h = ring->header_;
  h->layout_version = kTimelineLayoutVersion;
  h->slot_bytes = sizeof(TimelineSlot);
  h->capacity = capacity;
  h->pid = static_cast<int32_t>(getpid());
  h->created_ns = MonotonicNs();
  CopyString(h->job, sizeof(h->job), job_id);
  CopyString(h->label, sizeof(h->label), label);
  ring->mask_ = capacity - 1;
  ring->slots_ = reinterpret_cast<TimelineSlot*>(static_cast<char*>(base) +
                                                 kTimelineHeaderBytes);
  __atomic_store_n(&h->magic, kTimelineMagic, __ATOMIC_RELEASE);
  return ring;
}

TimelineRing::TimelineRing(std::string name, void* base, uint64_t bytes)
    : name_(std::move(name)),
      base_(base),
      bytes_(bytes),
      header_(static_cast<TimelineHeader*>(base)),
      slots_(nullptr),
      mask_(0) {}

TimelineRing::~TimelineRing() { munmap(base_, bytes_); }

TimelineSlot* TimelineRing::Claim(uint64_t* index) {
  const uint64_t i = header_->head.fetch_add(1, std::memory_order_relaxed);
  TimelineSlot& s = slots_[i & mask_];
  const uint64_t claim = 2 * i + 1;
  uint64_t seen = s.seq.load(std::memory_order_relaxed);
  // Odd: a writer is in it; at or past `claim`: a newer lap wrote it.
  if ((seen & 1) != 0 || seen >= claim ||
      !s.seq.compare_exchange_strong(seen, claim, std::memory_order_acquire,
                                     std::memory_order_relaxed)) {
    header_->dropped.fetch_add(1, std::memory_order_relaxed);
    return nullptr;
  }
  *index = i;
  return &s;
}

void TimelineRing::Publish(TimelineSlot* slot, uint64_t index) {
  slot->seq.store(2 * index + 2, std::memory_order_release);
  // The next event's slot (both of its cache lines), for writing: it is
  // usually not in the cache (the ring is megabytes), and the next write
  // would otherwise wait for it to be read in.
  const char* next =
      reinterpret_cast<const char*>(&slots_[(index + 1) & mask_]);
  __builtin_prefetch(next, 1, 3);
  __builtin_prefetch(next + 64, 1, 3);
}

void TimelineRing::Write(const TimelineEvent& e) {
  TimelineEventHead head;
  std::memcpy(&head, &e, sizeof(head));
  Write(head, FieldView(e.name, sizeof(e.name)),
        FieldView(e.detail, sizeof(e.detail)));
}

void TimelineRing::Write(const TimelineEventHead& head, absl::string_view name,
                         absl::string_view detail) {
  uint64_t i = 0;
  TimelineSlot* s = Claim(&i);
  if (s == nullptr) return;
  auto* dst = reinterpret_cast<uint64_t*>(&s->event);
  constexpr size_t kHeadWords = sizeof(TimelineEventHead) / sizeof(uint64_t);
  uint64_t words[kEventWords - kHeadWords] = {};
  uint64_t head_words[kHeadWords];
  std::memcpy(head_words, &head, sizeof(head_words));
  for (size_t w = 0; w < kHeadWords; ++w)
    __atomic_store_n(&dst[w], head_words[w], __ATOMIC_RELAXED);
  // The names, NUL-padded to their fields (at least one NUL each).
  auto* text = reinterpret_cast<char*>(words);
  const size_t n = std::min<size_t>(name.size(), kTimelineNameBytes - 1);
  const size_t d = std::min<size_t>(detail.size(), kTimelineDetailBytes - 1);
  if (n > 0) std::memcpy(text, name.data(), n);
  if (d > 0) std::memcpy(text + kTimelineNameBytes, detail.data(), d);
  for (size_t w = 0; w < kEventWords - kHeadWords; ++w)
    __atomic_store_n(&dst[kHeadWords + w], words[w], __ATOMIC_RELAXED);
  Publish(s, i);
}

namespace {

// Adds `v` to a counter that only the calling thread writes.
void AddOwn(std::atomic<uint64_t>* c, uint64_t v) {
  c->store(c->load(std::memory_order_relaxed) + v, std::memory_order_relaxed);
}

// The calling thread's last tally: the same op and backend (names of a
// call site, compared by address) find it without a search.
struct LastTally {
  const TimelineHeader* header = nullptr;
  const char* op = nullptr;
  size_t op_size = 0;
  const char* backend = nullptr;
  size_t backend_size = 0;
  CollectiveTally* tally = nullptr;
};
thread_local LastTally t_last_tally;

// Whether `t` is named (op, backend): a name at the same address may have
// been rewritten since.
bool Names(const CollectiveTally& t, absl::string_view op,
           absl::string_view backend) {
  return std::memcmp(t.op, op.data(), op.size()) == 0 &&
         t.op[op.size()] == '\0' &&
         std::memcmp(t.backend, backend.data(), backend.size()) == 0 &&
         t.backend[backend.size()] == '\0';
}

}  // namespace

CollectiveTally* TimelineRing::TallyFor(absl::string_view op,
                                        absl::string_view backend,
                                        uint32_t tid) {
  for (CollectiveTally& t : header_->tallies) {
    uint32_t state = t.state.load(std::memory_order_acquire);
    if (state == 0) {
      if (t.state.compare_exchange_strong(state, 1,
                                          std::memory_order_acquire)) {
        CopyString(t.op, sizeof(t.op), op);
        CopyString(t.backend, sizeof(t.backend), backend);
        t.writer_tid = tid;
        t.state.store(2, std::memory_order_release);
        return &t;
      }
    }
    // Another thread names it now: its name is known in a moment.
    while (state == 1) state = t.state.load(std::memory_order_acquire);
    if (t.writer_tid == tid && op == t.op && backend == t.backend) return &t;
  }
  return nullptr;
}

void TimelineRing::CountCollective(absl::string_view op,
                                   absl::string_view backend, uint64_t bytes,
                                   int64_t busy_ns, int64_t wait_ns,
                                   uint32_t tid) {
  op = op.substr(0, kTallyOpBytes - 1);
  backend = backend.substr(0, kTallyBackendBytes - 1);
  LastTally& last = t_last_tally;
  CollectiveTally* t = last.tally;
  if (last.header != header_ || last.op != op.data() ||
      last.op_size != op.size() || last.backend != backend.data() ||
      last.backend_size != backend.size() || t->writer_tid != tid ||
      !Names(*t, op, backend)) {
    t = TallyFor(op, backend, tid);
    if (t == nullptr) {
      header_->tallies_full.fetch_add(1, std::memory_order_relaxed);
      return;
    }
    last = {header_, op.data(), op.size(), backend.data(), backend.size(), t};
  }
  AddOwn(&t->calls, 1);
  AddOwn(&t->bytes, bytes);
  AddOwn(&t->busy_ns, static_cast<uint64_t>(std::max<int64_t>(busy_ns, 0)));
  AddOwn(&t->wait_ns, static_cast<uint64_t>(std::max<int64_t>(wait_ns, 0)));
}

absl::StatusOr<RingSnapshot> ReadRing(const std::string& segment,
                                      int64_t since_ns, bool events) {
  const std::string path = absl::StrCat(kShmDir, segment);
  const int fd = open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    if (err == ENOENT) return absl::NotFoundError(path);
    if (err == ELOOP) return absl::PermissionDeniedError(path + " is a link");
    return absl::PermissionDeniedError(absl::StrCat(path, ": ", strerror(err)));
  }
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != geteuid() ||
      (st.st_mode & 077) != 0) {
    close(fd);
    return absl::PermissionDeniedError(
        absl::StrCat(path, " is not a private file of this user: not read"));
  }
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  if (size < RingBytes(kTimelineMinEvents) ||
      size > RingBytes(kTimelineMaxEvents)) {
    close(fd);
    return absl::DataLossError(absl::StrCat(path, ": size ", size));
  }
  void* base = mmap(nullptr, size, PROT_READ, MAP_SHARED, fd, 0);
  close(fd);
  if (base == MAP_FAILED) {
    return absl::InternalError(
        absl::StrCat("mapping ", path, ": ", strerror(errno)));
  }
  struct Unmap {
    void* p;
    uint64_t n;
    ~Unmap() { munmap(p, n); }
  } unmap{base, size};
  const auto* h = static_cast<const TimelineHeader*>(base);
  const uint64_t capacity = __atomic_load_n(&h->capacity, __ATOMIC_RELAXED);
  if (__atomic_load_n(&h->magic, __ATOMIC_ACQUIRE) != kTimelineMagic ||
      h->layout_version != kTimelineLayoutVersion ||
      h->slot_bytes != sizeof(TimelineSlot) || capacity < kTimelineMinEvents ||
      capacity > kTimelineMaxEvents || (capacity & (capacity - 1)) != 0 ||
      RingBytes(capacity) != size) {
    return absl::DataLossError(absl::StrCat(
        path, ": not a timeline ring of layout ", kTimelineLayoutVersion));
  }
  RingSnapshot snap;
  snap.segment = segment;
  snap.label = FieldString(h->label, sizeof(h->label));
  snap.pid = h->pid;
  snap.capacity = capacity;
  snap.written = h->head.load(std::memory_order_acquire);
  snap.dropped = h->dropped.load(std::memory_order_relaxed);
  for (const CollectiveTally& t : h->tallies) {
    if (t.state.load(std::memory_order_acquire) != 2) continue;
    const std::string op = FieldString(t.op, sizeof(t.op));
    const std::string backend = FieldString(t.backend, sizeof(t.backend));
    // One count per kind: the threads' entries summed.
    auto c = std::find_if(snap.collectives.begin(), snap.collectives.end(),
                          [&](const CollectiveCount& k) {
                            return k.op == op && k.backend == backend;
                          });
    if (c == snap.collectives.end()) {
      c = snap.collectives.insert(snap.collectives.end(), CollectiveCount{});
      c->op = op;
      c->backend = backend;
    }
    c->calls += t.calls.load(std::memory_order_relaxed);
    c->bytes += t.bytes.load(std::memory_order_relaxed);
    c->busy_ns += t.busy_ns.load(std::memory_order_relaxed);
    c->wait_ns += t.wait_ns.load(std::memory_order_relaxed);
  }
  if (!events) return snap;
  const auto* slots = reinterpret_cast<const TimelineSlot*>(
      static_cast<const char*>(base) + kTimelineHeaderBytes);
  const uint64_t first = snap.written > capacity ? snap.written - capacity : 0;
  snap.events.reserve(snap.written - first);
  for (uint64_t i = first; i < snap.written; ++i) {
    const TimelineSlot& s = slots[i & (capacity - 1)];
    const uint64_t want = 2 * i + 2;
    if (s.seq.load(std::memory_order_acquire) != want) continue;
    TimelineEvent e;
    LoadWords(&e, &s.event);
    std::atomic_thread_fence(std::memory_order_acquire);
    if (s.seq.load(std::memory_order_relaxed) != want) continue;
    if (e.end_ns < since_ns) continue;
    e.name[kTimelineNameBytes - 1] = '\0';
    e.detail[kTimelineDetailBytes - 1] = '\0';
    if (e.end_ns < e.start_ns) e.end_ns = e.start_ns;
    snap.events.push_back(e);
  }
  return snap;
}

}  // namespace shoal::observe
