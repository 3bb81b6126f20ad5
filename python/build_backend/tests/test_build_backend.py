"""shoal's PEP 517 backend (python/build_backend): the wheel's files, RECORD
hashes and sizes, tags, metadata, the sdist, the environment Bazel runs in,
the outputs read from Bazel's build events; and, where tools/test built the
package (it sets SHOAL_BIN), build_wheel for real, its wheel unpacked and run.
tools/test also pip-installs the wheel into a fresh venv and runs a task and
a launch from it (python/build_backend/install_check.sh)."""

import base64
import csv
import hashlib
import io
import json
import os
import stat
import subprocess
import sys
import tarfile
import zipfile

import pytest

BACKEND_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ROOT = os.path.dirname(os.path.dirname(BACKEND_DIR))
sys.path.insert(0, BACKEND_DIR)

import shoal_build_backend  # noqa: E402
import shoal_wheel  # noqa: E402

VERSION = open(os.path.join(ROOT, "VERSION")).read().strip()
# The wheel is built for the interpreter running the backend (this one).
BUILT_FOR = tuple(sys.version_info[:2])
TAG = "cp%d%d-cp%d%d-linux_x86_64" % (BUILT_FOR * 2)


def make_file(path, data, executable=False):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)
    os.chmod(path, 0o755 if executable else 0o644)
    return path


def fake_outputs(tmp_path):
    """What build_outputs returns for a build: the files of //python:site
    (under python/site/shoal) and of //tools:shoal."""
    site = tmp_path / "bin" / "python" / "site" / "shoal"
    binary = make_file(str(tmp_path / "bin" / "tools" / "shoal"),
                       b"\x7fELF binary", executable=True)
    return {
        "//python:site": [
            make_file(str(site / "__init__.py"), b"__version__ = '0'\n"),
            make_file(str(site / "_shoal.so"), b"\x7fELF extension"),
            make_file(str(site / "sub" / "m.py"), b"x = 1\n"),
        ],
        "//tools:shoal": [binary],
    }


def build_event(event_id, **body):
    return json.dumps(dict(id=event_id, **body)) + "\n"


def test_outputs_are_the_files_the_build_event_stream_names():
    events = [
        build_event({"started": {}}, started={"command": "build"}),
        build_event({"namedSet": {"id": "1"}}, namedSetOfFiles={"files": [
            {"name": "python/site/shoal/b.py",
             "uri": "file:///out/bin/python/site/shoal/b.py"}]}),
        build_event({"namedSet": {"id": "0"}}, namedSetOfFiles={
            "files": [{"name": "python/site/shoal/a%20b.py",
                       "uri": "file:///out/bin/python/site/shoal/a%20b.py"}],
            "fileSets": [{"id": "1"}]}),
        build_event({"namedSet": {"id": "2"}}, namedSetOfFiles={"files": [
            {"name": "tools/shoal", "uri": "file:///out/bin/tools/shoal"}]}),
        build_event({"targetCompleted": {"label": "//python:site"}},
                    completed={"success": True, "outputGroup": [
                        {"name": "default", "fileSets": [{"id": "0"}]}]}),
        build_event({"targetCompleted": {"label": "//tools:shoal"}},
                    completed={"success": True, "outputGroup": [
                        {"name": "default", "fileSets": [{"id": "2"}]}]}),
        "\n",
    ]
    assert shoal_build_backend.target_outputs(events, "//python:site") == [
        "/out/bin/python/site/shoal/a b.py",
        "/out/bin/python/site/shoal/b.py"]
    assert shoal_build_backend.target_outputs(events, "//tools:shoal") == [
        "/out/bin/tools/shoal"]
    with pytest.raises(shoal_wheel.WheelError, match="did not complete"):
        shoal_build_backend.target_outputs(events, "//python:other")
    failed = [build_event({"targetCompleted": {"label": "//python:site"}},
                          completed={"success": False})]
    with pytest.raises(shoal_wheel.WheelError, match="did not complete"):
        shoal_build_backend.target_outputs(failed, "//python:site")


