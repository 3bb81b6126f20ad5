#include "observe/timeline.h"

#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <memory>
#include <string_view>

#include "absl/strings/numbers.h"
#include "base/mutex.h"

namespace shoal::observe {
namespace {

// Set once, never freed: events may be written until the process exits.
std::atomic<TimelineRing*> g_ring{nullptr};
Mutex g_start_mu;

uint64_t RingEvents() {
  const char* s = std::getenv("SHOAL_TIMELINE_EVENTS");
  uint64_t n = 0;
  if (s != nullptr && absl::SimpleAtoi(s, &n) && n > 0) return n;
  return kDefaultTimelineEvents;
}

}  // namespace

absl::Status StartTimeline(absl::string_view job_id, absl::string_view label) {
  MutexLock lock(&g_start_mu);
  if (g_ring.load(std::memory_order_acquire) != nullptr)
    return absl::OkStatus();
  if (const char* on = std::getenv("SHOAL_TIMELINE");
      on != nullptr && std::string_view(on) == "0") {
    return absl::OkStatus();  // recording switched off
  }
  absl::StatusOr<std::unique_ptr<TimelineRing>> ring =
      TimelineRing::Create(job_id, label, RingEvents());
  if (!ring.ok()) return ring.status();
  g_ring.store(ring->release(), std::memory_order_release);
  return absl::OkStatus();
}

bool TimelineOn() { return g_ring.load(std::memory_order_relaxed) != nullptr; }

std::string TimelineSegment() {
  TimelineRing* r = g_ring.load(std::memory_order_acquire);
  return r == nullptr ? std::string() : r->name();
}

uint32_t TimelineThreadId() {
  thread_local uint32_t tid = static_cast<uint32_t>(syscall(SYS_gettid));
  return tid;
}

void Record(TimelineEvent e) {
  TimelineRing* r = g_ring.load(std::memory_order_acquire);
  if (r == nullptr) return;
  if (e.tid == 0) e.tid = TimelineThreadId();
  r->Write(e);
}

namespace {
thread_local int64_t t_peer_wait_ns = 0;
}  // namespace

void AddPeerWait(int64_t ns) { t_peer_wait_ns += ns; }

int64_t TakePeerWait() {
  const int64_t ns = t_peer_wait_ns;
  t_peer_wait_ns = 0;
  return ns;
}

namespace {

// An event of `kind` from `start_ns` to `end_ns` on the calling thread.
TimelineEvent EventOf(EventKind kind, int64_t start_ns, int64_t end_ns,
                      absl::string_view name, absl::string_view detail,
                      uint64_t bytes, int code) {
  TimelineEvent e;
  e.start_ns = start_ns;
  e.end_ns = end_ns;
  e.bytes = bytes;
  e.tid = TimelineThreadId();
  e.kind = static_cast<uint16_t>(kind);
  e.code = static_cast<int16_t>(code);
  CopyString(e.name, sizeof(e.name), name);
  CopyString(e.detail, sizeof(e.detail), detail);
  return e;
}

}  // namespace

void RecordSpan(EventKind kind, int64_t start_ns, absl::string_view name,
                absl::string_view detail, uint64_t bytes, int code) {
  TimelineRing* r = g_ring.load(std::memory_order_acquire);
  if (r == nullptr) return;
  r->Write(EventOf(kind, start_ns, MonotonicNs(), name, detail, bytes, code));
}

void RecordCollective(int64_t start_ns, absl::string_view op,
                      absl::string_view backend, uint64_t bytes, int code) {
  TimelineRing* r = g_ring.load(std::memory_order_acquire);
  const int64_t wait_ns = TakePeerWait();
  if (r == nullptr) return;
  TimelineEvent e = EventOf(EventKind::kCollective, start_ns, MonotonicNs(), op,
                            backend, bytes, code);
  e.aux_ns = wait_ns;
  r->Write(e);
  r->CountCollective(op, backend, bytes, e.end_ns - start_ns, wait_ns, e.tid);
}

void RecordInstant(absl::string_view name, absl::string_view detail, int code) {
  TimelineRing* r = g_ring.load(std::memory_order_acquire);
  if (r == nullptr) return;
  const int64_t now = MonotonicNs();
  r->Write(EventOf(EventKind::kInstant, now, now, name, detail, 0, code));
}

}  // namespace shoal::observe
