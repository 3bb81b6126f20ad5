"""The files of shoal's wheel and sdist, and how they are written: the
.dist-info texts (METADATA, WHEEL, entry_points.txt, RECORD), the wheel's
tag, and reproducible zip / tar archives. Standard library only, and no Bazel:
shoal_build_backend.py decides what goes in, this module writes it (and
python/build_backend/tests checks it on its own).

Formats: the binary distribution format (wheel 1.0, PEP 427 / 491), core
metadata 2.1, the source distribution format (PEP 517 / 625).
"""

import base64
import hashlib
import io
import os
import re
import sys
import sysconfig
import tarfile
import time
import zipfile

NAME = "shoal"
SUMMARY = ("A multi-process runtime for ML jobs: workers with their own "
           "interpreters, a shared-memory tensor store, collectives")
# What `import shoal` needs besides the standard library. The build needs it
# too (its headers), so it is in the venv before `pip install .` (with
# `--no-index` pip then fetches nothing).
REQUIRES_DIST = ("numpy",)
# The oldest CPython the extension builds for (an sdist's Requires-Python).
MIN_PYTHON = (3, 10)
CONSOLE_SCRIPTS = (("shoal", "shoal.__main__:main"),)

# Zip entries before 1980 cannot be written; a fixed time makes the same
# inputs give the same bytes (SOURCE_DATE_EPOCH overrides it).
_DEFAULT_EPOCH = 315532800  # 1980-01-01T00:00:00Z


class WheelError(Exception):
    """A wheel or sdist cannot be made as asked (the message says why)."""


def read_version(root):
    """The version in ROOT/VERSION (the only place it is written down).

    Raises WheelError if the file is missing or is not a release version
    (digits and dots, e.g. 0.1.0).
    """
    path = os.path.join(root, "VERSION")
    try:
        with open(path, encoding="utf-8") as f:
            version = f.read().strip()
    except OSError as e:
        raise WheelError(f"cannot read the version from {path}: {e}") from e
    if not re.fullmatch(r"\d+(\.\d+)*", version):
        raise WheelError(f"{path} holds {version!r}, not a version like 0.1.0")
    return version


def built_for_running_interpreter(version_info=None, implementation=None):
    """(major, minor) of the CPython running the build backend: the one pip
    installs into, whose headers, numpy (and torch) the Bazel build compiles
    the extensions against (--repo_env=SHOAL_PYTHON, see
    third_party/python_configure.bzl).

    Raises WheelError for another implementation or a CPython older than
    MIN_PYTHON.
    """
    implementation = implementation or sys.implementation.name
    version_info = version_info or sys.version_info
    have = (version_info[0], version_info[1])
    if implementation != "cpython" or have < MIN_PYTHON:
        raise WheelError(
            f"shoal builds for CPython {MIN_PYTHON[0]}.{MIN_PYTHON[1]} or "
            f"newer; this is {implementation} {have[0]}.{have[1]}")
    return have


def wheel_tag(built_for, implementation=None, version_info=None,
              platform=None):
    """The wheel's tag, e.g. cp311-cp311-linux_x86_64, for the interpreter
    running this code, which must be the CPython the extension was built
    for (`built_for`: (major, minor)). The platform tag is the plain one
    (linux_x86_64), not manylinux: the binary links Debian's libraries.

    Raises WheelError naming both versions if the interpreter is another.
    """
    implementation = implementation or sys.implementation.name
    version_info = version_info or sys.version_info
    platform = platform or sysconfig.get_platform()
    have = (version_info[0], version_info[1])
    if implementation != "cpython" or have != tuple(built_for):
        want = "%d.%d" % tuple(built_for)
        raise WheelError(
            f"shoal's extension is built for CPython {want}, but this is "
            f"{implementation} {have[0]}.{have[1]}")
    py = "cp%d%d" % have
    return f"{py}-{py}-{re.sub(r'[^A-Za-z0-9]', '_', platform)}"


def dist_info_dir(version):
    return f"{NAME}-{version}.dist-info"


def wheel_filename(version, tag):
    return f"{NAME}-{version}-{tag}.whl"


def metadata_text(version, built_for):
    """METADATA (PKG-INFO): a wheel's BUILT_FOR is its CPython (major, minor);
    an sdist's is None (any CPython from MIN_PYTHON)."""
    lines = [
        "Metadata-Version: 2.1",
        f"Name: {NAME}",
        f"Version: {version}",
        f"Summary: {SUMMARY}",
        ("Requires-Python: ==%d.%d.*" % tuple(built_for) if built_for else
         "Requires-Python: >=%d.%d" % MIN_PYTHON),
    ]
    lines += [f"Requires-Dist: {r}" for r in REQUIRES_DIST]
    return "\n".join(lines) + "\n"


def wheel_text(tag, version):
    return (f"Wheel-Version: 1.0\n"
            f"Generator: shoal_build_backend {version}\n"
            f"Root-Is-Purelib: false\n"
            f"Tag: {tag}\n")


