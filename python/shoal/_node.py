"""Starting a node from Python (`shoal start` as a child process): for
scripts, tests and benchmarks that bring their own workers."""

import os
import select
import signal
import subprocess

from . import _client, _errors, _paths


class Node:
    """A running `shoal start` node. Stop it with stop() (or use `with`)."""

    def __init__(self, process, job_id, ready_line):
        self.process = process
        self.job_id = job_id
        self.ready_line = ready_line

    def stop(self, timeout=20):
        """Stops the node (SIGTERM; SIGKILL after `timeout` seconds).

        Clients of this process connected to it stay usable as objects, but
        their store refs are then dropped without asking the (gone) store.
        """
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        if self.process.stdout:
            self.process.stdout.close()
        for client in list(_client._CLIENTS):
            if client.job_id == self.job_id:
                client._handle.node_stopped()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()


def start_node(workers=2, *, job_id=None, store_bytes="512M",
               pythonpath=None, extra_args=(), env=None, timeout=60):
    """Starts `shoal start -n WORKERS` and waits until it serves.

    Returns a Node; shoal.connect(job_id=node.job_id) reaches it.
    """
    job_id = job_id or f"py-{os.getpid()}-{os.urandom(3).hex()}"
    cmd = [_paths.shoal_binary(), "start", "-n", str(workers),
           "--job-id", job_id, "--store-bytes", str(store_bytes)]
    if pythonpath:
        if not isinstance(pythonpath, str):
            pythonpath = ":".join(pythonpath)
        cmd += ["--pythonpath", pythonpath]
    cmd += list(extra_args)
    process = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True,
                               env=env)
    ready, _, _ = select.select([process.stdout], [], [], timeout)
    line = process.stdout.readline() if ready else ""
    if "ready" not in line:
        process.kill()
        process.wait()
        raise _errors.UnavailableError(
            f"`{' '.join(cmd)}` did not start (printed {line!r}, "
            f"exit {process.returncode})")
    return Node(process, job_id, line.strip())
