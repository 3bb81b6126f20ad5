"""@shoal.remote: functions and classes made remote, Ray's way.

    @shoal.remote
    def square(x):
        return x * x

    square.remote(3).result()                       # 9, on a worker
    square.options(num_cpus=2, timeout=5).remote(3)
    square(3)                                       # 9, here (it warns once)

Calling a remote function directly runs it here, in this process, as the
plain function, and warns the first time (Ray raises instead): the decorated name stays a function, so
other code and the worker, which imports it by name, can call it. A class
becomes an actor class (shoal._actor). shoal.submit(f, ...) keeps working.
"""

import functools
import inspect
import warnings
import weakref
from typing import (Any, Callable, Generic, Mapping, Optional, ParamSpec,
                    Protocol, TypeVar, Union, overload)

from . import _actor, _context, _ext, _future, _naming, _retry, _stream

# Ray's option names → Client.submit's.
_FUNCTION_OPTIONS = {"num_cpus": "cpus", "num_gpus": "gpus",
                     "max_retries": "max_retries", "timeout": "timeout"}


# Options of the call itself (not of Client.submit): see RemoteFunction.
_CALL_OPTIONS = ("retry_exceptions", "num_returns")
# max_retries when retry_exceptions is on and max_retries is not given
# (Ray's default).
DEFAULT_EXCEPTION_RETRIES = 3

_P = ParamSpec("_P")
_R = TypeVar("_R")
_C = TypeVar("_C", bound=type)


def _check_options(options: Mapping[str, Any]) -> dict[str, Any]:
    checked = _actor.check_options(
        options, tuple(_FUNCTION_OPTIONS) + _CALL_OPTIONS,
        ("num_cpus", "num_gpus", "max_retries"),
        lambda bad: f"unknown option(s) {bad} for a remote function; "
        f"options are {', '.join(tuple(_FUNCTION_OPTIONS) + _CALL_OPTIONS)}")
    t = checked.get("timeout")
    if t is not None and (not isinstance(t, (int, float)) or t < 0):
        raise ValueError(f"timeout must be seconds >= 0 or None, got {t!r}")
    given = checked.get("retry_exceptions")
    if given is not None and given is not True and given is not False:
        try:
            r = tuple(given)
        except TypeError:
            r = None
        if not r or not all(isinstance(c, type) and
                            issubclass(c, BaseException) for c in r):
            raise ValueError("retry_exceptions must be True, False or a list "
                             f"of exception classes, got {given!r}")
        checked["retry_exceptions"] = r
    n = checked.get("num_returns")
    if n is not None and n != "streaming" and (
            not isinstance(n, int) or isinstance(n, bool) or n < 1):
        raise ValueError(f"num_returns must be an int >= 1 or 'streaming', "
                         f"got {n!r}")
    return checked


