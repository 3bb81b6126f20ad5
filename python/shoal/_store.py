"""The one put / get: numpy arrays, torch tensors and any picklable object
through a node's store.

put copies an array into shared memory once and returns an ObjectRef; get
returns a read-only numpy view of an object (no copy: the array's memory is
the store's, mapped into this process). Refs and views keep the object alive;
the object of a put is deleted when its last ObjectRef and view are gone.
Any other object is pickled (protocol 5) into store objects and put returns
a ValueRef; get unpickles it, its arrays viewing the store in place.

put_into / get_from work on a store connection (the extension's Store, which
a Client and a Job both expose as `.store`); shoal.put / shoal.get
(_context.py) and Client.put / Job.put all come here.
"""

import pickle
from typing import (TYPE_CHECKING, Any, Callable, Iterable, Literal, Optional,
                    Union)

import numpy as np

from . import _errors, _ext, _serialize


class StoreArray(np.ndarray):
    """A read-only numpy array whose memory is a store object's.

    Behaves as any ndarray; in addition it exports DLPack although it is
    read-only (numpy's own __dlpack__ refuses read-only arrays), so
    torch.from_dlpack(a) shares its memory. Do not write through such a
    tensor: store objects are immutable once sealed.
    """

    def __dlpack__(self, stream: Optional[int] = None) -> Any:
        """A DLPack capsule of this array's memory (CPU), read-only."""
        return _ext.ext().dlpack_of_buffer(self)

    def __dlpack_device__(self) -> tuple[int, Literal[0]]:
        """(kDLCPU, 0): store objects live in host memory."""
        return (1, 0)  # kDLCPU, device 0


if TYPE_CHECKING:
    from ._shoal import ObjectRef as ObjectRef
elif _ext._shoal is not None:
    ObjectRef = _ext._shoal.ObjectRef
    _ext._shoal.set_array_type(StoreArray)
else:  # inside a worker: the type exists only for isinstance checks
    class ObjectRef:  # noqa: D101
        pass


def _is_torch_tensor(obj: Any) -> bool:
    return type(obj).__module__.startswith("torch") and hasattr(obj, "data_ptr")


def _prepare(obj: Any) -> Any:
    """An object the extension can read: arrays as they are, torch tensors
    detached (CPU only: GPU objects do not go through put yet)."""
    if not _is_torch_tensor(obj):
        return obj
    if obj.device.type != "cpu":
        raise _errors.FailedPreconditionError(
            f"put of a tensor on {obj.device}: only CPU tensors go through "
            "put; use tensor.cpu()")
    obj = obj.detach()
    if str(obj.dtype) == "torch.bool":
        return obj.numpy()  # torch 1.13's DLPack has no bool
    return obj


class ValueRef:
    """A picklable object in the store (shoal.put of anything but an array).

    shoal.get(ref) unpickles it: a new object each time, whose arrays are
    read-only views of the store (no copy). Passed to a task, at the top of
    its arguments it arrives as its value; inside a list, dict or object as
    a ValueRef the task reads with shoal.get. Either way its store objects
    travel as references (the task's arguments), never copies. Like an
    ObjectRef it keeps its objects while it lives.

    `_header`: the pickle (bytes), or the ObjectRef holding a large one;
    `_buffers`: its out-of-band buffers, ObjectRefs (memoryviews in a
    worker, where it arrives as a task's argument).
    """

    __slots__ = ("_header", "_buffers", "__weakref__")

    def __init__(self, header: Any, buffers: Iterable[Any]) -> None:
        self._header = header
        self._buffers = tuple(buffers)

    def get(self) -> Any:
        """The object (unpickled again at each call). Raises what unpickling
        raises (a class this process cannot import: its ImportError)."""
        header = self._header
        if not isinstance(header, (bytes, bytearray)):
            header = memoryview(header).cast("B")
        header, buffers = _serialize._sliced(
            header, [memoryview(b).cast("B") for b in self._buffers])
        return _errors.loads(header, buffers=buffers)

    @property
    def nbytes(self) -> int:
        """The bytes it takes in the store and in its pickle."""
        return (len(memoryview(self._header).cast("B")) +
                sum(memoryview(b).nbytes for b in self._buffers))

    def _parts(self) -> tuple[Any, ...]:
        # The store objects as out-of-band buffers of the task's call: its
        # arguments then name those same objects (_serialize.dumps).
        return (_keep_bytes(self._header),) + tuple(
            pickle.PickleBuffer(b) for b in self._buffers)

    def __reduce__(self) -> tuple[Callable[..., Any], tuple[Any, ...]]:
        return _value_ref, self._parts()

    def __repr__(self) -> str:
        return (f"<shoal.ValueRef {len(self._buffers)} buffer(s), "
                f"{self.nbytes} bytes>")


