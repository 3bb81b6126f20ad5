"""Starting a node from Python (`shoal start` as a child process): for
scripts, tests and benchmarks that bring their own workers."""

import atexit
import ctypes
import os
import select
import signal
import subprocess
import threading
from types import TracebackType
from typing import (Any, Callable, Mapping, Optional, Sequence, Type, Union)

from . import _client, _errors, _paths


class Node:
    """A running `shoal start` node. Stop it with stop() (or use `with`).
    `process`: the `shoal start` process (of a detached node: the one that
    started it, which has exited; the node runs in its own session)."""

    detached = False

    def __init__(self, process: "subprocess.Popen[str]", job_id: str,
                 ready_line: str) -> None:
        self.process = process
        self.job_id = job_id
        self.ready_line = ready_line

    def stop(self, timeout: float = 20) -> None:
        """Stops the node (SIGTERM; SIGKILL after `timeout` seconds).

        Clients of this process connected to it stay usable as objects, but
        their store refs are then dropped without asking the (gone) store.
        """
        if self.detached:
            subprocess.run([_paths.shoal_binary(), "stop", "--job-id",
                            self.job_id], stdout=subprocess.DEVNULL,
                           timeout=timeout, check=False)
        elif self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        if self.process.stdout:
            self.process.stdout.close()
        _STARTED.discard(self)
        for client in list(_client._CLIENTS):
            if client.job_id == self.job_id:
                client._handle.node_stopped()
                client._node_gone(self.process.pid)

    def __enter__(self) -> "Node":
        return self

    def __exit__(self, exc_type: Optional[Type[BaseException]],
                 exc: Optional[BaseException],
                 tb: Optional[TracebackType]) -> None:
        self.stop()


def start_node(workers: int = 2, *, job_id: Optional[str] = None,
               store_bytes: Union[str, int] = "512M",
               pythonpath: Union[None, str, Sequence[str]] = None,
               extra_args: Sequence[str] = (),
               env: Optional[Mapping[str, str]] = None,
               timeout: float = 60, detached: bool = False) -> Node:
    """Starts `shoal start -n WORKERS` and waits until it serves.

    Returns a Node; shoal.connect(job_id=node.job_id) reaches it. The node
    stops when this process exits (at exit it is stopped as Node.stop does;
    a process that dies — killed, os._exit — takes along a node started
    from its main thread: that node gets SIGTERM when the process ends). With detached=True it outlives this
    process, in a session of its own: stop it with `shoal stop`.

    job_id: the node's job id (default: a new one); store_bytes: the
    store's size ("512M", "2G" or bytes); pythonpath: folders its workers
    import from (a ":"-joined str or a list); extra_args: more `shoal
    start` arguments; env: its environment (default this process's);
    timeout: seconds to wait for it to serve. Raises UnavailableError when
    it did not start.
    """
    job_id = job_id or f"py-{os.getpid()}-{os.urandom(3).hex()}"
    cmd = [_paths.shoal_binary(), "start", "-n", str(workers),
           "--job-id", job_id, "--store-bytes", str(store_bytes)]
    if pythonpath:
        if not isinstance(pythonpath, str):
            pythonpath = ":".join(pythonpath)
        cmd += ["--pythonpath", pythonpath]
    cmd += list(extra_args)
    if detached:  # `shoal start --daemon`: it prints its line and exits
        cmd.append("--daemon")
        process = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True,
                                   env=env, start_new_session=True)
    else:
        process = subprocess.Popen(
            cmd, stdout=subprocess.PIPE, text=True, env=env,
            preexec_fn=_dies_with_parent(os.getpid())
            if threading.current_thread() is threading.main_thread()
            else None)
    ready, _, _ = select.select([process.stdout], [], [], timeout)
    line = process.stdout.readline() if ready else ""  # type: ignore[union-attr]  # (PIPE)
    if "ready" not in line and not (detached and line.startswith("node ")):
        process.kill()
        process.wait()
        raise _errors.UnavailableError(
            f"`{' '.join(cmd)}` did not start (printed {line!r}, "
            f"exit {process.returncode})")
    node = Node(process, job_id, line.strip())
    if detached:
        process.wait()
        node.detached = True
    else:
        _STARTED.add(node)
    return node


# Nodes start_node started (not detached) and nothing stopped yet: stopped
# when this process exits.
_STARTED: set[Node] = set()


@atexit.register
def _stop_started() -> None:
    for node in list(_STARTED):
        try:
            node.stop()
        except Exception:  # noqa: BLE001 (exiting: stop the others too)
            pass


_PR_SET_PDEATHSIG = 1


def _dies_with_parent(parent: int) -> Optional[Callable[[], None]]:
    """A preexec_fn: the child gets SIGTERM when the thread that forked it
    ends (prctl PR_SET_PDEATHSIG; for the main thread: when this process
    exits, however it exits), and exits at once if `parent` is already
    gone."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        prctl = libc.prctl
    except (OSError, AttributeError):
        return None

    def preexec() -> None:
        prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
        if os.getppid() != parent:
            os._exit(1)
    return preexec
