#include "tests/testing/netns_pair.h"

#include <unistd.h>

#include <cstdlib>

#include "absl/strings/str_cat.h"

namespace shoal::testing {
namespace {

bool Sh(const std::string& cmd) {
  return std::system((cmd + " >/dev/null 2>&1").c_str()) == 0;
}

}  // namespace

NetnsPair::NetnsPair(const std::string& tag, int octet) {
  a_ = absl::StrCat(tag, getpid(), "a");
  b_ = absl::StrCat(tag, getpid(), "b");
  const int x = getpid() % 200 + 20;
  ip_a_ = absl::StrCat("10.", octet, ".", x, ".1");
  ip_b_ = absl::StrCat("10.", octet, ".", x, ".2");
  const std::string va = absl::StrCat("v", a_), vb = absl::StrCat("v", b_);
  ok_ = Sh(absl::StrCat("ip netns add ", a_)) &&
        Sh(absl::StrCat("ip netns add ", b_)) &&
        Sh(absl::StrCat("ip link add ", va, " type veth peer name ", vb)) &&
        Sh(absl::StrCat("ip link set ", va, " netns ", a_)) &&
        Sh(absl::StrCat("ip link set ", vb, " netns ", b_)) &&
        Sh(absl::StrCat("ip netns exec ", a_, " ip addr add ", ip_a_,
                        "/24 dev ", va)) &&
        Sh(absl::StrCat("ip netns exec ", b_, " ip addr add ", ip_b_,
                        "/24 dev ", vb)) &&
        Sh(absl::StrCat("ip netns exec ", a_, " ip link set ", va, " up")) &&
        Sh(absl::StrCat("ip netns exec ", b_, " ip link set ", vb, " up")) &&
        Sh(absl::StrCat("ip netns exec ", a_, " ip link set lo up")) &&
        Sh(absl::StrCat("ip netns exec ", b_, " ip link set lo up"));
}

NetnsPair::~NetnsPair() {
  KillAll(1);
  KillAll(0);
  Sh(absl::StrCat("ip netns del ", a_));
  Sh(absl::StrCat("ip netns del ", b_));
}

std::vector<std::string> NetnsPair::In(int node) const {
  return {"ip", "netns", "exec", node == 0 ? a_ : b_};
}

void NetnsPair::KillAll(int node) const {
  Sh(absl::StrCat("ip netns pids ", node == 0 ? a_ : b_,
                  " | xargs -r kill -9"));
}

}  // namespace shoal::testing
