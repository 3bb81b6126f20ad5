"""A task's exception comes back as its own class, as Ray users catch it:
a class of the driver's script (the same class object, whether the task
went by name or by value), a ValueError subclass of a module, with its
attributes and the worker's traceback; an unpicklable return value's
message names the task's function and line once, with the worker's
traceback."""

import os
import subprocess
import sys
import textwrap

import pytest

import raytasks
import shoal

HERE = os.path.dirname(os.path.abspath(__file__))


def run_script(node, body, tmp_path):
    script = tmp_path / "driver.py"
    script.write_text(textwrap.dedent(body))
    env = dict(os.environ, SHOAL_JOB_ID=node.job_id)
    p = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, f"--- stdout\n{p.stdout}\n--- stderr\n{p.stderr}"
    return p.stdout


def test_exceptions_of_the_script_are_caught_by_their_class(node, tmp_path):
    out = run_script(node, """
        import shoal

        class MyError(Exception):
            def __init__(self, message, code):
                super().__init__(message)
                self.code = code

        def boom(code):                  # imported by name by the worker
            raise MyError("boom", code)

        if __name__ == "__main__":
            class Inner(RuntimeError):   # exists only in the driver
                pass

            def inner():                 # so it goes by value
                raise Inner("inner")

            c = shoal.connect()
            for submit in (lambda: c.submit(boom, 7),
                           lambda: c.submit(lambda: boom(8))):
                try:
                    submit().result(60)
                    raise AssertionError("no exception")
                except MyError as e:
                    assert type(e) is MyError, type(e)
                    assert e.code in (7, 8) and e.args == ("boom",), e.args
                    tb = e.__cause__.remote_traceback
                    assert "line 10, in boom" in tb, tb
            try:
                c.submit(inner).result(60)
            except Inner as e:
                assert type(e) is Inner and str(e) == "inner"
                assert "in inner" in e.__cause__.remote_traceback
            print("ok")
    """, tmp_path)
    assert out.strip() == "ok"


def test_value_error_subclass_of_a_module(client):
    with pytest.raises(ValueError, match="bad age") as info:
        client.submit(raytasks.reject, "age").result(30)
    assert type(info.value) is raytasks.BadInput
    assert info.value.field == "age"
    cause = info.value.__cause__
    assert isinstance(cause, shoal.TaskError)
    assert cause.qualified_type == "raytasks.BadInput"
    assert "in reject" in cause.remote_traceback
    # Caught by its own class too, from a task sent by value.
    with pytest.raises(raytasks.BadInput):
        client.submit(lambda: raytasks.reject("name")).result(30)


def test_unpicklable_return_value_names_the_function_once(client):
    with pytest.raises(shoal.InvalidArgumentError) as info:
        client.submit(raytasks.return_lock).result(30)
    text = str(info.value)
    assert text.startswith("task raytasks.return_lock ("), text
    line = raytasks.return_lock.__code__.co_firstlineno
    assert f"raytasks.py, line {line})" in text, text
    assert "its return value (a dict) cannot be pickled" in text, text
    assert "cannot pickle '_thread.lock' object" in text, text
    assert "The worker's traceback:\nTraceback (most recent call last)" \
        in text, text
    assert "InvalidArgumentError" not in text, text
    assert "\nAt:\n" not in text, text
    # A lambda: named by its qualified name.
    with pytest.raises(shoal.InvalidArgumentError,
                       match=r"^task test_ray_exceptions\."
                             r"test_unpicklable_return_value_names_the_"
                             r"function_once\.<locals>\.<lambda> \("):
        client.submit(lambda: raytasks.return_lock()).result(30)
