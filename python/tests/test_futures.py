"""shoal.Future is a concurrent.futures.Future: as_completed, wait,
add_done_callback and asyncio work without anyone calling result(); a
future passed as an argument makes the task wait for it; shoal.get takes a
list."""

import asyncio
import concurrent.futures as cf
import threading

import numpy as np
import pytest

import shoal
import valtasks


def test_is_a_concurrent_future(client):
    f = client.submit(valtasks.square, 3)
    assert isinstance(f, cf.Future)
    assert f.result(30) == 9 and f.done() and f.exception() is None


def test_as_completed_and_wait(client):
    futures = [client.submit(valtasks.sleep_then, 0.05 * (i % 3), i)
               for i in range(12)]
    got = sorted(f.result() for f in cf.as_completed(futures, timeout=60))
    assert got == list(range(12))

    slow = client.submit(valtasks.sleep_then, 1.0, "slow")
    quick = client.submit(valtasks.sleep_then, 0.0, "quick")
    done, pending = cf.wait([slow, quick], timeout=60,
                            return_when=cf.FIRST_COMPLETED)
    assert quick in done and slow in pending
    done, pending = cf.wait([slow, quick], timeout=60)
    assert not pending and slow.result() == "slow"


def test_add_done_callback_runs_without_result(client):
    fired = threading.Event()
    seen = []

    def callback(f):
        seen.append(f.result())
        fired.set()

    f = client.submit(valtasks.sleep_then, 0.1, "cb")
    f.add_done_callback(callback)
    assert fired.wait(30) and seen == ["cb"]
    late = []
    f.add_done_callback(lambda g: late.append(g.result()))  # already done
    assert late == ["cb"]


def test_asyncio(client):
    async def main():
        one = await client.submit(valtasks.square, 4)
        many = await asyncio.gather(
            *[client.submit(valtasks.sleep_then, 0.01, i) for i in range(20)])
        wrapped = await asyncio.wait_for(
            asyncio.wrap_future(client.submit(valtasks.square, 5)), 30)
        with pytest.raises(ValueError):
            await client.submit(valtasks.raise_value_error, 1)
        return one, many, wrapped

    one, many, wrapped = asyncio.run(main())
    assert one == 16 and many == list(range(20)) and wrapped == 25


def test_timeout_is_both_timeout_errors(client):
    f = client.submit(valtasks.sleep_then, 2.0, None)
    with pytest.raises(shoal.TimeoutError):
        f.result(0.05)
    with pytest.raises(cf.TimeoutError):
        f.result(0.05)
    assert f.result(30) is None


def test_a_future_as_argument(client):
    n = 1 << 20
    producer = client.submit(valtasks.sleep_then, 0.3,
                             np.full(n, 2.0, dtype=np.float32))
    consumer = client.submit(valtasks.total, producer, b=1)
    assert not consumer.done()
    assert consumer.result(60) == 2.0 * n + 1
    # Chains, and keyword arguments.
    a = client.submit(valtasks.square, 3)
    b = client.submit(valtasks.square, a)
    c = client.submit(valtasks.echo, b, k=a)
    assert c.result(60) == ((81,), {"k": 9})


def test_a_failed_dependency_fails_the_task(client):
    bad = client.submit(valtasks.raise_value_error, "dep")
    after = client.submit(valtasks.square, bad)
    with pytest.raises(ValueError, match="bad dep"):
        after.result(60)


def test_get_a_list(client):
    ref = shoal.put(np.arange(4.0))
    futures = [client.submit(valtasks.square, i) for i in range(5)]
    values = shoal.get(futures + [ref])
    assert values[:5] == [0, 1, 4, 9, 16]
    assert values[5].tolist() == [0.0, 1.0, 2.0, 3.0]
    assert shoal.get(client.submit(valtasks.square, 6)) == 36


def test_callbacks_from_many_threads(client):
    """Threads submitting and waiting at once while callbacks are pending:
    every result arrives once, none is lost."""
    results = []
    lock = threading.Lock()

    def work(k):
        fs = [client.submit(valtasks.square, k * 100 + i) for i in range(30)]
        for f in fs[::2]:
            f.add_done_callback(lambda g: (lock.acquire(),
                                           results.append(g.result()),
                                           lock.release()))
        return [f.result(60) for f in fs[1::2]]

    with cf.ThreadPoolExecutor(4) as pool:
        direct = list(pool.map(work, range(4)))
    deadline = 60
    for _ in range(deadline * 100):
        with lock:
            if len(results) == 60:
                break
        threading.Event().wait(0.01)
    assert sorted(results) == sorted((k * 100 + i) ** 2 for k in range(4)
                                     for i in range(0, 30, 2))
    assert direct == [[(k * 100 + i) ** 2 for i in range(1, 30, 2)]
                      for k in range(4)]


def test_a_dropped_future_does_not_cancel_its_task(client):
    """Futures dropped unread (more than one sweep's worth): every call still
    runs, in order, and the client frees their entries as they finish."""
    import pyactors
    counter = pyactors.Counter.remote(0, 1)
    for _ in range(300):
        counter.add.remote()  # the future is dropped at once
    assert counter.value.remote().result(60) == 300
    # A sweep (submits make them, further apart while many are pending)
    # frees the dropped ones: all finished by now.
    client._release_forgotten()
    assert client._forgotten == []
    shoal.kill(counter)


def test_a_long_result_does_not_hold_back_another_thread(client):
    """result() waits on the table by itself only briefly: a thread waiting
    on a slow task does not delay another thread's quick one, nor its
    callbacks."""
    slow = client.submit(valtasks.sleep_then, 3.0, "slow")
    started = threading.Event()

    def wait_slow():
        started.set()
        return slow.result(60)

    with cf.ThreadPoolExecutor(1) as pool:
        waiting = pool.submit(wait_slow)
        started.wait(10)
        quick = client.submit(valtasks.sleep_then, 0.0, "quick")
        fired = threading.Event()
        quick.add_done_callback(lambda _: fired.set())
        assert fired.wait(2.0), "the quick task's callback waited for slow"
        assert client.submit(valtasks.square, 4).result(2.0) == 16
        assert not slow.done()
        assert waiting.result(60) == "slow"


def test_a_future_argument_goes_by_store_reference(client):
    """A future's value reaches the next task from the store: the arrays the
    second task sees are the first task's result objects (the same offsets
    in the store segment), not copies made by the client."""
    n = 1 << 20  # 4 and 8 MiB: out of band
    first = client.submit(valtasks.dict_of_arrays, n)
    offsets = client.submit(valtasks.store_offsets, first).result(60)
    mine = first.result(60)
    assert None not in offsets.values()
    assert offsets == {k: valtasks.store_offset(a) for k, a in mine.items()}
    # A plain array result (no pickle) likewise.
    big = client.submit(valtasks.big_array, n, 2.0)
    offset = client.submit(valtasks.store_offset, big).result(60)
    assert offset is not None and offset == valtasks.store_offset(big.result())