def read_record(whl):
    dist_info = shoal_wheel.dist_info_dir(VERSION)
    text = whl.read(f"{dist_info}/RECORD").decode()
    return list(csv.reader(io.StringIO(text)))


def test_wheel_record_lists_every_file_with_its_hash_and_size(tmp_path):
    payload = shoal_build_backend.wheel_payload(fake_outputs(tmp_path))
    name = shoal_wheel.write_wheel(str(tmp_path), VERSION, TAG, BUILT_FOR,
                                   payload)
    assert name == f"shoal-{VERSION}-{TAG}.whl"
    with zipfile.ZipFile(tmp_path / name) as whl:
        names = whl.namelist()
        rows = read_record(whl)
        dist_info = shoal_wheel.dist_info_dir(VERSION)
        assert sorted(r[0] for r in rows) == sorted(names)
        for path, digest, size in rows:
            if path == f"{dist_info}/RECORD":
                assert digest == "" and size == ""
                continue
            data = whl.read(path)
            expected = base64.urlsafe_b64encode(
                hashlib.sha256(data).digest()).rstrip(b"=").decode()
            assert digest == "sha256=" + expected, path
            assert int(size) == len(data), path
        assert "shoal/sub/m.py" in names
        binary = whl.getinfo("shoal/_bin/shoal")
        assert stat.S_IMODE(binary.external_attr >> 16) == 0o755
        assert whl.read("shoal/_bin/shoal") == b"\x7fELF binary"
        init = whl.getinfo("shoal/__init__.py")
        assert stat.S_IMODE(init.external_attr >> 16) == 0o644


def test_wheel_metadata_tag_and_console_script(tmp_path):
    payload = shoal_build_backend.wheel_payload(fake_outputs(tmp_path))
    name = shoal_wheel.write_wheel(str(tmp_path), VERSION, TAG, BUILT_FOR,
                                   payload)
    dist_info = shoal_wheel.dist_info_dir(VERSION)
    with zipfile.ZipFile(tmp_path / name) as whl:
        metadata = whl.read(f"{dist_info}/METADATA").decode().splitlines()
        wheel = whl.read(f"{dist_info}/WHEEL").decode().splitlines()
        entry_points = whl.read(f"{dist_info}/entry_points.txt").decode()
    assert "Metadata-Version: 2.1" in metadata
    assert "Name: shoal" in metadata
    assert f"Version: {VERSION}" in metadata
    assert "Requires-Python: ==%d.%d.*" % BUILT_FOR in metadata
    assert f"Tag: {TAG}" in wheel and "Root-Is-Purelib: false" in wheel
    assert "[console_scripts]\nshoal = shoal.__main__:main\n" in entry_points


def test_wheel_bytes_are_reproducible(tmp_path):
    payload = shoal_build_backend.wheel_payload(fake_outputs(tmp_path))
    first, second = tmp_path / "a", tmp_path / "b"
    first.mkdir()
    second.mkdir()
    a = shoal_wheel.write_wheel(str(first), VERSION, TAG, BUILT_FOR, payload)
    b = shoal_wheel.write_wheel(str(second), VERSION, TAG, BUILT_FOR,
                                list(reversed(payload)))
    assert (first / a).read_bytes() == (second / b).read_bytes()
    assert not list(first.glob("*.partial"))


def test_wheel_rejects_paths_outside_the_package(tmp_path):
    source = make_file(str(tmp_path / "f"), b"x")
    for bad in ("other/f.py", "shoal/../evil.py", "/shoal/f"):
        with pytest.raises(shoal_wheel.WheelError):
            shoal_wheel.write_wheel(str(tmp_path), VERSION, TAG, BUILT_FOR,
                                    [(bad, source)])
    with pytest.raises(shoal_wheel.WheelError, match="twice"):
        shoal_wheel.write_wheel(str(tmp_path), VERSION, TAG, BUILT_FOR,
                                [("shoal/f", source), ("shoal/f", source)])


