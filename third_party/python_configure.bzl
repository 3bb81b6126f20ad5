"""The CPython (with its numpy, and torch where present) that shoal's Python
extensions, the worker's embedded interpreter and torch's backend build
against: by default Debian's /usr/bin/python3; SHOAL_PYTHON names another
interpreter (a venv's python: `--repo_env=SHOAL_PYTHON=/path/to/python`, as
pip's build backend does for the interpreter that runs it).

The repository it creates, @shoal_python, holds:
  BUILD      :python_headers, :numpy_headers, :pybind11, :python_embed,
             :torch and :torch_python (empty when the interpreter has no
             torch)
  defs.bzl   PYTHON_VERSION ("3.11"), TORCH_VERSION ("" without torch),
             TORCH_MAJOR (0 without torch), TORCH_TARGETS (what a target that
             needs torch adds to target_compatible_with: nothing, or
             @platforms//:incompatible when there is no torch)

The interpreter is asked with -E -s (no PYTHONPATH, no user site): a venv's
own site-packages, not what a caller's environment (pip's isolated build)
adds. torch is found without importing it (its folder and version.py).

Debian's interpreter: the static libpython (the worker runs pure Python
faster from it, see system.BUILD's history) and Debian's libtorch-dev
(/usr/include, /usr/lib). Any other: its shared libpython (or its static one
where it has none) and the venv's torch/include and torch/lib. pybind11 is
Debian's (pybind11-dev, /usr/include) for shoal._shoal; torch's extension
takes the pybind11 torch ships where torch has one (it must match torch's
own).
"""

_PROBE = r"""
import importlib.util, json, os, re, sys, sysconfig
cfg = sysconfig.get_config_vars()
out = {
    "version": "%d.%d" % sys.version_info[:2],
    "implementation": sys.implementation.name,
    "include": sysconfig.get_paths()["include"],
    "base_executable": os.path.realpath(
        getattr(sys, "_base_executable", "") or sys.executable),
    "shared": bool(cfg.get("Py_ENABLE_SHARED")),
    "libdir": cfg.get("LIBDIR") or "",
    "libpl": cfg.get("LIBPL") or "",
    "library": cfg.get("LIBRARY") or "",
    "ldversion": cfg.get("LDVERSION") or "",
    "libs": " ".join([cfg.get("LIBS") or "", cfg.get("SYSLIBS") or ""]),
    "numpy_include": "",
    "torch_dir": "",
    "torch_version": "",
    "torch_system": False,
}
try:
    import numpy
    out["numpy_include"] = numpy.get_include()
except ImportError:
    pass
spec = importlib.util.find_spec("torch")
if spec is not None and spec.origin:
    d = os.path.dirname(os.path.realpath(spec.origin))
    try:
        with open(os.path.join(d, "version.py")) as f:
            m = re.search(r"__version__\s*=\s*['\"]([^'\"]+)", f.read())
        if m:
            out["torch_dir"], out["torch_version"] = d, m.group(1)
            out["torch_system"] = (
                os.path.realpath(os.path.join(d, "include", "torch")) ==
                os.path.realpath("/usr/include/torch"))
    except OSError:
        pass
print(json.dumps(out))
"""

def _quote_list(items):
    return "[" + ", ".join(['"%s"' % i for i in items]) + "]"

def _python_embed(info, debian):
    """The libpython link options: (default, sanitized)."""
    ver = info["ldversion"] or info["version"]
    static = "%s/%s" % (info["libpl"], info["library"])
    if info["shared"] and not debian:
        opts = [
            "-L" + info["libdir"],
            "-lpython" + ver,
            "-Wl,-rpath," + info["libdir"],
            "-rdynamic",
        ]
        return opts, opts

    # A static libpython: a non-PIE executable, whole archive (extension
    # modules may call any of the C API), the C API exported (gold's
    # --export-dynamic-symbol takes no globs: everything).
    opts = [
        "-no-pie",
        "-Wl,--whole-archive",
        static,
        "-Wl,--no-whole-archive",
        "-rdynamic",
        "-lexpat",
        "-lz",
        "-lm",
        "-ldl",
    ]

    # The sanitizer builds keep the shared library (ThreadSanitizer wants
    # PIE).
    return opts, ["-lpython" + ver]

