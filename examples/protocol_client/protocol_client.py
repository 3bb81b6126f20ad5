#!/usr/bin/env python3
"""A shoal task client written from docs/protocol.md alone.

It uses only pyzmq and the module that protoc generates from
proto/shoal.proto (generated into a temporary folder at start): no shoal
extension, no shoal package. Run against a node started with
`shoal start --daemon`:

    /usr/bin/python3 protocol_client.py --job-id JOB [--transport tcp|ipc]

It says hello, submits tasks one request each and in a batch, waits for
their results, fetches a large result (a store object) and releases it,
cancels a task, reads the node's status, and checks every answer.
"""
import argparse
import importlib
import os
import socket
import stat
import subprocess
import sys
import tempfile

import zmq

PROTOCOL_MAJOR = 1
PROTOCOL_MINOR = 1
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def load_wire_module(proto_dir):
    """protoc --python_out into a temporary folder; returns shoal_pb2."""
    out = tempfile.mkdtemp(prefix="shoal-proto-")
    subprocess.run(["protoc", f"-I{proto_dir}", f"--python_out={out}",
                    os.path.join(proto_dir, "shoal.proto")], check=True)
    sys.path.insert(0, out)
    return importlib.import_module("shoal_pb2")


def runtime_root():
    """Where nodes keep their job folders (docs/protocol.md, "Finding a node")."""
    if os.environ.get("SHOAL_RUNTIME_DIR"):
        root = os.environ["SHOAL_RUNTIME_DIR"].rstrip("/") or "/"
    elif os.environ.get("XDG_RUNTIME_DIR"):
        root = os.path.join(os.environ["XDG_RUNTIME_DIR"], "shoal")
    else:
        root = f"/tmp/shoal-{os.getuid()}"
    try:
        held = os.lstat(root).st_uid != os.geteuid()
    except OSError:
        held = False
    return (held and recorded_fallback(root)) or root


def _private(path, kind):
    """Whether `path` is a `kind` (stat.S_ISDIR/S_ISREG) of this user, not a
    link, that no one else may write to."""
    try:
        st = os.lstat(path)
    except OSError:
        return False
    return (kind(st.st_mode) and st.st_uid == os.geteuid()
            and st.st_mode & 0o022 == 0)


def recorded_fallback(root):
    """The private fallback a node recorded for a root another user holds, or
    None: base/runtime_dir.cc's record, $HOME/.shoal/runtime-<host>-<FNV-1a
    of the root>, followed only if it and the folder it names are this
    user's alone."""
    home = os.environ.get("HOME", "")
    if not home.startswith("/"):
        return None
    h = 0xcbf29ce484222325
    for b in root.encode():
        h = ((h ^ b) * 0x100000001b3) & 0xffffffffffffffff
    host = (socket.gethostname() or "localhost").replace("/", "_")
    folder = (home.rstrip("/") or "") + "/.shoal"
    record = f"{folder}/runtime-{host}-{h:016x}"
    if not (_private(folder, stat.S_ISDIR) and _private(record, stat.S_ISREG)):
        return None
    with open(record) as f:
        lines = [line for line in f.read().split("\n") if line]
    if len(lines) != 2 or lines[0] != root:
        return None
    fallback = lines[1]
    tail = fallback[len(root) + 1:]
    if (not fallback.startswith(root + "-") or len(tail) != 6 or "/" in tail
            or not _private(fallback, stat.S_ISDIR)):
        return None
    return fallback


def read_discovery(job_id):
    """The job's `coordinator` file as a dict (key=value lines)."""
    return read_discovery_in(runtime_root(), job_id)


def read_discovery_in(root, job_id):
    path = os.path.join(root, job_id, "coordinator")
    with open(path) as f:
        return dict(line.rstrip("\n").split("=", 1) for line in f if "=" in line)


def read_key_pair(path):
    """A key-pair file: `public=<z85>` and `secret=<z85>` lines."""
    with open(path) as f:
        kv = dict(line.strip().split("=", 1) for line in f if "=" in line)
    return kv["public"].encode(), kv["secret"].encode()


class ShoalError(Exception):
    """An ErrorReply: `code` is an absl::StatusCode number."""

    def __init__(self, code, message):
        super().__init__(f"code {code}: {message}")
        self.code = code
        self.message = message


