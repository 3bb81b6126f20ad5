"""Where things are: the main script's module name, the shoal binary."""

import os
import shutil
import sys

from . import _errors


def main_module_name():
    """The name a worker imports this process's __main__ module by."""
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    if spec is not None and spec.name and spec.name != "__main__":
        return spec.name  # python -m package.module
    path = getattr(main, "__file__", None)
    if not path:
        raise _errors.InvalidArgumentError(
            "functions defined in an interactive session or `python -c` "
            "cannot be imported by workers: define them in a module")
    return os.path.splitext(os.path.basename(path))[0]


def package_dir():
    """The folder holding the shoal package (…/python/site in Bazel's
    output, site-packages once installed)."""
    return os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def shoal_binary(search_path=True):
    """The `shoal` executable: $SHOAL_BIN; the one an installed wheel carries
    (shoal/_bin/shoal); the one Bazel built beside this package
    (<bin>/tools/shoal for <bin>/python/site/shoal); with search_path, PATH's.

    Raises NotFoundError if there is none.
    """
    env = os.environ.get("SHOAL_BIN")
    if env:
        return env
    here = os.path.dirname(os.path.abspath(__file__))
    bundled = os.path.join(here, "_bin", "shoal")
    if os.access(bundled, os.X_OK):
        return bundled
    beside = os.path.join(package_dir(), "..", "..", "tools", "shoal")
    if os.access(beside, os.X_OK):
        return os.path.realpath(beside)
    found = shutil.which("shoal") if search_path else None
    if found:
        return found
    raise _errors.NotFoundError(
        "cannot find the shoal binary: set SHOAL_BIN, install shoal "
        "(pip install . in its source tree), or build it "
        "(bazel build //tools:shoal) beside this package")


def runtime_root():
    """Where nodes keep their job folders (base/runtime_dir.cc's preferred
    root: $SHOAL_RUNTIME_DIR, $XDG_RUNTIME_DIR/shoal, /tmp/shoal-<uid>)."""
    root = os.environ.get("SHOAL_RUNTIME_DIR")
    if root:
        return root.rstrip("/") or "/"
    xdg = os.environ.get("XDG_RUNTIME_DIR")
    if xdg:
        return os.path.join(xdg, "shoal")
    return f"/tmp/shoal-{os.getuid()}"


def coordinator_pid(job_id):
    """The pid of job `job_id`'s coordinator, from its discovery file; None
    when the file is not where runtime_root() says (a fallback root)."""
    path = os.path.join(runtime_root(), job_id, "coordinator")
    try:
        with open(path) as f:
            for line in f:
                if line.startswith("pid="):
                    pid = int(line[4:].strip() or 0)
                    return pid if pid > 0 else None
    except (OSError, ValueError):
        return None
    return None
