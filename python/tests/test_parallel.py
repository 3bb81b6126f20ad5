"""Two CPU-bound Python tasks on two workers run in parallel (each worker
has its own interpreter and GIL); two threads of one interpreter do not."""

import multiprocessing
import threading
import time

import pytest

import pytasks


def _calibrate(seconds=0.4):
    """A loop count that takes about `seconds` here."""
    n = 200_000
    while True:
        t0 = time.perf_counter()
        pytasks.spin(n)
        dt = time.perf_counter() - t0
        if dt > 0.05:
            return int(n * seconds / dt)
        n *= 4


def _ratio(one, two, good, tries=5):
    """(time of one, time of two) with two/one compared against `good`
    (a predicate), measured up to `tries` times: the 2 cores are shared
    with whatever else runs, and a noisy round is measured again."""
    for _ in range(tries):
        t_one, t_two = one(), two()
        if good(t_two / t_one):
            break
    return t_one, t_two


def test_two_tasks_on_two_workers_take_about_the_time_of_one(client):
    n = _calibrate()

    def one():
        t0 = time.perf_counter()
        client.submit(pytasks.spin, n).result(120)
        return time.perf_counter() - t0

    def two():
        t0 = time.perf_counter()
        futures = [client.submit(pytasks.spin, n) for _ in range(2)]
        for f in futures:
            f.result(120)
        return time.perf_counter() - t0

    t_one, t_two = _ratio(one, two, lambda r: r < 1.5)
    print(f"one task {t_one:.3f}s, two tasks on 2 workers {t_two:.3f}s")
    if t_two >= 1.5 * t_one:
        # The control, measured now: can two plain processes run at once on
        # this machine at this moment? Where other work holds the cores (a
        # loaded CI host, a stress run) they cannot, and no runtime could.
        p_one, p_two = _ratio(_plain_processes(n, 1), _plain_processes(n, 2),
                              lambda r: r < 1.5, tries=2)
        if p_two >= 1.5 * p_one:
            pytest.skip(f"the cores are busy: two plain processes took "
                        f"{p_two / p_one:.2f}x one ({t_two / t_one:.2f}x "
                        f"for two shoal tasks)")
        # The cores are free now; a load that held them during shoal's
        # rounds may have gone since (a CI host's other job), so shoal is
        # measured again beside the control that just passed.
        t_one, t_two = _ratio(one, two, lambda r: r < 1.5, tries=3)
        print(f"again: one task {t_one:.3f}s, two tasks {t_two:.3f}s "
              f"(plain processes {p_two / p_one:.2f}x)")
    assert t_two < 1.5 * t_one, (t_one, t_two)


def _plain_processes(n, count):
    """A timer of `count` multiprocessing processes each spinning n."""
    def run():
        procs = [multiprocessing.Process(target=pytasks.spin, args=(n,))
                 for _ in range(count)]
        t0 = time.perf_counter()
        for p in procs:
            p.start()
        for p in procs:
            p.join()
        return time.perf_counter() - t0
    return run


def test_two_threads_in_one_interpreter_take_twice_as_long():
    n = _calibrate()

    def one():
        t0 = time.perf_counter()
        pytasks.spin(n)
        return time.perf_counter() - t0

    def two():
        threads = [threading.Thread(target=pytasks.spin, args=(n,))
                   for _ in range(2)]
        t0 = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return time.perf_counter() - t0

    t_one, t_two = _ratio(one, two, lambda r: r >= 1.6)
    print(f"one thread {t_one:.3f}s, two threads {t_two:.3f}s")
    assert t_two >= 1.6 * t_one, (t_one, t_two)
