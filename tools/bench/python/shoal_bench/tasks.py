"""Task functions of shoal_bench (kept apart so workers import nothing
else for them)."""

import time


def noop():
    return None


def sleep(seconds):
    time.sleep(seconds)


def take_dict(d):
    """The small-dict workload: a module-level function of one dict."""
    return d["x"]


def make_closure():
    """The closure workload: the same work, in a closure (sent by value)."""
    offset = 0

    def take_dict_closure(d):
        return d["x"] + offset
    return take_dict_closure


def read_arrays(d):
    """Reads every page of the dict's arrays; returns when it finished
    (time.perf_counter: CLOCK_MONOTONIC, comparable across processes)."""
    total = 0.0
    for a in d.values():
        total += float(a[::1024].sum())  # 4 KiB apart: every page
    return time.perf_counter(), total
