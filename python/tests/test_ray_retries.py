"""retry_exceptions on @shoal.remote / .options(), as Ray's: a task that
raised runs again (on its worker, at once) up to max_retries times; a list
of classes retries only those. num_returns=k gives k futures."""

import pytest

import shoal
import ctltasks


@pytest.fixture(scope="module")
def client():
    with shoal.start_node(2, store_bytes="128M") as n:
        c = shoal.connect(job_id=n.job_id)
        yield c
        shoal.disconnect()


def _runs(path):
    return int(open(path).read())


def test_a_flaky_task_is_retried_until_it_succeeds(client, tmp_path):
    path = str(tmp_path / "runs")
    assert ctltasks.retried.remote(path, 2).result(60) == 3
    assert _runs(path) == 3


def test_retries_stop_at_max_retries(client, tmp_path):
    path = str(tmp_path / "runs")
    with pytest.raises(ValueError, match="run 4 fails"):
        ctltasks.retried.remote(path, 10).result(60)
    assert _runs(path) == 4  # the first run and 3 retries


def test_options_override(client, tmp_path):
    path = str(tmp_path / "runs")
    f = ctltasks.retried.options(max_retries=1).remote(path, 5)
    with pytest.raises(ValueError, match="run 2 fails"):
        f.result(60)
    path = str(tmp_path / "off")
    f = ctltasks.retried.options(retry_exceptions=False).remote(path, 1)
    with pytest.raises(ValueError, match="run 1 fails"):
        f.result(60)
    assert _runs(path) == 1


def test_a_list_retries_only_its_classes(client, tmp_path):
    for kind, runs in (("value", 6), ("unlucky", 6), ("key", 1)):
        path = str(tmp_path / kind)
        with pytest.raises((ValueError, ctltasks.Unlucky, KeyError)):
            ctltasks.retried_value_errors.remote(path, kind).result(60)
        assert _runs(path) == runs, kind


def test_bad_options_are_refused():
    with pytest.raises(ValueError, match="retry_exceptions"):
        shoal.remote(retry_exceptions=[42])(ctltasks.flaky)
    with pytest.raises(ValueError, match="num_returns"):
        shoal.remote(num_returns=0)(ctltasks.triple)


def test_num_returns_gives_k_futures(client):
    a, b, c = ctltasks.three.remote(7)
    assert (a.result(60), b.result(60), c.result(60)) == (7, 14, "7")
    fs = ctltasks.three.remote(2)
    assert [f.result(60) for f in shoal.as_completed(fs)] and \
        sorted(map(str, (f.result() for f in fs))) == ["2", "2", "4"]
    # An item future is an argument like any other future.
    sq = shoal.remote(ctltasks.slow_square)
    assert sq.remote(ctltasks.three.remote(5)[1]).result(60) == 100


def test_shoal_wait_takes_item_futures(client):
    fs = ctltasks.three.remote(3)
    done, pending = shoal.wait(fs, timeout=60)
    assert len(done) == 3 and not pending
    done, _ = shoal.wait(ctltasks.three.remote(4), timeout=60, num_returns=1)
    assert len(done) >= 1


def test_num_returns_of_the_wrong_length_fails_each_item(client):
    fs = ctltasks.three.options(num_returns=2).remote(1)
    for f in fs:
        with pytest.raises(shoal.InvalidArgumentError, match="num_returns=2"):
            f.result(60)
