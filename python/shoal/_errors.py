"""shoal's exceptions: one class per status code, plus TaskError.

Every error the C++ runtime reports arrives as a subclass of shoal.Error
chosen by its status code; the common ones also derive from the matching
built-in exception (TimeoutError, ValueError, LookupError, ...), so code that
already catches those keeps working.
"""

import builtins
import concurrent.futures
from typing import Any, Callable, Optional, Sequence, Union


class Error(Exception):
    """A shoal call failed. `code` names the status code (e.g. "NOT_FOUND")."""

    code = "UNKNOWN"


class CancelledError(Error, concurrent.futures.CancelledError):
    """The task or call was cancelled (also a
    concurrent.futures.CancelledError)."""

    code = "CANCELLED"


class UnknownError(Error):
    """A failure the runtime has no more specific status for."""

    code = "UNKNOWN"


class InvalidArgumentError(Error, ValueError):
    """An argument was invalid: a value out of range, an option unknown, an
    argument that cannot be pickled (also a ValueError)."""

    code = "INVALID_ARGUMENT"


class TimeoutError(Error, builtins.TimeoutError):  # noqa: A001 (DeadlineExceeded)
    """A deadline passed: a wait's timeout or a task's (also the built-in
    TimeoutError, and so concurrent.futures.TimeoutError)."""

    code = "DEADLINE_EXCEEDED"


class NotFoundError(Error, LookupError):
    """What was asked for does not exist: a node, a store object, a key, a
    named actor (also a LookupError)."""

    code = "NOT_FOUND"


class AlreadyExistsError(Error):
    """What was to be made exists already."""

    code = "ALREADY_EXISTS"


class PermissionDeniedError(Error, PermissionError):
    """The caller may not do this (also a PermissionError)."""

    code = "PERMISSION_DENIED"


class ResourceExhaustedError(Error):
    """A limit was reached (e.g. the store is full)."""

    code = "RESOURCE_EXHAUSTED"


class FailedPreconditionError(Error):
    """The call needs a state the process is not in (e.g. the client API
    inside a task, shoal.init's job outside `shoal launch`)."""

    code = "FAILED_PRECONDITION"


class AbortedError(Error):
    """The task was aborted, e.g. its worker died and no retries were left."""

    code = "ABORTED"


class OutOfRangeError(Error):
    """A position or size beyond what exists."""

    code = "OUT_OF_RANGE"


class UnimplementedError(Error, NotImplementedError):
    """The operation is not supported (also a NotImplementedError)."""

    code = "UNIMPLEMENTED"


class InternalError(Error):
    """An invariant of the runtime broke: a bug in shoal."""

    code = "INTERNAL"


class UnavailableError(Error, ConnectionError):
    """The node or a peer cannot be reached, or went away (also a
    ConnectionError)."""

    code = "UNAVAILABLE"


class ActorDiedError(UnavailableError):
    """An actor call failed because the actor ended: its process died (with
    no restarts left, or while running this call), it was killed, its
    constructor raised, or its owner exited. The message says which."""


class DataLossError(Error):
    """Data was lost or corrupted."""

    code = "DATA_LOSS"


class UnauthenticatedError(Error):
    """The caller could not be authenticated."""

    code = "UNAUTHENTICATED"


class TaskError(Error):
    """A task's Python function raised an exception.

    Attributes, as the worker caught it (separate fields end to end, never
    parsed out of a message): exc_type ("ValueError", "mymod.MyError": the
    qualified name, builtins without their module), qualified_type
    ("builtins.ValueError"), exc_message (str() of the exception), and
    remote_traceback (the worker's formatted traceback).
    """

    code = "UNKNOWN"

    def __init__(self, exc_type: str, exc_message: str,
                 remote_traceback: str,
                 qualified_type: Optional[str] = None) -> None:
        super().__init__(
            f"{exc_type}: {exc_message}\n\nThe task's traceback (in its "
            f"worker):\n{remote_traceback}")
        self.exc_type = exc_type
        self.exc_message = exc_message
        self.remote_traceback = remote_traceback
        self.qualified_type = qualified_type or exc_type

    def __reduce__(self) -> tuple[Callable[..., Any], tuple[Any, ...]]:
        # picklable: a task may raise or return one
        return (TaskError, (self.exc_type, self.exc_message,
                            self.remote_traceback, self.qualified_type))


