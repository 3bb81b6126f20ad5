"""Client.map: results in order, many small items per task with
chunksize."""

import pytest

import valtasks


def _submitted(client):
    return client.status()["submitted"]


def test_map_in_order(client):
    assert list(client.map(valtasks.square, range(20))) == \
        [i * i for i in range(20)]
    assert list(client.map(valtasks.total, [[1, 2], [3]], [10, 20])) == \
        [13.0, 23.0]


def test_chunksize_batches_items(client):
    before = _submitted(client)
    out = list(client.map(valtasks.square, range(1000), chunksize=100))
    assert out == [i * i for i in range(1000)]
    assert _submitted(client) - before == 10
    offset = 7
    assert list(client.map(lambda x: x + offset, range(25), chunksize=4)) \
        == [i + 7 for i in range(25)]


def test_a_failed_item_raises_when_reached(client):
    results = client.map(valtasks.fail_on, range(10), [5] * 10, chunksize=3)
    assert [next(results) for _ in range(3)] == [0, 1, 2]
    with pytest.raises(ValueError, match="item 5"):
        list(results)
    with pytest.raises(ValueError):
        client.map(valtasks.square, [1], chunksize=0)
