"""Actor classes and remote functions for test_actors.py and test_remote.py
(module level, so workers import them by name from this folder)."""

import os
import signal
import time

import shoal


@shoal.remote
class Counter:
    def __init__(self, start=0, step=1):
        self.n = start
        self.step = step
        self.started = time.time()

    def add(self, k=None):
        self.n += self.step if k is None else k
        return self.n

    def value(self):
        return self.n

    def pid(self):
        return os.getpid()

    def env(self, key):
        return os.environ.get(key, "<unset>")

    def sleep(self, seconds):
        time.sleep(seconds)
        return seconds

    def sleep_until(self, path):
        """Creates `path`, then waits until it is removed (or 60 s)."""
        open(path, "w").close()
        deadline = time.time() + 60
        while os.path.exists(path) and time.time() < deadline:
            time.sleep(0.01)
        return "released"

    def die(self):
        os.kill(os.getpid(), signal.SIGKILL)

    def fail(self, message):
        raise ValueError(message)


@shoal.remote
class BadInit:
    def __init__(self, message):
        raise RuntimeError(message)

    def value(self):
        return 1


@shoal.remote(num_cpus=1, max_restarts=1)
class Restartable:
    def __init__(self, tag):
        self.tag = tag
        self.calls = 0

    def call(self):
        self.calls += 1
        return (self.tag, self.calls, os.getpid())

    def die(self):
        os.kill(os.getpid(), signal.SIGKILL)


@shoal.remote
def square(x):
    return x * x


@shoal.remote(max_retries=0, timeout=30)
def pid_of_worker():
    return os.getpid()


@shoal.remote
def add_kw(a, b=10, *, c=100):
    return a + b + c


