"""Collation without torch: numpy's counterpart of torch's default_collate.

`numpy_collate` follows torch.utils.data.default_collate's rules with numpy
arrays in place of tensors: arrays are stacked (a new leading axis), Python
floats become float64 arrays, ints int64 arrays, bools bool arrays, numpy
scalars an array of their dtype, strings and bytes stay lists, mappings,
namedtuples and sequences are collated field by field (sequences of unequal
lengths raise, as torch's do). `numpy_convert` is default_convert's
counterpart (no batch axis: values as they are).

`to_torch` turns every numpy array (not of strings or objects) of a
collated value into a tensor sharing its memory: torch's default_collate of
the same samples, computed in a worker that never imports torch.
"""

import collections.abc
from typing import Any, Sequence

import numpy as np

_ERROR = ("default_collate: batch must contain tensors, numpy arrays, "
          "numbers, dicts or lists; found {}")


def _is_strings(array: Any) -> bool:
    return array.dtype.kind in "SUOV"


def numpy_collate(batch: Sequence[Any]) -> Any:
    """torch's default_collate with numpy: arrays and numbers stacked,
    mappings and sequences collated field by field, strings listed."""
    elem = batch[0]
    t = type(elem)
    if isinstance(elem, np.ndarray) and not _is_strings(elem):
        return np.stack(batch)
    if isinstance(elem, np.ndarray) or (isinstance(elem, np.generic) and
                                       _is_strings(np.asarray(elem))):
        raise TypeError(_ERROR.format(elem.dtype))
    if isinstance(elem, np.generic):
        return np.asarray(batch)
    if isinstance(elem, bool):
        return np.asarray(batch, dtype=np.bool_)
    if isinstance(elem, float):
        return np.asarray(batch, dtype=np.float64)
    if isinstance(elem, int):
        return np.asarray(batch, dtype=np.int64)
    if isinstance(elem, (str, bytes)):
        return batch
    if isinstance(elem, collections.abc.Mapping):
        try:
            return t({k: numpy_collate([d[k] for d in batch]) for k in elem})
        except TypeError:
            return {k: numpy_collate([d[k] for d in batch]) for k in elem}
    if isinstance(elem, tuple) and hasattr(elem, "_fields"):
        return t(*(numpy_collate(s) for s in zip(*batch)))
    if isinstance(elem, collections.abc.Sequence):
        it = iter(batch)
        size = len(next(it))
        if not all(len(e) == size for e in it):
            raise RuntimeError(
                "each element in list of batch should be of equal size")
        transposed = list(zip(*batch))
        if isinstance(elem, tuple):
            return [numpy_collate(s) for s in transposed]
        try:
            return t([numpy_collate(s) for s in transposed])
        except TypeError:
            return [numpy_collate(s) for s in transposed]
    raise TypeError(_ERROR.format(t))


def numpy_convert(data: Any) -> Any:
    """torch's default_convert with numpy: the data as it is."""
    return data


def plain(value: Any, depth: int = 0) -> bool:
    """Whether torch's default_collate of samples like `value` can be
    computed with numpy (numpy arrays, Python and numpy numbers, strings,
    and mappings/sequences of them; no tensors or other objects)."""
    if depth > 8:
        return False
    if isinstance(value, np.ndarray):
        return not _is_strings(value)
    if isinstance(value, (np.generic, bool, int, float, str, bytes)):
        return True
    if isinstance(value, collections.abc.Mapping):
        return all(plain(v, depth + 1) for v in value.values())
    if isinstance(value, tuple) and hasattr(value, "_fields"):
        return False  # torch rebuilds namedtuples: leave it to torch
    if isinstance(value, (list, tuple)):
        return all(plain(v, depth + 1) for v in value)
    return False


def to_torch(value: Any) -> Any:
    """Every numpy array in a collated value as a tensor over its memory."""
    import warnings

    import torch
    if isinstance(value, np.ndarray):
        if _is_strings(value):
            return value
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # read-only store memory
            return torch.from_numpy(value) if value.ndim else \
                torch.as_tensor(value)
    if isinstance(value, dict):
        return {k: to_torch(v) for k, v in value.items()}
    if isinstance(value, list):
        return [to_torch(v) for v in value]
    if isinstance(value, tuple) and not hasattr(value, "_fields"):
        return tuple(to_torch(v) for v in value)
    return value


class WorkerCollate:
    """The collate a worker (or the consumer making a worker's batch) runs
    for the default collate: numpy's when the samples are plain numpy
    values (the consumer then makes tensors of its arrays: the values and
    dtypes of torch's default_collate), else torch's. A class of this
    module, so that a worker unpickles it without importing the loader (nor
    torch)."""

    def __init__(self, batched: bool) -> None:
        self.batched = batched  # default_collate, else default_convert

    def __call__(self, batch: Any) -> Any:
        sample = batch[0] if self.batched and batch else batch
        if plain(sample):
            return numpy_collate(batch) if self.batched else batch
        import torch.utils.data as tud
        return (tud.default_collate(batch) if self.batched
                else tud.default_convert(batch))
