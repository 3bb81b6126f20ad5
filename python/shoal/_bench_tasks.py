"""Task functions of shoal.bench (kept apart so workers import nothing
else for them)."""

import time


def noop():
    return None


def sleep(seconds):
    time.sleep(seconds)
