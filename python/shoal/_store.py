"""The one put / get: numpy arrays and torch tensors through a node's store.

put copies an array into shared memory once and returns an ObjectRef; get
returns a read-only numpy view of an object (no copy: the array's memory is
the store's, mapped into this process). Refs and views keep the object alive;
the object of a put is deleted when its last ObjectRef and view are gone.

put_into / get_from work on a store connection (the extension's Store, which
a Client and a Job both expose as `.store`); shoal.put / shoal.get
(_context.py) and Client.put / Job.put all come here.
"""

import numpy as np

from . import _errors, _ext


class StoreArray(np.ndarray):
    """A read-only numpy array whose memory is a store object's.

    Behaves as any ndarray; in addition it exports DLPack although it is
    read-only (numpy's own __dlpack__ refuses read-only arrays), so
    torch.from_dlpack(a) shares its memory. Do not write through such a
    tensor: store objects are immutable once sealed.
    """

    def __dlpack__(self, stream=None):
        return _ext.ext().dlpack_of_buffer(self)

    def __dlpack_device__(self):
        return (1, 0)  # kDLCPU, device 0


if _ext._shoal is not None:
    ObjectRef = _ext._shoal.ObjectRef
    _ext._shoal.set_array_type(StoreArray)
else:  # inside a worker: the type exists only for isinstance checks
    class ObjectRef:  # noqa: D101
        pass


def _is_torch_tensor(obj):
    return type(obj).__module__.startswith("torch") and hasattr(obj, "data_ptr")


def _prepare(obj):
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


def put_into(store, obj, dtype=None):
    """Copies an array (numpy, torch CPU tensor, anything with the buffer
    protocol or __dlpack__) into `store` (an extension Store); returns its
    ObjectRef. `dtype` ("bf16", ...) reinterprets elements of the same size.
    The copy runs with the GIL released.
    """
    return store.put(_prepare(obj), dtype or "")


def get_from(store_of, ref, timeout=0):
    """A read-only numpy view (StoreArray) of a store object — no copy.

    `ref` is an ObjectRef, or an object id (hex) made by another process on
    this node; for an id, get asks the Store `store_of()` returns (called
    only then: viewing a ref needs no connection), waiting up to `timeout`
    seconds (None: forever, Ctrl-C interrupts) for the object to appear.
    """
    ext = _ext.ext()
    if not isinstance(ref, ext.ObjectRef):
        ref = store_of().get(str(ref), timeout)
    return ext.as_array(ref)
