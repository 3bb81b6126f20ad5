"""progress=True of shoal.map and shoal.as_completed: a tqdm bar on stderr
(Debian's python3-tqdm). Without tqdm, a one-line note on stderr once per
process and no bar; the results are the same either way."""

import sys
import threading

_warned = False


def bar(total, desc):
    """A tqdm bar of `total` items, or None (tqdm missing: notes it once)."""
    global _warned
    try:
        from tqdm import tqdm
    except ImportError:
        if not _warned:
            _warned = True
            sys.stderr.write(
                "shoal: progress=True shows no bar: tqdm is not installed "
                "(apt install python3-tqdm, or pip install tqdm)\n")
            sys.stderr.flush()
        return None
    return tqdm(total=total, desc=desc, unit="task")


class Counter:
    """Counts finished futures on a bar once each, whichever thread sees
    them first (a completion callback, or the reader of the results)."""

    def __init__(self, bar_):
        self._bar = bar_
        self._seen = set()
        self._lock = threading.Lock()

    def watch(self, future, items=1):
        """Counts `items` on the bar when `future` finishes."""
        future.add_done_callback(lambda f: self.count(f, items))

    def count(self, future, items=1):
        with self._lock:
            if id(future) in self._seen:
                return
            self._seen.add(id(future))
            self._bar.update(items)

    def close(self):
        with self._lock:
            self._bar.close()


def as_completed(futures, timeout=None, *, progress=False):
    """concurrent.futures.as_completed over shoal futures (any futures):
    yields each as it finishes; `timeout` (seconds) bounds the whole
    iteration (concurrent.futures.TimeoutError). progress=True shows a tqdm
    bar of the finished ones on stderr."""
    import concurrent.futures
    futures = list(futures)
    b = bar(len(futures), "as_completed") if progress else None
    try:
        for f in concurrent.futures.as_completed(futures, timeout):
            if b is not None:
                b.update(1)
            yield f
    finally:
        if b is not None:
            b.close()
