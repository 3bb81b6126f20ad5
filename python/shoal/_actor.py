"""Actors: @shoal.remote on a class (docs/actors.md).

    @shoal.remote
    class Counter:
        def __init__(self, start):
            self.n = start
        def add(self, k):
            self.n += k
            return self.n

    c = Counter.remote(10)            # one instance, in a worker of its own
    c.add.remote(1).result()          # 11: calls run in order, state stays
    shoal.kill(c)

The node makes the actor (coordinator/actor_directory.h): a worker process of its own
(its own interpreter; its GPUs, per num_gpus, through CUDA_VISIBLE_DEVICES),
and a queue of its own in the task table that only that process claims from.
A call is an ordinary task named "py:shoal._actor:_call@actor=<id>", so it
costs what a task costs (client → table → the actor's worker → client), and
calls run in the order they were submitted.

The constructor's class and arguments travel once, pickled, to the
coordinator, which keeps them in the store and runs `_init` on them first at
every (re)start of the actor's process.

Lifetime: an actor belongs to the process that made it and ends when that
process exits, when shoal.kill() ends it, when its constructor raises, or
when its process dies with no restarts left (max_restarts, default 0).
lifetime="detached" makes it outlive its creator (until killed or the node
stops). Calls pending when it ends, and calls made afterwards, fail with
shoal.ActorDiedError (later ones at .remote()); with restarts left, the call
running when the process died fails and queued ones run on the new instance.
"""

import pickle
import re
import sys
from typing import Any, Callable, Iterable, Mapping, NoReturn, Optional

from . import _context, _errors, _ext, _naming

try:
    import cloudpickle
except ImportError:  # the class must then be importable by name
    cloudpickle = None

_INIT_FUNCTION = _naming.by_module("shoal._actor", "_init")
_CALL_FUNCTION = _naming.by_module("shoal._actor", "_call")
_ACTOR_OPTIONS = ("num_cpus", "num_gpus", "max_restarts", "lifetime", "name")
# A named actor's name goes to the node with this prefix, which makes it
# unique among the node's live actors (coordinator/actor_directory.h); its worker's
# role in the node's status is then "actor <id> name:<name>".
_NAME_PREFIX = "name:"
_NAMED_ROLE = re.compile(r"actor (\d+) name:(.*)", re.S)
# The method name of get_actor's liveness check: a call that does nothing.
_PING = "__shoal_ping__"


def check_options(options: Mapping[str, Any], allowed: Iterable[str],
                  counts: Iterable[str],
                  unknown: Callable[[str], str]) -> dict[str, Any]:
    """The checks actors and remote functions share: only `allowed` keys
    (TypeError with unknown(their names) otherwise), each key of `counts`
    an int >= 0 or None, num_cpus at least 1. Returns a copy."""
    bad = set(options) - set(allowed)
    if bad:
        raise TypeError(unknown(", ".join(sorted(bad))))
    for key in counts:
        v = options.get(key)
        if v is not None and (not isinstance(v, int) or isinstance(v, bool)
                              or v < 0):
            raise ValueError(f"{key} must be an int >= 0, got {v!r}")
    if options.get("num_cpus") == 0:
        raise ValueError("num_cpus must be at least 1")
    return dict(options)


def _check_options(options: Mapping[str, Any]) -> dict[str, Any]:
    checked = check_options(
        options, _ACTOR_OPTIONS, ("num_cpus", "num_gpus", "max_restarts"),
        lambda bad: f"unknown actor option(s) {bad}; options are "
        f"{', '.join(_ACTOR_OPTIONS)}")
    name = checked.get("name")
    if name is not None and (not isinstance(name, str) or not name or
                             len(name.encode()) > 190):
        raise ValueError(f"name must be a str of 1-190 bytes, got {name!r}")
    lifetime = checked.get("lifetime")
    if lifetime not in (None, "detached", "owned"):
        raise ValueError(f"lifetime must be None, 'owned' or 'detached', "
                         f"got {lifetime!r}")
    return checked


