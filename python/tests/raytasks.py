"""Task functions for the Ray-pattern tests (test_ray_*.py): imported by
name by the workers."""

import dataclasses
import threading


class BadInput(ValueError):
    """A ValueError subclass of a module, with an attribute its __init__
    sets from a second argument."""

    def __init__(self, message, field):
        super().__init__(message)
        self.field = field


def reject(field):
    raise BadInput(f"bad {field}", field)


def return_lock():
    return {"held": threading.Lock()}


@dataclasses.dataclass
class Model:
    name: str
    weights: dict


def in_store(array):
    """Whether `array`'s memory lies in this process's mapping of the node's
    store (/dev/shm/shoal-<job>-store): a view, not a copy."""
    at = array.__array_interface__["data"][0]
    with open("/proc/self/maps") as f:
        for line in f:
            fields = line.split()
            if len(fields) >= 6 and fields[5].endswith("-store"):
                lo, hi = (int(x, 16) for x in fields[0].split("-"))
                if lo <= at and at + array.nbytes <= hi:
                    return True
    return False


def summarize(model):
    """(name, sums, whether every array views the store, writable flags)."""
    arrays = list(model.weights.values())
    return (model.name, [float(a.sum()) for a in arrays],
            all(in_store(a) for a in arrays if a.nbytes >= 64 << 10),
            [a.flags.writeable for a in arrays])


def read_nested(box):
    import shoal
    ref = box["ref"]
    return type(ref).__name__, shoal.get(ref).name
