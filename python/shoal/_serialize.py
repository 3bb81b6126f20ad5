"""Values that are not plain: pickle protocol 5 with out-of-band buffers, and
functions by value (cloudpickle). Used by the client (_client.py) and inside
workers (worker/python_runner.cc calls load_call and dump_result), so it
imports nothing of shoal's but _errors.

The call envelope ("py:<fn>!" tasks, see worker/python_runner.h):
    args[0]    the header: pickle.dumps((fn_bytes, args, kwargs), protocol 5)
               with fn_bytes None unless the function rides along by value
               ("py:#<hash>!", remote clients);
    args[1:]   its out-of-band buffers, in order: each a large contiguous
               buffer (numpy array, torch CPU tensor) the client put into the
               store once; the worker's unpickled arrays view them in place.
Small buffers (< OUT_OF_BAND_BYTES) stay in the pickle stream.
A buffer inside a zero-copy array (_zero_copy.py) goes as the store object
the array lives in, and the header then starts with _SLICES: where in those
objects the buffers are (`_sliced`; pickle streams start with b"\x80").

The result envelope (a return value that is not None, a scalar, str, bytes,
an array or a tuple of those): outputs[0] is the header, a raw byte object
of shape (1, n) — the marker: no other output is raw and 2-D — and
outputs[1:] its out-of-band buffers as raw byte objects.
"""

import hashlib
import io
import pickle
import struct
import sys
import warnings

from . import _errors, _zero_copy

# Buffers at least this large leave the pickle stream: as store objects.
OUT_OF_BAND_BYTES = 64 << 10
_PROTOCOL = 5
_NO_KWARGS: dict = {}  # pickled, never changed


# ---- torch CPU tensors: their bytes out of band, like numpy's ----------------

def _torch_of(obj):
    """The torch module if `obj` is a torch CPU tensor, else None."""
    t = sys.modules.get("torch")
    if t is None or not isinstance(obj, t.Tensor):
        return None
    return t if obj.device.type == "cpu" and not obj.is_sparse else None


def _rebuild_tensor(array, dtype_name, shape, requires_grad):
    """A torch tensor over `array`'s memory (no copy): the inverse of
    _reduce_tensor. A store-backed array is read-only; torch has no read-only
    tensors, so its warning about that is silenced: do not write into it."""
    import torch
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        t = torch.from_numpy(array)
    dtype = getattr(torch, dtype_name)
    if t.dtype != dtype:
        t = t.view(dtype)
    t = t.reshape(shape)
    if requires_grad:
        t.requires_grad_(True)
    return t


def _reduce_tensor(t):
    flat = t.detach().contiguous().reshape(-1)
    try:
        array = flat.numpy()
    except TypeError:  # bfloat16 and others numpy lacks: their bytes
        array = flat.view(_uint8()).numpy()
    dtype_name = str(t.dtype).rsplit(".", 1)[-1]
    return (_rebuild_tensor,
            (array, dtype_name, tuple(t.shape), bool(t.requires_grad)))


def _uint8():
    import torch
    return torch.uint8


class _TensorPickler(pickle.Pickler):
    def reducer_override(self, obj):
        if _torch_of(obj) is not None:
            return _reduce_tensor(obj)
        return NotImplemented


def _cloudpickler():
    import cloudpickle

    class _CloudTensorPickler(cloudpickle.Pickler):
        def reducer_override(self, obj):
            if _torch_of(obj) is not None:
                return _reduce_tensor(obj)
            return super().reducer_override(obj)

    return _CloudTensorPickler


# ---- dumping --------------------------------------------------------------