def _python_configure_impl(ctx):
    python = ctx.os.environ.get("SHOAL_PYTHON", "") or "/usr/bin/python3"
    res = ctx.execute([python, "-E", "-s", "-c", _PROBE], timeout = 120)
    if res.return_code != 0:
        fail("SHOAL_PYTHON=%s: cannot run it (%s)" % (python, res.stderr.strip()))
    info = json.decode(res.stdout.strip().splitlines()[-1])
    if info["implementation"] != "cpython":
        fail("%s is %s, not CPython" % (python, info["implementation"]))
    if not info["numpy_include"]:
        fail("%s has no numpy (shoal's extension needs its headers): " % python +
             "pip install numpy into it")
    debian = info["base_executable"].startswith("/usr/bin/")
    # Its include/ less the numpy link Debian's python3-numpy puts there
    # (/usr/include/python3.X/numpy): <numpy/...> must be the numpy of the
    # interpreter the build is for.
    for entry in ctx.path(info["include"]).readdir():
        if entry.basename != "numpy":
            ctx.symlink(entry, "python_include/" + entry.basename)
    ctx.symlink(info["numpy_include"], "numpy_include")
    embed, embed_sanitized = _python_embed(info, debian)

    torch_dir = info["torch_dir"]
    torch_version = info["torch_version"]
    torch_major = 0
    if torch_version:
        torch_major = int(torch_version.split(".")[0])
    system_torch = info["torch_system"]

    if not torch_dir:
        torch_build = """
# {python} has no torch: torch's backend is not built.
cc_library(name = "torch")

cc_library(name = "torch_python")
""".format(python = python)
    elif system_torch:
        # Debian's libtorch-dev: headers under /usr/include (searched by
        # default), the C++ frontend's under torch/csrc/api/include.
        ctx.symlink("/usr/include/torch/csrc/api/include", "torch_api_include")
        torch_build = """
cc_library(
    name = "torch",
    hdrs = glob(["torch_api_include/**/*.h"]),
    includes = ["torch_api_include"],
    linkopts = ["-ltorch", "-ltorch_cpu", "-lc10"],
)

cc_library(
    name = "torch_python",
    linkopts = ["-ltorch_python"],
    deps = [":pybind11", ":torch"],
)
"""
    else:
        # A venv's torch: its include/ less the protobuf it bundles (shoal's
        # own code includes Debian's), its lib/ with a runtime path.
        include = ctx.path(torch_dir + "/include")
        for entry in include.readdir():
            if entry.basename != "google":
                ctx.symlink(entry, "torch_include/" + entry.basename)
        lib = torch_dir + "/lib"
        torch_build = """
cc_library(
    name = "torch",
    hdrs = glob(["torch_include/**/*.h", "torch_include/**/*.hpp",
                 "torch_include/**/*.cuh", "torch_include/**/*.inc"]),
    includes = ["torch_include", "torch_include/torch/csrc/api/include"],
    linkopts = ["-L{lib}", "-ltorch", "-ltorch_cpu", "-lc10",
                "-Wl,-rpath,{lib}"],
)

# torch_include/pybind11 (torch's own) comes before Debian's.
cc_library(
    name = "torch_python",
    linkopts = ["-ltorch_python"],
    deps = [":python_headers", ":torch"],
)
""".format(lib = lib)

    ctx.file("BUILD", """# Generated by //third_party:python_configure.bzl for {python}
# (CPython {version}, numpy {numpy}, torch {torch}).
package(default_visibility = ["//visibility:public"])

cc_library(
    name = "python_headers",
    hdrs = glob(["python_include/**/*.h"]),
    includes = ["python_include"],
)

cc_library(
    name = "numpy_headers",
    hdrs = glob(["numpy_include/numpy/**/*.h"]),
    includes = ["numpy_include"],
    deps = [":python_headers"],
)

# Debian's pybind11-dev, under /usr/include (searched by default).
cc_library(
    name = "pybind11",
    deps = [":python_headers"],
)

config_setting(
    name = "sanitized",
    define_values = {{"shoal_sanitizer": "1"}},
)

# The worker embeds this interpreter; SHOAL_PYTHON_EXECUTABLE is its
# sys.executable.
cc_library(
    name = "python_embed",
    defines = ['SHOAL_PYTHON_EXECUTABLE=\\\\"{executable}\\\\"'],
    linkopts = select({{
        ":sanitized": {embed_sanitized},
        "//conditions:default": {embed},
    }}),
    deps = [":python_headers"],
)
{torch_build}""".format(
        python = python,
        version = info["version"],
        numpy = info["numpy_include"],
        torch = torch_version or "absent",
        executable = info["base_executable"],
        embed = _quote_list(embed),
        embed_sanitized = _quote_list(embed_sanitized),
        torch_build = torch_build,
    ))
    ctx.file("defs.bzl", """# Generated by //third_party:python_configure.bzl.
PYTHON = "{python}"
PYTHON_VERSION = "{version}"
TORCH_VERSION = "{torch}"
TORCH_MAJOR = {major}
TORCH_TARGETS = {targets}
""".format(
        python = python,
        version = info["version"],
        torch = torch_version,
        major = torch_major,
        targets = "[]" if torch_dir else '["@platforms//:incompatible"]',
    ))

python_configure = repository_rule(
    implementation = _python_configure_impl,
    environ = ["SHOAL_PYTHON"],
    local = True,
)
