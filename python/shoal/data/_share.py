"""A dataset in the store once: its arrays read in place by every worker.

`share(dataset, put)` pickles the dataset (protocol 5, cloudpickle, torch CPU
tensors as shoal's _serialize reduces them) with every contiguous buffer of a
numpy array or tensor out of band, and puts the buffers into the store:
- a buffer inside a zero-copy array (allocated in the store after connect,
  docs/values.md) goes as the sealed object it lives in: no copy at all;
- a buffer of 16 MiB or more: one store object of its own (one copy);
- smaller ones are packed, 64-byte aligned, into store objects of up to
  64 MiB (one copy; a list of 50,000 small arrays is a dozen objects, not
  50,000).
The pickle stream itself, when over 64 KiB, is a store object too.

The SharedDataset that comes back is small and pickles by object ids: a
worker's `load()` maps those objects and unpickles the dataset over them, so
its arrays and tensors view the store (read-only) and nothing of the data is
copied per worker. The objects live as long as a SharedDataset (or a worker's
dataset made from one) holds them.

The data is resident once, in the store. A process that mapped it keeps the
pages it touched in its page tables (its RSS) until it lets go of them:
`Resident.release()` drops this process's entries for the objects
(madvise MADV_DONTNEED over the page-aligned inside of each, only where the
store is mapped shared; the store's pages stay and fault in again on the
next read). The consumer releases what it wrote at once; a worker the dataset's
pages after loading it and after a batch, at most every 50 ms.
"""

import ctypes
import io
import pickle
import sys
import time
from typing import Any, Callable, Iterable, Optional

import numpy as np

_PROTOCOL = 5
_OWN_OBJECT_BYTES = 16 << 20  # buffers this large get a store object each
_PACK_BYTES = 64 << 20  # packed objects of small buffers, at most this large
_ALIGN = 64
_INLINE_HEADER_BYTES = 64 << 10


_MADV_DONTNEED = 4
_PAGE = 4096


def _libc() -> Any:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t,
                                 ctypes.c_int]
        return libc
    except (OSError, AttributeError):
        return None


def _shared_store_maps() -> list[tuple[int, int]]:
    """[(start, end)] of this process's shared mappings of a shoal store."""
    out = []
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                parts = line.split()
                if (len(parts) >= 6 and parts[1][3] == "s" and
                        parts[5].startswith("/dev/shm/shoal-") and
                        parts[5].endswith("-store")):
                    lo, hi = parts[0].split("-")
                    out.append((int(lo, 16), int(hi, 16)))
    except OSError:
        pass
    return out


class Resident:
    """Page-aligned ranges of store objects this process mapped, which
    release() drops from its page tables (never its private copy-on-write
    pages: only ranges inside a shared mapping of the store are kept)."""

    def __init__(self, views: Iterable[Any]) -> None:
        self._libc = _libc()
        self._last = 0.0
        maps = _shared_store_maps()
        self.ranges: list[tuple[int, int]] = []
        for view in views:
            if len(view) == 0:
                continue
            addr = np.frombuffer(view, np.uint8).ctypes.data
            lo = (addr + _PAGE - 1) // _PAGE * _PAGE
            hi = (addr + len(view)) // _PAGE * _PAGE
            if hi > lo and any(a <= lo and hi <= b for a, b in maps):
                self.ranges.append((lo, hi - lo))

    def release(self, every: float = 0.0) -> None:
        """Drops the ranges' entries; with `every` > 0, only when that many
        seconds passed since the last time (the call walks the ranges' page
        tables: for a large dataset, far more than a batch's reads)."""
        if self._libc is None:
            return
        now = time.monotonic()
        if every > 0 and now - self._last < every:
            return
        self._last = now
        for addr, n in self.ranges:
            self._libc.madvise(ctypes.c_void_p(addr), n, _MADV_DONTNEED)