def dumps(obj, out_of_band=True):
    """(pickle bytes, [large contiguous buffers as memoryviews]).

    `out_of_band`: False keeps every buffer in the stream (remote clients,
    which have no store). Plain pickle first; objects it cannot pickle
    (lambdas, closures inside the value) go through cloudpickle.
    Raises whatever pickling raised.
    """
    buffers = []
    slices = []  # (buffer index, offset, length) of zero-copy arrays

    def callback(b):
        raw = b.raw()
        if not out_of_band or raw.nbytes < OUT_OF_BAND_BYTES:
            return True  # in band
        # A buffer inside a zero-copy array goes as the sealed object it
        # lives in (its pages here become copy-on-write): no copy.
        snap = _zero_copy.snapshot(raw) if _zero_copy.active else None
        if snap is not None:
            slices.append((len(buffers), snap[1], raw.nbytes))
            buffers.append(snap[0])
            return False
        # A buffer that is a whole store object already (an array of a
        # task's result, of shoal.get) goes as that object: no copy.
        buffers.append(_store_object_of(raw) or raw)
        return False

    try:
        if "torch" not in sys.modules:
            data = pickle.dumps(obj, _PROTOCOL, buffer_callback=callback)
        else:
            f = io.BytesIO()
            _TensorPickler(f, _PROTOCOL, buffer_callback=callback).dump(obj)
            data = f.getvalue()
        if not names_main(data):
            return _with_slices(data, slices), buffers
        # A class (or function) of __main__ by reference: a worker's
        # __main__ is not this script's, so those go by value, as
        # cloudpickle pickles __main__'s objects.
        buffers.clear()
        slices.clear()
    except (pickle.PicklingError, AttributeError, TypeError):
        buffers.clear()
        slices.clear()
    f = io.BytesIO()
    _cloudpickler()(f, _PROTOCOL, buffer_callback=callback).dump(obj)
    return _with_slices(f.getvalue(), slices), buffers


def names_main(data):
    """Whether a pickle may name a global of __main__ (a false positive, a
    string "__main__" among the values, only costs a cloudpickle pass)."""
    return b"__main__" in data


def dump_exception(exc):
    """A task's exception pickled for its client (worker/python_runner.cc):
    plainly, or by cloudpickle when its class is only known by value here
    (defined in the driver's __main__ or a closure); b"" when it cannot be
    pickled or would not load again."""
    class Plain(pickle.Pickler):
        def reducer_override(self, obj):
            return _reduce_exception(obj)

    try:
        f = io.BytesIO()
        Plain(f, _PROTOCOL).dump(exc)
        data = f.getvalue()
        if not names_main(data):
            pickle.loads(data)
            return data
    except Exception:  # noqa: BLE001 (whatever its __reduce__ raises)
        pass
    try:
        import cloudpickle

        class Cloud(cloudpickle.Pickler):
            def reducer_override(self, obj):
                r = _reduce_exception(obj)
                return super().reducer_override(obj) \
                    if r is NotImplemented else r

        f = io.BytesIO()
        Cloud(f, _PROTOCOL).dump(exc)
        data = f.getvalue()
        pickle.loads(data)
        return data
    except Exception:  # noqa: BLE001
        return b""


def _reduce_exception(obj):
    """An exception as its class, args and attributes, rebuilt without
    calling its __init__ (which may take other arguments than its args)."""
    if not isinstance(obj, BaseException) or \
            type(obj).__reduce__ is not BaseException.__reduce__:
        return NotImplemented
    return _rebuild_exception, (type(obj), obj.args,
                                dict(getattr(obj, "__dict__", None) or {}))


def _rebuild_exception(cls, args, attributes):
    e = cls.__new__(cls, *args)
    e.args = args
    e.__dict__.update(attributes)
    return e


# The header of a call or result whose out-of-band buffers include parts of
# zero-copy arrays' objects: _SLICES, a count, then per such buffer its
# index, offset and length, then the pickle.
_SLICES = b"SZC1"
_SLICE = struct.Struct("<IQQ")
_COUNT = struct.Struct("<I")


def _with_slices(data, slices):
    if not slices:
        return data
    return b"".join([_SLICES, _COUNT.pack(len(slices))] +
                    [_SLICE.pack(*s) for s in slices] + [data])


def _sliced(header, buffers):
    """(the pickle, its buffers) of a header: each zero-copy buffer is the
    part of its store object the array occupies (a view, no copy)."""
    if bytes(header[:4]) != _SLICES:
        return header, buffers
    header = memoryview(header).cast("B")
    buffers = list(buffers)
    try:
        (n,) = _COUNT.unpack_from(header, 4)
        at = 4 + _COUNT.size
        for _ in range(n):
            i, offset, length = _SLICE.unpack_from(header, at)
            at += _SLICE.size
            whole = memoryview(buffers[i]).cast("B")
            if offset + length > whole.nbytes:
                raise IndexError(f"slice {offset}+{length} of a "
                                 f"{whole.nbytes}-byte object")
            buffers[i] = whole[offset:offset + length]
    except (struct.error, IndexError) as e:
        raise _errors.InvalidArgumentError(
            f"malformed zero-copy slices in a call: {e}") from None
    return header[at:], buffers


