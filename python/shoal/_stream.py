"""Generator tasks: a remote function that yields streams its items to the
caller as they come (Ray's num_returns="streaming", ObjectRefGenerator).

    gen = count_up.remote(5)        # a StreamingFutures
    for f in gen:                   # item i arrives before the task ends
        print(f.result())

How items travel: the caller listens on an abstract Unix socket (a random
name; the worker's uid and a 16-byte token checked at connect) and the task
(produce, on the worker) connects to it and sends each item as it is
yielded: a small item (pickle up to INLINE_BYTES) inline, a larger one as a
store object the worker puts (shoal.put) and the caller borrows. The caller
acknowledges each item it took; the worker keeps at most WINDOW items
unacknowledged, waiting for acknowledgements beyond that (back-pressure: a
caller that does not read holds the generator, and at most WINDOW items of
memory), and drops its reference to a stored item once acknowledged. A
client that is not on the node's machine (no socket, no store there) gets
the items after the task ended: the task returns them as one list.

Imports nothing of shoal's at import time beyond _future: the worker
imports this module to run produce."""

import os
import pickle
import secrets
import select
import socket
import struct

from . import _future

# Items the worker sends before it waits for the caller's acknowledgement.
WINDOW = 16
# An item whose pickle is at most this big travels inline; a bigger one as
# a store object.
INLINE_BYTES = 64 * 1024
_HEADER = struct.Struct("<cI")  # kind, length
_INLINE, _STORED, _END = b"v", b"r", b"e"
# How often a caller waiting for the next item looks whether the task ended
# without sending (it failed before connecting, or its worker died).
_POLL_S = 0.05


# ---- the worker's side -------------------------------------------------------


def produce(target, address, token, window, args, kwargs):
    """The task: runs the generator function `target` (_retry.resolve) and
    streams its items to the caller at `address`. Returns how many it sent.
    The caller gone: the generator is closed and the task ends."""
    from . import _retry
    gen = _retry.resolve(target)(*args, **kwargs)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(address)
    held = {}  # item index → the ObjectRef/ValueRef the caller borrows
    sent = acked = 0
    try:
        sock.sendall(token, socket.MSG_NOSIGNAL)
        for item in gen:
            while sent - acked >= window:
                acked = _read_acks(sock, held, acked, block=True)
            acked = _read_acks(sock, held, acked, block=False)
            data = pickle.dumps(item, 5)
            kind = _INLINE
            if len(data) > INLINE_BYTES:
                import shoal
                ref = shoal.put(item)
                held[sent] = ref
                data, kind = pickle.dumps(ref, 5), _STORED
            sock.sendall(_HEADER.pack(kind, len(data)) + data,
                         socket.MSG_NOSIGNAL)
            sent += 1
        sock.sendall(_HEADER.pack(_END, 0), socket.MSG_NOSIGNAL)
        while held:  # stored items: until the caller borrowed them
            acked = _read_acks(sock, held, acked, block=True)
    except (BrokenPipeError, ConnectionResetError, EOFError):
        gen.close()  # the caller went away
    finally:
        _close_gently(sock)
    return sent


# How long a finished task waits for its caller to see the end of the stream.
_LINGER_S = 2.0


def _close_gently(sock):
    """Ends the stream, then reads the caller's last acknowledgements until
    it closes (or _LINGER_S): a socket closed with unread data resets the
    caller's end, which could then miss the last items or the error."""
    try:
        sock.shutdown(socket.SHUT_WR)
        sock.settimeout(_LINGER_S)
        while sock.recv(4096):
            pass
    except OSError:
        pass
    sock.close()


def _read_acks(sock, held, acked, block):
    """Reads acknowledgements (one byte each): each drops the worker's
    reference to that item. Returns the new count."""
    if not block and not select.select([sock], [], [], 0)[0]:
        return acked
    data = sock.recv(4096)
    if not data:
        raise EOFError("the caller closed the stream")
    for _ in data:
        held.pop(acked, None)
        acked += 1
    return acked


def collect(target, args, kwargs):
    """The task for a caller off the node's machine: all items as one
    list."""
    from . import _retry
    return list(_retry.resolve(target)(*args, **kwargs))


