"""Actor handles as values (passed to tasks and actors, returned, called
from there) in the parameter-server and actor-pool patterns, and named
actors (A.options(name=...), shoal.get_actor), against a real node."""

import os

import numpy as np
import pytest

import rayactors
import shoal


def unique(stem):
    return f"{stem}-{os.getpid()}-{os.urandom(3).hex()}"


def test_parameter_server(client):
    ps = rayactors.ParamServer.remote(4)
    steps = [rayactors.train_step.remote(ps, k) for k in range(1, 7)]
    assert sorted(f.result(120) for f in steps) == [1, 2, 3, 4, 5, 6]
    assert ps.count.remote().result(60) == 6
    np.testing.assert_array_equal(ps.pull.remote().result(60),
                                  np.full(4, 21.0))
    shoal.kill(ps)


def test_actor_pool_from_a_task_and_from_an_actor(client):
    pool = [rayactors.Adder.remote(100), rayactors.Adder.remote(200)]
    xs = list(range(6))
    want = [x + (100, 200)[i % 2] for i, x in enumerate(xs)]
    assert rayactors.use_pool.remote(pool, xs).result(120) == want
    d = rayactors.Dispatcher.remote(pool)
    assert d.run.remote(xs).result(120) == want
    # A handle passed to a method, and one returned by a task.
    third = rayactors.Adder.remote(300)
    assert d.add_actor.remote(third).result(60) == 3
    back = rayactors.echo.remote(third).result(60)
    assert back == third and back.add.remote(1).result(60) == 301
    for a in pool + [third, d]:
        shoal.kill(a)


def test_named_actors(client):
    name = unique("plus10")
    a = rayactors.Adder.options(name=name).remote(10)
    assert a.name == name
    found = shoal.get_actor(name)
    assert found == a and found.add.remote(1).result(60) == 11
    assert rayactors.call_named.remote(name, 5).result(60) == 15
    # Unique per node while it lives.
    with pytest.raises(shoal.AlreadyExistsError, match=f"named '{name}'"):
        rayactors.Adder.options(name=name).remote(20)
    with pytest.raises(shoal.NotFoundError,
                       match=r"no live actor named 'nobody-here'"):
        shoal.get_actor("nobody-here")
    # Its end frees the name.
    shoal.kill(a)
    with pytest.raises(shoal.NotFoundError):
        shoal.get_actor(name)
    b = rayactors.Adder.options(name=name).remote(30)
    assert shoal.get_actor(name).add.remote(1).result(60) == 31
    assert b.actor_id != a.actor_id
    shoal.kill(b)
    # Unnamed actors of one class share its label, as before.
    c1, c2 = rayactors.Adder.remote(1), rayactors.Adder.remote(2)
    assert [c.add.remote(0).result(60) for c in (c1, c2)] == [1, 2]
    shoal.kill(c1)
    shoal.kill(c2)


def test_named_handle_knows_the_methods(client):
    name = unique("methods")
    a = rayactors.Adder.options(name=name).remote(7)
    found = shoal.get_actor(name)
    # An unknown method fails at once, as Ray's handle does, naming the
    # ones there are; nothing is queued on the actor.
    with pytest.raises(AttributeError, match=r"no method 'nope'.*add"):
        found.nope.remote()
    assert found.add.remote(1).result(60) == 8
    # A copy of the handle (a task's argument) knows them too.
    with pytest.raises(AttributeError, match=r"no method 'nope'"):
        pickle_roundtrip(found).nope
    assert rayactors.call_named.remote(name, 2).result(60) == 9
    # A task's own get_actor handle checks as well.
    err = rayactors.call_named_method.remote(name, "nope").result(60)
    assert "AttributeError" in err and "no method 'nope'" in err
    shoal.kill(a)


def pickle_roundtrip(x):
    import pickle
    return pickle.loads(pickle.dumps(x))