# absl::StatusCode values → classes.
_BY_CODE = {
    1: CancelledError, 2: UnknownError, 3: InvalidArgumentError,
    4: TimeoutError, 5: NotFoundError, 6: AlreadyExistsError,
    7: PermissionDeniedError, 8: ResourceExhaustedError,
    9: FailedPreconditionError, 10: AbortedError, 11: OutOfRangeError,
    12: UnimplementedError, 13: InternalError, 14: UnavailableError,
    15: DataLossError, 16: UnauthenticatedError,
}


def _text(message: Union[str, bytes]) -> str:
    if isinstance(message, bytes):
        return message.decode("utf-8", "replace")
    return message


def from_status(code: int, message: Union[str, bytes]) -> Error:
    """The exception for a status (code as absl::StatusCode's number).

    Unavailable whose message starts "actor " is the node saying an actor
    ended (coordinator/actor_directory.h, tasks' Submit): ActorDiedError."""
    message = _text(message)
    if code == 14 and message.startswith("actor "):
        return ActorDiedError(message)
    return _BY_CODE.get(code, UnknownError)(message)


def task_failure(code: int, message: Union[str, bytes],
                 exception: Optional[Sequence[Any]] = None
                 ) -> BaseException:
    """The exception for a failed task.

    `exception`: None, or the (type, message, traceback, pickled) fields of
    the Python exception that failed it (ipc::TaskException, filled by
    worker/python_runner.cc) — then the task's own exception when the worker
    pickled it (`pickled` not empty) and it unpickles here, with
    a TaskError holding the worker's traceback as its __cause__; else a
    TaskError built from the fields as they are; without them the status's
    class (C++ tasks, the runtime's own failures).
    """
    if exception is None:
        return from_status(code, message)
    type_field = exception[0]
    pickled = exception[3] if len(exception) > 3 else None
    qualified, exc_message, trace = (
        _text(f) for f in (type_field, exception[1], exception[2]))
    short = (qualified[len("builtins."):]
             if qualified.startswith("builtins.") else qualified)
    error = TaskError(short, exc_message, trace, qualified)
    if pickled:
        original = _unpickled_exception(pickled)
        if original is not None:
            original.__cause__ = error
            return original
    return error


def _main_module_name() -> Optional[str]:
    """The name a worker imports this process's __main__ by (the script's
    file name, or python -m's module), or None."""
    import os
    import sys
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    if spec is not None and spec.name and spec.name != "__main__":
        return spec.name
    path = getattr(main, "__file__", None)
    return os.path.splitext(os.path.basename(path))[0] if path else None


def loads(data: Any, buffers: Any = None) -> Any:
    """pickle.loads, where a global of the module a worker imports this
    process's __main__ by (a class or exception of the driver's script, as
    a worker that imported the script by name pickled it) is __main__'s own
    object: `except MyError` and isinstance see the driver's class."""
    import io
    import pickle
    import sys
    name = _main_module_name()
    if not isinstance(data, (bytes, bytearray)):
        data = memoryview(data).cast("B").tobytes()  # (a small header)
    if name is None or name.encode() not in data:
        return pickle.loads(data, buffers=buffers)
    main = sys.modules["__main__"]

    class _MainAware(pickle.Unpickler):
        def find_class(self, module: str, qualname: str) -> Any:
            if module == name and sys.modules.get(name) is not main:
                obj: Any = main
                for part in qualname.split("."):
                    obj = getattr(obj, part, None)
                if obj is not None:
                    return obj
            return super().find_class(module, qualname)

    return _MainAware(io.BytesIO(data), buffers=buffers).load()


def _unpickled_exception(data: Any) -> Optional[BaseException]:
    """The exception a worker pickled, or None if it does not load here (a
    module this process lacks, ...)."""
    try:
        exc = loads(data)
    except Exception:  # noqa: BLE001 (whatever its __reduce__ raises)
        return None
    return exc if isinstance(exc, BaseException) else None
