"""Nested tasks: submit, get, put and actors from inside a task, on a node
with ONE worker, where a parent waiting for its queued children would
deadlock unless its worker gives up its slot while it waits (the node starts
a temporary worker: coordinator/blocked_workers.cc). Every wait is bounded:
a hang fails the test, never CI."""

import time

import pytest

import shoal

import nesttasks

WAIT_S = 120


@pytest.fixture(scope="module")
def one_worker():
    with shoal.start_node(1, store_bytes="256M") as n:
        c = shoal.connect(job_id=n.job_id)
        yield c
        shoal.disconnect()


def test_submit_and_get_inside_a_task(one_worker):
    assert one_worker.submit(nesttasks.submit_and_get, 1, 2).result(
        WAIT_S) == 3


def test_put_and_get_inside_a_task(one_worker):
    assert one_worker.submit(nesttasks.put_and_get, 100).result(
        WAIT_S) == sum(range(100))


def test_a_task_fans_out_and_sums_its_children(one_worker):
    assert one_worker.submit(nesttasks.fan_out, 20).result(WAIT_S) == \
        sum(range(20))


def test_recursion_three_deep(one_worker):
    # Each level waits for the next: three workers blocked at once.
    assert one_worker.submit(nesttasks.recurse, 3).result(WAIT_S) == 3


def test_remote_function_inside_a_task(one_worker):
    assert one_worker.submit(nesttasks.remote_and_get, 3, 4).result(
        WAIT_S) == 7


def test_an_actor_method_submits_a_task(one_worker):
    a = nesttasks.Adder.remote(10)
    try:
        assert a.add_in_task.remote(5).result(WAIT_S) == 15
    finally:
        shoal.kill(a)


def test_a_childs_exception_reaches_the_grandparent_with_its_type(
        one_worker):
    with pytest.raises(KeyError) as e:
        one_worker.submit(nesttasks.call_failing_grandchild,
                          "no such key").result(WAIT_S)
    assert "no such key" in str(e.value)


def test_many_parents_wait_at_once(one_worker):
    # Four parents, each blocked on its children: no deadlock, right sums.
    parents = [one_worker.submit(nesttasks.fan_out, 5) for _ in range(4)]
    assert [p.result(WAIT_S) for p in parents] == [10] * 4


def test_nested_tasks_on_two_workers():
    with shoal.start_node(2, store_bytes="256M") as n:
        c = shoal.connect(job_id=n.job_id)
        try:
            assert c.submit(nesttasks.recurse, 3).result(WAIT_S) == 3
            assert c.submit(nesttasks.fan_out, 10).result(WAIT_S) == 45
        finally:
            shoal.disconnect()


def test_temporary_workers_exit_once_idle():
    # A 2-deep recursion on a 1-worker node needs temporary workers; each
    # exits by itself ~2 s after its last task (it is never restarted).
    with shoal.start_node(1, store_bytes="256M") as n:
        c = shoal.connect(job_id=n.job_id)
        try:
            assert c.submit(nesttasks.recurse, 2).result(WAIT_S) == 2
            workers = c.status()["workers"]
            assert len(workers) > 1, workers
            deadline = time.monotonic() + 60
            while True:
                extra = [w for w in c.status()["workers"] if w["id"] != 0]
                if all(w["state"] == "stopped" and w["last_exit"] == "exit 0"
                       for w in extra):
                    break
                assert time.monotonic() < deadline, extra
                time.sleep(0.1)
            # The pool worker is still there and still runs nested tasks.
            assert c.submit(nesttasks.submit_and_get, 2, 3).result(
                WAIT_S) == 5
        finally:
            shoal.disconnect()
