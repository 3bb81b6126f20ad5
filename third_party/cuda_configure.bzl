"""Detects the CUDA Toolkit and NCCL so that gpu/ builds with them when present.

The repository it creates, @local_cuda, always exists:
  defs.bzl   CUDA_ENABLED (bool), if_cuda(a, b), CUDA_PATH
  BUILD      :cuda (runtime headers + static cudart), :nccl and :cublas; empty
             when absent.

Detection order: SHOAL_CUDA=0 forces off; CUDA_HOME, else /usr/local/cuda, must hold
bin/nvcc, include/cuda_runtime.h, include/nccl.h and lib64/libcudart_static.a.
SHOAL_CUDA=1 turns a missing toolkit into an error instead of a silent stub build.
"""

def _find_cuda(ctx):
    home = ctx.os.environ.get("CUDA_HOME", "") or "/usr/local/cuda"
    needed = [
        "bin/nvcc",
        "include/cuda_runtime.h",
        "include/nccl.h",
        "lib64/libcudart_static.a",
    ]
    missing = [f for f in needed if not ctx.path(home + "/" + f).exists]
    return home, missing

def _cuda_configure_impl(ctx):
    mode = ctx.os.environ.get("SHOAL_CUDA", "auto")
    home, missing = _find_cuda(ctx)
    enabled = (mode != "0") and not missing
    if mode == "1" and missing:
        fail("SHOAL_CUDA=1 but the CUDA toolkit at %s lacks: %s" % (home, ", ".join(missing)))

    if enabled:
        ctx.symlink(home + "/include", "cuda_include")
        ctx.symlink(home + "/lib64", "cuda_lib64")
        build = """
package(default_visibility = ["//visibility:public"])

cc_library(
    name = "cuda",
    hdrs = glob(["cuda_include/**/*.h", "cuda_include/**/*.hpp"]),
    includes = ["cuda_include"],
    linkopts = [
        "-L{home}/lib64",
        "-l:libcudart_static.a",
        "-ldl",
        "-lrt",
        "-lpthread",
    ],
)

# NCCL is linked dynamically (libnccl.so.2 is 218 MB); the runtime path points at
# the toolkit, and LD_LIBRARY_PATH can point elsewhere (a PyTorch install's NCCL).
cc_library(
    name = "nccl",
    linkopts = [
        "-L{home}/lib64",
        "-lnccl",
        "-Wl,-rpath,{home}/lib64",
    ],
    deps = [":cuda"],
)

# cuBLAS (the data-parallel example's GPU path), linked dynamically like NCCL.
cc_library(
    name = "cublas",
    linkopts = [
        "-L{home}/lib64",
        "-lcublas",
        "-Wl,-rpath,{home}/lib64",
    ],
    deps = [":cuda"],
)

filegroup(
    name = "nvcc",
    srcs = [],
)
""".format(home = home)
    else:
        build = """
package(default_visibility = ["//visibility:public"])

# Built without CUDA ({reason}): gpu/ compiles its stubs instead.
cc_library(name = "cuda")

cc_library(name = "nccl")

cc_library(name = "cublas")
""".format(reason = "SHOAL_CUDA=0" if mode == "0" else "missing: " + ", ".join(missing))

    ctx.file("BUILD", build)
    ctx.file("defs.bzl", """
CUDA_ENABLED = {enabled}
CUDA_PATH = "{home}"

def if_cuda(if_true, if_false = []):
    return if_true if CUDA_ENABLED else if_false
""".format(enabled = enabled, home = home if enabled else ""))

cuda_configure = repository_rule(
    implementation = _cuda_configure_impl,
    environ = ["CUDA_HOME", "SHOAL_CUDA"],
    local = True,
)