class ActorClass:
    """A class made remote: A.remote(*args) makes an actor."""

    def __init__(self, cls: type, options: Mapping[str, Any]) -> None:
        self._cls = cls
        self._options = _check_options(options)
        self.__name__ = cls.__name__
        self.__qualname__ = cls.__qualname__
        self.__module__ = cls.__module__
        self.__doc__ = cls.__doc__

    def options(self, **options: Any) -> "ActorClass":
        """The same class with these options (num_cpus, num_gpus,
        max_restarts, lifetime="detached", name). Raises TypeError for an
        unknown option, ValueError for a value out of range."""
        merged = dict(self._options)
        merged.update(_check_options(options))
        return ActorClass(self._cls, merged)

    def remote(self, *args: Any, **kwargs: Any) -> "ActorHandle":
        """Makes the actor: one instance of the class in a worker process of
        its own. Returns its ActorHandle at once; a constructor that raises
        ends the actor (its calls fail with ActorDiedError). Raises
        InvalidArgumentError when the arguments cannot be pickled,
        AlreadyExistsError when a live actor has its name."""
        return _create(self._cls, args, kwargs, self._options,
                       _context.client())

    def __call__(self, *args: Any, **kwargs: Any) -> NoReturn:
        """Raises TypeError: an actor class is instantiated with .remote."""
        raise TypeError(
            f"actor class {self.__qualname__} cannot be instantiated "
            f"directly: use {self.__qualname__}.remote(...)")

    def __repr__(self) -> str:
        return f"<shoal actor class {self.__module__}.{self.__qualname__}>"


class ActorHandle:
    """An actor: handle.method.remote(*args) queues a call (a Future).

    A handle is a value: it pickles (into a task's or an actor's arguments,
    a result, shoal.put) and the copy calls the same actor, through the
    default client of the process it arrives in. It does not own the actor:
    the actor still ends with its creator (unless detached) or shoal.kill.
    """

    def __init__(self, client: Any, control: Any, actor_id: int,
                 worker_id: int, cls: Optional[type],
                 name: Optional[str] = None, methods: Any = None) -> None:
        self._client = client  # None: the default client, at the first call
        self._control = control  # None: made at kill
        self.actor_id = actor_id
        self.worker_id = worker_id
        self.name = name
        # What method names are checked against: the class (the creator's
        # handle and its copies), else the instance's method names, which
        # shoal.get_actor's ping asks the actor for (a tuple, or the ping's
        # Future until its answer is read; None: not checked).
        self._cls = cls
        self._methods = methods
        self._call = _naming.for_actor(_CALL_FUNCTION, actor_id)

    def _bound_client(self) -> Any:
        if self._client is None:
            self._client = _context.client()
        return self._client

    def __getattr__(self, name: str) -> "ActorMethod":
        """handle.method: the ActorMethod whose .remote queues a call.
        Raises AttributeError for a name the actor has no method of."""
        if name.startswith("_"):
            raise AttributeError(name)
        if self._cls is not None and not callable(
                getattr(self._cls, name, None)):
            raise AttributeError(
                f"actor class {self._cls.__qualname__} has no method {name!r}")
        methods = self._method_names()
        if methods is not None and name not in methods:
            raise AttributeError(
                f"actor {self.name or self.actor_id!r} has no method "
                f"{name!r} (its methods: {', '.join(methods) or 'none'})")
        method = ActorMethod(self, name)
        self.__dict__[name] = method  # cached: the next call skips this
        return method

    def _method_names(self) -> Optional[tuple[str, ...]]:
        """The actor's method names (a tuple), or None when not known: the
        ping's answer is read at the first method looked up (it waits for
        the calls queued before the ping); a ping that failed, or an actor
        whose worker does not answer with names, leaves calls unchecked
        (a call to an ended actor fails at .remote())."""
        methods = self._methods
        if methods is None or isinstance(methods, tuple):
            return methods
        try:
            names = methods.result()
        except _errors.Error:
            names = None
        self._methods = tuple(names) if isinstance(names, list) else None
        return self._methods

    def __reduce__(self) -> tuple[Callable[..., Any], tuple[Any, ...]]:
        methods = self._method_names() if self._cls is None else None
        return _handle, (self.actor_id, self.worker_id,
                         _class_spec(self._cls), self.name, methods)

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, ActorHandle) and
                other.actor_id == self.actor_id and
                other.worker_id == self.worker_id)

    def __hash__(self) -> int:
        return hash((self.actor_id, self.worker_id))

    def __repr__(self) -> str:
        what = self._cls.__qualname__ if self._cls is not None else \
            f"named {self.name!r}"
        return (f"<shoal actor {self.actor_id} ({what}) on worker "
                f"{self.worker_id}>")


