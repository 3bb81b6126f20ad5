// SessionSeq: the client's side of a resumable session's numbering
// (docs/protocol.md, "Sessions"): which of the node's numbered replies have
// arrived, the acknowledgement to send, and duplicates to drop — after a
// reconnect the node sends every reply not acknowledged again.
#ifndef SHOAL_IPC_SESSION_SEQ_H_
#define SHOAL_IPC_SESSION_SEQ_H_

#include <cstddef>
#include <cstdint>
#include <set>

namespace shoal::ipc {

class SessionSeq {
 public:
  // Notes reply number `seq` (0: unnumbered, always new). Returns false for
  // one that arrived before: the caller drops it.
  bool Accept(uint64_t seq) {
    if (seq == 0) return true;
    if (seq <= ack_ || !above_.insert(seq).second) return false;
    while (!above_.empty() && *above_.begin() == ack_ + 1) {
      above_.erase(above_.begin());
      ++ack_;
    }
    ++unreported_;
    return true;
  }
  // Every reply up to this one has arrived: the Envelope.ack to send.
  uint64_t ack() const { return ack_; }
  // Replies accepted since the last MarkReported.
  uint64_t unreported() const { return unreported_; }
  void MarkReported() { unreported_ = 0; }
  // Whether a later reply arrived before an earlier one (one was lost with a
  // connection and will come again).
  bool gap() const { return !above_.empty(); }
  // Number `seq` counts as not arrived again (the node discarded a request
  // unserved: the client is to send it again). A number more than
  // kMaxForgetSpan below the acknowledgement stays arrived: forgetting it
  // would list every number between (a client whose ids jumped, SkipGap).
  static constexpr uint64_t kMaxForgetSpan = uint64_t{1} << 17;
  void Forget(uint64_t seq) {
    if (seq == 0) return;
    if (seq > ack_) {
      above_.erase(seq);
      return;
    }
    if (ack_ - seq > kMaxForgetSpan) return;
    for (uint64_t n = seq + 1; n <= ack_; ++n) above_.insert(n);
    ack_ = seq - 1;
  }
  // How many arrived above a gap.
  size_t above() const { return above_.size(); }
  // Gives up the lowest gap: everything below the first number that
  // arrived above it counts as arrived (the node's bound on a client that
  // never fills a gap).
  void SkipGap() {
    if (above_.empty()) return;
    ack_ = *above_.begin() - 1;
    while (!above_.empty() && *above_.begin() == ack_ + 1) {
      above_.erase(above_.begin());
      ++ack_;
    }
  }
  // A new session: numbering starts again.
  void Reset() {
    ack_ = 0;
    above_.clear();
    unreported_ = 0;
  }

 private:
  uint64_t ack_ = 0;
  std::set<uint64_t> above_;  // arrived, above ack_
  uint64_t unreported_ = 0;
};

}  // namespace shoal::ipc

#endif  // SHOAL_IPC_SESSION_SEQ_H_
