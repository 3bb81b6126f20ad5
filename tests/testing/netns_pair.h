// Two "machines" for tests across nodes: network namespaces joined by a veth
// pair, 10.<octet>.x.1 and 10.<octet>.x.2 (x from the pid). Needs root and
// iproute2; ok() says whether they could be made (tests skip otherwise).
#ifndef SHOAL_TESTS_TESTING_NETNS_PAIR_H_
#define SHOAL_TESTS_TESTING_NETNS_PAIR_H_

#include <string>
#include <vector>

namespace shoal::testing {

class NetnsPair {
 public:
  // `tag` keeps the names of concurrent test binaries apart.
  NetnsPair(const std::string& tag, int octet);
  // Kills what still runs in either namespace, then deletes both.
  ~NetnsPair();
  NetnsPair(const NetnsPair&) = delete;
  NetnsPair& operator=(const NetnsPair&) = delete;

  bool ok() const { return ok_; }
  // The argv prefix that runs a command in node 0's or node 1's namespace.
  std::vector<std::string> In(int node) const;
  const std::string& head_ip() const { return ip_a_; }
  // SIGKILLs every process in the node's namespace: the machine is gone.
  void KillAll(int node) const;

 private:
  std::string a_, b_, ip_a_, ip_b_;
  bool ok_ = false;
};

}  // namespace shoal::testing

#endif  // SHOAL_TESTS_TESTING_NETNS_PAIR_H_
