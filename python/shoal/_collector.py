"""Collecting task results for a Client (_client.Client inherits this):
result() of one future, waits for many, the completion thread that serves
futures with callbacks or waiters (concurrent.futures, asyncio), and the
sweep of dropped futures' tasks. One thread at a time waits on the task
table (a finished task is taken once); the others wait on the client's
Condition.

Uses the Client's _handle, _cond, _wait_lock, _watched, _wanted,
_user_waiting, _completer, _forgotten and _sweep_at (made by its
__init__)."""

import os
import select
import threading
import time
import weakref

from . import _errors
from ._future import _DONE_STATES, _finish, _finished

# How long the completion thread waits per round (it holds the client's
# connection meanwhile, so a submit from another thread waits at most this).
_COMPLETER_SLICE_S = 0.001

# Dropped futures' tasks are looked at in batches of at least this many.
_MIN_SWEEP = 64

# How long result() waits on the task table by itself before it joins the
# shared collector (so a long wait never keeps another thread's completions,
# callbacks or asyncio waiters from being delivered).
_DIRECT_WAIT_S = 0.02

# The longest one round of the shared collector waits on the table before it
# looks again at which futures threads want (see Client._collect).
_ROUND_S = 0.1


class Collector:
    """The completions half of a Client."""

    # The UnavailableError of a node that went away (its coordinator
    # exited): set once, by _node_gone; then every pending future fails with
    # it and submits raise it at once.
    _gone = None

    def _watch_node(self, pid):
        """Watches the node's coordinator process `pid` from a daemon
        thread: when it exits, _node_gone. Local clients only (a remote
        client's connection reports a node that went away)."""
        try:
            fd = os.pidfd_open(pid)
        except (AttributeError, OSError):
            fd = None  # no pidfd here: the thread polls the pid instead
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                self._node_gone(pid)
                return
            except OSError:
                return
        threading.Thread(target=_watch_loop, args=(weakref.ref(self), pid, fd),
                         name="shoal-node-watch", daemon=True).start()

    def _node_gone(self, pid):
        """The node's coordinator (pid) exited: fails the futures threads
        wait for and the watched ones, now; later waits and submits fail at
        once (_collect_once, the client's submits)."""
        with self._cond:
            if self._gone is not None:
                return
            self._gone = _errors.UnavailableError(
                f"the node of job {self.job_id!r} went away (its coordinator, "
                f"pid {pid}, exited): its tasks will not finish")
            pending = [e[0] for e in self._wanted.values()] + \
                list(self._watched.values())
            self._watched.clear()
            self._cond.notify_all()
        try:
            self._handle.node_stopped()
        except Exception:  # noqa: BLE001 (an older extension)
            pass
        self._fail(pending)

    def _fail(self, futures):
        """Fails those of `futures` still pending with self._gone."""
        for f in futures:
            if f._state in _DONE_STATES:
                continue
            f._keep = None
            if f._settle(None, self._gone):
                f._notify()

    def _await_one(self, future, timeout):
        """result()/done() of one future. The common case (no other thread
        collecting, no watched futures) waits on the task table directly on
        this thread, as a C++ client does: no Condition, no hand-off. After
        _DIRECT_WAIT_S (or when the direct way is taken) it joins _collect,
        which shares the table among threads."""
        if self._gone is not None:
            self._fail([future])
            return
        if (future.id is not None and not self._watched and
                self._wait_lock.acquire(False)):
            direct = _DIRECT_WAIT_S if timeout is None else \
                min(timeout, _DIRECT_WAIT_S)
            notify = None
            try:
                rows = self._handle.wait([future.id], direct, 1)
                if rows:
                    notify = _finish(future, rows[0])
            finally:
                self._wait_lock.release()
                if self._user_waiting or self._watched:
                    with self._cond:  # (watched meanwhile: it is done now)
                        self._watched.pop(future.id, None)
                        self._cond.notify_all()
            if rows:
                if notify is not None:
                    notify._notify()
                return
            if timeout is not None:
                timeout = max(0.0, timeout - direct)
                if timeout == 0.0:
                    return
        self._collect([future], timeout, 1)

    def _collect(self, futures, timeout, min_done, completer=False):
        """Waits until `min_done` of `futures` finished or `timeout` passed.

        One thread at a time waits on the task table (a finished task is
        taken once): it waits for every thread's wanted futures and the
        watched ones (callbacks, as_completed, asyncio) at once, in rounds of
        at most _ROUND_S so that futures wanted later join, and delivers
        whatever finished; the other threads wait on the Condition. The
        completion thread (`completer`) steps aside while a user thread is
        in here (that one serves the watched futures too).
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        mine = []  # registered in _wanted: when another thread collects
        with self._cond:
            if not completer:
                self._user_waiting += 1
        try:
            while self._collect_once(futures, deadline, min_done, completer,
                                     mine):
                pass
        finally:
            if not completer:
                with self._cond:
                    self._user_waiting -= 1
                    for f in mine:
                        entry = self._wanted.get(f.id)
                        if entry is None:
                            continue
                        if entry[1] <= 1:
                            del self._wanted[f.id]
                        else:
                            self._wanted[f.id] = (f, entry[1] - 1)

    def _collect_once(self, futures, deadline, min_done, completer, mine):
        """One round of _collect; whether to go on. The first time another
        thread holds the table, this one's futures go into _wanted (and
        into `mine`, for _collect to take them out again)."""
        with self._cond:
            done_states = _DONE_STATES
            waiting = [f for f in futures if f._state not in done_states]
            if len(futures) - len(waiting) >= min_done or not waiting:
                return False
            gone = self._gone
        if gone is not None:
            self._fail(waiting)
            return False
        with self._cond:
            left = None if deadline is None else \
                max(0.0, deadline - time.monotonic())
            targets = {f.id: f for f in waiting if f.id is not None}
            need = min_done - (len(futures) - len(waiting))
            if self._wanted or self._watched:
                for task_id, entry in self._wanted.items():
                    if not _finished(entry[0]):
                        targets[task_id] = entry[0]
                for task_id, f in self._watched.items():
                    if not _finished(f):
                        targets[task_id] = f
                need = 1
            if (not targets or (completer and self._user_waiting) or
                    not self._wait_lock.acquire(False)):
                if not completer and not mine:
                    mine.extend(f for f in waiting if f.id is not None)
                    for f in mine:
                        entry = self._wanted.get(f.id)
                        self._wanted[f.id] = (f, 1 if entry is None
                                              else entry[1] + 1)
                if left == 0.0:
                    return False
                self._cond.wait(0.05 if left is None else min(left, 0.05))
                return not completer
        round_s = _ROUND_S if left is None else min(left, _ROUND_S)
        rows, notify = [], []
        try:
            rows = self._handle.wait(list(targets), round_s, need)
            for row in rows:
                f = _finish(targets[row[0]], row)
                if f is not None:
                    notify.append(f)
        finally:
            self._wait_lock.release()
            with self._cond:
                for row in rows:
                    self._watched.pop(row[0], None)
                self._cond.notify_all()
        for f in notify:
            f._notify()
        return not completer and left != 0.0 and (
            deadline is None or time.monotonic() < deadline)

    def _watch(self, future):
        """Delivers `future`'s completion without a caller waiting."""
        with self._cond:
            if future.id is None or future.id in self._watched:
                return
            self._watched[future.id] = future
            if self._completer is None or not self._completer.is_alive():
                self._completer = threading.Thread(
                    target=_complete_loop, args=(weakref.ref(self),),
                    name="shoal-completions", daemon=True)
                self._completer.start()
            self._cond.notify_all()

    def _forget(self, task_id):
        # From __del__: anything may be half torn down; just remember it.
        self._forgotten.append(task_id)

    def _release_forgotten(self):
        """Frees the table entries (and outputs) of dropped futures' tasks
        that finished; the others stay listed until a later sweep (sweeps
        come further apart while many stay, so a submit costs O(1)
        amortised)."""
        ids, self._forgotten = self._forgotten, []
        try:
            rows = self._handle.wait(ids, 0, 0)  # takes and frees them
        except _errors.Error:
            rows = []  # the node went away: nothing left to free
            ids = []
        done = {row[0] for row in rows}
        left = [i for i in ids if i not in done]
        self._forgotten.extend(left)
        self._sweep_at = max(_MIN_SWEEP, 2 * len(left))


