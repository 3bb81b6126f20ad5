"""Task functions of the issue-12 tests (test_values, test_functions,
test_exceptions, test_futures, test_map): module level, so workers import
them by name from this folder."""

import dataclasses
import time

import numpy as np


@dataclasses.dataclass
class Point:
    x: int
    label: str
    data: object = None


class NeedsTwoArgs(Exception):
    """Pickles (args = (a,)) but does not unpickle: __init__ wants two."""

    def __init__(self, a, b):
        super().__init__(a)
        self.b = b


class AppError(Exception):
    pass


def echo(*args, **kwargs):
    if kwargs:
        return args, kwargs
    return args[0] if len(args) == 1 else args


def mapping_of(address):
    """The /proc/self/maps path holding `address` ("" if anonymous)."""
    with open("/proc/self/maps") as f:
        for line in f:
            fields = line.split()
            lo, hi = (int(v, 16) for v in fields[0].split("-"))
            if lo <= address < hi:
                return fields[5] if len(fields) > 5 else ""
    return None


def array_address(a):
    if hasattr(a, "data_ptr"):  # torch
        return a.data_ptr()
    return a.__array_interface__["data"][0]


def where_are(d):
    """For each array of a dict: (mapping path, writeable, sum)."""
    out = {}
    for k, a in d.items():
        writeable = a.flags.writeable if hasattr(a, "flags") else None
        out[k] = (mapping_of(array_address(a)), writeable, float(a.sum()))
    return out


def type_names(*args, **kwargs):
    return ([type(a).__name__ for a in args],
            {k: type(v).__name__ for k, v in kwargs.items()})


def raise_value_error(x):
    raise ValueError(f"bad {x}")


def raise_app_error():
    raise AppError("app failed")


def raise_needs_two():
    raise NeedsTwoArgs("first", "second")


def raise_local_class():
    class Local(Exception):
        pass
    raise Local("local failure")


def return_generator():
    return (i for i in range(3))


def return_lock():
    import threading
    return {"lock": threading.Lock()}


def sleep_then(seconds, value):
    time.sleep(seconds)
    return value


def big_array(n, value):
    return np.full(n, value, dtype=np.float32)


def total(a, b=0):
    return float(np.sum(a)) + b


def square(x):
    return x * x


def fail_on(x, bad):
    if x == bad:
        raise ValueError(f"item {x}")
    return x


def functions_loaded():
    import _shoal_task
    return _shoal_task.functions_loaded()


def store_offsets(d):
    """For each array of a dict: its offset in the store segment (the same
    in every process that maps the segment)."""
    return {k: store_offset(a) for k, a in d.items()}


def store_offset(a):
    address = array_address(a)
    with open("/proc/self/maps") as f:
        for line in f:
            fields = line.split()
            lo, hi = (int(v, 16) for v in fields[0].split("-"))
            if lo <= address < hi and len(fields) > 5 and \
                    "/dev/shm/shoal-" in fields[5]:
                return address - lo + int(fields[2], 16)
    return None


def dict_of_arrays(n):
    return {"a": np.full(n, 1.0, np.float32),
            "b": np.arange(n, dtype=np.float64)}


def pair_is_shared(d):
    """Whether d["pair"] holds one object twice (identity kept by pickle)."""
    return d["pair"][0] is d["pair"][1]
