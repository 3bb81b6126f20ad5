"""shoal.Future, a concurrent.futures.Future for a task, and its completion
from a row of the task table (_finish). _client.Client submits tasks and
collects their rows; a Future asks its client to wait (_await_one), to
watch it (callbacks, waiters) and to cancel it."""

import concurrent.futures
import pickle
import threading
from typing import (TYPE_CHECKING, Any, Callable, Generator, Optional,
                    Sequence, TypeVar)

from . import _errors, _serialize

if TYPE_CHECKING:
    from ._client import Client

_T = TypeVar("_T")
_CANCELLED_CODE = 1  # absl::StatusCode::kCancelled


# The base class's private protocol. concurrent.futures.wait and
# as_completed accept any concurrent.futures.Future, and they read its
# `_state`, take its `_condition` and append their waiter to its `_waiters`
# (Lib/concurrent/futures/_base.py); the base class's own cancel,
# add_done_callback, result and set_running_or_notify_cancel use the same
# attributes and `_done_callbacks` / `_invoke_callbacks`. A shoal future
# must learn that someone waits for it (its client delivers completions
# only of futures someone waits for or has callbacks on), and no public
# method tells it; nor does the public interface let it put off making the
# Condition the base class's __init__ makes (see Future's class comment).
# So Future keeps these attributes itself (the Condition and lists made on
# first use), with the base class's state values. Those are read here off
# a plain concurrent.futures.Future driven through its public methods, not
# taken from the private module concurrent.futures._base; test_typing.py's
# test_the_base_class_protocol fails on a Python where any of this changed.
def _base_states() -> tuple[str, str, str, str, str]:
    """The base class's PENDING, RUNNING, FINISHED, CANCELLED and
    CANCELLED_AND_NOTIFIED, in that order."""
    f: concurrent.futures.Future[None] = concurrent.futures.Future()
    pending = f._state  # type: ignore[attr-defined]
    f.set_running_or_notify_cancel()
    running = f._state  # type: ignore[attr-defined]
    f.set_result(None)
    finished = f._state  # type: ignore[attr-defined]
    g: concurrent.futures.Future[None] = concurrent.futures.Future()
    g.cancel()
    cancelled = g._state  # type: ignore[attr-defined]
    g.set_running_or_notify_cancel()
    notified = g._state  # type: ignore[attr-defined]
    return pending, running, finished, cancelled, notified


(_PENDING, _RUNNING, _FINISHED, _CANCELLED,
 _CANCELLED_AND_NOTIFIED) = _base_states()
_CANCELLED_STATES = (_CANCELLED, _CANCELLED_AND_NOTIFIED)
_DONE_STATES = frozenset([_CANCELLED, _CANCELLED_AND_NOTIFIED, _FINISHED])
_LAZY_LOCK = threading.Lock()  # Future's Condition and lists, made lazily


class _WaiterList(list[Any]):
    """Future._waiters: concurrent.futures.wait / as_completed append their
    waiter here; that is the moment the client must start delivering this
    future's completion without anyone calling result()."""

    __slots__ = ("_future",)

    def __init__(self, future: "Future[Any]") -> None:
        super().__init__()
        self._future = future

    def append(self, waiter: Any) -> None:
        super().append(waiter)
        self._future._watch()


