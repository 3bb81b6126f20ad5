"""A future passed as an argument: the task waits for it, and a
result held in the store reaches the worker as that same store object (the
client neither fetches nor re-serialises it; docs/python.md, "Futures as
arguments")."""

import numpy as np
import pytest

import deptasks
import shoal
from shoal import _client, _ext
from valtasks import store_offset

MIB16 = 16 << 20


def test_a_large_result_reaches_the_task_as_the_same_store_object(client):
    producer = client.submit(deptasks.big, MIB16, 2.0)
    result = producer.result(60)
    used_before = client.status()["store_used_bytes"]
    offset, total, used_during = client.submit(
        deptasks.report, producer).result(60)
    assert offset is not None and offset == store_offset(result)
    assert total == 2.0 * (MIB16 // 4)
    # No copy of the 16 MiB was made for the consumer (other objects come
    # and go, far smaller than that).
    assert used_during - used_before < MIB16 // 4


def test_a_dependency_still_running_at_submit(client):
    producer = client.submit(deptasks.big, MIB16, 1.0)
    consumer = client.submit(deptasks.report, producer, scale=2)
    offset, total, _ = consumer.result(60)
    assert offset == store_offset(producer.result(60))
    assert total == 2.0 * (MIB16 // 4)


def test_a_chain_of_large_arrays(client):
    a = client.submit(deptasks.big, MIB16, 1.0)
    b = client.submit(deptasks.plus, a, 1.0)
    c = client.submit(deptasks.plus, b, 1.0)
    offset_b, total_b, _ = client.submit(deptasks.report, b).result(60)
    offset_c, total_c, _ = client.submit(deptasks.report, c).result(60)
    assert (total_b, total_c) == (2.0 * (MIB16 // 4), 3.0 * (MIB16 // 4))
    assert offset_b == store_offset(b.result(60))
    assert offset_c == store_offset(c.result(60))
    assert float(c.result(60)[0]) == 3.0


def test_a_pickled_result_as_a_keyword_argument(client):
    produced = client.submit(deptasks.pair, 1 << 20)
    offsets, note, _ = client.submit(deptasks.report_dict,
                                     d=produced).result(60)
    mine = produced.result(60)
    assert note == "x"
    assert offsets == {"a": store_offset(mine["a"]),
                       "b": store_offset(mine["b"])}


def test_small_results_go_by_value(client):
    a = client.submit(deptasks.plus, np.arange(4, dtype=np.float32), 1.0)
    b = client.submit(deptasks.plus, a, 1.0)
    assert b.result(60).tolist() == [2.0, 3.0, 4.0, 5.0]
    assert store_offset(b.result(60)) is None  # inline, not in the store


def test_a_failed_dependency_fails_the_task_with_its_error(client):
    bad = client.submit(deptasks.fail, "dep")
    after = client.submit(deptasks.report, bad)
    kw = client.submit(deptasks.report_dict, d=bad)
    with pytest.raises(KeyError, match="dep"):
        after.result(60)
    with pytest.raises(KeyError, match="dep"):
        kw.result(60)


def test_a_dropped_dependency_future_keeps_its_object_for_the_task(client):
    """The consumer holds the producer's result object until it finished,
    even when nobody keeps the producer's future."""
    consumer = client.submit(deptasks.report,
                             client.submit(deptasks.big, MIB16, 4.0))
    _, total, _ = consumer.result(60)
    assert total == 4.0 * (MIB16 // 4)


def test_a_future_argument_inside_a_task(client):
    same, total = client.submit(deptasks.nested, MIB16).result(60)
    assert same and total == 3.0 * (MIB16 // 4)


def test_a_value_the_client_cannot_unpickle_still_reaches_the_task(
        tmp_path):
    """The client cannot import the result's class (the module is on the
    workers' path only): its own result() fails, yet a task taking the
    future gets the value, rebuilt by the worker from the outputs."""
    (tmp_path / "onlyworker.py").write_text(
        "class Secret:\n"
        "    def __init__(self, n):\n"
        "        self.n = n\n"
        "def make(n):\n"
        "    return Secret(n)\n"
        "def read(s, plus=0):\n"
        "    return s.n + plus\n")
    with shoal.start_node(1, store_bytes="64M",
                          pythonpath=[str(tmp_path)]) as node:
        c = _client.Client(_ext.ext().Client.connect("", node.job_id, "",
                                                     False))
        made = c.submit("onlyworker:make", 41)
        with pytest.raises(shoal.TaskError, match="unpickling"):
            made.result(60)
        assert c.submit("onlyworker:read", made, plus=1).result(60) == 42
