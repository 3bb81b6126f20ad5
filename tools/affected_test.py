"""tools/affected.py: which tests a change selects. The selection rules
alone, then Bazel's graph for real files of this tree (bazel query; run from
the repository root, as tools/test does)."""

import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tools"))

import affected  # noqa: E402


def test_a_changed_test_file_alone_selects_itself():
    files = ["python/tests/test_tasks.py", "docs/python.md"]
    assert affected.pytest_selection(files, site_affected=False) == [
        "python/tests/test_tasks.py"]


def test_a_change_to_the_package_selects_every_python_test():
    assert affected.pytest_selection(
        ["python/tests/test_tasks.py"], site_affected=True) == list(
            affected.PYTEST_PATHS)


def test_a_helper_beside_the_tests_selects_every_python_test():
    for helper in ("python/tests/conftest.py", "python/tests/pytasks.py"):
        assert affected.pytest_selection([helper], site_affected=False) == \
            list(affected.PYTEST_PATHS)


def test_files_outside_the_python_tests_select_none():
    assert affected.pytest_selection(
        ["docs/env.md", "base/mutex.h", "tools/plot_dataloader.py"],
        site_affected=False) == []


def test_test_files_are_those_pytest_collects():
    assert affected.is_pytest_file("tools/knobs_test.py")
    assert affected.is_pytest_file("tests/shm/test_spill.py")
    assert affected.is_pytest_file("examples/task_pool/test_pool.py")
    assert not affected.is_pytest_file("tests/shm/store_process_test.cc")
    assert not affected.is_pytest_file("python/shoal/_future.py")
    assert not affected.is_pytest_file("tools/other_test.py")


def test_tools_test_runs_the_same_pytest_paths():
    with open(os.path.join(ROOT, "tools", "test"), encoding="utf-8") as f:
        script = f.read()
    assert "tools/affected.py pytest-paths" in script


def test_a_header_selects_the_tests_that_include_it(monkeypatch):
    monkeypatch.chdir(ROOT)
    tests, site_affected = affected.affected(["base/mutex.h"])
    assert "//tasks:task_table_test" in tests, tests
    assert "//tests/remote:soak_long_test" not in tests  # manual
    assert affected.PYTHON_SITE not in tests
    assert site_affected  # the extension links base


def test_a_python_module_selects_the_site_and_no_bazel_test(monkeypatch):
    monkeypatch.chdir(ROOT)
    tests, site_affected = affected.affected(["python/shoal/_future.py"])
    assert site_affected
    assert "//tasks:task_table_test" not in tests


def test_the_plan_lists_the_tests_then_the_pytest_paths(monkeypatch):
    monkeypatch.chdir(ROOT)
    lines = affected.plan(["base/mutex.h"])
    kinds = [line.split(" ", 1)[0] for line in lines]
    assert "bazel-test //tasks:task_table_test" in lines
    assert kinds == sorted(kinds, key=["bazel-test", "pytest"].index)
    assert [l for l in lines if l.startswith("pytest ")] == [
        f"pytest {p}" for p in affected.PYTEST_PATHS]


def test_the_type_check_follows_the_package_and_its_config():
    assert affected.needs_type_check(["python/shoal/_future.py"])
    assert affected.needs_type_check(["python/shoal/_shoal.pyi"])
    assert affected.needs_type_check(["python/shoal/data/_loader.py"])
    assert affected.needs_type_check(["pyproject.toml"])
    assert not affected.needs_type_check(["python/tests/test_map.py",
                                          "python/ext/client.cc",
                                          "base/mutex.h"])


def test_the_plan_ends_with_the_type_check_when_python_changed(monkeypatch):
    monkeypatch.chdir(ROOT)
    lines = affected.plan(["python/shoal/_naming.py"])
    assert lines[-1] == "mypy"
    assert "mypy" not in affected.plan(["base/mutex.h"])


def test_the_command_line_prints_the_changed_files(monkeypatch):
    monkeypatch.chdir(ROOT)
    p = subprocess.run([sys.executable, "tools/affected.py", "--base",
                        "HEAD", "files"], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    expected = affected.changed_files("HEAD")
    assert p.stdout.split() == expected
