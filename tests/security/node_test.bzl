"""node_test: a gtest against a real node, reached as a client would."""

# What every such test uses: the fixture of a node started by the test
# (node_test_base.h, which brings the node's client, its discovery file and
# keys, and the raw client that sends frames the C++ client would refuse).
NODE_TEST_DEPS = [
    ":node_test_base",
    "@googletest//:gtest_main",
    "@system//:absl",
]

def node_test(name, deps = [], size = "medium", **kwargs):
    """A cc_test NAME from NAME.cc with NODE_TEST_DEPS and DEPS.

    Args:
      name: the test's name; its source is name + ".cc".
      deps: what the test needs beyond NODE_TEST_DEPS.
      size: Bazel's test size (a node takes a second or two to start).
      **kwargs: passed to cc_test (data, tags, timeout, ...).
    """
    native.cc_test(
        name = name,
        size = size,
        srcs = [name + ".cc"],
        deps = NODE_TEST_DEPS + [d for d in deps if d not in NODE_TEST_DEPS],
        **kwargs
    )