class Session:
    """One DEALER socket to a node's frontend; one request, one reply."""

    def __init__(self, wire, endpoint, server_key=None, key_pair=None,
                 timeout_ms=30000):
        self.wire = wire
        self.ctx = zmq.Context()
        self.sock = self.ctx.socket(zmq.DEALER)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.setsockopt(zmq.RCVTIMEO, timeout_ms)
        self.sock.setsockopt(zmq.MAXMSGSIZE, 128 << 20)
        if endpoint.startswith("tcp://"):
            # CURVE: the server's public key from the discovery file, and a
            # key pair the node admits (the owner's client.key here).
            self.sock.curve_serverkey = server_key
            self.sock.curve_publickey, self.sock.curve_secretkey = key_pair
        self.sock.connect(endpoint)
        self.next_id = 1

    def close(self):
        self.sock.close()
        self.ctx.term()

    def call(self, field, message):
        """Sends Envelope{field: message}; returns (reply field, reply body)."""
        env = self.wire.Envelope(major=PROTOCOL_MAJOR, minor=PROTOCOL_MINOR,
                                 request_id=self.next_id)
        getattr(env, field).CopyFrom(message)
        self.next_id += 1
        self.sock.send(env.SerializeToString())
        frames = self.sock.recv_multipart()  # zmq.Again on timeout
        assert len(frames) == 1, f"expected one frame, got {len(frames)}"
        reply = self.wire.Envelope()
        reply.ParseFromString(frames[0])
        assert reply.request_id == env.request_id, (reply.request_id,
                                                    env.request_id)
        which = reply.WhichOneof("body")
        if which == "error":
            raise ShoalError(reply.error.code,
                             reply.error.message.decode(errors="replace"))
        return which, getattr(reply, which)

    # The task client's requests (docs/protocol.md, "Requests").
    def hello(self, name):
        w = self.wire
        _, welcome = self.call("client_hello",
                               w.ClientHello(pid=os.getpid(), name=name.encode()))
        return welcome

    def submit(self, specs):
        _, reply = self.call("submit", self.wire.SubmitRequest(tasks=specs))
        return list(reply.task_ids)

    def run_pushed(self, specs):
        """One submit with push (protocol 1.1): no submit_reply; the results
        arrive as wait_replies with this request's id. Returns them all."""
        env = self.wire.Envelope(major=PROTOCOL_MAJOR, minor=PROTOCOL_MINOR,
                                 request_id=self.next_id)
        env.submit.CopyFrom(self.wire.SubmitRequest(tasks=specs, push=True))
        self.next_id += 1
        self.sock.send(env.SerializeToString())
        results = []
        while len(results) < len(specs):
            reply = self.wire.Envelope()
            reply.ParseFromString(self.sock.recv())
            assert reply.request_id == env.request_id, reply
            which = reply.WhichOneof("body")
            if which == "error":
                raise ShoalError(reply.error.code,
                                 reply.error.message.decode(errors="replace"))
            assert which == "wait_reply", which  # a 1.0 node: submit_reply
            results.extend(reply.wait_reply.results)
        return results

    def wait(self, task_ids, timeout_ms=-1, min_done=0, release=True):
        _, reply = self.call("wait", self.wire.WaitRequest(
            task_ids=task_ids, timeout_ms=timeout_ms, min_done=min_done,
            release=release))
        return list(reply.results)

    def cancel(self, task_ids):
        self.call("cancel", self.wire.CancelRequest(task_ids=task_ids))

    def release_tasks(self, task_ids):
        self.call("release_tasks", self.wire.ReleaseTasksRequest(task_ids=task_ids))

    def fetch(self, object_id):
        _, reply = self.call("fetch_object",
                             self.wire.FetchObjectRequest(id=object_id))
        return reply.tensor

    def release_output(self, object_id):
        self.call("delete_object", self.wire.DeleteRequest(id=object_id))

    def status(self):
        _, st = self.call("status", self.wire.StatusRequest())
        return st


def task(wire, function, *args):
    """A TaskSpec of `function` with int, float, str or bytes arguments."""
    values = []
    for a in args:
        if isinstance(a, bool):
            values.append(wire.Value(b=a))
        elif isinstance(a, int):
            values.append(wire.Value(i=a))
        elif isinstance(a, float):
            values.append(wire.Value(f=a))
        elif isinstance(a, str):
            values.append(wire.Value(s=a.encode()))
        else:
            values.append(wire.Value(raw=bytes(a)))
    return wire.TaskSpec(function=function.encode(), args=values)


