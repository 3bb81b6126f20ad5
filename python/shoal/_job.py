"""Launch mode: a process started by `shoal launch` joins its job — rank,
world size, the job's key-value store, barriers, the node's store.

The process's Job (shoal.init, shoal.kv_set, ...) is _context's."""

from . import _store

DEFAULT_BARRIER_TIMEOUT = 300.0


def _bytes(value):
    return value.encode() if isinstance(value, str) else bytes(value)


class Job:
    """This process's place in a launched job (see shoal.init)."""

    def __init__(self, handle):
        self._handle = handle

    rank = property(lambda self: self._handle.rank)
    world_size = property(lambda self: self._handle.world_size)
    local_rank = property(lambda self: self._handle.local_rank)
    local_world_size = property(lambda self: self._handle.local_world_size)
    node_rank = property(lambda self: self._handle.node_rank)
    nnodes = property(lambda self: self._handle.nnodes)
    restart_count = property(lambda self: self._handle.restart_count)
    job_id = property(lambda self: self._handle.job_id)

    def kv_set(self, key, value):
        """Sets key to value (bytes or str) in the job's key-value store."""
        self._handle.kv_set(key, _bytes(value))

    def kv_get(self, key, timeout=0):
        """The key's value (bytes), waiting up to `timeout` seconds (None:
        forever) for it to be set. NotFoundError / TimeoutError otherwise."""
        return self._handle.kv_get(key, timeout)

    def kv_add(self, key, delta=1):
        """Adds delta to the key's integer value (absent: 0); the sum."""
        return self._handle.kv_add(key, int(delta))

    def kv_compare_and_set(self, key, expected, desired):
        """Sets desired if the key holds expected (None: if it is absent);
        whether it did."""
        return self._handle.kv_compare_and_set(
            key, None if expected is None else _bytes(expected),
            _bytes(desired))

    def kv_delete(self, key):
        """Deletes the key; whether it existed."""
        return self._handle.kv_delete(key)

    def kv_list(self, prefix=""):
        """{key: value} of every key starting with prefix."""
        return dict(self._handle.kv_list(prefix))

    def kv_wait(self, keys, timeout=None):
        """Waits until every key exists (TimeoutError names the missing)."""
        if isinstance(keys, str):
            keys = [keys]
        self._handle.kv_wait(list(keys), timeout)

    def barrier(self, timeout=DEFAULT_BARRIER_TIMEOUT):
        """Returns once every process of the job called barrier()."""
        self._handle.barrier(timeout)

    def put(self, obj, *, dtype=None):
        """See shoal.put."""
        return _store.put_into(self._handle.store, obj, dtype)

    def get(self, ref, *, timeout=0):
        """See shoal.get."""
        return _store.get_from(lambda: self._handle.store, ref, timeout)

    def __repr__(self):
        return (f"<shoal.Job {self.job_id} rank {self.rank} of "
                f"{self.world_size}>")
