"""Collectives on numpy arrays and torch tensors among the processes of a
launched job: shared memory for CPU buffers on one node, NCCL for CUDA
tensors (chosen by where the buffer lives), like torch.distributed.

    import numpy as np, shoal
    grad = np.ones(1000, np.float32)
    shoal.all_reduce(grad)               # in place: the sum over all ranks

Buffers must be C-contiguous; outputs writable. Every rank must issue the
same collectives in the same order. Blocking calls release the GIL and end
at their timeout at the latest (default 5 minutes); async ones
(async_op=True) return a Work whose wait() Ctrl-C interrupts.
"""

import threading
from typing import (Any, Iterable, Literal, Optional, TypeVar, Union,
                    overload)

import numpy as np

# An array or tensor: a collective returns the kind it was given.
_A = TypeVar("_A")

from . import _context, _errors, _ext

_NUMPY_DTYPES = {
    np.dtype(np.float16): "f16", np.dtype(np.float32): "f32",
    np.dtype(np.float64): "f64", np.dtype(np.int8): "i8",
    np.dtype(np.int16): "i16", np.dtype(np.int32): "i32",
    np.dtype(np.int64): "i64", np.dtype(np.uint8): "u8",
    np.dtype(np.bool_): "bool",
}
_TORCH_DTYPES = {
    "torch.float16": "f16", "torch.bfloat16": "bf16", "torch.float32": "f32",
    "torch.float64": "f64", "torch.int8": "i8", "torch.int16": "i16",
    "torch.int32": "i32", "torch.int64": "i64", "torch.uint8": "u8",
    "torch.bool": "bool",
}


class _Buffer:
    """(pointer, elements, dtype, CUDA stream) of an array or tensor."""

    __slots__ = ("obj", "ptr", "count", "dtype", "stream")

    def __init__(self, obj: Any, writable: bool, what: str) -> None:
        self.obj = obj
        self.stream = 0
        if isinstance(obj, np.ndarray):
            if not obj.flags.c_contiguous:
                raise _errors.InvalidArgumentError(
                    f"{what}: the array must be C-contiguous "
                    "(np.ascontiguousarray)")
            if writable and not obj.flags.writeable:
                raise _errors.InvalidArgumentError(
                    f"{what}: the array is read-only (a store view?): "
                    "copy it first")
            self.dtype = _NUMPY_DTYPES.get(obj.dtype)
            self.ptr = obj.__array_interface__["data"][0]
            self.count = obj.size
        elif type(obj).__module__.startswith("torch"):
            if not obj.is_contiguous():
                raise _errors.InvalidArgumentError(
                    f"{what}: the tensor must be contiguous (.contiguous())")
            self.dtype = _TORCH_DTYPES.get(str(obj.dtype))
            self.ptr = obj.data_ptr()
            self.count = obj.numel()
            if obj.is_cuda:
                import torch
                self.stream = torch.cuda.current_stream(obj.device).cuda_stream
        else:
            raise _errors.InvalidArgumentError(
                f"{what}: a {type(obj).__name__}; collectives take numpy "
                "arrays and torch tensors")
        if self.dtype is None:
            raise _errors.InvalidArgumentError(
                f"{what}: dtype {obj.dtype} is not supported (f16, bf16, "
                "f32, f64, i8, i16, i32, i64, u8, bool)")


def _empty_like(x: Any, shape: Any) -> Any:
    if isinstance(x, np.ndarray):
        return np.empty(shape, dtype=x.dtype)
    import torch
    return torch.empty(shape, dtype=x.dtype, device=x.device)


class Work:
    """A pending async collective: wait(timeout) or is_completed().

    It keeps its buffers alive until it finished, even if the caller's
    references go (a Ctrl-C out of wait() included)."""

    def __init__(self, handle: Any, buffers: Any, result: Any) -> None:
        self._handle = handle
        self._buffers = buffers
        self._result = result

    def wait(self, timeout: Optional[float] = None) -> Any:
        """Waits up to `timeout` seconds (None: the collective's own
        timeout; Ctrl-C interrupts); returns the result buffer. Raises
        TimeoutError, or the error the collective failed with."""
        self._handle.wait(timeout)
        self._buffers = None
        return self._result

    def is_completed(self) -> bool:
        """Whether the collective finished (does not wait)."""
        return self._handle.test()


