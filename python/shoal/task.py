"""What a running task may ask about itself (inside a worker only).

    import shoal.task

    def long_job(n):
        for i in range(n):
            if shoal.task.cancelled():
                return None
            ...
"""

from types import ModuleType

from . import _errors

try:  # inside a worker: the class its forced cancellations raise
    from _shoal_task import TaskCancelledError
except ImportError:
    class TaskCancelledError(BaseException):  # type: ignore[no-redef]
        """Raised inside a task cancelled with shoal.cancel(f, force=True). A
        BaseException, so `except Exception` does not stop it."""


def _module() -> ModuleType:
    try:
        import _shoal_task  # built into the worker binary
    except ImportError:
        raise _errors.FailedPreconditionError(
            "shoal.task works only inside a task running on a shoal worker"
        ) from None
    return _shoal_task


def in_task() -> bool:
    """True while this code runs as a task on a shoal worker."""
    try:
        import _shoal_task
    except ImportError:
        return False
    return _shoal_task.in_task()


def attempt() -> int:
    """1 on the first run; 2, 3, ... when retried after a worker died.
    Raises FailedPreconditionError outside a task."""
    return _module().attempt()


def worker_id() -> int:
    """The id of the worker running this task. Raises
    FailedPreconditionError outside a task."""
    return _module().worker_id()


def cancelled() -> bool:
    """True once the task was cancelled or timed out: stop soon. Raises
    FailedPreconditionError outside a task."""
    return _module().cancelled()
