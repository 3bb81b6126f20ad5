"""The task-name rule (_naming.python_name): which functions a worker runs
by name ("py:module:qualname") and which go by value, for a plain function
and a @shoal.remote one, of a module and of the driver's script
(__main__), and the name limit (MAX_NAME_BYTES)."""

import os
import subprocess
import sys
import textwrap
import types

import shoal
import valtasks
from shoal import _naming, _remote


def test_module_functions_go_by_name():
    assert _naming.task_name(valtasks.square) == "py:valtasks:square"
    rf = shoal.remote(valtasks.square)
    # The module binds the plain function, not this RemoteFunction.
    assert _remote._task_name(rf) is valtasks.square


def test_a_remote_function_of_a_module_goes_by_name(monkeypatch):
    module = types.ModuleType("naming_probe")

    def double(x):
        return 2 * x
    double.__module__ = module.__name__
    double.__qualname__ = "double"
    module.double = shoal.remote(double)
    monkeypatch.setitem(sys.modules, module.__name__, module)
    assert _remote._task_name(module.double) == "py:naming_probe:double"
    # The plain function is not what the module binds: by value.
    assert _naming.task_name(double, by_value_ok=True) is None


def test_the_limit_is_one_constant(monkeypatch):
    """A name of MAX_NAME_BYTES goes by name, one byte more by value, for
    both kinds of function."""
    prefix = len("py::f")
    fits = "m" * (_naming.MAX_NAME_BYTES - prefix)
    for module_name, expected in ((fits, True), (fits + "m", False)):
        module = types.ModuleType(module_name)

        def f():
            return None
        f.__module__ = module_name
        f.__qualname__ = "f"
        module.f = f
        monkeypatch.setitem(sys.modules, module_name, module)
        name = _naming.task_name(f, by_value_ok=True)
        assert (name is not None) == expected, name
        if expected:
            assert len(name.encode()) == _naming.MAX_NAME_BYTES
        module.f = shoal.remote(f)
        name = _remote._task_name(module.f)
        assert isinstance(name, str) == expected, name


def test_main_plain_by_name_remote_by_value(node, tmp_path):
    """In the driver's script: a plain function bound on import goes by the
    script's module name, one defined under `if __name__ == "__main__":`
    by value, and a @shoal.remote function by value; all three run."""
    script = tmp_path / "driver.py"
    script.write_text(textwrap.dedent("""
        import shoal
        from shoal import _naming, _remote

        def plain(x):
            return x + 1

        @shoal.remote
        def remote_fn(x):
            return x + 2

        if __name__ == "__main__":
            def local(x):
                return x + 3

            assert _naming.task_name(plain) == "py:driver:plain"
            assert _naming.task_name(local, by_value_ok=True) is None
            assert _remote._task_name(remote_fn) is remote_fn._fn
            c = shoal.connect()
            assert c.submit(plain, 1).result(60) == 2
            assert c.submit(local, 1).result(60) == 4
            assert remote_fn.remote(1).result(60) == 3
            print("ok")
    """))
    env = dict(os.environ, SHOAL_JOB_ID=node.job_id)
    p = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, f"--- stdout\n{p.stdout}\n--- stderr\n{p.stderr}"
    assert p.stdout.strip() == "ok"