class SharedDataset:
    """What workers need to rebuild a dataset from the store (picklable)."""

    def __init__(self, header: Any, pieces: list[Any],
                 nbytes: int) -> None:
        self.header = header  # bytes, or an ObjectRef of the pickle stream
        self.pieces = pieces  # [(ObjectRef, offset, length)] per buffer
        self.nbytes = nbytes  # the bytes of the buffers (the data)

    def refs(self) -> list[Any]:
        seen = {}
        for ref, _, _ in self.pieces:
            seen[id(ref)] = ref
        if not isinstance(self.header, bytes):
            seen[id(self.header)] = self.header
        return list(seen.values())

    def load(self) -> Any:
        """The dataset, its buffers viewing the store objects in place."""
        cache: dict[int, Any] = {}
        buffers = []
        for ref, offset, length in self.pieces:
            whole = cache.get(id(ref))
            if whole is None:
                whole = memoryview(ref).cast("B")
                cache[id(ref)] = whole
            buffers.append(whole[offset:offset + length])
        header = self.header
        if not isinstance(header, bytes):
            header = memoryview(header).cast("B")
        self.resident = Resident(list(cache.values()))
        return pickle.loads(header, buffers=buffers)


def _pickler() -> Any:
    """cloudpickle (datasets defined in __main__ go by value) with torch CPU
    tensors reduced to numpy arrays (their bytes out of band)."""
    import cloudpickle

    from .. import _serialize

    class _Pickler(cloudpickle.Pickler):
        def reducer_override(self, obj: Any) -> Any:
            if _serialize._torch_of(obj) is not None:
                return _serialize._reduce_tensor(obj)
            return super().reducer_override(obj)

    return _Pickler


def share(dataset: Any, put: Callable[[Any], Any],
          snapshot: Optional[Callable[[Any], Any]] = None
          ) -> "SharedDataset":
    """Puts `dataset` into a store once; returns its SharedDataset.

    put(array) → ObjectRef copies a uint8 array into the store;
    snapshot(memoryview) → (ObjectRef, offset) or None finds a buffer that
    already lies in a zero-copy store allocation. Raises what pickling or the
    store raise (a full store: ResourceExhaustedError).
    """
    pieces: list[list[Any]] = []  # per buffer: [ref or None, offset, length]
    pending: list[Any] = []  # (piece, raw) of small buffers not yet packed
    pending_bytes = [0]

    packs: list[Any] = []  # one buffer, reused by every pack

    def flush() -> None:
        if not pending:
            return
        if not packs:
            packs.append(np.empty(_PACK_BYTES, dtype=np.uint8))
        pack = packs[0][:pending_bytes[0]]
        for piece, raw in pending:
            pack[piece[1]:piece[1] + piece[2]] = np.frombuffer(raw, np.uint8)
        ref = put(pack)
        # This process wrote those pages and does not read them again.
        Resident([memoryview(ref).cast("B")]).release()
        for piece, _ in pending:
            piece[0] = ref
        pending.clear()
        pending_bytes[0] = 0

    def callback(b: Any) -> Any:
        try:
            raw = b.raw()
        except BufferError:  # not contiguous: stays in the stream
            return True
        n = raw.nbytes
        snap = snapshot(raw) if snapshot is not None else None
        if snap is not None:
            pieces.append([snap[0], snap[1], n])
        elif n >= _OWN_OBJECT_BYTES:
            ref = put(np.frombuffer(raw, np.uint8))
            Resident([memoryview(ref).cast("B")]).release()
            pieces.append([ref, 0, n])
        else:
            if pending_bytes[0] + n > _PACK_BYTES:
                flush()
            offset = pending_bytes[0]
            piece = [None, offset, n]
            pieces.append(piece)
            pending.append((piece, raw))
            pending_bytes[0] = (offset + n + _ALIGN - 1) // _ALIGN * _ALIGN
        return False

    f = io.BytesIO()
    _pickler()(f, _PROTOCOL, buffer_callback=callback).dump(dataset)
    flush()
    packs.clear()
    header = f.getvalue()
    if len(header) > _INLINE_HEADER_BYTES:
        header = put(np.frombuffer(header, np.uint8))
    return SharedDataset(header, [tuple(p) for p in pieces],
                         sum(p[2] for p in pieces))


def torch_loaded() -> bool:
    return "torch" in sys.modules
