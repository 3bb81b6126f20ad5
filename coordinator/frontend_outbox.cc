// Replies to the frontend's clients, and back-pressure in bytes.
//
// Replies go out zero-copy: libzmq calls FreeReply on its I/O thread once it
// has written a reply to the kernel (or dropped it with its connection), so
// a session's ZmqBytes count what libzmq still holds for it. A reply that
// finds the client's queue full (EAGAIN) stays in Session::out and goes when
// the socket is writable again. A resumable session's replies are numbered
// and stay in Session::out until the client acknowledges them: a reply lost
// with a connection goes again when the session resumes.
//
// A session over max_reply_bytes_per_client (Session::outstanding) has its
// requests parked (frontend_admission.cc) and its results left in the table
// (PushReady) until its client reads.
#include <zmq.h>

#include <cerrno>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/log.h"
#include "coordinator/frontend.h"
#include "ipc/protocol.h"

namespace shoal::coordinator {
namespace {

struct ReplyInFlight {
  std::shared_ptr<const std::string> payload;
  std::shared_ptr<ZmqBytes> counter;
};

void FreeReply(void* /*data*/, void* hint) {
  auto* r = static_cast<ReplyInFlight*>(hint);
  r->counter->queued.fetch_sub(static_cast<int64_t>(r->payload->size()),
                               std::memory_order_relaxed);
  delete r;
}

}  // namespace

void Frontend::Reply(Session& s, uint64_t request_id, ipc::Message body) {
  ipc::Envelope e{request_id, std::move(body)};
  if (s.resumable()) e.seq = s.next_seq++;
  if (s.resumable() && s.minor >= 5) e.ack = s.requests.ack();
  absl::StatusOr<std::string> frame = ipc::Encode(e);
  if (!frame.ok()) {
    ipc::Envelope error{request_id, ipc::ErrorReply{frame.status()}};
    error.seq = e.seq;
    error.ack = e.ack;
    frame = ipc::Encode(error);
    if (!frame.ok()) frame = ipc::EncodeError(request_id, frame.status());
  }
  if (const auto* error = std::get_if<ipc::ErrorReply>(&e.body))
    CountError(error->status.code());
  const bool behind = s.unsent < s.out.size();
  s.out_bytes += frame->size();
  reply_bytes_ += frame->size();
  s.out.push_back(OutMessage{
      e.seq, std::make_shared<const std::string>(*std::move(frame))});
  // Behind replies kept for this session: in order, after them.
  if (!behind) Flush(s);
}

bool Frontend::Flush(Session& s) {
  bool sent = false;
  if (s.attached) {
    void* socket = (s.route.tcp ? tcp_ : ipc_).raw();
    touched_ |= s.route.tcp ? kTouchedTcp : kTouchedIpc;
    while (s.unsent < s.out.size()) {
      OutMessage& m = s.out[s.unsent];
      // ROUTER_MANDATORY: EAGAIN when the client's queue is full (keep it
      // for POLLOUT), EHOSTUNREACH when its connection is gone.
      if (zmq_send(socket, s.route.routing_id.data(), s.route.routing_id.size(),
                   ZMQ_SNDMORE | ZMQ_DONTWAIT) < 0) {
        if (zmq_errno() == EAGAIN || s.resumable()) break;
        // A legacy session's connection is gone: it ends with it.
        SHOAL_LOG(DEBUG, "a reply was dropped: %s", zmq_strerror(zmq_errno()));
        s.out_bytes -= m.payload->size();
        s.out.pop_front();
        continue;
      }
      auto* r = new ReplyInFlight{m.payload, s.zmq};
      s.zmq->queued.fetch_add(static_cast<int64_t>(m.payload->size()),
                              std::memory_order_relaxed);
      zmq_msg_t msg;
      zmq_msg_init_data(&msg, const_cast<char*>(m.payload->data()),
                        m.payload->size(), FreeReply, r);
      if (zmq_msg_send(&msg, socket, ZMQ_DONTWAIT) < 0) {
        // The routing frame went, so the body cannot wait (one thread
        // sends: the pipe cannot fill between the two frames).
        SHOAL_LOG(DEBUG, "a reply was dropped: %s", zmq_strerror(zmq_errno()));
        zmq_msg_close(&msg);  // calls FreeReply
      }
      sent = true;
      if (s.resumable()) {
        ++s.unsent;  // kept until acknowledged
      } else {
        s.out_bytes -= m.payload->size();
        s.out.pop_front();
      }
    }
  }
  const bool waiting = s.attached && s.unsent < s.out.size();
  if (waiting && unsent_.insert(s.serial).second) ++unsent_sessions_;
  if (!waiting && unsent_.erase(s.serial) != 0) --unsent_sessions_;
  return sent;
}

void Frontend::Acknowledge(Session& s, uint64_t ack) {
  while (!s.out.empty() && s.out.front().seq != 0 && s.out.front().seq <= ack) {
    s.out_bytes -= s.out.front().payload->size();
    s.out.pop_front();
    if (s.unsent > 0) --s.unsent;
  }
}

void Frontend::Resend(Session& s) {
  s.unsent = 0;
  Flush(s);
}

}  // namespace shoal::coordinator
