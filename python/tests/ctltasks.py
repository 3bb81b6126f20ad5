"""Task functions of test_ray_control.py (imported by name in workers)."""

import os
import time

import shoal


def mark(path):
    with open(path, "w") as f:
        f.write(str(os.getpid()))


def spin(path):
    """A busy loop that never checks for cancellation."""
    mark(path)
    while True:
        pass


def spin_catching(path):
    """A busy loop that swallows every Exception (not TaskCancelledError)."""
    mark(path)
    while True:
        try:
            sum(range(100))
        except Exception:  # noqa: BLE001
            pass


def sleep_long(path):
    """C code (time.sleep): an asynchronous exception cannot stop it."""
    mark(path)
    time.sleep(1000)


def slow_square(x):
    time.sleep(0.05)
    return x * x


def flaky(path, fails):
    """Fails its first `fails` runs (counted in a file), then returns the
    number of runs."""
    n = int(open(path).read()) + 1 if os.path.exists(path) else 1
    with open(path, "w") as f:
        f.write(str(n))
    if n <= fails:
        raise ValueError(f"run {n} fails")
    return n


class Unlucky(Exception):
    pass


def fail_with(path, kind):
    n = int(open(path).read()) + 1 if os.path.exists(path) else 1
    with open(path, "w") as f:
        f.write(str(n))
    raise {"value": ValueError, "key": KeyError,
           "unlucky": Unlucky}[kind](f"run {n}")


def triple(x):
    return x, x * 2, str(x)


def count_up(n, gate=None):
    """Yields 0..n-1; with `gate`, waits before yielding item 2 until that
    file exists (the caller reads items 0 and 1 first)."""
    for i in range(n):
        if i == 2 and gate is not None:
            while not os.path.exists(gate):
                time.sleep(0.01)
        yield i


def big_items(n, size):
    import numpy as np
    for i in range(n):
        yield np.full(size, i, dtype=np.int64)


def fail_after(n):
    for i in range(n):
        yield i
    raise KeyError("after the items")


def produced(path, n):
    """Yields n items, writing how many it produced to `path` each time."""
    for i in range(n):
        with open(path, "w") as f:
            f.write(str(i + 1))
        yield i




# ---- remote functions of test_ray_streaming.py and the retry tests

retried = shoal.remote(max_retries=3, retry_exceptions=True)(flaky)
retried_value_errors = shoal.remote(
    max_retries=5, retry_exceptions=[ValueError, Unlucky])(fail_with)
three = shoal.remote(num_returns=3)(triple)
stream_up = shoal.remote(count_up)
stream_big = shoal.remote(big_items)
stream_failing = shoal.remote(fail_after)
stream_produced = shoal.remote(produced)