def test_payload_needs_the_package_and_the_binary(tmp_path):
    outputs = fake_outputs(tmp_path)
    no_binary = dict(outputs, **{"//tools:shoal": []})
    with pytest.raises(shoal_wheel.WheelError, match="not one shoal binary"):
        shoal_build_backend.wheel_payload(no_binary)
    no_init = dict(outputs, **{"//python:site": outputs["//python:site"][1:]})
    with pytest.raises(shoal_wheel.WheelError, match="__init__.py"):
        shoal_build_backend.wheel_payload(no_init)


def test_tag_is_this_cpython_and_refuses_another():
    assert shoal_wheel.wheel_tag((3, 11), "cpython", (3, 11, 2),
                                 "linux-x86_64") == "cp311-cp311-linux_x86_64"
    assert shoal_wheel.wheel_tag((3, 13), "cpython", (3, 13, 0),
                                 "linux-x86_64") == "cp313-cp313-linux_x86_64"
    with pytest.raises(shoal_wheel.WheelError, match="CPython 3.11"):
        shoal_wheel.wheel_tag((3, 11), "cpython", (3, 12, 0), "linux-x86_64")
    with pytest.raises(shoal_wheel.WheelError, match="pypy"):
        shoal_wheel.wheel_tag((3, 11), "pypy", (3, 11, 0), "linux-x86_64")


def test_python_version_is_the_running_interpreters():
    assert shoal_wheel.built_for_running_interpreter() == BUILT_FOR
    for minor in (10, 11, 12, 13):
        assert shoal_wheel.built_for_running_interpreter(
            (3, minor, 0), "cpython") == (3, minor)
    with pytest.raises(shoal_wheel.WheelError, match="3.10 or newer"):
        shoal_wheel.built_for_running_interpreter((3, 9, 18), "cpython")
    with pytest.raises(shoal_wheel.WheelError, match="pypy"):
        shoal_wheel.built_for_running_interpreter((3, 11, 0), "pypy")


def test_bazel_builds_for_the_interpreter_running_the_backend():
    """The build's @shoal_python is the venv's python as pip runs it (its
    numpy and torch), not the interpreter it links to."""
    venv_python = "/home/u/venv/bin/python"
    assert shoal_build_backend.python_args(venv_python) == [
        "--repo_env=SHOAL_PYTHON=/home/u/venv/bin/python"]


def test_metadata_requires_this_python_and_an_sdist_any():
    assert "Requires-Python: ==3.12.*\n" in shoal_wheel.metadata_text(
        VERSION, (3, 12))
    assert "Requires-Python: >=3.10\n" in shoal_wheel.metadata_text(
        VERSION, None)


def test_version_file_is_checked(tmp_path):
    assert shoal_wheel.read_version(ROOT) == VERSION
    (tmp_path / "VERSION").write_text("1.2-dirty\n")
    with pytest.raises(shoal_wheel.WheelError, match="not a version"):
        shoal_wheel.read_version(str(tmp_path))
    with pytest.raises(shoal_wheel.WheelError, match="cannot read"):
        shoal_wheel.read_version(str(tmp_path / "nowhere"))


def test_prepared_metadata_is_the_wheels(tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)
    tag = shoal_wheel.wheel_tag(BUILT_FOR)
    name = shoal_build_backend.prepare_metadata_for_build_wheel(str(tmp_path))
    assert name == shoal_wheel.dist_info_dir(VERSION)
    expected = shoal_wheel.metadata_files(VERSION, tag, BUILT_FOR)
    assert sorted(os.listdir(tmp_path / name)) == sorted(expected)
    for file, text in expected.items():
        assert (tmp_path / name / file).read_text() == text
    assert shoal_build_backend.get_requires_for_build_wheel() == []
    assert shoal_build_backend.get_requires_for_build_sdist() == []


