"""shoal's PEP 517 build backend, named by pyproject.toml (backend-path), so
`pip install .` needs nothing from an index: no build requirements, the
standard library only.

  build_wheel       `bazel build //tools:shoal //python:site` (the repo's
                    .bazelrc applies) for the interpreter running this
                    backend (--repo_env=SHOAL_PYTHON=sys.executable: its
                    headers and libpython, the numpy and, where present, the
                    torch of its venv; third_party/python_configure.bzl),
                    then a wheel of the files //python:site built
                    (python/site/shoal: *.py and every extension in it) with
                    the binary as shoal/_bin/shoal, where
                    base/python_env.cc finds the package from
  prepare_metadata_for_build_wheel   the .dist-info, without building
  build_sdist       the source files git knows (or the tree of an unpacked
                    sdist), plus PKG-INFO

config_settings (pip install --config-settings KEY=VALUE .):
  bazel-args        more Bazel build arguments, split like a shell's words
                    (e.g. "--config=opt")
  bazel-startup-args  Bazel startup options, e.g. "--output_base=DIR" (an
                    output base of its own, so that a build for another
                    interpreter leaves the main one's outputs alone)
"""

import json
import os
import shlex
import subprocess
import sys
import tempfile
import urllib.parse

import shoal_wheel

BAZEL_TARGETS = ("//tools:shoal", "//python:site")
BINARY_IN_WHEEL = "shoal/_bin/shoal"
# Never packed into an sdist made from a tree git does not know.
_SDIST_SKIP_DIRS = {".git", ".venv", "__pycache__", "shared"}


def _root():
    """The source tree: PEP 517 runs hooks from its root."""
    root = os.getcwd()
    for marker in ("WORKSPACE", "VERSION", "pyproject.toml"):
        if not os.path.isfile(os.path.join(root, marker)):
            raise shoal_wheel.WheelError(
                f"{root} is not shoal's source tree (no {marker})")
    return root


def _version_and_tag(root):
    built_for = shoal_wheel.built_for_running_interpreter()
    return (shoal_wheel.read_version(root), shoal_wheel.wheel_tag(built_for),
            built_for)


def python_args(executable):
    """The Bazel arguments that build for EXECUTABLE (the interpreter pip
    runs this backend with: the venv's python, not the one it links to, so
    that the build sees the venv's numpy and torch)."""
    return ["--repo_env=SHOAL_PYTHON=" + executable]


def bazel_environment(environ, prefix, base_prefix):
    """The environment to run Bazel in: ENVIRON less what pip and the venv
    put on PATH (pip's pip-build-env-* folders, the venv's bin/).

    Why: Bazel 4 hands the client's PATH to every action and keys the action
    cache on it, so a PATH that differs from the one of a plain
    `bazel build` in a shell would rebuild everything, twice.
    """
    env = dict(environ)
    drop = set()
    if os.path.realpath(prefix) != os.path.realpath(base_prefix):
        drop.add(os.path.realpath(os.path.join(prefix, "bin")))
    kept = [p for p in env.get("PATH", "").split(os.pathsep)
            if p and "pip-build-env-" not in p
            and os.path.realpath(p) not in drop]
    env["PATH"] = os.pathsep.join(kept)
    for name in ("VIRTUAL_ENV", "PYTHONNOUSERSITE", "PYTHONPATH",
                 "PIP_BUILD_TRACKER", "PEP517_BUILD_BACKEND"):
        env.pop(name, None)
    return env


def _bazel_args(config_settings, key="bazel-args"):
    extra = (config_settings or {}).get(key, "")
    if isinstance(extra, list):  # given more than once
        extra = " ".join(extra)
    return shlex.split(extra)


def _bazel(root, args, startup_args=()):
    env = bazel_environment(os.environ, sys.prefix, sys.base_prefix)
    cmd = ["bazel"] + list(startup_args) + args
    # Bazel's progress goes to stderr; pip shows it with -v, or on failure.
    print("shoal_build_backend: " + " ".join(cmd), file=sys.stderr,
          flush=True)
    try:
        done = subprocess.run(cmd, cwd=root, env=env)
    except FileNotFoundError as e:
        raise shoal_wheel.WheelError(
            "bazel is not on PATH: tools/setup installs it (Debian's "
            "bazel-bootstrap)") from e
    if done.returncode != 0:
        raise shoal_wheel.WheelError(
            f"`{' '.join(cmd)}` failed (exit {done.returncode}): see above")


