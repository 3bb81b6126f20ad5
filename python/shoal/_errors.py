"""shoal's exceptions: one class per status code, plus TaskError.

Every error the C++ runtime reports arrives as a subclass of shoal.Error
chosen by its status code; the common ones also derive from the matching
built-in exception (TimeoutError, ValueError, LookupError, ...), so code that
already catches those keeps working.
"""

import builtins
import concurrent.futures


class Error(Exception):
    """A shoal call failed. `code` names the status code (e.g. "NOT_FOUND")."""

    code = "UNKNOWN"


class CancelledError(Error, concurrent.futures.CancelledError):
    code = "CANCELLED"


class UnknownError(Error):
    code = "UNKNOWN"


class InvalidArgumentError(Error, ValueError):
    code = "INVALID_ARGUMENT"


class TimeoutError(Error, builtins.TimeoutError):  # noqa: A001 (DeadlineExceeded)
    code = "DEADLINE_EXCEEDED"


class NotFoundError(Error, LookupError):
    code = "NOT_FOUND"


class AlreadyExistsError(Error):
    code = "ALREADY_EXISTS"


class PermissionDeniedError(Error, PermissionError):
    code = "PERMISSION_DENIED"


class ResourceExhaustedError(Error):
    code = "RESOURCE_EXHAUSTED"


class FailedPreconditionError(Error):
    code = "FAILED_PRECONDITION"


class AbortedError(Error):
    """The task was aborted, e.g. its worker died and no retries were left."""

    code = "ABORTED"


class OutOfRangeError(Error):
    code = "OUT_OF_RANGE"


class UnimplementedError(Error, NotImplementedError):
    code = "UNIMPLEMENTED"


class InternalError(Error):
    code = "INTERNAL"


class UnavailableError(Error, ConnectionError):
    code = "UNAVAILABLE"


class ActorDiedError(UnavailableError):
    """An actor call failed because the actor ended: its process died (with
    no restarts left, or while running this call), it was killed, its
    constructor raised, or its owner exited. The message says which."""


class DataLossError(Error):
    code = "DATA_LOSS"


class UnauthenticatedError(Error):
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

    def __init__(self, exc_type, exc_message, remote_traceback,
                 qualified_type=None):
        super().__init__(
            f"{exc_type}: {exc_message}\n\nThe task's traceback (in its "
            f"worker):\n{remote_traceback}")
        self.exc_type = exc_type
        self.exc_message = exc_message
        self.remote_traceback = remote_traceback
        self.qualified_type = qualified_type or exc_type

    def __reduce__(self):  # picklable: a task may raise or return one
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


def _text(message):
    if isinstance(message, bytes):
        return message.decode("utf-8", "replace")
    return message


def from_status(code, message):
    """The exception for a status (code as absl::StatusCode's number).

    Unavailable whose message starts "actor " is the node saying an actor
    ended (coordinator/actors.cc, tasks' Submit): ActorDiedError."""
    message = _text(message)
    if code == 14 and message.startswith("actor "):
        return ActorDiedError(message)
    return _BY_CODE.get(code, UnknownError)(message)


def task_failure(code, message, exception=None):
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


def _unpickled_exception(data):
    """The exception a worker pickled, or None if it does not load here (a
    module this process lacks, ...)."""
    import pickle
    try:
        exc = pickle.loads(data)
    except Exception:  # noqa: BLE001 (whatever its __reduce__ raises)
        return None
    return exc if isinstance(exc, BaseException) else None
