"""The timeline from Python: `shoal.span` marks a region of code as a span on
the calling process's track, and `shoal.timeline` writes a node's (or a
launched job's) last seconds as Chrome trace-event JSON for Perfetto.

Inside a task the span lands on its worker's track, nested in the task's own
span; in a launched rank on the rank's track; in a driver (a client of a
node) on a track of its own, made at the first span.
"""

import contextlib
import os
from typing import Any, Iterator, Optional, Union

from . import _errors, _ext


def _job_id(job: Optional[str] = None) -> str:
    """The job a timeline is of: `job`, the default client's node,
    $SHOAL_JOB_ID, or the node started last on this machine."""
    if job:
        return job
    from . import _context
    client = _context._client_now
    if client is not None:
        return client.job_id
    env = os.environ.get("SHOAL_JOB_ID")
    if env:
        return env
    current = _current_job_id()
    if current:
        return current
    raise _errors.NotFoundError(
        "no node: connect to one (shoal.connect / shoal.init) or pass job=")


def _current_job_id() -> Optional[str]:
    """The job <runtime dir>/current names (the node started last), or
    None."""
    from . import _paths
    try:
        with open(os.path.join(_paths.runtime_root(), "current")) as f:
            return f.read().strip() or None
    except OSError:
        return None


def _ensure_ring(ext: Any) -> bool:
    """Starts this process's ring if it has none and a job is known; returns
    whether it records."""
    if ext.timeline_on():
        return True
    try:
        job = _job_id()
    except _errors.NotFoundError:  # no node known: a span is then a no-op
        return False
    ext.timeline_start(job, "client")
    return True


@contextlib.contextmanager
def span(name: object, detail: object = "") -> Iterator[None]:
    """Marks the `with` block as a span named `name` on this process's track
    of the timeline (`shoal timeline`, `shoal.timeline`). An exception
    leaving the block marks the span's outcome as an error. A process that
    knows no node (no client, no $SHOAL_JOB_ID, no node on this machine)
    records nothing."""
    ext = _ext.ext()
    if not _ensure_ring(ext):
        yield
        return
    start = ext.timeline_now()
    try:
        yield
    except BaseException:
        ext.timeline_span(str(name), start, str(detail), 2)  # UNKNOWN
        raise
    ext.timeline_span(str(name), start, str(detail), 0)


def timeline(path: Union[None, str, "os.PathLike[str]"] = None,
             seconds: float = 60, job: Optional[str] = None) -> str:
    """Writes the last `seconds` (0: all the rings hold) of the node this
    process uses (or launched job `job`) on this machine to `path` as Chrome
    trace-event JSON (open it in ui.perfetto.dev or chrome://tracing).
    Returns the path written (as a str); without a path, the JSON as a
    str. Raises NotFoundError when no node is known."""
    data = _ext.ext().timeline_json(_job_id(job), float(seconds))
    if path is None:
        return data.decode("ascii")
    fd = os.open(os.fspath(path),
                 os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    return os.fspath(path)
