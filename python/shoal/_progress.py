"""progress=True of shoal.map and shoal.as_completed: a tqdm bar on stderr
(Debian's python3-tqdm). Without tqdm, a one-line note on stderr once per
process and no bar; the results are the same either way."""

import concurrent.futures
import sys
import threading
from typing import Any, Iterable, Iterator, Optional, TypeVar

_F = TypeVar("_F", bound="concurrent.futures.Future[Any]")

_warned = False


def bar(total: int, desc: str) -> Any:
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

    def __init__(self, bar_: Any) -> None:
        self._bar = bar_
        self._seen: set[int] = set()
        self._lock = threading.Lock()

    def watch(self, future: "concurrent.futures.Future[Any]",
              items: int = 1) -> None:
        """Counts `items` on the bar when `future` finishes."""
        future.add_done_callback(lambda f: self.count(f, items))

    def count(self, future: "concurrent.futures.Future[Any]",
              items: int = 1) -> None:
        with self._lock:
            if id(future) in self._seen:
                return
            self._seen.add(id(future))
            self._bar.update(items)

    def close(self) -> None:
        with self._lock:
            self._bar.close()


def as_completed(futures: Iterable[_F], timeout: Optional[float] = None, *,
                 progress: bool = False) -> Iterator[_F]:
    """concurrent.futures.as_completed over shoal futures (any futures):
    yields each as it finishes; `timeout` (seconds) bounds the whole
    iteration (concurrent.futures.TimeoutError). progress=True shows a tqdm
    bar of the finished ones on stderr."""
    futures = list(futures)
    b = bar(len(futures), "as_completed") if progress else None
    try:
        for f in concurrent.futures.as_completed(futures, timeout):
            if b is not None:
                b.update(1)
            yield f  # type: ignore[misc]  # (as_completed yields ours)
    finally:
        if b is not None:
            b.close()
