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

The node makes the actor (coordinator/actors.cc): a worker process of its own
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
import sys

from . import _context, _errors, _ext

try:
    import cloudpickle
except ImportError:  # the class must then be importable by name
    cloudpickle = None

_INIT_FUNCTION = "py:shoal._actor:_init"
_CALL_FUNCTION = "py:shoal._actor:_call"
_ACTOR_OPTIONS = ("num_cpus", "num_gpus", "max_restarts", "lifetime", "name")


def check_options(options, allowed, counts, unknown):
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


def _check_options(options):
    checked = check_options(
        options, _ACTOR_OPTIONS, ("num_cpus", "num_gpus", "max_restarts"),
        lambda bad: f"unknown actor option(s) {bad}; options are "
        f"{', '.join(_ACTOR_OPTIONS)}")
    lifetime = checked.get("lifetime")
    if lifetime not in (None, "detached", "owned"):
        raise ValueError(f"lifetime must be None, 'owned' or 'detached', "
                         f"got {lifetime!r}")
    return checked


class ActorClass:
    """A class made remote: A.remote(*args) makes an actor."""

    def __init__(self, cls, options):
        self._cls = cls
        self._options = _check_options(options)
        self.__name__ = cls.__name__
        self.__qualname__ = cls.__qualname__
        self.__module__ = cls.__module__
        self.__doc__ = cls.__doc__

    def options(self, **options):
        """The same class with these options (num_cpus, num_gpus,
        max_restarts, lifetime="detached", name)."""
        merged = dict(self._options)
        merged.update(_check_options(options))
        return ActorClass(self._cls, merged)

    def remote(self, *args, **kwargs):
        """Makes the actor: one instance of the class in a worker process of
        its own. Returns its ActorHandle at once; a constructor that raises
        ends the actor (its calls fail with ActorDiedError)."""
        return _create(self._cls, args, kwargs, self._options,
                       _context.client())

    def __call__(self, *args, **kwargs):
        raise TypeError(
            f"actor class {self.__qualname__} cannot be instantiated "
            f"directly: use {self.__qualname__}.remote(...)")

    def __repr__(self):
        return f"<shoal actor class {self.__module__}.{self.__qualname__}>"


class ActorHandle:
    """An actor: handle.method.remote(*args) queues a call (a Future)."""

    def __init__(self, client, control, actor_id, worker_id, cls):
        self._client = client
        self._control = control
        self.actor_id = actor_id
        self.worker_id = worker_id
        self._cls = cls
        self._call = f"{_CALL_FUNCTION}@actor={actor_id}"

    def __getattr__(self, name):
        if name.startswith("_"):
            raise AttributeError(name)
        if not callable(getattr(self._cls, name, None)):
            raise AttributeError(
                f"actor class {self._cls.__qualname__} has no method {name!r}")
        method = ActorMethod(self, name)
        self.__dict__[name] = method  # cached: the next call skips this
        return method

    def __repr__(self):
        return (f"<shoal actor {self.actor_id} "
                f"({self._cls.__qualname__}) on worker {self.worker_id}>")


class ActorMethod:
    """handle.method: .remote(*args) queues a call on the actor."""

    __slots__ = ("_handle", "_name")

    def __init__(self, handle, name):
        self._handle = handle
        self._name = name

    def remote(self, *args, **kwargs):
        h = self._handle
        return submit(h._client, h._call, (self._name,) + args, kwargs,
                      _CALL_OPTIONS)

    def __call__(self, *args, **kwargs):
        raise TypeError(f"actor methods are called with "
                        f".{self._name}.remote(...)")


# A call is not retried: the actor's state it ran on is gone with its process.
_CALL_OPTIONS = {"max_retries": 0}


def submit(client, fn, args, kwargs, options):
    """client._submit_call(fn, args, kwargs, options): the client's one way
    in (any picklable arguments, keyword arguments, futures)."""
    submit_call = getattr(client, "_submit_call", None)
    if submit_call is not None:
        return submit_call(fn, args, kwargs, options)
    if kwargs:  # a client without the pickled-argument path
        raise TypeError("keyword arguments need a newer shoal client; pass "
                        "them positionally")
    return client.submit(fn, *args, **options)


_CONTROLS = {}  # job id → ActorControl: one per node this process uses


def _control_for(client):
    control = _CONTROLS.get(client.job_id)
    if control is None:
        control = _ext.ext().ActorControl.connect("", client.job_id)
        _CONTROLS[client.job_id] = control
    return control


def _init_spec(cls, args, kwargs):
    """The constructor's class and arguments, pickled: a class importable by
    name goes by reference (the worker imports it), others by value."""
    module = sys.modules.get(cls.__module__)
    found = module
    for part in cls.__qualname__.split("."):
        found = getattr(found, part, None)
    if (cls.__module__ != "__main__" and isinstance(found, ActorClass)
            and found._cls is cls):
        what = ("ref", cls.__module__, cls.__qualname__)
    else:
        what = ("value", cls)
    dumps = cloudpickle.dumps if cloudpickle is not None else pickle.dumps
    try:
        return dumps((what, args, kwargs), protocol=5)
    except Exception as e:  # noqa: BLE001 (any pickling failure)
        raise _errors.InvalidArgumentError(
            f"the arguments of {cls.__qualname__}.remote() cannot be "
            f"pickled: {type(e).__name__}: {e}") from e


def _create(cls, args, kwargs, options, client):
    if getattr(client, "_gone", None) is not None:
        raise client._gone_error()  # its node went away
    control = _control_for(client)
    detached = options.get("lifetime") == "detached"
    actor_id, worker_id = control.create(
        _INIT_FUNCTION, _init_spec(cls, args, kwargs),
        client._python_path(), options.get("num_cpus") or 1,
        options.get("num_gpus") or 0, options.get("max_restarts") or 0,
        detached, options.get("name") or cls.__qualname__)
    return ActorHandle(client, control, actor_id, worker_id, cls)


def kill(actor):
    """Ends an actor at once: its process is killed; pending and later calls
    fail with ActorDiedError. No restart, whatever max_restarts says."""
    if not isinstance(actor, ActorHandle):
        raise TypeError(f"shoal.kill takes an actor handle, not {actor!r}")
    actor._control.kill(actor.actor_id)


# ---- inside the actor's worker ---------------------------------------------

_instance = None
_init_error = None  # why the constructor failed, for calls queued behind it


def _init(spec):
    """The constructor call (the coordinator queues it first at every start
    of the actor's process). `spec` is _init_spec's bytes, from the store."""
    global _instance, _init_error
    _instance = None
    _init_error = "its constructor did not run"
    what, args, kwargs = pickle.loads(spec)
    if what[0] == "ref":
        import importlib
        obj = importlib.import_module(what[1])
        for part in what[2].split("."):
            obj = getattr(obj, part)
        cls = obj._cls if isinstance(obj, ActorClass) else obj
    else:
        cls = what[1]
    try:
        _instance = cls(*args, **kwargs)
    except BaseException as e:
        _init_error = f"its constructor failed: {type(e).__name__}: {e}"
        raise
    _init_error = None


def _call(method, *args, **kwargs):
    """One method call on this worker's actor instance."""
    if _instance is None:
        # Calls queued behind a failed constructor, before the coordinator
        # ended the actor (it learns of the failure a moment later).
        raise _errors.ActorDiedError(f"actor: {_init_error}")
    return getattr(_instance, method)(*args, **kwargs)