def test_bazel_runs_with_the_path_from_before_pip_and_the_venv(tmp_path):
    venv = str(tmp_path / "venv")
    os.makedirs(os.path.join(venv, "bin"))
    environ = {
        "PATH": os.pathsep.join([
            "/tmp/pip-build-env-abc/overlay/bin",
            "/tmp/pip-build-env-abc/normal/bin", venv + "/bin",
            "/usr/local/bin", "/usr/bin"]),
        "PYTHONPATH": "/tmp/pip-build-env-abc/site",
        "VIRTUAL_ENV": venv, "HOME": "/root"}
    env = shoal_build_backend.bazel_environment(environ, venv, "/usr")
    assert env["PATH"] == "/usr/local/bin:/usr/bin"
    assert "PYTHONPATH" not in env and "VIRTUAL_ENV" not in env
    assert env["HOME"] == "/root"
    # Outside a venv its bin/ is the interpreter's own: kept.
    env = shoal_build_backend.bazel_environment(
        {"PATH": "/usr/bin"}, "/usr", "/usr")
    assert env["PATH"] == "/usr/bin"


def test_bazel_args_from_config_settings():
    assert shoal_build_backend._bazel_args(None) == []
    assert shoal_build_backend._bazel_args(
        {"bazel-args": "--config=opt --jobs 2"}) == ["--config=opt",
                                                      "--jobs", "2"]
    assert shoal_build_backend._bazel_args(
        {"bazel-args": ["--config=opt", "-c dbg"]}) == ["--config=opt", "-c",
                                                        "dbg"]
    assert shoal_build_backend._bazel_args(
        {"bazel-startup-args": "--output_base=/o b"},
        "bazel-startup-args") == ["--output_base=/o", "b"]


def test_sdist_of_a_tree_git_does_not_know(tmp_path, monkeypatch):
    tree = tmp_path / "src"
    for rel in ("WORKSPACE", "pyproject.toml", "python/shoal/__init__.py"):
        make_file(str(tree / rel), b"# " + rel.encode() + b"\n")
    make_file(str(tree / "tools" / "test"), b"#!/bin/sh\n", executable=True)
    (tree / "VERSION").write_text(VERSION + "\n")
    make_file(str(tree / "third_party" / "system.BUILD"),
              b'glob(["include/python3.11/**/*.h"])\n')
    make_file(str(tree / ".git" / "HEAD"), b"not a repository")
    make_file(str(tmp_path / "out" / "x"), b"")
    os.symlink(str(tmp_path / "out"), str(tree / "bazel-out"))
    os.symlink("VERSION", str(tree / "link"))
    monkeypatch.chdir(tree)
    monkeypatch.setenv("GIT_DIR", str(tmp_path / "no-such-git-dir"))
    out = tmp_path / "dist"
    out.mkdir()
    name = shoal_build_backend.build_sdist(str(out))
    assert name == f"shoal-{VERSION}.tar.gz"
    base = f"shoal-{VERSION}/"
    with tarfile.open(out / name) as tar:
        members = {m.name[len(base):]: m for m in tar.getmembers()}
        assert sorted(members) == [
            "PKG-INFO", "VERSION", "WORKSPACE", "pyproject.toml",
            "python/shoal/__init__.py", "third_party/system.BUILD",
            "tools/test"]
        assert members["tools/test"].mode == 0o755
        assert members["WORKSPACE"].mode == 0o644
        assert members["WORKSPACE"].uid == 0
        pkg_info = tar.extractfile(base + "PKG-INFO").read().decode()
    assert f"Version: {VERSION}" in pkg_info and "Name: shoal" in pkg_info
    assert "Requires-Python: >=3.10" in pkg_info


