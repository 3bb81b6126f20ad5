"""What a change touches, for `tools/test --quick`: the files that differ
from a commit (default HEAD: the edits not committed yet, untracked files
included), the Bazel tests that depend on them (Bazel's own graph: rdeps of
the changed files), and the pytest files to run.

  tools/affected.py [--base REV] files          # the changed files
  tools/affected.py [--base REV] bazel-tests    # labels, one a line
  tools/affected.py [--base REV] pytest         # paths, one a line
  tools/affected.py [--base REV] plan           # all: "bazel-test LABEL",
                                                # "pytest PATH" lines and
                                                # "mypy" (type check)

Run from the repository root (tools/test does). The pytest list is every
Python test tools/test runs (PYTEST_PATHS) when the package the tests import
changed (anything //python:site is built from: its Python files, the
extension's C++ and all it links), else the changed test files among them.
The type check (mypy) runs when a file it reads changed (TYPED_PATHS).
"""

import argparse
import os
import subprocess
import sys

# What tools/test's python_tests() runs: folders (every test file in them)
# and single files. tools/test reads this list (`pytest-paths`).
PYTEST_PATHS = (
    "python/tests",
    "python/build_backend/tests",
    "examples/python_torch",
    "examples/task_pool",
    "examples/protocol_client",
    "tests/shm/test_spill.py",
    "tools/knobs_test.py",
    "tools/affected_test.py",
    "torch_backend/tests",
)

# What the type check reads: the package's sources and stubs, and its
# configuration (pyproject.toml's [tool.mypy]).
TYPED_PATHS = ("python/shoal/", "tools/bench/python/", "pyproject.toml")

# The target every pytest file imports the package from.
PYTHON_SITE = "//python:site"

BAZEL_FLAGS = ("--curses=no", "--color=no")


def changed_files(base="HEAD"):
    """Paths (relative to the root) that differ between BASE and the
    working tree, plus untracked files git does not ignore; sorted."""
    diff = subprocess.run(["git", "diff", "--name-only", base, "--"],
                          check=True, capture_output=True, text=True).stdout
    untracked = subprocess.run(
        ["git", "ls-files", "--others", "--exclude-standard"],
        check=True, capture_output=True, text=True).stdout
    return sorted(set(diff.split()) | set(untracked.split()))


def is_pytest_file(path):
    """Whether PATH is one of the test files tools/test's pytest runs."""
    name = os.path.basename(path)
    if not name.endswith(".py") or not (name.startswith("test_") or
                                        name.endswith("_test.py")):
        return False
    return any(path == p or path.startswith(p.rstrip("/") + "/")
               for p in PYTEST_PATHS)


def pytest_selection(files, site_affected):
    """The pytest paths for a change of FILES: all of PYTEST_PATHS when
    SITE_AFFECTED (the package they import changed) or a conftest.py or
    helper module beside the tests changed; else the changed test files."""
    if site_affected:
        return list(PYTEST_PATHS)
    selected = []
    for f in files:
        if is_pytest_file(f):
            selected.append(f)
        elif f.endswith(".py") and any(
                f.startswith(p.rstrip("/") + "/") for p in PYTEST_PATHS):
            return list(PYTEST_PATHS)  # a conftest or a tests' helper
    return selected


def needs_type_check(files):
    """Whether a change of FILES reaches what mypy reads (TYPED_PATHS)."""
    return any(f == p or (p.endswith("/") and f.startswith(p) and
                          f.endswith((".py", ".pyi", "py.typed")))
               for f in files for p in TYPED_PATHS)


def _bazel_query(expression):
    """The labels `bazel query EXPRESSION` prints (--keep_going: a file in
    no package, or deleted, is skipped)."""
    p = subprocess.run(["bazel", "query", *BAZEL_FLAGS, "--keep_going",
                        expression], capture_output=True, text=True)
    # Exit 3: a partial result (some files are no target); still usable.
    if p.returncode not in (0, 3):
        sys.stderr.write(p.stderr)
        raise RuntimeError(f"bazel query failed (exit {p.returncode})")
    return [line for line in p.stdout.split() if line.startswith("//")]


def _existing(files):
    return [f for f in files if os.path.isfile(f) and " " not in f]


def affected(files):
    """(Bazel tests, whether PYTHON_SITE is reached) for a change of FILES:
    the test targets that depend on one of them, less those tagged manual,
    from one `bazel query` over their reverse dependencies."""
    existing = _existing(files)
    if not existing:
        return [], False
    labels = _bazel_query(
        f"let r = rdeps(//..., set({' '.join(existing)})) in "
        f"(kind('.*_test', $r) except attr(tags, 'manual', //...)) + "
        f"($r ^ {PYTHON_SITE})")
    return [l for l in labels if l != PYTHON_SITE], PYTHON_SITE in labels


def plan(files):
    """The lines of `plan`: "bazel-test LABEL" for each Bazel test, then
    "pytest PATH" for each pytest path a change of FILES selects, then
    "mypy" when it needs the type check."""
    tests, site_affected = affected(files)
    return ([f"bazel-test {t}" for t in tests] +
            [f"pytest {p}" for p in pytest_selection(files, site_affected)] +
            (["mypy"] if needs_type_check(files) else []))


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", default="HEAD",
                        help="the commit to compare with (default HEAD)")
    parser.add_argument("what", choices=("files", "bazel-tests", "pytest",
                                         "plan", "pytest-paths"))
    args = parser.parse_args(argv)
    if args.what == "pytest-paths":
        print("\n".join(PYTEST_PATHS))
        return 0
    files = changed_files(args.base)
    if args.what == "files":
        out = files
    elif args.what == "plan":
        out = plan(files)
    else:
        tests, site_affected = affected(files)
        out = (tests if args.what == "bazel-tests" else
               pytest_selection(files, site_affected))
    if out:
        print("\n".join(out))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
