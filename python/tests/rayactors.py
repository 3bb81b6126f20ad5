"""Actors and tasks for test_ray_actors.py (imported by name by the
workers): handles passed as values, the parameter-server and actor-pool
patterns, named actors."""

import numpy as np

import shoal


@shoal.remote
class ParamServer:
    def __init__(self, dim):
        self.w = np.zeros(dim)
        self.pushes = 0

    def push(self, grad):
        self.w += grad
        self.pushes += 1

    def pull(self):
        return self.w.copy()

    def count(self):
        return self.pushes


@shoal.remote
def train_step(ps, k):
    """A worker of the parameter server: pull, then push a gradient."""
    w = ps.pull.remote().result(60)
    ps.push.remote(np.full(len(w), float(k))).result(60)
    return k


@shoal.remote
class Adder:
    def __init__(self, k):
        self.k = k

    def add(self, x):
        return x + self.k


def spread(pool, xs):
    """xs over the actors of `pool`, round robin; the results in order."""
    futures = [pool[i % len(pool)].add.remote(x) for i, x in enumerate(xs)]
    return [f.result(60) for f in futures]


@shoal.remote
def use_pool(pool, xs):
    return spread(pool, xs)


@shoal.remote
class Dispatcher:
    """An actor holding other actors' handles (given to its constructor)."""

    def __init__(self, pool):
        self.pool = list(pool)

    def run(self, xs):
        return spread(self.pool, xs)

    def add_actor(self, handle):
        self.pool.append(handle)
        return len(self.pool)


@shoal.remote
def echo(x):
    return x


@shoal.remote
def call_named(name, x):
    return shoal.get_actor(name).add.remote(x).result(60)


@shoal.remote
def call_named_method(name, method):
    """What getting `method` of the named actor's handle raises, as text."""
    try:
        getattr(shoal.get_actor(name), method)
    except AttributeError as e:
        return f"AttributeError: {e}"
    return "no error"