def built_by_tools_test():
    """Whether tools/test's Bazel build of the package is there (it sets
    SHOAL_BIN to its tools/shoal)."""
    binary = os.environ.get("SHOAL_BIN", "")
    bazel_bin = os.path.dirname(os.path.dirname(os.path.realpath(binary)))
    return bool(binary) and os.path.isfile(
        os.path.join(bazel_bin, "python", "site", "shoal", "_shoal.so"))


@pytest.mark.skipif(not built_by_tools_test(),
                    reason="needs SHOAL_BIN in a Bazel build with "
                    "//python:site (tools/test sets it)")
def test_wheel_of_the_real_build_runs_unpacked(tmp_path, monkeypatch):
    """build_wheel for real (a Bazel build that has nothing left to do after
    tools/test's), and a layout in which the binary and the package find
    each other: shoal --version, python -m shoal, import shoal."""
    monkeypatch.chdir(ROOT)
    name = shoal_build_backend.build_wheel(str(tmp_path))
    assert name == shoal_wheel.wheel_filename(
        VERSION, shoal_wheel.wheel_tag(BUILT_FOR))
    site = tmp_path / "site"
    with zipfile.ZipFile(tmp_path / name) as whl:
        for info in whl.infolist():
            whl.extract(info, site)
            os.chmod(site / info.filename, info.external_attr >> 16)
        names = whl.namelist()
    for expected in ("shoal/__init__.py", "shoal/__main__.py",
                     "shoal/_version.py", "shoal/_shoal.so",
                     "shoal/_bin/shoal"):
        assert expected in names
    env = {k: v for k, v in os.environ.items()
           if k not in ("SHOAL_BIN", "PYTHONPATH")}
    out = subprocess.run([str(site / "shoal" / "_bin" / "shoal"),
                          "--version"], capture_output=True, text=True,
                         timeout=30, env=env)
    assert out.returncode == 0 and out.stdout == f"shoal {VERSION}\n", out
    env["PYTHONPATH"] = str(site)
    out = subprocess.run(
        [sys.executable, "-m", "shoal", "--version"], cwd=str(tmp_path),
        capture_output=True, text=True, timeout=60, env=env)
    assert out.returncode == 0 and out.stdout == f"shoal {VERSION}\n", out
    out = subprocess.run(
        [sys.executable, "-c",
         "import shoal, shoal._paths as p; "
         "print(shoal.__version__, p.shoal_binary())"],
        cwd=str(tmp_path), capture_output=True, text=True, timeout=60,
        env=env)
    assert out.returncode == 0, out
    assert out.stdout.split() == [
        VERSION, str(site / "shoal" / "_bin" / "shoal")]


def test_sdist_of_a_git_checkout_has_only_tracked_files(tmp_path,
                                                        monkeypatch):
    tree = tmp_path / "src"
    for rel in ("WORKSPACE", "pyproject.toml", "python/shoal/__init__.py"):
        make_file(str(tree / rel), b"x\n")
    (tree / "VERSION").write_text(VERSION + "\n")
    make_file(str(tree / "third_party" / "system.BUILD"),
              b'glob(["include/python3.11/**/*.h"])\n')
    monkeypatch.chdir(tree)
    for var in ("GIT_DIR", "GIT_INDEX_FILE", "GIT_WORK_TREE"):
        monkeypatch.delenv(var, raising=False)
    subprocess.run(["git", "init", "-q"], check=True)
    subprocess.run(["git", "add", "."], check=True)
    make_file(str(tree / "notes.txt"), b"untracked: not shipped\n")
    make_file(str(tree / "gone.txt"), b"")
    subprocess.run(["git", "add", "gone.txt"], check=True)
    os.unlink(str(tree / "gone.txt"))  # tracked, deleted: skipped
    assert shoal_build_backend.sdist_files(str(tree)) == [
        "VERSION", "WORKSPACE", "pyproject.toml", "python/shoal/__init__.py",
        "third_party/system.BUILD"]
