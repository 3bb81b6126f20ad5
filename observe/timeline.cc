#include "observe/timeline.h"

#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <memory>
#include <string_view>

#include "absl/strings/numbers.h"
#include "base/mutex.h"
#include "observe/timeline_clock.h"

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

void Record(TimelineEventHead head, absl::string_view name,
            absl::string_view detail) {
  TimelineRing* r = g_ring.load(std::memory_order_acquire);
  if (r == nullptr) return;
  if (head.tid == 0) head.tid = TimelineThreadId();
  r->Write(head, name, detail);
}

namespace {
thread_local int64_t t_peer_wait_ns = 0;
thread_local int64_t t_call_start_ns = 0;
}  // namespace

void SetCallStart(int64_t ns) { t_call_start_ns = ns; }

int64_t TakeCallStart() {
  const int64_t ns = t_call_start_ns;
  t_call_start_ns = 0;
  return ns;
}

void AddPeerWait(int64_t ns) { t_peer_wait_ns += ns; }

int64_t TakePeerWait() {
  const int64_t ns = t_peer_wait_ns;
  t_peer_wait_ns = 0;
  return ns;
}

namespace {

// The numbers of an event of `kind` from `start_ns` to `end_ns` on the
// calling thread.
TimelineEventHead HeadOf(EventKind kind, int64_t start_ns, int64_t end_ns,
                         uint64_t bytes, int code) {
  TimelineEventHead h;
  h.start_ns = start_ns;
  // A start read from CLOCK_MONOTONIC itself may lie a few nanoseconds past
  // the timeline clock's end (observe/timeline_clock.h).
  h.end_ns = std::max(end_ns, start_ns);
  h.bytes = bytes;
  h.tid = TimelineThreadId();
  h.kind = static_cast<uint16_t>(kind);
  h.code = static_cast<int16_t>(code);
  return h;
}

}  // namespace

void RecordSpan(EventKind kind, int64_t start_ns, absl::string_view name,
                absl::string_view detail, uint64_t bytes, int code) {
  TimelineRing* r = g_ring.load(std::memory_order_acquire);
  if (r == nullptr) return;
  r->Write(HeadOf(kind, start_ns, TimelineNowNs(), bytes, code), name, detail);
}

void RecordCollective(int64_t start_ns, absl::string_view op,
                      absl::string_view backend, uint64_t bytes, int code) {
  TimelineRing* r = g_ring.load(std::memory_order_acquire);
  const int64_t wait_ns = TakePeerWait();
  if (r == nullptr) return;
  TimelineEventHead h =
      HeadOf(EventKind::kCollective, start_ns, TimelineNowNs(), bytes, code);
  h.aux_ns = wait_ns;
  r->Write(h, op, backend);
  r->CountCollective(op, backend, bytes, h.end_ns - start_ns, wait_ns, h.tid);
}

void RecordInstant(absl::string_view name, absl::string_view detail, int code) {
  TimelineRing* r = g_ring.load(std::memory_order_acquire);
  if (r == nullptr) return;
  const int64_t now = TimelineNowNs();
  r->Write(HeadOf(EventKind::kInstant, now, now, 0, code), name, detail);
}

}  // namespace shoal::observe
