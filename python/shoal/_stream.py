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
memory), and drops its reference to a stored item once acknowledged.

A client that is not on the node's machine has no socket there and no
store: it makes a Relay actor on the node, which listens in its place, and
takes the items from it through the node's frontend (Relay.take: all that
have come, up to WINDOW, waiting for the first), as they come.

Imports nothing of shoal's at import time beyond _errors and _future: the
worker imports this module to run produce."""

import os
import pickle
import secrets
import select
import socket
import struct
from typing import Any, Callable, Mapping, Optional, Sequence

from . import _errors, _future

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


# ---- the worker's side ------------------------------------------------------


def produce(target: Any, address: str, token: bytes, window: int,
            args: Sequence[Any], kwargs: Mapping[str, Any]) -> int:
    """The task: runs the generator function `target` (_retry.resolve) and
    streams its items to the caller at `address`. Returns how many it sent.
    The caller gone: the generator is closed and the task ends."""
    from . import _retry
    gen = _retry.resolve(target)(*args, **kwargs)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(address)
    # Item index → the ObjectRef/ValueRef the caller borrows.
    held: dict[int, Any] = {}
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


def _close_gently(sock: socket.socket) -> None:
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


def _read_acks(sock: socket.socket, held: dict[int, Any], acked: int,
               block: bool) -> int:
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


# ---- the caller's end of a stream -------------------------------------------

# What next_frame returns when `gave_up` said stop before a frame came.
_NOTHING = object()


class _Reader:
    """The end a producing task connects to: a listener on an abstract Unix
    socket (a random name), then that one connection's frames. Used by a
    caller on the node's machine, and by the relay actor of a caller off
    it."""

    def __init__(self) -> None:
        self.address = "\0shoal-stream-" + secrets.token_hex(16)
        self.token = secrets.token_bytes(16)
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(self.address)
        listener.listen(1)
        self._listener: Optional[socket.socket] = listener
        self._conn: Optional[socket.socket] = None

    def next_frame(self, gave_up: Callable[[], bool]) -> Any:
        """The next frame, (kind, data); None when the stream ended (the end
        frame, or the task's connection closed); _NOTHING when `gave_up()`,
        asked every _POLL_S while nothing is readable, says stop first (one
        last look follows it)."""
        if self._conn is None and self._listener is None:
            return None  # closed
        if self._conn is None and not self._accept(gave_up):
            return _NOTHING
        conn = self._conn
        if conn is None:
            return None  # closed meanwhile
        if not self._wait_readable(conn, gave_up):
            return _NOTHING
        # The producer sends each frame whole: its rest follows the header.
        header = _recv_exact(conn, _HEADER.size)
        if header is None:
            return None
        kind, n = _HEADER.unpack(header)
        data = _recv_exact(conn, n) if n else b""
        if data is None or kind == _END:
            return None
        return kind, data

    def ack(self) -> None:
        """Tells the producer one more item was taken (it may drop it)."""
        if self._conn is None:
            return
        try:
            self._conn.sendall(b"\x01", socket.MSG_NOSIGNAL)
        except OSError:
            pass  # the task ended after its last item: no one to tell

    @staticmethod
    def _wait_readable(sock: socket.socket,
                       gave_up: Callable[[], bool]) -> bool:
        timeout: float = 0  # a first look that does not wait
        while True:
            if select.select([sock], [], [], timeout)[0]:
                return True
            if gave_up():
                return bool(select.select([sock], [], [], 0)[0])
            timeout = _POLL_S

    def _accept(self, gave_up: Callable[[], bool]) -> bool:
        listener = self._listener
        while listener is not None and self._wait_readable(listener, gave_up):
            conn, _ = listener.accept()
            conn.settimeout(5)  # the token comes at once
            creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED,
                                    struct.calcsize("3i"))
            _, uid, _ = struct.unpack("3i", creds)
            try:
                ours = uid == os.getuid() and \
                    _recv_exact(conn, 16) == self.token
            except OSError:
                ours = False
            if ours:
                conn.settimeout(_FRAME_S)
                self._conn = conn
                listener.close()
                self._listener = None
                return True
            conn.close()  # not our task
        return False

    def close(self) -> None:
        for s in (self._conn, self._listener):
            if s is not None:
                s.close()
        self._conn = None
        self._listener = None


# Longest wait for the rest of a frame whose header came (the producer
# sends a frame in one call, so only a stopped producer takes this long).
_FRAME_S = 60.0


class Relay:
    """The actor that carries a stream to a caller off the node's machine
    (it has no socket there, and no store): the producing task connects to
    the relay's _Reader on the node, and the caller calls take() through
    the node's frontend. Items stay held by the producer until taken, so
    back-pressure is the same as for a caller on the node."""

    def __init__(self) -> None:
        self._reader = _Reader()
        self._ended = False

    def where(self) -> tuple[str, bytes]:
        """(address, token): what the producing task connects to."""
        return self._reader.address, self._reader.token

    def take(self, most: int,
             wait_s: float) -> tuple[list[tuple[bytes, Any]], bool]:
        """Up to `most` items, waiting up to `wait_s` for the first: a list
        of (kind, payload), an inline item as its pickle, a stored one as
        its value; and whether the stream ended."""
        import time
        deadline = time.monotonic() + wait_s
        items: list[tuple[bytes, Any]] = []
        while len(items) < most and not self._ended:
            frame = self._reader.next_frame(
                (lambda: time.monotonic() >= deadline) if not items
                else (lambda: True))
            if frame is _NOTHING:
                break
            if frame is None:
                self._ended = True
                self._reader.close()
                break
            kind, data = frame
            if kind == _STORED:
                import shoal
                items.append((_STORED, shoal.get(pickle.loads(data))))
            else:
                items.append((_INLINE, data))
            self._reader.ack()
        return items, self._ended


# How long one take() of a remote caller waits in the relay before the
# caller looks whether the task ended without sending.
_TAKE_WAIT_S = 0.5


class StreamingFutures:
    """The items of a generator task, as an iterator of futures (Ray's
    ObjectRefGenerator): next() waits for the next item and returns a
    finished Future holding it; when the task failed, the last future holds
    its error; then StopIteration. `task` is the task's own Future (its
    value: the number of items)."""

    def __init__(self, client: Any, target: Any, args: Sequence[Any],
                 kwargs: Mapping[str, Any], options: Mapping[str, Any],
                 submit: Callable[..., Any]) -> None:
        self._client = client
        self._reader: Optional[_Reader] = None
        self._relay: Any = None  # an ActorHandle of a Relay
        self._taken: list[Any] = []  # (a remote caller's: the relay's)
        self._ended = False
        self._relayed = not client.local
        if not self._relayed:
            self._reader = _Reader()
            where = self._reader.address, self._reader.token
        else:
            from . import _actor
            self._relay = _actor.ActorClass(Relay, {}).remote()
            where = self._relay.where.remote().result()
        self.task = submit(produce, (target, where[0], where[1], WINDOW,
                                     args, kwargs), {}, options)

    def __iter__(self) -> "StreamingFutures":
        return self

    def __next__(self) -> _future.Future[Any]:
        if self._ended:
            raise StopIteration
        if self._relayed:
            return self._next_relayed()
        reader = self._reader
        if reader is None:
            return self._end()
        frame = reader.next_frame(self.task.done)
        if frame is None or frame is _NOTHING:
            return self._end()
        kind, data = frame
        value = pickle.loads(data)
        if kind == _STORED:
            import shoal
            value = shoal.get(value)  # borrowed: now the worker may drop it
        reader.ack()
        return _future.finished(self._client, value)

    def _next_relayed(self) -> _future.Future[Any]:
        while not self._taken:
            if self._relay is None:
                return self._end()
            done = self.task.done()  # before the take: what it saw counts
            try:
                items, ended = self._relay.take.remote(
                    WINDOW, 0 if done else _TAKE_WAIT_S).result()
            except _errors.Error as e:  # the relay died, the node went away
                self._ended = True
                self.close()
                return _future.finished(self._client, None, e)
            self._taken = [pickle.loads(p) if k == _INLINE else p
                           for k, p in reversed(items)]
            if ended or (done and not items):
                self._close_relay()
        return _future.finished(self._client, self._taken.pop())

    def _end(self) -> _future.Future[Any]:
        """The stream ended: StopIteration after the task's success, else a
        last future holding its error."""
        self._ended = True
        self.close()
        try:
            self.task.result()
        except BaseException as e:  # noqa: BLE001
            return _future.finished(self._client, None, e)
        raise StopIteration

    def _close_relay(self) -> None:
        relay, self._relay = self._relay, None
        if relay is not None:
            from . import _actor
            try:
                _actor.kill(relay)
            except _errors.Error:
                pass  # it ended already

    def close(self) -> None:
        """Stops reading: the worker's generator is closed at its next item."""
        if self._reader is not None:
            self._reader.close()
        self._close_relay()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001 (the interpreter may be ending)
            pass

    def __repr__(self) -> str:
        return f"<shoal.StreamingFutures of task {self.task.id}>"


def _recv_exact(sock: socket.socket, n: int) -> Optional[bytes]:
    """n bytes from `sock`, or None at its end (or past its timeout)."""
    out = bytearray()
    while len(out) < n:
        try:
            chunk = sock.recv(n - len(out))
        except OSError:
            return None
        if not chunk:
            return None
        out += chunk
    return bytes(out)
