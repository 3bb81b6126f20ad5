"""Task functions the tests submit. Workers import this module by name from
the test process's sys.path (which holds this folder)."""

import os
import signal
import sys
import time

import numpy as np

import shoal.task


def noop():
    return None


def sleep(seconds):
    time.sleep(seconds)
    return seconds


def echo(*args):
    return args


def add(a, b):
    return a + b


def describe(x):
    """What arrived: type, dtype, shape, writeable, data address."""
    if isinstance(x, np.ndarray):
        return (type(x).__name__, str(x.dtype), str(x.shape),
                bool(x.flags.writeable), x.__array_interface__["data"][0])
    if isinstance(x, memoryview):
        return ("memoryview", x.format, str(x.shape), not x.readonly, 0)
    return (type(x).__name__, "", "", False, 0)


def store_offset(x):
    """The array's offset within this process's mapping of the store
    segment (found in /proc/self/maps), or -1."""
    address = x.__array_interface__["data"][0]
    with open("/proc/self/maps") as maps:
        for line in maps:
            fields = line.split()
            if len(fields) < 6 or not fields[5].endswith("-store"):
                continue
            lo, hi = (int(v, 16) for v in fields[0].split("-"))
            if lo <= address < hi:
                # the mapping's start is (segment base + file offset)
                return address - lo + int(fields[2], 16)
    return -1


def checksum(x):
    return float(np.asarray(x, dtype=np.float64).sum())


def scale(x, k):
    return x * k


def zeros(n, dtype):
    return np.zeros(n, dtype=dtype)


def big_bytes(n):
    return b"\x07" * n


def byte_sum(b):
    return int(np.frombuffer(b, dtype=np.uint8).sum())


def torch_double(n):
    import torch
    return torch.arange(n, dtype=torch.float32) * 2


def raise_value_error(x):
    _inner(x)


def _inner(x):
    raise ValueError(f"bad value {x}")


class CustomError(Exception):
    pass


def raise_custom():
    raise CustomError("custom failure")


# A message that looks like the start of a traceback, over several lines.
TRICKY_MESSAGE = ("line one\nTraceback (most recent call last):\n"
                  "  File \"fake.py\", line 1, in <module>\nValueError: no")


def raise_tricky():
    raise CustomError(TRICKY_MESSAGE)


def returns_list():
    return [1, 2, 3]


def spin(n):
    """CPU-bound pure Python: holds its interpreter's GIL throughout."""
    x = 0
    for i in range(n):
        x += i * i % 7
    return x


def attempt():
    return shoal.task.attempt()


def die_once(marker):
    """Kills its own worker on the first attempt; the retry returns."""
    if not os.path.exists(marker):
        with open(marker, "w") as f:
            f.write(str(os.getpid()))
        os.kill(os.getpid(), signal.SIGKILL)
    return shoal.task.attempt()


def wait_to_be_killed(pid_file, marker):
    """Writes its pid, then sleeps until killed (first attempt only)."""
    if os.path.exists(marker):
        return ("retried", shoal.task.attempt(), os.getpid())
    with open(marker, "w"):
        pass
    with open(pid_file + ".tmp", "w") as f:
        f.write(str(os.getpid()))
    os.rename(pid_file + ".tmp", pid_file)
    time.sleep(60)
    return ("not killed", shoal.task.attempt(), os.getpid())


def until_cancelled(limit):
    deadline = time.time() + limit
    while time.time() < deadline:
        if shoal.task.cancelled():
            return "saw cancel"
        time.sleep(0.01)
    return "no cancel"


def speak(text):
    print(f"stdout says {text}")
    print(f"stderr says {text}", file=sys.stderr)
    return text


def worker_pid():
    return os.getpid()


def sys_path():
    return ":".join(sys.path)


def client_api_inside_task():
    """A store round trip through the client API, from inside a task (nested
    tasks: the worker's built-in shoal._shoal)."""
    import shoal
    ref = shoal.put(np.arange(3.0))
    return float(shoal.get(ref).sum())


# ---- state that lives as long as the worker's interpreter ---------------------

_calls = 0


def count_calls():
    """(this worker's pid, how many times this worker ran it, id of sys):
    module state survives from task to task in one interpreter."""
    global _calls
    _calls += 1
    return os.getpid(), _calls, id(sys)


def buffer_results():
    """Objects with the buffer protocol (not numpy) as results."""
    import array
    return (array.array("d", [1.5, 2.5, 3.5]), bytearray(b"abc"),
            memoryview(np.arange(6, dtype=np.int16).reshape(2, 3)))


# ---- the GIL while the worker is not running Python --------------------------

_ticker = None


class _Ticker:
    """A thread in the worker's interpreter that counts (`sleepy`: one count
    per 1 ms sleep) or spins, stamping time.monotonic() every 64 counts."""

    def __init__(self, sleepy):
        import threading
        self.sleepy = sleepy
        self.count = 0
        self.stamps = []
        self.stop = False
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        while not self.stop:
            self.count += 1
            if self.sleepy:
                time.sleep(0.001)
            elif self.count % 64 == 0:
                self.stamps.append(time.monotonic())


def start_ticker(sleepy):
    global _ticker
    _ticker = _Ticker(sleepy)
    time.sleep(0.02)  # it runs before the task returns
    return _ticker.count


def stop_ticker():
    """Stops the ticker: (its count, its time stamps, returned_at)."""
    global _ticker
    t, _ticker = _ticker, None
    t.stop = True
    t.thread.join()
    return t.count, np.array(t.stamps, dtype=np.float64), _returned_at


_returned_at = 0.0


def many_outputs(n, nbytes):
    """n arrays of nbytes each (each a store object above 64 KiB), while a
    spinning ticker runs; remembers when the function returned."""
    global _returned_at
    start_ticker(False)
    out = tuple(np.full(nbytes, i % 251, dtype=np.uint8) for i in range(n))
    _returned_at = time.monotonic()
    return out
