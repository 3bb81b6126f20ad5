"""Launch mode: a process started by `shoal launch` joins its job — rank,
world size, the job's key-value store, barriers, the node's store.

The process's Job (shoal.init, shoal.kv_set, ...) is _context's."""

from typing import TYPE_CHECKING, Any, Iterable, Optional, Union

from . import _store

if TYPE_CHECKING:
    from . import _shoal

DEFAULT_BARRIER_TIMEOUT = 300.0


def _bytes(value: Union[str, bytes]) -> bytes:
    return value.encode() if isinstance(value, str) else bytes(value)


class Job:
    """This process's place in a launched job (see shoal.init)."""

    def __init__(self, handle: "_shoal.Job") -> None:
        self._handle = handle

    @property
    def rank(self) -> int:
        """This process's rank in the job, 0 to world_size - 1."""
        return self._handle.rank

    @property
    def world_size(self) -> int:
        """How many processes the job has."""
        return self._handle.world_size

    @property
    def local_rank(self) -> int:
        """This process's rank among the job's processes on its machine."""
        return self._handle.local_rank

    @property
    def local_world_size(self) -> int:
        """How many of the job's processes run on this machine."""
        return self._handle.local_world_size

    @property
    def node_rank(self) -> int:
        """This machine's rank among the job's machines."""
        return self._handle.node_rank

    @property
    def nnodes(self) -> int:
        """How many machines the job runs on."""
        return self._handle.nnodes

    @property
    def restart_count(self) -> int:
        """How many times the job's processes were restarted."""
        return self._handle.restart_count

    @property
    def job_id(self) -> str:
        """The job's id."""
        return self._handle.job_id

    def kv_set(self, key: str, value: Union[str, bytes]) -> None:
        """Sets key to value (bytes or str) in the job's key-value store."""
        self._handle.kv_set(key, _bytes(value))

    def kv_get(self, key: str, timeout: Optional[float] = 0) -> bytes:
        """The key's value (bytes), waiting up to `timeout` seconds (None:
        forever) for it to be set. NotFoundError / TimeoutError otherwise."""
        return self._handle.kv_get(key, timeout)

    def kv_add(self, key: str, delta: int = 1) -> int:
        """Adds delta to the key's integer value (absent: 0); the sum."""
        return self._handle.kv_add(key, int(delta))

    def kv_compare_and_set(self, key: str,
                           expected: Optional[Union[str, bytes]],
                           desired: Union[str, bytes]) -> bool:
        """Sets desired if the key holds expected (None: if it is absent);
        whether it did."""
        return self._handle.kv_compare_and_set(
            key, None if expected is None else _bytes(expected),
            _bytes(desired))

    def kv_delete(self, key: str) -> bool:
        """Deletes the key; whether it existed."""
        return self._handle.kv_delete(key)

    def kv_list(self, prefix: str = "") -> dict[str, bytes]:
        """{key: value} of every key starting with prefix."""
        return dict(self._handle.kv_list(prefix))

    def kv_wait(self, keys: Union[str, Iterable[str]],
                timeout: Optional[float] = None) -> None:
        """Waits until every key exists (TimeoutError names the missing)."""
        if isinstance(keys, str):
            keys = [keys]
        self._handle.kv_wait(list(keys), timeout)

    def barrier(self, timeout: Optional[float] = DEFAULT_BARRIER_TIMEOUT
                ) -> None:
        """Returns once every process of the job called barrier(); raises
        TimeoutError after `timeout` seconds (None: waits forever)."""
        self._handle.barrier(timeout)

    def put(self, obj: Any, *, dtype: Optional[str] = None
            ) -> Union[_store.ObjectRef, _store.ValueRef]:
        """See shoal.put."""
        return _store.put_into(self._handle.store, obj, dtype)

    def get(self, ref: Any, *, timeout: Optional[float] = 0) -> Any:
        """See shoal.get."""
        return _store.get_from(lambda: self._handle.store, ref, timeout)

    def __repr__(self) -> str:
        return (f"<shoal.Job {self.job_id} rank {self.rank} of "
                f"{self.world_size}>")
