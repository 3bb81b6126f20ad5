"""Tasks that use the client API from inside a task (test_nested.py)."""

import shoal


def add(a, b):
    return a + b


def submit_and_get(a, b):
    return shoal.submit(add, a, b).result(60)


def put_and_get(n):
    import numpy as np
    ref = shoal.put(np.arange(n, dtype=np.int64))
    return int(shoal.get(ref).sum())


def fan_out(n):
    futures = [shoal.submit(add, i, 0) for i in range(n)]
    return sum(f.result(60) for f in futures)


def recurse(depth):
    if depth == 0:
        return 0
    return 1 + shoal.submit(recurse, depth - 1).result(60)


def fail(message):
    raise KeyError(message)


def call_failing_child(message):
    return shoal.submit(fail, message).result(60)


def call_failing_grandchild(message):
    return shoal.submit(call_failing_child, message).result(60)


@shoal.remote
def remote_add(a, b):
    return a + b


def remote_and_get(a, b):
    return remote_add.remote(a, b).result(60)


@shoal.remote
class Adder:
    def __init__(self, base):
        self.base = base

    def add_in_task(self, k):
        return shoal.submit(add, self.base, k).result(60)


def make_actor_and_call(base, k):
    a = Adder.remote(base)
    try:
        return a.add_in_task.remote(k).result(60)
    finally:
        shoal.kill(a)


def fib(n):
    # Binary fan-out: each level submits two children and waits for both.
    if n < 2:
        return n
    a, b = shoal.submit(fib, n - 1), shoal.submit(fib, n - 2)
    return a.result(120) + b.result(120)


def sleep_and_return(value, seconds):
    import time
    time.sleep(seconds)
    return value


def wait_for_a_slow_child(seconds):
    return shoal.submit(sleep_and_return, 1, seconds).result(60)


def recurse_then_sleep(depth, seconds):
    if depth == 0:
        return sleep_and_return(0, seconds)
    return 1 + shoal.submit(recurse_then_sleep, depth - 1, seconds).result(60)
