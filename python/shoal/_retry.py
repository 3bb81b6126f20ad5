"""retry_exceptions of @shoal.remote, run inside the worker: the task's
function runs again on the same worker, at once, while it raises an
exception the option covers and retries are left (docs/tasks.md, "Retries").
Imports nothing of shoal's at import time: a worker unpickles calls to it."""

import importlib


def resolve(target):
    """The function a task names: "py:module:qualname" (imported; a
    RemoteFunction there gives its plain function) or the function itself
    (sent by value)."""
    if not isinstance(target, str):
        return target
    module, qualname = target[3:].split(":")
    obj = importlib.import_module(module)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return getattr(obj, "_fn", obj)


def covered(error, exceptions):
    """Whether retry_exceptions=`exceptions` (True, or a tuple of classes)
    retries `error`."""
    if exceptions is True:
        return isinstance(error, Exception)
    return isinstance(error, exceptions)


def _cancelled():
    try:
        import _shoal_task
    except ImportError:
        return False
    return _shoal_task.cancelled()


def call(target, retries, exceptions, *args, **kwargs):
    """Runs the task's function; an exception `exceptions` covers runs it
    again, up to `retries` more times (the last one raises). A cancelled
    task is not run again."""
    fn = resolve(target)
    done = 0
    while True:
        try:
            return fn(*args, **kwargs)
        except Exception as e:  # noqa: BLE001 (covered() decides)
            if done >= retries or not covered(e, exceptions) or _cancelled():
                raise
            done += 1
