// Keeps this extension's copy of shoal.proto out of libprotobuf's global
// descriptor pool.
//
// Communicator's code for launched jobs (the KV client, and through it the
// wire format) is linked in with it, though the torch backend never runs it
// (its communicators meet through torch's store). Its generated shoal.pb.cc
// registers "proto/shoal.proto" at load time in the process's one
// libprotobuf — which shoal._shoal, imported first by `import shoal`, has
// already done, and a second registration aborts the process. The linker
// sends this library's registrations here instead (--wrap, BUILD.bazel);
// nothing in it uses shoal's descriptors (no reflection), so nothing misses
// them.
//
// The cleaner fix: Communicator's job-specific code in a translation unit of
// its own, which this extension would then not link.

extern "C" void
__wrap__ZN6google8protobuf8internal20AddDescriptorsRunnerC1EPKNS1_15DescriptorTableE(
    void* /*self*/, const void* /*table*/) {}
