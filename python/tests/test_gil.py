"""The GIL is released whenever shoal waits: in a worker while it waits for
work and for the store (its interpreter's other threads keep running), and
in a client during every blocking call (its other threads keep running)."""

import threading
import time

import pytest

import pytasks
import shoal


@pytest.fixture(scope="module")
def one_worker():
    """A node of 1 worker, so consecutive tasks share one interpreter."""
    with shoal.start_node(1, store_bytes="256M") as n:
        c = shoal.connect(job_id=n.job_id)
        c.submit(pytasks.noop).result(60)
        yield c
        shoal.disconnect()


def test_a_worker_thread_runs_while_the_worker_waits_for_work(one_worker):
    one_worker.submit(pytasks.start_ticker, True).result(30)
    time.sleep(0.5)  # the worker is idle, waiting for its next task
    count, _, _ = one_worker.submit(pytasks.stop_ticker).result(30)
    # ~1 count per ms while the GIL is free; 0 if the idle worker held it.
    assert count >= 50, count


def test_a_worker_thread_runs_while_outputs_go_into_the_store(one_worker):
    """Each large output is a Create request to the store service; a thread
    of the task's interpreter runs during those waits."""
    for attempt in range(3):  # 2 noisy cores: a descheduled round is redone
        f = one_worker.submit(pytasks.many_outputs, 40, 128 << 10)
        outputs = f.result(60)
        done_at = time.monotonic()
        assert len(outputs) == 40 and int(outputs[39][0]) == 39
        del outputs
        _, stamps, returned_at = one_worker.submit(
            pytasks.stop_ticker).result(30)
        after = stamps[stamps > returned_at]
        window = done_at - returned_at
        first = after[0] - returned_at if len(after) else window
        # Holding the GIL through the 40 store requests, the thread would
        # not run until they were all done (first ≈ window).
        print(f"window {window * 1e3:.1f} ms, thread first ran after "
              f"{first * 1e3:.2f} ms")
        if first < 0.5 * window:
            return
    pytest.fail(f"the worker's thread did not run while the outputs were "
                f"stored: first ran {first * 1e3:.2f} ms into a "
                f"{window * 1e3:.1f} ms window")


class _Ticker:
    """A thread of this process counting 1 ms sleeps."""

    def __init__(self):
        self.count = 0
        self._stop = False
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        while not self._stop:
            self.count += 1
            time.sleep(0.001)

    def __enter__(self):
        self._thread.start()
        time.sleep(0.01)
        self.count = 0
        return self

    def __exit__(self, *exc):
        self._stop = True
        self._thread.join()


def test_client_threads_run_during_blocking_calls(client):
    with _Ticker() as t:
        client.submit(pytasks.sleep, 0.3).result(30)
    assert t.count >= 30, ("Future.result", t.count)

    with _Ticker() as t:
        shoal.wait([client.submit(pytasks.sleep, 0.3)], timeout=30)
    assert t.count >= 30, ("shoal.wait", t.count)

    with _Ticker() as t:
        with pytest.raises(shoal.TimeoutError):
            shoal.get("00" * 16, timeout=0.3)
    assert t.count >= 30, ("shoal.get with a timeout", t.count)