class RemoteFunction(Generic[_P, _R]):
    """A function made remote: f.remote(*args, **kwargs) → Future.

    `RemoteFunction[P, R]` is made of a function taking P and returning R:
    calling it directly takes P and returns R; .remote takes any arguments
    (a Future where the function takes its value) and returns the task's
    Future (a list of them for num_returns > 1, a StreamingFutures for a
    generator function or num_returns="streaming", hence typed Any).
    """

    def __init__(self, fn: Callable[_P, _R],
                 options: Mapping[str, Any]) -> None:
        self._fn = fn
        self._options = _check_options(options)
        self._submit_options = {_FUNCTION_OPTIONS[k]: v
                                for k, v in self._options.items()
                                if v is not None and k in _FUNCTION_OPTIONS}
        # What a worker runs: see _task_name.
        self._name: Union[None, str, Callable[..., Any]] = None
        # The retry_exceptions wrapper, made once.
        self._retrying: Optional[Callable[..., Any]] = None
        n = self._options.get("num_returns")
        if n is None and inspect.isgeneratorfunction(fn):
            n = "streaming"  # (Ray's default for generator functions)
        self._num_returns: Union[int, str] = 1 if n is None else n
        functools.update_wrapper(self, fn)

    def __call__(self, *args: _P.args, **kwargs: _P.kwargs) -> _R:
        """Runs the function here (not on a worker); outside a worker, the
        first direct call of each function warns that it did."""
        if not self._warned and not _ext.IN_WORKER:
            RemoteFunction._warned_about.add(self._fn)
            warnings.warn(
                f"{self._fn.__module__}.{self._fn.__qualname__}() was called "
                "directly: it ran here, in this process, not on a worker; "
                f"use {self._fn.__name__}.remote(...) to run it as a task",
                RuntimeWarning, stacklevel=2)
        return self._fn(*args, **kwargs)

    _warned_about: "weakref.WeakSet[Any]" = weakref.WeakSet()

    @property
    def _warned(self) -> bool:
        try:
            return self._fn in RemoteFunction._warned_about
        except TypeError:
            return True

    def remote(self, *args: Any, **kwargs: Any) -> Any:
        """Queues the function on the node (connecting the default client if
        needed); returns its Future (a list of num_returns futures for
        num_returns > 1; a StreamingFutures for a generator function or
        num_returns="streaming"). Arguments as Client.submit takes them;
        raises InvalidArgumentError for one that cannot be pickled."""
        if self._name is None:
            self._name = _task_name(self)
        client = _context.client()
        if self._num_returns == "streaming":
            return _stream.StreamingFutures(
                client, self._target(), args, kwargs, self._submit_options,
                lambda fn, a, k, o: _actor.submit(client, fn, a, k, o))
        fn = self._name
        if self._options.get("retry_exceptions"):
            fn = self._retrying_call()
        f = _actor.submit(client, fn, args, kwargs, self._submit_options)
        if self._num_returns == 1:
            return f
        assert isinstance(self._num_returns, int)
        return _future.split(f, self._num_returns)

    def _target(self) -> Union[str, Callable[..., Any]]:
        """What a wrapper running in the worker calls (_retry.resolve): the
        task name when the worker imports the function by name, else the
        function (by value)."""
        return self._name if isinstance(self._name, str) else self._fn

    def _retrying_call(self) -> Callable[..., Any]:
        """retry_exceptions: the task runs _retry.call around the function,
        up to max_retries more times on the same worker (the partial is made
        once, so it is pickled once per client)."""
        if self._retrying is None:
            retries = self._options.get("max_retries")
            self._retrying = functools.partial(
                _retry.call, self._target(),
                DEFAULT_EXCEPTION_RETRIES if retries is None else retries,
                self._options["retry_exceptions"])
        return self._retrying

    def options(self, **options: Any) -> "RemoteFunction[_P, _R]":
        """The same function with these options (num_cpus, num_gpus,
        max_retries, timeout in seconds, retry_exceptions, num_returns).
        Raises ValueError for an unknown option or a value out of range."""
        merged = dict(self._options)
        merged.update(_check_options(options))
        return RemoteFunction(self._fn, merged)

    def __get__(self, obj: Any, objtype: Any = None) -> Any:
        # As a class attribute it stays a plain function for instances.
        if obj is None:
            return self
        return functools.partial(self._fn, obj)

    def __repr__(self) -> str:
        return f"<shoal remote function {self._fn.__qualname__}>"


def _task_name(rf: RemoteFunction[Any, Any]
               ) -> Union[str, Callable[..., Any]]:
    """"py:module:qualname" when that name, imported in a worker, is this
    RemoteFunction (whose __call__ runs the function there); else the plain
    function, which the client sends by value. A remote function of the
    driver's script (__main__) goes by value (_naming.python_name)."""
    fn = rf._fn
    name = _naming.python_name(
        fn.__module__, fn.__qualname__,
        lambda obj: isinstance(obj, RemoteFunction) and obj._fn is fn,
        main_by_name=False)
    return fn if name is None else name


class _Decorator(Protocol):
    """What @shoal.remote(option=...) returns: the decorator proper."""

    @overload
    def __call__(self, obj: _C, /) -> _actor.ActorClass: ...
    @overload
    def __call__(self, obj: Callable[_P, _R], /) -> RemoteFunction[_P, _R]: ...


@overload
def remote(obj: _C, /) -> _actor.ActorClass: ...
@overload
def remote(obj: Callable[_P, _R], /) -> RemoteFunction[_P, _R]: ...
@overload
def remote(**options: Any) -> _Decorator: ...


def remote(*args: Any, **options: Any) -> Any:
    """@shoal.remote, or @shoal.remote(num_cpus=..., ...): a function
    becomes a RemoteFunction, a class an actor class (ActorClass).

    Options of a function: num_cpus, num_gpus, max_retries, timeout
    (seconds), retry_exceptions, num_returns; of a class: num_cpus,
    num_gpus, max_restarts, lifetime="detached", name. Raises TypeError
    when given anything but one callable or keyword options, ValueError
    for an unknown option or a value out of range."""
    if args:
        if len(args) != 1 or options or not callable(args[0]):
            raise TypeError("use @shoal.remote or @shoal.remote(option=...)")
        return _make(args[0], {})
    return lambda obj: _make(obj, options)


def _make(obj: Any, options: Mapping[str, Any]
          ) -> Union[_actor.ActorClass, RemoteFunction[Any, Any]]:
    if isinstance(obj, type):
        return _actor.ActorClass(obj, options)
    return RemoteFunction(obj, options)
