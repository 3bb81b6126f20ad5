"""Task functions for test_spill.py: each returns 1 MiB whose bytes say which
call made it."""

import numpy as np


def block(i, n=1 << 20):
    """n bytes: the call's number in the first 8, then (i % 251) repeated."""
    a = np.full(n, i % 251, dtype=np.uint8)
    a[:8] = np.frombuffer(np.int64(i).tobytes(), dtype=np.uint8)
    return a


def check(a, i, n=1 << 20):
    """Whether `a` is block(i, n)."""
    a = np.asarray(a)
    return (a.size == n and
            int(np.frombuffer(a[:8].tobytes(), dtype=np.int64)[0]) == i and
            bool((a[8:] == i % 251).all()))