class Future(concurrent.futures.Future[_T]):
    """The result of a submitted task: a concurrent.futures.Future.

    result(timeout) waits (Ctrl-C interrupts the wait) and returns the
    task's value: None, one value, or a tuple for several; arrays come back
    as read-only numpy arrays (store objects are not copied). A failed task
    raises its own exception when it could be pickled (its __cause__ a
    TaskError with the worker's traceback), else TaskError;
    AbortedError when its worker died and no retries were left,
    TimeoutError for a task timeout, CancelledError after cancel().

    concurrent.futures.wait / as_completed, add_done_callback and
    `await future` (asyncio) work: the client's completion thread delivers
    completions of futures that have callbacks or waiters.

    Futures come from Client.submit, shoal.submit and f.remote(); they are
    not made by hand. `Future[T]` is the future of a task whose function
    returns T.
    """

    # Most futures are submitted, then result()ed on the same thread: they
    # never need concurrent.futures' Condition, waiter list or callback list,
    # so those are made on first use (the properties below) rather than for
    # every task (making the Condition was the largest single cost of a
    # no-op task in a profile of the client). A
    # future completes through _settle, which notifies only when a Condition
    # exists; see _settle for why that cannot miss a waiter.
    _result: Any = None
    _exception: Optional[BaseException] = None
    _cond: Optional[threading.Condition] = None  # see _condition
    _waiter_list: Optional[_WaiterList] = None
    _callbacks: Optional[list[Callable[["Future[Any]"], object]]] = None
    # The task's outputs as the table gave them (store-backed arrays and
    # raw objects, inline values), kept for a task that takes this future
    # as an argument: it gets the same store objects
    # (_client.Client._submit_resolved).
    _outputs: Optional[Sequence[Any]] = None
    # cancel(force=True) was called: whatever the task ends with, the
    # future is cancelled (_finish).
    _forced = False

    def __init__(self, client: "Optional[Client]", task_id: Optional[int],
                 keep: Any) -> None:  # pylint: disable=super-init-not-called
        self._client: Any = client
        # The task's id; None while it waits for futures it depends on.
        self.id: Optional[int] = task_id
        self._keep = keep  # ObjectRefs of arguments put for this task
        self._state: str = _PENDING

    # (Class attributes and plain reads, not self.__dict__: CPython keeps an
    # instance's attributes without a dict until someone asks for one.)
    @property
    def _condition(self) -> threading.Condition:
        c = self._cond
        if c is None:
            with _LAZY_LOCK:  # two threads making it keep one
                if self._cond is None:
                    self._cond = threading.Condition()
                c = self._cond
        return c

    @property
    def _waiters(self) -> _WaiterList:
        w = self._waiter_list
        if w is None:
            with _LAZY_LOCK:
                if self._waiter_list is None:
                    self._waiter_list = _WaiterList(self)
                w = self._waiter_list
        return w

    @property
    def _done_callbacks(self) -> list[Callable[["Future[Any]"], object]]:
        c = self._callbacks
        if c is None:
            with _LAZY_LOCK:
                if self._callbacks is None:
                    self._callbacks = []
                c = self._callbacks
        return c

    def _settle(self, result: Any,
                exception: Optional[BaseException]) -> bool:
        """Completes a pending future (the one place that does, besides
        cancel). Returns whether _notify must follow (when a Condition
        exists: someone may wait or have a callback). The state is written
        before the Condition is looked for, and whoever registers a waiter
        or callback makes the Condition before it reads the state under it:
        so either this sees the Condition (and _notify tells them), or the
        registrant sees FINISHED (and does not wait)."""
        self._result = result
        self._exception = exception
        self._state = _FINISHED
        return self._cond is not None

    def _notify(self) -> None:
        """Tells waiters and runs callbacks of a future _settle completed
        (or _finish cancelled); called without the client's locks."""
        cond = self._condition
        with cond:
            if self._state == _FINISHED:
                for waiter in self._waiters:
                    if self._exception is None:
                        waiter.add_result(self)
                    else:
                        waiter.add_exception(self)
            cond.notify_all()
        self._invoke_callbacks()  # type: ignore[attr-defined]

    def _watch(self) -> None:
        if self.id is not None and self._state not in _DONE_STATES:
            self._client._watch(self)

    def done(self) -> bool:
        """Whether the task finished: succeeded, failed or was cancelled
        (does not wait)."""
        if self._state not in _DONE_STATES and self.id is not None:
            self._client._await_one(self, 0)
        return self._state in _DONE_STATES

    def cancelled(self) -> bool:
        """Whether the task was cancelled (cancel(), shoal.cancel)."""
        return self._state in _CANCELLED_STATES

    def running(self) -> bool:
        """Whether set_running_or_notify_cancel() marked it running (never
        for a submitted task: its state is pending until it finished)."""
        return self._state == _RUNNING

    def result(self, timeout: Optional[float] = None) -> _T:
        """The task's value; waits up to `timeout` seconds (None: forever).

        Raises shoal.TimeoutError (also a concurrent.futures.TimeoutError)
        if it has not finished by then (the task keeps running; call
        result() again later); shoal.CancelledError if it was cancelled;
        else what the task raised.
        """
        if self._state != _FINISHED:
            self._await(timeout)
            if self._state in _CANCELLED_STATES:
                raise _errors.CancelledError(self._cancelled_message())
        if self._exception is not None:
            return super().result(0)  # raises it (and breaks the cycle)
        return self._result

    def exception(self, timeout: Optional[float] = None
                  ) -> Optional[BaseException]:
        """The task's exception, or None if it succeeded; waits up to
        `timeout` seconds (None: forever) as result() does, and raises
        shoal.TimeoutError if it has not finished by then. A cancelled
        task's is a shoal.CancelledError (returned, not raised)."""
        self._await(timeout)
        if self._state in _CANCELLED_STATES:
            return _errors.CancelledError(self._cancelled_message())
        return self._exception

    def _cancelled_message(self) -> str:
        if self._forced:
            return (f"task {self.id} was cancelled (force=True: interrupted, "
                    "or its worker stopped after the grace period)")
        return f"task {self.id} was cancelled"

    def _await(self, timeout: Optional[float]) -> None:
        if self._state not in _DONE_STATES:
            self._client._await_one(self, timeout)
            if self._state not in _DONE_STATES:
                raise _errors.TimeoutError(
                    f"task {self.id} did not finish within {timeout} s")

    def add_done_callback(
            self, fn: "Callable[[Future[_T]], object]") -> None:
        """Calls fn(future) when the task finished (at once if it has), on
        the thread that noticed: the client's completion thread, or one
        waiting in result()."""
        self._watch()
        super().add_done_callback(fn)  # type: ignore[arg-type]

    def cancel(self, force: bool = False) -> bool:
        """Cancels the task: a queued one never runs; a running one sees
        shoal.task.cancelled(). True if it had not finished yet.

        force=True also stops a running task that never looks: see
        shoal.cancel."""
        if self._state in _DONE_STATES:
            return False
        if self.id is None:  # not submitted yet: it never will be
            return super().cancel()
        if not self._client._handle.cancel(self.id):
            return False
        if force:
            self._forced = True
            self._client._force_cancel(self.id)
        return True

    def __await__(self) -> Generator[Any, None, _T]:
        import asyncio
        return asyncio.wrap_future(self).__await__()

    def __del__(self) -> None:
        if self.id is not None and self._state == _PENDING and \
                self._client is not None:
            self._client._forget(self.id)

    def __reduce__(self) -> tuple[Callable[[Any], Any], tuple[Any]]:
        """A Future inside a task's argument (a list, dict, object): its
        value once it succeeded; else NestedFuture, and the client submits
        the task when it finished (Client._submit_call)."""
        if self._state == _FINISHED and self._exception is None:
            return _identity, (self._result,)
        raise NestedFuture(f"task {self.id} has not finished")

    def __repr__(self) -> str:
        state = "pending" if self._state not in _DONE_STATES else (
            "cancelled" if self._state in _CANCELLED_STATES else
            "failed" if self._exception is not None else "done")
        return f"<shoal.Future task {self.id} {state}>"


