// NodeTest: the fixture of the tests that reach a real node as its clients
// do (node_test.bzl): the node and its discovery file, and the requests and
// checks those tests share.
#ifndef SHOAL_TESTS_SECURITY_NODE_TEST_BASE_H_
#define SHOAL_TESTS_SECURITY_NODE_TEST_BASE_H_

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "coordinator/discovery.h"
#include "gtest/gtest.h"
#include "ipc/curve.h"
#include "ipc/protocol.h"
#include "tests/coordinator/node_fixture.h"
#include "tests/security/raw_client.h"

namespace shoal::testing {

// Writes the public keys of `keys`, one a line, to a --client-keys file
// named `file_name` in the test's temporary folder; its path.
std::string WriteClientKeys(
    absl::string_view file_name,
    std::initializer_list<const ipc::CurveKeyPair*> keys);

class NodeTest : public ::testing::Test {
 protected:
  // Starts a node with `flags` and reads its discovery file into
  // `discovery_`; a failure of either fails the test.
  void StartNode(std::vector<std::string> flags = {});

  // Whether the node's process has not exited (reaps it if it has).
  bool NodeAlive();

  // The node is up and runs add(2, 40) for the owner's client, promptly:
  // over the owner's ipc:// socket, or over TCP when `remote`.
  void ExpectServesOwner(bool remote = false);

  // Submits `t` through `raw`; its task id (0, with a test failure, when the
  // submit fails).
  static uint64_t SubmitRaw(RawClient& raw, ipc::TaskSpec t);

  std::unique_ptr<NodeProcess> node_;
  coordinator::Discovery discovery_;
};

}  // namespace shoal::testing

#endif  // SHOAL_TESTS_SECURITY_NODE_TEST_BASE_H_