def target_outputs(build_events, label):
    """The files Bazel built for LABEL (its default outputs), as absolute
    paths, from the lines of a --build_event_json_file.

    Why not the bazel-bin folder: a genrule's output folder keeps files it
    no longer declares (a renamed .py stays there until `bazel clean`);
    the build event stream names exactly this build's outputs.

    Raises WheelError if LABEL did not complete.
    """
    named_sets = {}  # id -> ([uri], [nested set id])
    file_sets = None
    for line in build_events:
        if not line.strip():
            continue
        event = json.loads(line)
        event_id = event.get("id", {})
        if "namedSet" in event_id:
            files = event.get("namedSetOfFiles", {})
            named_sets[event_id["namedSet"]["id"]] = (
                [f["uri"] for f in files.get("files", []) if "uri" in f],
                [n["id"] for n in files.get("fileSets", [])])
        elif (event_id.get("targetCompleted", {}).get("label") == label
              and event.get("completed", {}).get("success")):
            file_sets = [fs["id"]
                         for group in event["completed"].get("outputGroup", [])
                         if group.get("name") == "default"
                         for fs in group.get("fileSets", [])]
    if file_sets is None:
        raise shoal_wheel.WheelError(
            f"the Bazel build did not complete {label}")
    paths, seen, pending = [], set(), list(file_sets)
    while pending:
        set_id = pending.pop()
        if set_id in seen or set_id not in named_sets:
            continue
        seen.add(set_id)
        uris, nested = named_sets[set_id]
        paths += [urllib.parse.unquote(urllib.parse.urlparse(u).path)
                  for u in uris if u.startswith("file://")]
        pending += nested
    return sorted(set(paths))


def build_outputs(root, config_settings=None):
    """Runs the Bazel build; returns {label: [files it built]} for
    BAZEL_TARGETS (outputs of the configuration the arguments select, e.g.
    --config=opt's)."""
    with tempfile.TemporaryDirectory(prefix="shoal-wheel-") as tmp:
        events = os.path.join(tmp, "build_events.json")
        _bazel(root, ["build", f"--build_event_json_file={events}"] +
               python_args(sys.executable) + _bazel_args(config_settings) +
               list(BAZEL_TARGETS),
               _bazel_args(config_settings, "bazel-startup-args"))
        with open(events, encoding="utf-8") as f:
            lines = f.readlines()
    return {label: target_outputs(lines, label) for label in BAZEL_TARGETS}


def wheel_payload(outputs):
    """(name in the wheel, file) pairs: every file of the package that
    //python:site assembled (…/python/site/shoal/…) and the binary.

    Raises WheelError if the package's __init__.py or the binary is missing.
    """
    payload = []
    for path in outputs["//python:site"]:
        at = path.rfind("/python/site/shoal/")
        if at >= 0:
            payload.append((path[at + len("/python/site/"):], path))
    binaries = [p for p in outputs["//tools:shoal"]
                if os.path.basename(p) == "shoal"]
    if "shoal/__init__.py" not in {name for name, _ in payload}:
        raise shoal_wheel.WheelError(
            "//python:site built no python/site/shoal/__init__.py")
    if len(binaries) != 1 or not os.path.isfile(binaries[0]):
        raise shoal_wheel.WheelError(
            f"//tools:shoal built {binaries}, not one shoal binary")
    payload.append((BINARY_IN_WHEEL, binaries[0]))
    return payload


# PEP 517 hooks.

def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def prepare_metadata_for_build_wheel(metadata_directory,
                                     config_settings=None):
    root = _root()
    version, tag, built_for = _version_and_tag(root)
    return shoal_wheel.write_metadata_dir(metadata_directory, version, tag,
                                          built_for)


def build_wheel(wheel_directory, config_settings=None,
                metadata_directory=None):
    root = _root()
    version, tag, built_for = _version_and_tag(root)  # fails before Bazel
    outputs = build_outputs(root, config_settings)
    return shoal_wheel.write_wheel(wheel_directory, version, tag, built_for,
                                   wheel_payload(outputs))


def sdist_files(root):
    """The files of the sdist, relative to ROOT: the ones git tracks (not a
    stray untracked file, which may be anything) that exist; in a tree that
    is not a git checkout (an unpacked sdist), every regular file but the
    skipped folders and Bazel's convenience links."""
    try:
        out = subprocess.run(
            ["git", "ls-files", "-z", "--cached"],
            cwd=root, check=True, capture_output=True).stdout
        names = [n for n in out.decode().split("\0") if n]
    except (OSError, subprocess.CalledProcessError):
        names = []
        for folder, dirs, files in os.walk(root):
            dirs[:] = [d for d in dirs
                       if d not in _SDIST_SKIP_DIRS
                       and not d.startswith("bazel-")]
            names += [os.path.relpath(os.path.join(folder, f), root)
                      for f in files]
    return sorted(n for n in names
                  if n != "PKG-INFO"
                  and not os.path.islink(os.path.join(root, n))
                  and os.path.isfile(os.path.join(root, n)))


def build_sdist(sdist_directory, config_settings=None):
    root = _root()
    return shoal_wheel.write_sdist(sdist_directory,
                                   shoal_wheel.read_version(root), root,
                                   sdist_files(root))
