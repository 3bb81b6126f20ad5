"""Task names and function naming for task submission.

A task's name says what runs it (ipc/task_name.h has the grammar and the
node's one parser; this module is the Python side's one writer):
"py:module:qualname" (a function a worker imports by name), "py:=<object
id>" and "py:#<hash>" (a function sent by value: in a store object, or
carried in the call), a C++ task's own name, each optionally followed by
"@actor=<id>" (a call to that actor) and then "!" (the call envelope: the
arguments are one pickle). Also here: the folders of sys.path a worker
needs to import the client's modules, and the fingerprint that tells when
a function sent by value was rebound. The rule for a Python task name
(python_name, MAX_NAME_BYTES) lives here only: used by _client.Client and
_remote.RemoteFunction."""

import ast
import os
import re
import site
import sys
import sysconfig
import types
import weakref

from . import _errors, _paths

# The prefix of every Python task name.
PYTHON_PREFIX = "py:"
# Between a function's name and the actor a call goes to.
ACTOR_MARKER = "@actor="
# At the end of a Python task name: the arguments are the call envelope.
ENVELOPE = "!"
# A Python task name inside a message (readable_message rewrites them).
NAME_IN_TEXT = re.compile(r"py:(?:[=#][0-9a-fA-F]+|[\w.]+:[\w.]+)!?")


def is_python(name: str) -> bool:
    """Whether task name `name` is run by a worker's Python runner."""
    return name.startswith(PYTHON_PREFIX)


def by_module(module: str, qualname: str) -> str:
    """"py:module:qualname": a function a worker imports by name."""
    return f"{PYTHON_PREFIX}{module}:{qualname}"


def stored(object_id: str) -> str:
    """The name of a function whose pickle is store object `object_id`."""
    return f"{PYTHON_PREFIX}={object_id}"


def carried(digest: str) -> str:
    """The name of a function whose pickle the call carries (`digest`: its
    blake2b-128 hex digest); used with the envelope only."""
    return f"{PYTHON_PREFIX}#{digest}"


def is_by_value(name: str) -> bool:
    """Whether `name` (without "!") names a function sent by value."""
    return name.startswith((PYTHON_PREFIX + "=", PYTHON_PREFIX + "#"))


def enveloped(name: str) -> str:
    """`name` marked as a call whose arguments are one pickle."""
    return name + ENVELOPE


def for_actor(name: str, actor_id: int) -> str:
    """`name` as a call to actor `actor_id`."""
    return f"{name}{ACTOR_MARKER}{actor_id}"



def _fingerprint(fn):
    """What rebinding would change: code, defaults, closure cells' values
    (by identity). A change inside an object the function refers to is not
    seen (as with Ray's remote functions, pickled once)."""
    f = getattr(fn, "__func__", fn)
    code = getattr(f, "__code__", None)
    cells = getattr(f, "__closure__", None) or ()
    try:
        values = tuple(id(c.cell_contents) for c in cells)
    except ValueError:  # an empty cell
        values = None
    return (id(code), id(getattr(f, "__defaults__", None)),
            id(getattr(f, "__kwdefaults__", None)), values,
            id(getattr(fn, "__self__", None)))


def _interpreter_dirs():
    """Folders of the base interpreter's standard library and site-packages."""
    dirs = set()
    for key in ("stdlib", "platstdlib"):
        p = sysconfig.get_paths().get(key)
        if p:
            dirs.add(os.path.realpath(p))
    try:
        for p in site.getsitepackages([sys.base_prefix]):
            dirs.add(os.path.realpath(p))
    except AttributeError:  # virtualenv's old site.py
        pass
    return dirs


_INTERPRETER_DIRS = None


def client_search_path():
    """The folders of sys.path a worker lacks, absolute, in order."""
    global _INTERPRETER_DIRS
    if _INTERPRETER_DIRS is None:
        _INTERPRETER_DIRS = _interpreter_dirs()
    out = []
    for p in sys.path:
        p = os.path.abspath(p or os.getcwd())
        real = os.path.realpath(p)
        if ":" in p or p in out:
            continue
        if p.endswith(".zip") and real.startswith(sys.base_prefix):
            continue
        if any(real == d or real.startswith(d + os.sep)
               for d in _INTERPRETER_DIRS):
            continue
        out.append(p)
    return out


_NAMES: "weakref.WeakKeyDictionary[object, str]" = \
    weakref.WeakKeyDictionary()


