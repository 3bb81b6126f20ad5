"""Task functions of test_timeline.py: a task that marks a span of its own
code, and one that runs a task nested inside it."""

import time

import shoal


def marked(seconds):
    """Sleeps inside a span of its own, within the task's span."""
    with shoal.span("inside-task", detail="user"):
        time.sleep(seconds)
    return seconds


def work(seconds):
    time.sleep(seconds)
    return seconds


def total(array):
    """Reads its argument (a large array: a store object the worker gets)."""
    return float(array.sum())
