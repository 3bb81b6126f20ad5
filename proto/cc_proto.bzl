"""cc_proto: a .proto compiled by Debian's protoc into a cc_library.

The native proto rules would need @com_google_protobuf, which is not available
offline; this is the one genrule every schema here goes through instead.
"""

def cc_proto(name, src, visibility = None):
    """Generates <src>.pb.{h,cc} with protoc and wraps them in cc_library `name`.

    Args:
      name: the cc_library; the genrule is `name`_gen.
      src: the .proto file, in this package.
      visibility: the cc_library's, else the package default.
    """
    base = src[:-len(".proto")]
    native.genrule(
        name = name + "_gen",
        srcs = [src],
        outs = [
            base + ".pb.cc",
            base + ".pb.h",
        ],
        cmd = "protoc --proto_path=. --cpp_out=$(GENDIR) $(location %s)" % src,
    )
    native.cc_library(
        name = name,
        srcs = [base + ".pb.cc"],
        hdrs = [base + ".pb.h"],
        # Generated code leaves some parameters unused.
        copts = ["-Wno-unused-parameter"],
        visibility = visibility,
        deps = ["@system//:protobuf"],
    )