def run_session(s, wire, n_tasks):
    """The worked example of docs/protocol.md, checked step by step."""
    welcome = s.hello("protocol_client")
    assert not welcome.local and welcome.job_id, welcome
    print(f"hello: job {welcome.job_id}, {welcome.cpus_per_worker} cpu/worker")

    # One request per task, then one wait for all of them.
    ids = [s.submit([task(wire, "echo", i, f"task {i}")])[0]
           for i in range(n_tasks)]
    assert len(set(ids)) == n_tasks, ids
    results = s.wait(ids)
    assert sorted(r.task_id for r in results) == sorted(ids)
    by_id = {r.task_id: r for r in results}
    for i, tid in enumerate(ids):
        r = by_id[tid]
        assert r.code == 0, (r.code, r.message)
        assert [o.WhichOneof("kind") for o in r.outputs] == ["i", "s"], r
        assert r.outputs[0].i == i and r.outputs[1].s == f"task {i}".encode()
    print(f"echo: {n_tasks} tasks, one submit each, all results right")

    # A batch: one SubmitRequest with many TaskSpecs.
    ids = s.submit([task(wire, "noop")] * n_tasks)
    results = s.wait(ids)
    assert len(results) == n_tasks and all(r.code == 0 for r in results)
    print(f"noop: {n_tasks} tasks in one batch")

    # A large result: fill(n, value) makes an f32 tensor of n elements; over
    # 64 KiB it stays in the node's store and the result names the object.
    n = 1 << 20
    (tid,) = s.submit([task(wire, "fill", n, 2.5)])
    (r,) = s.wait([tid])
    assert r.code == 0 and r.outputs[0].WhichOneof("kind") == "object", r
    obj = r.outputs[0].object
    assert obj.nbytes == 4 * n and list(obj.meta.shape) == [n], obj
    tensor = s.fetch(obj.id)
    assert tensor.meta.dtype == 3 and len(tensor.data) == 4 * n  # 3: f32
    assert tensor.data == (b"\x00\x00\x20\x40" * n)  # 2.5f little-endian
    s.release_output(obj.id)
    print(f"fill: fetched a {len(tensor.data)}-byte result, then released it")

    # A failing task: its result carries the status, the request succeeds.
    (tid,) = s.submit([task(wire, "fail", "on purpose")])
    (r,) = s.wait([tid])
    assert r.code == 2 and b"on purpose" in r.message, r  # 2: UNKNOWN
    print(f"fail: code {r.code}, {r.message.decode()!r}")

    # Cancel a long task; its result then says CANCELLED (1).
    (tid,) = s.submit([task(wire, "sleep", 60.0)])
    s.cancel([tid])
    (r,) = s.wait([tid], timeout_ms=30000)
    assert r.code == 1, r
    print("sleep: cancelled")

    # Wait with a timeout on a task that cannot finish in time: no results.
    (tid,) = s.submit([task(wire, "sleep", 60.0)])
    assert s.wait([tid], timeout_ms=50, release=False) == []
    s.cancel([tid])
    s.release_tasks([tid])
    try:
        s.wait([tid], timeout_ms=0)
        raise AssertionError("a released task is still known")
    except ShoalError as e:
        assert e.code == 5, e  # 5: NOT_FOUND
    print("released: a released task is NotFound")

    st = s.status()
    assert st.job_id == welcome.job_id and len(st.workers) >= 1
    print(f"status: {len(st.workers)} workers, {st.completed} tasks completed")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--job-id", required=True)
    p.add_argument("--transport", choices=["tcp", "ipc"], default="tcp")
    p.add_argument("--tasks", type=int, default=100)
    p.add_argument("--proto-dir", default=os.path.join(REPO, "proto"))
    args = p.parse_args()
    wire = load_wire_module(args.proto_dir)
    d = read_discovery(args.job_id)
    if args.transport == "tcp":
        s = Session(wire, d["tcp"], d["server_key"].encode(),
                    read_key_pair(d["client_key_file"]))
    else:
        s = Session(wire, d["frontend"])
    try:
        run_session(s, wire, args.tasks)
    finally:
        s.close()
    print("protocol_client: OK")


if __name__ == "__main__":
    main()
