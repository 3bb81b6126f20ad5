"""Nested tasks: submit, get, put and actors from inside a task, on a node
with ONE worker, where a parent waiting for its queued children would
deadlock unless its wait runs them inline (the worker helps while it waits:
tasks::TaskTable::ClaimNested) or the node starts a temporary worker
(coordinator/blocked_workers.cc). Every wait is bounded: a hang fails the
test, never CI."""

import os
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


def test_a_chain_sixty_deep_on_one_worker(one_worker):
    # Deeper than 1 worker + 16 temporary ones: each level runs its child
    # inside its own wait.
    assert one_worker.submit(nesttasks.recurse, 60).result(WAIT_S) == 60


def test_a_binary_fan_out_recursion_on_one_worker(one_worker):
    # fib(12): 465 tasks, each inner one waiting for two children.
    assert one_worker.submit(nesttasks.fib, 12).result(WAIT_S) == 144


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


def _node_without_inline_help(workers):
    # Waits never run tasks inline here: the temporary workers' path.
    env = dict(os.environ, SHOAL_WORKER_MAX_INLINE_DEPTH="0")
    return shoal.start_node(workers, store_bytes="256M", env=env)


def test_no_temporary_worker_while_an_idle_worker_can_run_the_children():
    # Worker A's task blocks for 1.5 s on a child that idle worker B runs:
    # nothing waits for a worker, so no temporary one starts.
    with _node_without_inline_help(2) as n:
        c = shoal.connect(job_id=n.job_id)
        try:
            assert c.submit(nesttasks.wait_for_a_slow_child, 1.5).result(
                WAIT_S) == 1
            workers = c.status()["workers"]
            assert sorted(w["id"] for w in workers) == [0, 1], workers
            assert not any("temporary" in w["role"] for w in workers)
        finally:
            shoal.disconnect()


def test_past_the_inline_depth_temporary_workers_carry_on():
    # 20 tasks nest in one worker at most here: a chain 60 deep goes on in
    # temporary workers (each helps in its own waits too).
    env = dict(os.environ, SHOAL_WORKER_MAX_INLINE_DEPTH="20")
    with shoal.start_node(1, store_bytes="256M", env=env) as n:
        c = shoal.connect(job_id=n.job_id)
        try:
            # (Without them the 21st level would wait forever: WAIT_S fails.)
            assert c.submit(nesttasks.recurse, 60).result(WAIT_S) == 60
        finally:
            shoal.disconnect()


def test_temporary_workers_start_for_waiting_work_and_leave_the_listing():
    # A 2-deep recursion on a 1-worker node whose waits cannot help: each
    # child waits for a worker, so temporary ones start; each exits by
    # itself ~2 s after its last task and then leaves `shoal status`.
    with _node_without_inline_help(1) as n:
        c = shoal.connect(job_id=n.job_id)
        try:
            assert c.submit(nesttasks.recurse, 2).result(WAIT_S) == 2
            workers = c.status()["workers"]
            temporary = [w for w in workers if "temporary" in w["role"]]
            assert len(temporary) >= 1, workers
            deadline = time.monotonic() + 60
            while True:
                workers = c.status()["workers"]
                if [w["id"] for w in workers] == [0]:
                    break
                assert time.monotonic() < deadline, workers
                time.sleep(0.1)
            assert workers[0]["state"] in ("idle", "busy"), workers
            # The pool worker is still there and still runs nested tasks.
            assert c.submit(nesttasks.submit_and_get, 2, 3).result(
                WAIT_S) == 5
        finally:
            shoal.disconnect()
