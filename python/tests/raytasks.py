"""Task functions for the Ray-pattern tests (test_ray_*.py): imported by
name by the workers."""

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
