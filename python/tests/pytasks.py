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
    import shoal
    try:
        shoal.put(np.zeros(3))
    except shoal.Error as e:
        return type(e).__name__
    return "no error"