def entry_points_text():
    lines = ["[console_scripts]"]
    lines += [f"{name} = {target}" for name, target in CONSOLE_SCRIPTS]
    return "\n".join(lines) + "\n"


def metadata_files(version, tag, built_for):
    """{name inside the .dist-info: text}, RECORD aside."""
    return {
        "METADATA": metadata_text(version, built_for),
        "WHEEL": wheel_text(tag, version),
        "entry_points.txt": entry_points_text(),
        "top_level.txt": NAME + "\n",
    }


def write_metadata_dir(directory, version, tag, built_for):
    """Writes DIRECTORY/shoal-VERSION.dist-info/ (what
    prepare_metadata_for_build_wheel returns) and returns its name."""
    name = dist_info_dir(version)
    os.makedirs(os.path.join(directory, name), exist_ok=True)
    for file, text in metadata_files(version, tag, built_for).items():
        with open(os.path.join(directory, name, file), "w",
                  encoding="utf-8") as f:
            f.write(text)
    return name


def record_hash(data):
    """RECORD's hash field: sha256=<urlsafe base64, no padding>."""
    digest = hashlib.sha256(data).digest()
    return "sha256=" + base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def _epoch():
    return max(int(os.environ.get("SOURCE_DATE_EPOCH", _DEFAULT_EPOCH)),
               _DEFAULT_EPOCH)


def _zip_info(arcname, executable):
    info = zipfile.ZipInfo(arcname, time.gmtime(_epoch())[:6])
    info.external_attr = (0o100755 if executable else 0o100644) << 16
    info.compress_type = zipfile.ZIP_DEFLATED
    return info


def write_wheel(directory, version, tag, built_for, payload):
    """Writes the wheel into DIRECTORY and returns its file name.

    payload: (name in the wheel, path of the file to copy) pairs; a file
    that is executable on disk stays executable. The .dist-info (with a
    RECORD that lists every file with its hash and size) is added here.
    Entries are sorted, dated SOURCE_DATE_EPOCH (default 1980): the same
    inputs give the same bytes.

    Raises WheelError for a name outside the package or given twice, and
    OSError for a file that cannot be read.
    """
    dist_info = dist_info_dir(version)
    names = [name for name, _ in payload]
    for name in names:
        if not name.startswith(NAME + "/") or ".." in name.split("/"):
            raise WheelError(f"{name!r} is not a path inside the package")
    if len(set(names)) != len(names):
        raise WheelError("a file is listed twice in the wheel")
    filename = wheel_filename(version, tag)
    final = os.path.join(directory, filename)
    partial = final + ".partial"
    record = []
    with zipfile.ZipFile(partial, "w") as whl:
        for name, source in sorted(payload):
            with open(source, "rb") as f:
                data = f.read()
            whl.writestr(_zip_info(name, os.access(source, os.X_OK)), data)
            record.append(f"{name},{record_hash(data)},{len(data)}")
        for file, text in sorted(metadata_files(version, tag,
                                                built_for).items()):
            data = text.encode("utf-8")
            name = f"{dist_info}/{file}"
            whl.writestr(_zip_info(name, False), data)
            record.append(f"{name},{record_hash(data)},{len(data)}")
        record.append(f"{dist_info}/RECORD,,")
        whl.writestr(_zip_info(f"{dist_info}/RECORD", False),
                     "\n".join(record) + "\n")
    os.replace(partial, final)
    return filename


def sdist_filename(version):
    return f"{NAME}-{version}.tar.gz"


def write_sdist(directory, version, root, files):
    """Writes DIRECTORY/shoal-VERSION.tar.gz: FILES (paths relative to
    ROOT) under shoal-VERSION/, plus PKG-INFO (any CPython from
    MIN_PYTHON); returns its file name.
    Owners are 0, times SOURCE_DATE_EPOCH, modes 644 or 755.

    Raises WheelError for a path that leaves ROOT or is not a regular file.
    """
    base = f"{NAME}-{version}"
    filename = sdist_filename(version)
    final = os.path.join(directory, filename)
    partial = final + ".partial"

    def add(tar, name, data, executable):
        info = tarfile.TarInfo(f"{base}/{name}")
        info.size = len(data)
        info.mtime = _epoch()
        info.mode = 0o755 if executable else 0o644
        tar.addfile(info, io.BytesIO(data))

    with tarfile.open(partial, "w:gz", format=tarfile.PAX_FORMAT) as tar:
        for rel in sorted(set(files)):
            path = os.path.join(root, rel)
            if (os.path.isabs(rel) or ".." in rel.split("/")
                    or os.path.islink(path) or not os.path.isfile(path)):
                raise WheelError(f"{rel!r} is not a regular file in {root}")
            with open(path, "rb") as f:
                add(tar, rel, f.read(), os.access(path, os.X_OK))
        add(tar, "PKG-INFO",
            metadata_text(version, None).encode("utf-8"), False)
    os.replace(partial, final)
    return filename