def dump_call(fn_bytes, args, kwargs, out_of_band):
    """The task values of the call envelope: [header] + its out-of-band
    buffers (see the module's docstring). kwargs None: none. Small calls
    (a dict of a few keys) are one short pickle, carried inline in the
    task like any bytes argument. Raises whatever pickling raised."""
    header, buffers = dumps((fn_bytes, args, kwargs or _NO_KWARGS),
                            out_of_band)
    if buffers:
        buffers.insert(0, header)
        return buffers
    return [header]


def _store_object_of(raw):
    """The shoal ObjectRef whose whole object the memoryview `raw` covers
    (found through the .base / .obj chain of the array it views), else
    None. Only the client has ObjectRefs (the extension's type)."""
    owner = raw.obj
    for _ in range(7):
        if owner is None:
            return None
        if type(owner).__name__ == "ObjectRef":
            break
        owner = owner.obj if isinstance(owner, memoryview) else \
            getattr(owner, "base", None)
    else:
        return None
    try:
        import numpy as np
        whole = np.frombuffer(owner, dtype=np.uint8)
        mine = np.frombuffer(raw, dtype=np.uint8)
    except (TypeError, ValueError, ImportError):
        return None
    if (whole.ctypes.data == mine.ctypes.data and
            whole.nbytes == mine.nbytes):
        return owner
    return None


def _describe(value):
    t = type(value)
    return t.__qualname__ if t.__module__ == "builtins" else \
        f"{t.__module__}.{t.__qualname__}"


def unpicklable_argument(args, kwargs, error):
    """An InvalidArgumentError naming the first argument that cannot be
    pickled (only called after pickling the call failed)."""
    for where, value in ([(f"argument {i}", a) for i, a in enumerate(args)] +
                         [(f"keyword argument {k!r}", v)
                          for k, v in kwargs.items()]):
        try:
            dumps(value, out_of_band=False)
        except Exception as e:  # noqa: BLE001 (any pickling failure)
            return _errors.InvalidArgumentError(
                f"{where} cannot be sent to a task: a {_describe(value)} "
                f"cannot be pickled ({type(e).__name__}: {e})")
    return _errors.InvalidArgumentError(
        f"the task's arguments cannot be pickled: {error}")


def dump_function(fn):
    """The function by value (cloudpickle) and the hex of its content hash."""
    import cloudpickle
    data = cloudpickle.dumps(fn, _PROTOCOL)
    return data, hashlib.blake2b(data, digest_size=16).hexdigest()


# ---- in the worker --------------------------------------------------------

def load_call(header, *buffers):
    """The worker's side of the call envelope: (fn_bytes, args, kwargs)."""
    if isinstance(header, memoryview) and header.ndim != 1:
        header = header.cast("B")
    header, buffers = _sliced(header, buffers)
    return _errors.loads(header, buffers=buffers)


def load_function(data):
    return pickle.loads(data)


def dump_result(value):
    """The worker's side of the result envelope: (header, [buffers]).
    Raises InvalidArgumentError naming the value's type and the reason,
    with the pickler's traceback (the worker names the function)."""
    try:
        return dumps(value)
    except Exception as e:  # noqa: BLE001
        import traceback
        raise _errors.InvalidArgumentError(
            f"its return value (a {_describe(value)}) cannot be pickled: "
            f"{type(e).__name__}: {e}\n\nThe worker's traceback:\n"
            f"{traceback.format_exc()}") from None


def describe_function(fn):
    """"module.qualname (file, line N)" of a task's function, for messages."""
    f = getattr(fn, "_fn", fn)  # a RemoteFunction: the function it wraps
    f = getattr(f, "__func__", f)
    name = getattr(f, "__qualname__", None) or type(f).__qualname__
    module = getattr(f, "__module__", None)
    if module:
        name = f"{module}.{name}"
    code = getattr(f, "__code__", None)
    if code is not None:
        name += f" ({code.co_filename}, line {code.co_firstlineno})"
    return name


def load_result(outputs):
    """The client's side: the value of a task's outputs (a list)."""
    header = outputs[0]
    if header.ndim != 1:
        header = header.cast("B")
    header, buffers = _sliced(header, outputs[1:])
    return _errors.loads(header, buffers=buffers)


def is_result_envelope(outputs):
    return (len(outputs) >= 1 and isinstance(outputs[0], memoryview) and
            outputs[0].ndim == 2)


def map_chunk(fn, items):
    """A chunk of Client.map in one task: [fn(*item) for item in items]."""
    return [fn(*item) for item in items]
