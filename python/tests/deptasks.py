"""Task functions of test_future_args.py: futures passed as arguments."""

import numpy as np

import shoal
from shoal import _context
from valtasks import store_offset


def big(n_bytes, value):
    """A float32 array of n_bytes: a store object of its own."""
    return np.full(n_bytes // 4, value, dtype=np.float32)


def plus(a, value):
    """A new array: a + value (a chain's next link)."""
    return a + np.float32(value)


def pair(n_bytes):
    """A dict of two large arrays and a small value: a pickled result."""
    return {"a": big(n_bytes, 1.0), "b": big(n_bytes, 2.0), "note": "x"}


def report(a, *, scale=1):
    """Where the argument lies in the store, its sum, and the store's bytes
    in use while this task holds it."""
    used = _context.client().status()["store_used_bytes"]
    return store_offset(a), float(np.sum(a)) * scale, used


def report_dict(d):
    return ({k: store_offset(v) for k, v in d.items() if k != "note"},
            d["note"], _context.client().status()["store_used_bytes"])


def fail(message):
    raise KeyError(message)


def nested(n_bytes):
    """Inside a task: a future passed to a task submitted from here."""
    producer = shoal.submit(big, n_bytes, 3.0)
    offset, total, _ = shoal.submit(report, producer).result(60)
    return offset == store_offset(producer.result(60)), total