def _handle(actor_id: int, worker_id: int, cls_spec: Any,
            name: Optional[str], methods: Any = None) -> ActorHandle:
    """An ActorHandle unpickled: bound to this process's default client at
    its first call (a worker connects then, as for any nested call)."""
    return ActorHandle(None, None, actor_id, worker_id, _class_of(cls_spec),
                       name, methods)


def get_actor(name: str) -> ActorHandle:
    """The handle of the live actor named `name` on the default client's
    node (made with A.options(name=name).remote()). Raises NotFoundError
    when no live actor has that name. The handle knows the actor's method
    names (from the answer to a ping queued here, read at its first method
    looked up): an unknown one raises AttributeError there."""
    client = _context.client()
    named = []
    for w in client.status()["workers"]:
        m = _NAMED_ROLE.fullmatch(w.get("role") or "")
        if m is None or w.get("state") == "stopped":
            continue
        if m.group(2) != name:
            named.append(m.group(2))
            continue
        handle = ActorHandle(client, None, int(m.group(1)), w["id"], None,
                             name)
        # The status lists a killed actor's process until it exited; a
        # call to an actor that ended fails at submit (ActorDiedError, or
        # NotFoundError once the node has forgotten it). The ping answers
        # with the instance's method names.
        try:
            handle._methods = submit(client, handle._call, (_PING,), None,
                                     _CALL_OPTIONS)
        except (_errors.ActorDiedError, _errors.NotFoundError):
            continue
        return handle
    raise _errors.NotFoundError(
        f"no live actor named {name!r} on node {client.job_id} (named "
        f"actors there: {', '.join(map(repr, sorted(named))) or 'none'})")


class ActorMethod:
    """handle.method: .remote(*args) queues a call on the actor."""

    __slots__ = ("_handle", "_name")

    def __init__(self, handle: ActorHandle, name: str) -> None:
        self._handle = handle
        self._name = name

    def remote(self, *args: Any, **kwargs: Any) -> Any:
        """Queues a call of the method on the actor; returns its Future.
        Raises ActorDiedError when the actor has ended."""
        h = self._handle
        return submit(h._client or h._bound_client(), h._call,
                      (self._name,) + args, kwargs, _CALL_OPTIONS)

    def __call__(self, *args: Any, **kwargs: Any) -> NoReturn:
        """Raises TypeError: a method is called with .remote."""
        raise TypeError(f"actor methods are called with "
                        f".{self._name}.remote(...)")


# A call is not retried: the actor's state it ran on is gone with its process.
_CALL_OPTIONS = {"max_retries": 0}


def submit(client: Any, fn: Any, args: Any, kwargs: Any,
           options: Mapping[str, Any]) -> Any:
    """client._submit_call(fn, args, kwargs, options): the client's one way
    in (any picklable arguments, keyword arguments, futures)."""
    submit_call = getattr(client, "_submit_call", None)
    if submit_call is not None:
        return submit_call(fn, args, kwargs, options)
    if kwargs:  # a client without the pickled-argument path
        raise TypeError("keyword arguments need a newer shoal client; pass "
                        "them positionally")
    return client.submit(fn, *args, **options)


# (Job id, whether through the frontend) → ActorControl: one per node and
# way in this process uses.
_CONTROLS: dict[tuple[str, bool], Any] = {}


def _control_for(client: Any) -> Any:
    """The ActorControl for `client`'s node: over shared memory's ipc socket
    for a local client, through the node's frontend (the client's endpoint)
    for a remote one."""
    key = (client.job_id, not client.local)
    control = _CONTROLS.get(key)
    if control is None:
        if client.local:
            control = _ext.ext().ActorControl.connect("", client.job_id)
        else:
            control = _ext.ext().ActorControl.connect(
                client._endpoint, client.job_id, force_remote=True)
        _CONTROLS[key] = control
    return control