class ByValue:
    """A ValueRef at the top of a task's arguments: the task gets its value
    (Client._submit_now wraps them)."""

    __slots__ = ("ref",)

    def __init__(self, ref: ValueRef) -> None:
        self.ref = ref

    def __reduce__(self) -> tuple[Callable[..., Any], tuple[Any, ...]]:
        return _value_of, self.ref._parts()


def _keep_bytes(header: Any) -> Any:
    if isinstance(header, (bytes, bytearray)):
        return header
    return pickle.PickleBuffer(header)


def _value_ref(header: Any, *buffers: Any) -> ValueRef:
    """A ValueRef unpickled in a task: over its call's buffers."""
    return ValueRef(header, buffers)


def _value_of(header: Any, *buffers: Any) -> Any:
    return ValueRef(header, buffers).get()


# numpy dtypes a store object has (ipc::DType; bf16 travels as uint16 with
# put's dtype="bf16"). Arrays of others are pickled, as any object.
_STORE_DTYPES = frozenset(np.dtype(t) for t in (
    "float16", "float32", "float64", "int8", "int16", "int32", "int64",
    "uint8", "bool"))


def _is_array(obj: Any) -> bool:
    """Whether put stores `obj` as one array object (else it pickles it)."""
    if isinstance(obj, np.ndarray):
        return obj.dtype in _STORE_DTYPES
    if _is_torch_tensor(obj) or hasattr(obj, "__dlpack__"):
        return True
    try:
        memoryview(obj)
    except TypeError:
        return False
    return True


def _put_value(store: Any, obj: Any) -> ValueRef:
    try:
        header, buffers = _serialize.dumps(obj)
    except Exception as e:  # noqa: BLE001 (any pickling failure)
        raise _errors.InvalidArgumentError(
            f"put: a {_serialize._describe(obj)} is neither an array nor "
            f"picklable ({type(e).__name__}: {e})") from None
    refs = [b if isinstance(b, _ext.ext().ObjectRef) else
            store.put(np.frombuffer(b, dtype=np.uint8), "")
            for b in buffers]
    if len(header) >= _serialize.OUT_OF_BAND_BYTES:
        header = store.put(np.frombuffer(header, dtype=np.uint8), "")
    return ValueRef(header, refs)


def put_into(store: Any, obj: Any,
             dtype: Optional[str] = None) -> Union[ObjectRef, ValueRef]:
    """Copies an array (numpy, torch CPU tensor, anything with the buffer
    protocol or __dlpack__) into `store` (an extension Store); returns its
    ObjectRef. `dtype` ("bf16", ...) reinterprets elements of the same size.
    The copy runs with the GIL released. Any other picklable object: a
    ValueRef (its pickle and out-of-band buffers in store objects).
    """
    if dtype is None and not _is_array(obj):
        return _put_value(store, obj)
    return store.put(_prepare(obj), dtype or "")


def get_from(store_of: Callable[[], Any], ref: Any,
             timeout: Optional[float] = 0) -> Any:
    """A read-only numpy view (StoreArray) of a store object — no copy.

    `ref` is an ObjectRef, or an object id (hex) made by another process on
    this node; for an id, get asks the Store `store_of()` returns (called
    only then: viewing a ref needs no connection), waiting up to `timeout`
    seconds (None: forever, Ctrl-C interrupts) for the object to appear.
    """
    if isinstance(ref, ValueRef):
        return ref.get()
    ext = _ext.ext()
    if not isinstance(ref, ext.ObjectRef):
        ref = store_of().get(str(ref), timeout)
    return ext.as_array(ref)
