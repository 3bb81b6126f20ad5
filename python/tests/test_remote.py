"""@shoal.remote on functions against a real node."""

import pytest

import shoal
import pyactors


@pytest.fixture(scope="module")
def client():
    with shoal.start_node(2, store_bytes="128M") as n:
        c = shoal.connect(job_id=n.job_id)
        yield c
        shoal.disconnect()


def test_remote_returns_a_future(client):
    f = pyactors.square.remote(7)
    assert f.result(30) == 49


def test_direct_call_runs_here():
    assert pyactors.square(5) == 25
    assert pyactors.square.__name__ == "square"


def test_options_and_defaults(client):
    assert pyactors.pid_of_worker.remote().result(30) > 0
    g = pyactors.square.options(num_cpus=1, max_retries=1, timeout=10)
    assert g.remote(3).result(30) == 9
    assert g is not pyactors.square
    with pytest.raises(TypeError):
        pyactors.square.options(cpus=1)
    with pytest.raises(ValueError):
        pyactors.square.options(num_cpus=0)
    with pytest.raises(ValueError):
        pyactors.square.options(timeout=-1)


def test_many_in_flight(client):
    futures = [pyactors.square.remote(i) for i in range(200)]
    assert [f.result(60) for f in futures] == [i * i for i in range(200)]


def test_keyword_arguments(client):
    if not hasattr(client, "_submit_call"):
        pytest.skip("this client has no pickled-argument path")
    assert pyactors.add_kw.remote(1, b=2, c=3).result(30) == 6
    assert pyactors.add_kw.remote(1).result(30) == 111


def test_remote_needs_a_function_or_class():
    with pytest.raises(TypeError):
        shoal.remote(1, 2)
