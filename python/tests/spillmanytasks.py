"""Task functions for test_spill_many.py: each returns n bytes that say
which call made them."""

import numpy as np

import shoal


@shoal.remote
def block(i, n):
    """n bytes: i in the first 8, then (i % 251) repeated."""
    a = np.full(n, i % 251, dtype=np.uint8)
    a[:8] = np.frombuffer(np.int64(i).tobytes(), dtype=np.uint8)
    return a


def check(a, i, n):
    """Whether `a` is block(i, n)'s result."""
    a = np.asarray(a)
    return (a.size == n and
            int(np.frombuffer(a[:8].tobytes(), dtype=np.int64)[0]) == i and
            bool((a[8:] == i % 251).all()))