class ItemFuture(Future[Any]):
    """One of the futures of a task submitted with num_returns=k: item
    `index` of the task's value (a sequence of k items). It completes when
    the task does; cancel() cancels the task."""

    _lock = threading.Lock()

    def __init__(self, parent: Future[Any], index: int,
                 count: int) -> None:  # pylint: disable=super-init-not-called
        Future.__init__(self, parent._client, None, None)
        self._parent = parent
        self._index = index
        self._count = count

    def _pull(self, timeout: Optional[float]) -> None:
        """Takes the item once the task finished (waits up to `timeout`)."""
        if self._state in _DONE_STATES:
            return
        self._parent._await(timeout)  # TimeoutError while it runs
        p = self._parent
        with ItemFuture._lock:
            if self._state in _DONE_STATES:
                return
            if p._state in _CANCELLED_STATES:
                self._state = _CANCELLED
                self._forced = p._forced
                notify = True
            elif p._exception is not None:
                notify = self._settle(None, p._exception)
            else:
                value = p._result
                try:
                    n = len(value)
                except TypeError:
                    n = None
                if n != self._count:
                    notify = self._settle(None, _errors.InvalidArgumentError(
                        f"task {p.id} was submitted with "
                        f"num_returns={self._count} but returned "
                        f"{type(value).__name__} of length {n}"))
                else:
                    notify = self._settle(value[self._index], None)
        if notify or self._cond is not None:
            self._notify()

    def _await(self, timeout: Optional[float]) -> None:
        self._pull(timeout)

    def done(self) -> bool:
        if self._state not in _DONE_STATES and self._parent.done():
            self._pull(0)
        return self._state in _DONE_STATES

    def _watch(self) -> None:
        if self._state not in _DONE_STATES:
            self._parent.add_done_callback(lambda _: self._pull(0))

    def cancel(self, force: bool = False) -> bool:
        return self._parent.cancel(force)

    def __del__(self) -> None:
        pass

    def __repr__(self) -> str:
        return (f"<shoal.Future item {self._index} of task {self._parent.id} "
                f"{'done' if self.done() else 'pending'}>")


