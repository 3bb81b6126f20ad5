"""A task's exception comes back as its own type with the worker's
traceback attached (a TaskError as __cause__), else as TaskError; values
that cannot be pickled fail clearly at submit (arguments) or as the task's
error (results), affecting nothing else."""

import pickle
import socket
import threading

import pytest

import shoal
import valtasks


def test_builtin_and_custom_types_come_back_as_themselves(client):
    with pytest.raises(ValueError, match="bad 3") as info:
        client.submit(valtasks.raise_value_error, 3).result(30)
    assert type(info.value) is ValueError
    cause = info.value.__cause__
    assert isinstance(cause, shoal.TaskError)
    assert cause.qualified_type == "builtins.ValueError"
    assert "in raise_value_error" in cause.remote_traceback
    assert "valtasks.py" in str(cause)

    with pytest.raises(valtasks.AppError, match="app failed") as info:
        client.submit(valtasks.raise_app_error).result(30)
    assert info.value.__cause__.exc_type == "valtasks.AppError"

    # From a lambda (a function sent by value) too.
    with pytest.raises(ZeroDivisionError) as info:
        client.submit(lambda: 1 / 0).result(30)
    assert "ZeroDivisionError" in info.value.__cause__.remote_traceback


def raise_holding_a_lock():
    e = RuntimeError("holds a lock")
    e.lock = threading.Lock()
    raise e


def test_exceptions_travel_with_their_attributes_or_become_task_errors(client):
    # Its __init__ wants two arguments: rebuilt from its args and attributes
    # without calling it.
    with pytest.raises(valtasks.NeedsTwoArgs) as info:
        client.submit(valtasks.raise_needs_two).result(30)
    assert info.value.args == ("first",) and info.value.b == "second"
    assert info.value.__cause__.exc_type == "valtasks.NeedsTwoArgs"
    # A class defined inside the function: by value.
    with pytest.raises(Exception, match="local failure") as info:
        client.submit(valtasks.raise_local_class).result(30)
    assert type(info.value).__name__ == "Local"
    assert "Local" in info.value.__cause__.exc_type
    # An attribute that cannot be pickled: a TaskError with the fields.
    with pytest.raises(shoal.TaskError) as info:
        client.submit(raise_holding_a_lock).result(30)
    assert info.value.exc_type == "RuntimeError"
    assert info.value.exc_message == "holds a lock"
    assert "in raise_holding_a_lock" in info.value.remote_traceback


def test_task_error_pickles():
    e = shoal.TaskError("ValueError", "msg", "Traceback ...\n",
                        "builtins.ValueError")
    back = pickle.loads(pickle.dumps(e))
    assert type(back) is shoal.TaskError and str(back) == str(e)
    assert (back.exc_type, back.exc_message, back.remote_traceback,
            back.qualified_type) == (e.exc_type, e.exc_message,
                                     e.remote_traceback, e.qualified_type)


def test_unpicklable_arguments_fail_at_submit_naming_them(client):
    lock = threading.Lock()
    with pytest.raises(shoal.InvalidArgumentError,
                       match=r"argument 1 .*a _thread\.lock cannot be pickled"):
        client.submit(valtasks.echo, 1, lock)
    with socket.socket() as s:
        with pytest.raises(shoal.InvalidArgumentError,
                           match=r"keyword argument 'conn' .*socket"):
            client.submit(valtasks.echo, 1, conn=s)
    gen = (i for i in range(3))
    with pytest.raises(shoal.InvalidArgumentError,
                       match=r"argument 0 .*generator"):
        client.submit(valtasks.echo, {"inner": [gen]})  # nested, still named
    assert client.submit(valtasks.echo, 5).result(30) == 5


def test_unpicklable_results_fail_that_task_only(client):
    good = [client.submit(valtasks.sleep_then, 0.2, i) for i in range(4)]
    with pytest.raises(shoal.InvalidArgumentError,
                       match=r"return value \(a generator\) cannot be pickled"):
        client.submit(valtasks.return_generator).result(30)
    with pytest.raises(shoal.InvalidArgumentError, match="dict.*lock"):
        client.submit(valtasks.return_lock).result(30)
    assert [f.result(30) for f in good] == [0, 1, 2, 3]
    assert client.submit(valtasks.echo, {"still": "fine"}).result(30) == \
        {"still": "fine"}