# ---- the caller's side -------------------------------------------------------


class StreamingFutures:
    """The items of a generator task, as an iterator of futures (Ray's
    ObjectRefGenerator): next() waits for the next item and returns a
    finished Future holding it; when the task failed, the last future holds
    its error; then StopIteration. `task` is the task's own Future (its
    value: the number of items)."""

    def __init__(self, client, target, args, kwargs, options, submit):
        self._client = client
        self._conn = None
        self._listener = None
        self._ended = False
        self._items = None  # (a remote caller's: the task's list)
        self._collected = not client.local
        if self._collected:
            self.task = submit(collect, (target, args, kwargs), {}, options)
            return
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        address = "\0shoal-stream-" + secrets.token_hex(16)
        self._listener.bind(address)
        self._listener.listen(1)
        self._token = secrets.token_bytes(16)
        self.task = submit(produce, (target, address, self._token, WINDOW,
                                     args, kwargs), {}, options)

    def __iter__(self):
        return self

    def __next__(self):
        if self._ended:
            raise StopIteration
        if self._collected:
            return self._next_collected()
        if self._conn is None and not self._accept():
            return self._end()
        frame = self._read_frame()
        if frame is None or frame[0] == _END:
            return self._end()
        kind, data = frame
        value = pickle.loads(data)
        if kind == _STORED:
            import shoal
            value = shoal.get(value)  # borrowed: now the worker may drop it
        try:
            self._conn.sendall(b"\x01", socket.MSG_NOSIGNAL)
        except OSError:
            pass  # the task ended after its last item: no one to tell
        return _future.finished(self._client, value)

    def _next_collected(self):
        if self._items is None:
            try:
                self._items = iter(self.task.result())
            except BaseException as e:  # noqa: BLE001 (the task's error)
                self._ended = True
                return _future.finished(self._client, None, e)
        try:
            return _future.finished(self._client, next(self._items))
        except StopIteration:
            self._ended = True
            raise

    def _wait_readable(self, sock):
        """Waits until `sock` is readable; False when the task ended first
        (it then may still have left data: one last look)."""
        while True:
            if select.select([sock], [], [], _POLL_S)[0]:
                return True
            if self.task.done():
                return bool(select.select([sock], [], [], 0)[0])

    def _accept(self):
        while self._wait_readable(self._listener):
            conn, _ = self._listener.accept()
            conn.settimeout(5)  # the token comes at once
            creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED,
                                    struct.calcsize("3i"))
            _, uid, _ = struct.unpack("3i", creds)
            try:
                ours = uid == os.getuid() and \
                    _recv_exact(conn, 16) == self._token
            except OSError:
                ours = False
            if ours:
                conn.settimeout(None)
                self._conn = conn
                self._listener.close()
                self._listener = None
                return True
            conn.close()  # not our task
        return False

    def _read_frame(self):
        header = _recv_exact(self._conn, _HEADER.size, self)
        if header is None:
            return None
        kind, n = _HEADER.unpack(header)
        data = _recv_exact(self._conn, n, self) if n else b""
        return None if data is None else (kind, data)

    def _end(self):
        """The stream ended: StopIteration after the task's success, else a
        last future holding its error."""
        self._ended = True
        self.close()
        try:
            self.task.result()
        except BaseException as e:  # noqa: BLE001
            return _future.finished(self._client, None, e)
        raise StopIteration

    def close(self):
        """Stops reading: the worker's generator is closed at its next item."""
        for s in (self._conn, self._listener):
            if s is not None:
                s.close()
        self._conn = self._listener = None

    def __del__(self):
        self.close()

    def __repr__(self):
        return f"<shoal.StreamingFutures of task {self.task.id}>"


def _recv_exact(sock, n, stream=None):
    """n bytes from `sock`, or None at its end. With `stream`, waits in
    slices, giving up when its task ended and nothing more came."""
    out = bytearray()
    while len(out) < n:
        if stream is not None and not stream._wait_readable(sock):
            return None
        try:
            chunk = sock.recv(n - len(out))
        except ConnectionResetError:
            return None
        if not chunk:
            return None
        out += chunk
    return bytes(out)