class Communicator:
    """Collectives among the job's processes (or a group of them)."""

    def __init__(self, handle: Any) -> None:
        self._handle = handle
        self._pending: list[Work] = []  # async Works not known to be done

    @property
    def rank(self) -> int:
        """This process's rank in the communicator."""
        return self._handle.rank

    @property
    def size(self) -> int:
        """How many ranks the communicator has."""
        return self._handle.size

    def _run(self, op: str, src: Optional[_Buffer], dst: Optional[_Buffer],
             count: int, dtype: Any, reduce: str = "sum", peer: int = 0,
             async_op: bool = False, timeout: Optional[float] = None,
             result: Any = None, buffers: Any = ()) -> Any:
        stream = (src or dst).stream  # type: ignore[union-attr]
        in_ptr = src.ptr if src else 0
        out_ptr = dst.ptr if dst else 0
        if async_op:
            self._pending = [w for w in self._pending if not w.is_completed()]
            handle = self._handle.run_async(op, in_ptr, out_ptr, count, dtype,
                                            reduce, peer, timeout, stream)
            work = Work(handle, buffers, result)
            self._pending.append(work)  # its buffers live until it is done
            return work
        self._handle.run(op, in_ptr, out_ptr, count, dtype, reduce, peer,
                         timeout, stream)
        return result

    @overload
    def all_reduce(self, x: _A, op: str = ..., *,
            async_op: Literal[False] = ...,
            timeout: Optional[float] = ...) -> _A: ...
    @overload
    def all_reduce(self, x: _A, op: str = ..., *,
            async_op: Literal[True],
            timeout: Optional[float] = ...) -> "Work": ...
    @overload
    def all_reduce(self, x: _A, op: str = ..., *, async_op: bool,
            timeout: Optional[float] = ...) -> Union[_A, "Work"]: ...

    def all_reduce(self, x: Any, op: str = "sum", *,
            async_op: bool = False, timeout: Optional[float] = None) -> Any:
        """x ← op over every rank's x (sum, prod, min, max, avg); x."""
        b = _Buffer(x, True, "all_reduce")
        return self._run("all_reduce", b, b, b.count, b.dtype, op,
                         async_op=async_op, timeout=timeout, result=x,
                         buffers=(b,))

    @overload
    def broadcast(self, x: _A, root: int = ..., *,
            async_op: Literal[False] = ...,
            timeout: Optional[float] = ...) -> _A: ...
    @overload
    def broadcast(self, x: _A, root: int = ..., *,
            async_op: Literal[True],
            timeout: Optional[float] = ...) -> "Work": ...
    @overload
    def broadcast(self, x: _A, root: int = ..., *, async_op: bool,
            timeout: Optional[float] = ...) -> Union[_A, "Work"]: ...

    def broadcast(self, x: Any, root: int = 0, *,
            async_op: bool = False, timeout: Optional[float] = None) -> Any:
        """x ← root's x on every rank; x."""
        b = _Buffer(x, True, "broadcast")
        return self._run("broadcast", b, b, b.count, b.dtype, peer=root,
                         async_op=async_op, timeout=timeout, result=x,
                         buffers=(b,))

    @overload
    def reduce(self, x: _A, root: int = ..., op: str = ..., *,
            async_op: Literal[False] = ...,
            timeout: Optional[float] = ...) -> _A: ...
    @overload
    def reduce(self, x: _A, root: int = ..., op: str = ..., *,
            async_op: Literal[True],
            timeout: Optional[float] = ...) -> "Work": ...
    @overload
    def reduce(self, x: _A, root: int = ..., op: str = ..., *, async_op: bool,
            timeout: Optional[float] = ...) -> Union[_A, "Work"]: ...

    def reduce(self, x: Any, root: int = 0, op: str = "sum", *,
            async_op: bool = False, timeout: Optional[float] = None) -> Any:
        """root's x ← op over every rank's x (others' x unchanged); x."""
        b = _Buffer(x, True, "reduce")
        return self._run("reduce", b, b, b.count, b.dtype, op, root,
                         async_op=async_op, timeout=timeout, result=x,
                         buffers=(b,))

    @overload
    def all_gather(self, x: _A, out: Optional[_A] = ..., *,
            async_op: Literal[False] = ...,
            timeout: Optional[float] = ...) -> _A: ...
    @overload
    def all_gather(self, x: _A, out: Optional[_A] = ..., *,
            async_op: Literal[True],
            timeout: Optional[float] = ...) -> "Work": ...
    @overload
    def all_gather(self, x: _A, out: Optional[_A] = ...,
            *, async_op: bool,
            timeout: Optional[float] = ...) -> Union[_A, "Work"]: ...

    def all_gather(self, x: Any, out: Optional[Any] = None, *,
            async_op: bool = False, timeout: Optional[float] = None) -> Any:
        """Every rank's x stacked: out of shape (size, *x.shape)."""
        src = _Buffer(x, False, "all_gather input")
        if out is None:
            out = _empty_like(x, (self.size,) + tuple(x.shape))
        dst = _Buffer(out, True, "all_gather output")
        if dst.count != src.count * self.size or dst.dtype != src.dtype:
            raise _errors.InvalidArgumentError(
                f"all_gather: out must hold size ({self.size}) x "
                f"{src.count} elements of {src.dtype}")
        return self._run("all_gather", src, dst, src.count, src.dtype,
                         async_op=async_op, timeout=timeout, result=out,
                         buffers=(src, dst))

    @overload
    def reduce_scatter(self, x: _A, op: str = ..., out: Optional[_A] = ..., *,
            async_op: Literal[False] = ...,
            timeout: Optional[float] = ...) -> _A: ...
    @overload
    def reduce_scatter(self, x: _A, op: str = ..., out: Optional[_A] = ..., *,
            async_op: Literal[True],
            timeout: Optional[float] = ...) -> "Work": ...
    @overload
    def reduce_scatter(self, x: _A, op: str = ..., out: Optional[_A] = ...,
            *, async_op: bool,
            timeout: Optional[float] = ...) -> Union[_A, "Work"]: ...

    def reduce_scatter(self, x: Any, op: str = "sum",
            out: Optional[Any] = None, *,
            async_op: bool = False, timeout: Optional[float] = None) -> Any:
        """This rank's slice of op over every rank's x: x holds size equal
        slices (along the first axis when it divides)."""
        src = _Buffer(x, False, "reduce_scatter input")
        if src.count % self.size:
            raise _errors.InvalidArgumentError(
                f"reduce_scatter: {src.count} elements do not split into "
                f"{self.size} equal slices")
        if out is None:
            shape = ((x.shape[0] // self.size,) + tuple(x.shape[1:])
                     if len(x.shape) and x.shape[0] % self.size == 0
                     else (src.count // self.size,))
            out = _empty_like(x, shape)
        dst = _Buffer(out, True, "reduce_scatter output")
        if dst.count * self.size != src.count or dst.dtype != src.dtype:
            raise _errors.InvalidArgumentError(
                "reduce_scatter: out must hold 1/size of the input")
        return self._run("reduce_scatter", src, dst, dst.count, src.dtype,
                         op, async_op=async_op, timeout=timeout, result=out,
                         buffers=(src, dst))

    @overload
    def all_to_all(self, x: _A, out: Optional[_A] = ..., *,
            async_op: Literal[False] = ...,
            timeout: Optional[float] = ...) -> _A: ...
    @overload
    def all_to_all(self, x: _A, out: Optional[_A] = ..., *,
            async_op: Literal[True],
            timeout: Optional[float] = ...) -> "Work": ...
    @overload
    def all_to_all(self, x: _A, out: Optional[_A] = ...,
            *, async_op: bool,
            timeout: Optional[float] = ...) -> Union[_A, "Work"]: ...

    def all_to_all(self, x: Any, out: Optional[Any] = None, *,
            async_op: bool = False, timeout: Optional[float] = None) -> Any:
        """Block j of x goes to rank j; out's block i came from rank i."""
        src = _Buffer(x, False, "all_to_all input")
        if src.count % self.size:
            raise _errors.InvalidArgumentError(
                f"all_to_all: {src.count} elements do not split into "
                f"{self.size} blocks")
        if out is None:
            out = _empty_like(x, tuple(x.shape))
        dst = _Buffer(out, True, "all_to_all output")
        if dst.count != src.count or dst.dtype != src.dtype:
            raise _errors.InvalidArgumentError(
                "all_to_all: out must match the input")
        return self._run("all_to_all", src, dst, src.count // self.size,
                         src.dtype, async_op=async_op, timeout=timeout,
                         result=out, buffers=(src, dst))

    @overload
    def send(self, x: _A, dst: int, *,
            async_op: Literal[False] = ...,
            timeout: Optional[float] = ...) -> _A: ...
    @overload
    def send(self, x: _A, dst: int, *,
            async_op: Literal[True],
            timeout: Optional[float] = ...) -> "Work": ...
    @overload
    def send(self, x: _A, dst: int, *, async_op: bool,
            timeout: Optional[float] = ...) -> Union[_A, "Work"]: ...

    def send(self, x: Any, dst: int, *,
            async_op: bool = False, timeout: Optional[float] = None) -> Any:
        """Sends x to rank dst (which calls recv)."""
        b = _Buffer(x, False, "send")
        return self._run("send", b, None, b.count, b.dtype, peer=dst,
                         async_op=async_op, timeout=timeout, result=x,
                         buffers=(b,))

    @overload
    def recv(self, x: _A, src: int, *,
            async_op: Literal[False] = ...,
            timeout: Optional[float] = ...) -> _A: ...
    @overload
    def recv(self, x: _A, src: int, *,
            async_op: Literal[True],
            timeout: Optional[float] = ...) -> "Work": ...
    @overload
    def recv(self, x: _A, src: int, *, async_op: bool,
            timeout: Optional[float] = ...) -> Union[_A, "Work"]: ...

    def recv(self, x: Any, src: int, *,
            async_op: bool = False, timeout: Optional[float] = None) -> Any:
        """Receives into x from rank src; x."""
        b = _Buffer(x, True, "recv")
        return self._run("recv", None, b, b.count, b.dtype, peer=src,
                         async_op=async_op, timeout=timeout, result=x,
                         buffers=(b,))

    def barrier(self, timeout: Optional[float] = None) -> None:
        """Returns once every rank of the communicator arrived; raises
        TimeoutError after `timeout` seconds (None: the default)."""
        self._handle.run("barrier", 0, 0, 0, "f32", "sum", 0, timeout, 0)


_world: Optional[Communicator] = None
_world_lock = threading.Lock()


def world() -> Communicator:
    """The communicator of all the job's processes (made at first use:
    every rank must make its first collective call in the same order)."""
    global _world
    with _world_lock:
        if _world is None:
            job = _context.job()
            _world = Communicator(_ext.ext().Communicator.create(job._handle))
        return _world


def new_group(ranks: Iterable[int], *, name: str = "",
              timeout: Optional[float] = None) -> Communicator:
    """A communicator of some ranks (job ranks; this process among them).
    Only the members call it, in the same order."""
    job = _context.job()
    return Communicator(_ext.ext().Communicator.create(
        job._handle, list(ranks), name, timeout))


@overload
def all_reduce(x: _A, op: str = ..., *,
        async_op: Literal[False] = ...,
        timeout: Optional[float] = ...) -> _A: ...
@overload
def all_reduce(x: _A, op: str = ..., *,
        async_op: Literal[True],
        timeout: Optional[float] = ...) -> "Work": ...
@overload
def all_reduce(x: _A, op: str = ..., *, async_op: bool,
        timeout: Optional[float] = ...) -> Union[_A, "Work"]: ...

def all_reduce(x: Any, op: str = "sum", **kw: Any) -> Any:
    """Communicator.all_reduce on world(): the job's processes."""
    return world().all_reduce(x, op, **kw)


@overload
def broadcast(x: _A, root: int = ..., *,
        async_op: Literal[False] = ...,
        timeout: Optional[float] = ...) -> _A: ...
@overload
def broadcast(x: _A, root: int = ..., *,
        async_op: Literal[True],
        timeout: Optional[float] = ...) -> "Work": ...
@overload
def broadcast(x: _A, root: int = ..., *, async_op: bool,
        timeout: Optional[float] = ...) -> Union[_A, "Work"]: ...

def broadcast(x: Any, root: int = 0, **kw: Any) -> Any:
    """Communicator.broadcast on world(): the job's processes."""
    return world().broadcast(x, root, **kw)


@overload
def reduce(x: _A, root: int = ..., op: str = ..., *,
        async_op: Literal[False] = ...,
        timeout: Optional[float] = ...) -> _A: ...
@overload
def reduce(x: _A, root: int = ..., op: str = ..., *,
        async_op: Literal[True],
        timeout: Optional[float] = ...) -> "Work": ...
@overload
def reduce(x: _A, root: int = ..., op: str = ..., *, async_op: bool,
        timeout: Optional[float] = ...) -> Union[_A, "Work"]: ...

def reduce(x: Any, root: int = 0, op: str = "sum", **kw: Any) -> Any:
    """Communicator.reduce on world(): the job's processes."""
    return world().reduce(x, root, op, **kw)


@overload
def all_gather(x: _A, out: Optional[_A] = ..., *,
        async_op: Literal[False] = ...,
        timeout: Optional[float] = ...) -> _A: ...
@overload
def all_gather(x: _A, out: Optional[_A] = ..., *,
        async_op: Literal[True],
        timeout: Optional[float] = ...) -> "Work": ...
@overload
def all_gather(x: _A, out: Optional[_A] = ...,
            *, async_op: bool,
        timeout: Optional[float] = ...) -> Union[_A, "Work"]: ...

def all_gather(x: Any, out: Optional[Any] = None, **kw: Any) -> Any:
    """Communicator.all_gather on world(): the job's processes."""
    return world().all_gather(x, out, **kw)


@overload
def reduce_scatter(x: _A, op: str = ..., out: Optional[_A] = ..., *,
        async_op: Literal[False] = ...,
        timeout: Optional[float] = ...) -> _A: ...
@overload
def reduce_scatter(x: _A, op: str = ..., out: Optional[_A] = ..., *,
        async_op: Literal[True],
        timeout: Optional[float] = ...) -> "Work": ...
@overload
def reduce_scatter(x: _A, op: str = ..., out: Optional[_A] = ...,
            *, async_op: bool,
        timeout: Optional[float] = ...) -> Union[_A, "Work"]: ...

def reduce_scatter(x: Any, op: str = "sum", out: Optional[Any] = None,
        **kw: Any) -> Any:
    """Communicator.reduce_scatter on world(): the job's processes."""
    return world().reduce_scatter(x, op, out, **kw)


@overload
def all_to_all(x: _A, out: Optional[_A] = ..., *,
        async_op: Literal[False] = ...,
        timeout: Optional[float] = ...) -> _A: ...
@overload
def all_to_all(x: _A, out: Optional[_A] = ..., *,
        async_op: Literal[True],
        timeout: Optional[float] = ...) -> "Work": ...
@overload
def all_to_all(x: _A, out: Optional[_A] = ...,
            *, async_op: bool,
        timeout: Optional[float] = ...) -> Union[_A, "Work"]: ...

def all_to_all(x: Any, out: Optional[Any] = None, **kw: Any) -> Any:
    """Communicator.all_to_all on world(): the job's processes."""
    return world().all_to_all(x, out, **kw)


@overload
def send(x: _A, dst: int, *,
        async_op: Literal[False] = ...,
        timeout: Optional[float] = ...) -> _A: ...
@overload
def send(x: _A, dst: int, *,
        async_op: Literal[True],
        timeout: Optional[float] = ...) -> "Work": ...
@overload
def send(x: _A, dst: int, *, async_op: bool,
        timeout: Optional[float] = ...) -> Union[_A, "Work"]: ...

def send(x: Any, dst: int, **kw: Any) -> Any:
    """Communicator.send on world(): the job's processes."""
    return world().send(x, dst, **kw)


@overload
def recv(x: _A, src: int, *,
        async_op: Literal[False] = ...,
        timeout: Optional[float] = ...) -> _A: ...
@overload
def recv(x: _A, src: int, *,
        async_op: Literal[True],
        timeout: Optional[float] = ...) -> "Work": ...
@overload
def recv(x: _A, src: int, *, async_op: bool,
        timeout: Optional[float] = ...) -> Union[_A, "Work"]: ...

def recv(x: Any, src: int, **kw: Any) -> Any:
    """Communicator.recv on world(): the job's processes."""
    return world().recv(x, src, **kw)