def _complete_loop(client_ref):
    """The completion thread: delivers watched futures' completions while
    there are any; ends with its client."""
    while True:
        client = client_ref()
        if client is None:
            return
        with client._cond:
            for task_id in [i for i, f in client._watched.items()
                            if _finished(f)]:
                del client._watched[task_id]  # another thread took it
            if not client._watched:
                client._cond.wait(1.0)
                continue
            watched = list(client._watched.values())
        try:
            client._collect(watched, _COMPLETER_SLICE_S, 1, completer=True)
        except Exception as e:  # noqa: BLE001 (the node went away, ...)
            with client._cond:
                failed = list(client._watched.values())
                client._watched.clear()
            for f in failed:
                if not _finished(f) and f.set_running_or_notify_cancel():
                    f.set_exception(e)
        del client


# How often the node watch looks whether its client is still there.
_WATCH_ROUND_S = 1.0


def _watch_loop(client_ref, pid, fd):
    """The node watch: waits for the coordinator's pidfd to become readable
    (the process exited), or polls the pid where there is no pidfd; ends
    with its client."""
    try:
        while True:
            if fd is not None:
                ready, _, _ = select.select([fd], [], [], _WATCH_ROUND_S)
                exited = bool(ready)
            else:
                time.sleep(_WATCH_ROUND_S / 4)
                try:
                    os.kill(pid, 0)
                    exited = False
                except ProcessLookupError:
                    exited = True
                except OSError:
                    exited = False
            client = client_ref()
            if client is None:
                return
            if exited:
                client._node_gone(pid)
                return
            del client
    finally:
        if fd is not None:
            os.close(fd)