def task_name(fn, by_value_ok=False):
    """The task name of a function or name: "py:module:qualname" for Python
    functions a worker can import by name, C++ task names unchanged.

    For other callables (lambdas, closures, bound methods, callable objects,
    functions of `python -c` or an interactive session): None with
    `by_value_ok` (the caller sends them by value), else
    InvalidArgumentError."""
    if isinstance(fn, str):
        if is_python(fn) or ":" not in fn:
            return fn
        return PYTHON_PREFIX + fn
    try:
        name = _NAMES[fn]  # "" for a function that goes by value
    except (KeyError, TypeError):
        name = _importable_name(fn) or ""
        try:
            _NAMES[fn] = name
        except TypeError:
            pass
    if name or by_value_ok:
        return name or None
    raise _errors.InvalidArgumentError(
        f"{fn!r} cannot be imported by a worker by name")


# The longest task name, in bytes: the task table's name field
# (ipc/task_name.h kMaxTaskNameBytes).
MAX_NAME_BYTES = 95


def python_name(module, qualname, is_target, main_by_name):
    """The task rule for Python names: "py:module:qualname" when a worker
    that imports `module` and follows `qualname` finds an object
    `is_target` accepts, and the name fits MAX_NAME_BYTES; else None (the
    caller sends the function by value).

    `main_by_name` is for the driver's script (module "__main__"): True
    names it by the script's module name when `qualname` is bound on
    import (a plain function: the worker imports the script); False sends
    anything of __main__ by value (a @shoal.remote function, whose
    decorated name the worker would otherwise have to import the script
    for)."""
    if not module or not qualname or "<" in qualname:
        return None
    if module == "__main__" and not main_by_name:
        return None
    obj = sys.modules.get(module)
    for part in qualname.split("."):
        obj = getattr(obj, part, None)
    if not is_target(obj):
        return None  # shadowed, decorated or rebound: by value
    if module == "__main__":
        try:
            module = _paths.main_module_name()
        except _errors.InvalidArgumentError:
            return None  # python -c, interactive: by value
        names = _main_import_names()
        if names is not None and qualname.split(".")[0] not in names:
            return None  # bound only when run as a script: by value
    name = by_module(module, qualname)
    return name if len(name.encode()) <= MAX_NAME_BYTES else None


def _importable_name(fn):
    """"py:module:qualname" if a worker importing that name gets `fn`."""
    if not isinstance(fn, (types.FunctionType, types.BuiltinFunctionType)):
        return None
    return python_name(getattr(fn, "__module__", None),
                       getattr(fn, "__qualname__", None),
                       lambda obj: obj is fn, main_by_name=True)


_MAIN_NAMES = {}  # (path, mtime) → frozenset of names, or None


def _main_import_names():
    """The names the driver's script binds when a worker imports it by name:
    those of its top level, not those bound only under
    `if __name__ == "__main__":` (a function defined there exists only in
    the driver). None when the script cannot be read or parsed (every name
    is then taken as importable)."""
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    if not path:
        return None
    try:
        key = (path, os.stat(path).st_mtime_ns)
    except OSError:
        return None
    if key not in _MAIN_NAMES:
        try:
            with open(path, "rb") as f:
                tree = ast.parse(f.read(), path)
            _MAIN_NAMES[key] = frozenset(_bound_on_import(tree.body))
        except (OSError, SyntaxError, ValueError):
            _MAIN_NAMES[key] = None
    return _MAIN_NAMES[key]


def _runs_only_as_main(node):
    """Whether `node` is an `if` whose test reads __name__ (the script's
    `if __name__ == "__main__":` block)."""
    return isinstance(node, ast.If) and any(
        isinstance(n, ast.Name) and n.id == "__name__"
        for n in ast.walk(node.test))


def _bound_on_import(body):
    """Names a module's statements bind, descending into the blocks that
    run on import (if, try, with, for) but not into functions, classes or
    the `if __name__ ...` block."""
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef,
                             ast.ClassDef)):
            yield node.name
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            for a in node.names:
                yield (a.asname or a.name).split(".")[0]
        elif _runs_only_as_main(node):
            yield from _bound_on_import(node.orelse)
        else:
            for field, value in ast.iter_fields(node):
                if field in ("body", "orelse", "finalbody"):
                    yield from _bound_on_import(value)
                elif field == "handlers":
                    for h in value:
                        if h.name:
                            yield h.name
                        yield from _bound_on_import(h.body)
                else:
                    for v in value if isinstance(value, list) else [value]:
                        if isinstance(v, ast.AST):
                            yield from _stored_names(v)


def _stored_names(node):
    for n in ast.walk(node):
        if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store):
            yield n.id