def split(parent: Future[Any], count: int) -> list[Future[Any]]:
    """num_returns=count: the `count` futures of `parent`'s items."""
    return [ItemFuture(parent, i, count) for i in range(count)]


def finished(client: "Optional[Client]", value: Any = None,
             error: Optional[BaseException] = None) -> Future[Any]:
    """A Future that has finished already (a streamed item)."""
    f: Future[Any] = Future(client, None, None)
    f._settle(value, error)
    return f


class NestedFuture(Exception):
    """Pickling met a Future that has not succeeded (Future.__reduce__)."""


def _identity(value: Any) -> Any:
    return value


class ValueByReference:
    """A finished task's value in a call to another task (a future passed
    as an argument), pickled as the task's outputs: the store objects among
    them as out-of-band buffers (the call's task values then name those
    same objects, which the worker views in place), inline ones by value.
    The worker rebuilds the value with _value_of_outputs, as result() does
    here. `stored`: per output, its ObjectRef or None (inline)."""

    __slots__ = ("outputs", "stored")

    def __init__(self, outputs: Sequence[Any],
                 stored: Sequence[Any]) -> None:
        self.outputs = outputs
        self.stored = stored

    def __reduce__(self) -> tuple[Callable[..., Any], tuple[Any, ...]]:
        parts = tuple(
            pickle.PickleBuffer(o) if r is not None else
            bytes(o) if type(o) is memoryview else o
            for o, r in zip(self.outputs, self.stored))
        return _value_of_outputs, (
            _serialize.is_result_envelope(self.outputs), parts)


def _value_of_outputs(envelope: bool, parts: Sequence[Any]) -> Any:
    """A task's value from its outputs (ValueByReference, in the worker):
    a result envelope's pickle and buffers, else one value or a tuple."""
    if envelope:
        header = parts[0]
        if not isinstance(header, memoryview):
            header = memoryview(header)  # inline: its bytes
        return _serialize.load_result([header] + list(parts[1:]))
    return parts[0] if len(parts) == 1 else tuple(parts)


def _finished(f: Future[Any]) -> bool:
    return f._state in _DONE_STATES


def _finish(f: Future[Any], row: Sequence[Any]) -> Optional[Future[Any]]:
    """Completes future `f` with a row of ClientHandle.wait; returns `f` when
    its waiters and callbacks are to be told (f._notify(), once the caller
    let go of the table), else None. Called by the thread that took the
    row, while it holds the wait lock: no other thread can take it again."""
    _task_id, code, message, outputs, _attempts, exception = row
    f._keep = None
    if f._state != _PENDING:
        return None
    if code == _CANCELLED_CODE or (code != 0 and f._forced):
        f._state = _CANCELLED
        return f if f._cond is not None else None
    if code == 0 and not outputs:  # the commonest: a None result
        f._state = _FINISHED  # (_settle's order: state, then the Condition)
        return f if f._cond is not None else None
    if code != 0:
        if b"py:" in message:
            message = f._client.readable_message(
                message.decode("utf-8", "replace"))
        value, error = None, _errors.task_failure(code, message, exception)
    else:
        f._outputs = outputs
        try:
            if len(outputs) == 1 and type(outputs[0]) is not memoryview:
                value, error = outputs[0], None  # the commonest value
            elif _serialize.is_result_envelope(outputs):
                value, error = _serialize.load_result(outputs), None
            else:
                value = outputs[0] if len(outputs) == 1 else tuple(outputs)
                error = None
        except Exception as e:  # noqa: BLE001 (a class this process lacks)
            value, error = None, _errors.TaskError(
                type(e).__name__, f"unpickling the task's result: {e}", "",
                f"{type(e).__module__}.{type(e).__qualname__}")
    return f if f._settle(value, error) else None