def _class_spec(cls: Optional[type]) -> Optional[tuple[Any, ...]]:
    """How an actor's class travels: ("ref", module, qualname) when the
    worker can import its ActorClass by name, else ("value", cls) (the
    pickler sends the class by value); None for no class."""
    if cls is None:
        return None
    module = sys.modules.get(cls.__module__)
    found = module
    for part in cls.__qualname__.split("."):
        found = getattr(found, part, None)
    if (cls.__module__ != "__main__" and isinstance(found, ActorClass)
            and found._cls is cls):
        return ("ref", cls.__module__, cls.__qualname__)
    return ("value", cls)


def _class_of(spec: Optional[tuple[Any, ...]]) -> Any:
    """The class _class_spec described (imported for "ref")."""
    if spec is None:
        return None
    if spec[0] == "ref":
        import importlib
        obj = importlib.import_module(spec[1])
        for part in spec[2].split("."):
            obj = getattr(obj, part)
        return obj._cls if isinstance(obj, ActorClass) else obj
    return spec[1]


def _init_spec(cls: type, args: Any, kwargs: Any) -> bytes:
    """The constructor's class and arguments, pickled: a class importable by
    name goes by reference (the worker imports it), others by value."""
    dumps = cloudpickle.dumps if cloudpickle is not None else pickle.dumps
    try:
        return dumps((_class_spec(cls), args, kwargs), protocol=5)
    except Exception as e:  # noqa: BLE001 (any pickling failure)
        raise _errors.InvalidArgumentError(
            f"the arguments of {cls.__qualname__}.remote() cannot be "
            f"pickled: {type(e).__name__}: {e}") from e


def _create(cls: type, args: Any, kwargs: Any, options: Mapping[str, Any],
            client: Any) -> ActorHandle:
    if getattr(client, "_gone", None) is not None:
        raise client._gone_error()  # its node went away
    control = _control_for(client)
    detached = options.get("lifetime") == "detached"
    name = options.get("name")
    actor_id, worker_id = control.create(
        _INIT_FUNCTION, _init_spec(cls, args, kwargs),
        client._python_path(), options.get("num_cpus") or 1,
        options.get("num_gpus") or 0, options.get("max_restarts") or 0,
        detached, _NAME_PREFIX + name if name else cls.__qualname__)
    return ActorHandle(client, control, actor_id, worker_id, cls, name)


def kill(actor: ActorHandle) -> None:
    """Ends an actor at once: its process is killed; pending and later calls
    fail with ActorDiedError. No restart, whatever max_restarts says.
    Raises TypeError for anything but an ActorHandle."""
    if not isinstance(actor, ActorHandle):
        raise TypeError(f"shoal.kill takes an actor handle, not {actor!r}")
    if actor._control is None:
        actor._control = _control_for(actor._bound_client())
    actor._control.kill(actor.actor_id)


# ---- inside the actor's worker ---------------------------------------------

_instance: Any = None
# Why the constructor failed, for calls queued behind it.
_init_error: Optional[str] = None


def _init(spec: bytes) -> None:
    """The constructor call (the coordinator queues it first at every start
    of the actor's process). `spec` is _init_spec's bytes, from the store."""
    global _instance, _init_error
    _instance = None
    _init_error = "its constructor did not run"
    what, args, kwargs = pickle.loads(spec)
    cls = _class_of(what)
    try:
        _instance = cls(*args, **kwargs)
    except BaseException as e:
        _init_error = f"its constructor failed: {type(e).__name__}: {e}"
        raise
    _init_error = None


def _call(method: str, *args: Any, **kwargs: Any) -> Any:
    """One method call on this worker's actor instance."""
    if _instance is None:
        # Calls queued behind a failed constructor, before the coordinator
        # ended the actor (it learns of the failure a moment later).
        raise _errors.ActorDiedError(f"actor: {_init_error}")
    if method == _PING:
        return _method_names_of(type(_instance))
    return getattr(_instance, method)(*args, **kwargs)


def _method_names_of(cls: type) -> list[str]:
    """The names a handle may call on an instance of `cls`: its public
    callable attributes, as ActorHandle checks them against a class."""
    return sorted(n for n in dir(cls)
                  if not n.startswith("_") and callable(getattr(cls, n, None)))
