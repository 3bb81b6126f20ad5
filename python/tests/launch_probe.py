"""Run by test_launch.py under `shoal launch --nproc-per-node 2`: collectives
on numpy arrays and torch tensors, the key-value store, barriers, and a
zero-copy hand-over through the store. Exits non-zero on any mismatch."""

import sys
import threading
import time

import numpy as np

import shoal


def check(cond, what):
    if not cond:
        print(f"rank {shoal.init().rank}: FAILED {what}", file=sys.stderr)
        sys.exit(3)


def ticks_during(call):
    """How many 1 ms sleeps a thread of this process got through while the
    main thread was in call() (about none if call() held the GIL)."""
    state = {"count": 0, "stop": False}

    def tick():
        while not state["stop"]:
            state["count"] += 1
            time.sleep(0.001)

    t = threading.Thread(target=tick)
    t.start()
    time.sleep(0.01)
    state["count"] = 0
    call()
    state["stop"] = True
    t.join()
    return state["count"]


def main():
    job = shoal.init()
    rank, world = job.rank, job.world_size
    check(world == 2, "world size")

    # numpy: in-place all_reduce of every reduction.
    x = np.full(100_003, rank + 1, dtype=np.float32)
    shoal.all_reduce(x)
    check(np.all(x == 3), "numpy all_reduce sum")
    y = np.arange(10, dtype=np.int64) * (rank + 1)
    shoal.all_reduce(y, op="max")
    check(y.tolist() == [2 * i for i in range(10)], "numpy all_reduce max")
    z = np.full(7, 2.0 * (rank + 1), dtype=np.float64)
    shoal.all_reduce(z, op="avg")
    check(np.allclose(z, 3.0), "numpy all_reduce avg")

    # torch: the same through data_ptr, and async.
    import torch
    t = torch.full((4, 1000), float(rank + 1))
    shoal.all_reduce(t)
    check(bool((t == 3).all()), "torch all_reduce")
    b = torch.ones(33, dtype=torch.bfloat16) * (rank + 1)
    work = shoal.all_reduce(b, async_op=True)
    work.wait(60)
    check(bool((b.float() == 3).all()), "torch bf16 async all_reduce")

    # gathers and broadcast.
    g = shoal.all_gather(np.array([rank, rank * 10], dtype=np.int32))
    check(g.tolist() == [[0, 0], [1, 10]], "all_gather")
    rs = shoal.reduce_scatter(np.arange(4, dtype=np.float32))
    check(rs.tolist() == ([0.0, 2.0] if rank == 0 else [4.0, 6.0]),
          "reduce_scatter")
    bc = np.array([rank + 5.0])
    shoal.broadcast(bc, root=1)
    check(bc.tolist() == [6.0], "broadcast")

    # key-value store and barrier.
    job.kv_set(f"probe/{rank}", f"hello {rank}")
    check(job.kv_get(f"probe/{1 - rank}", timeout=30) ==
          f"hello {1 - rank}".encode(), "kv_get")
    check(job.kv_add("probe/count", 1) in (1, 2), "kv_add")
    job.barrier(60)
    check(job.kv_get("probe/count") == b"2", "kv count after barrier")

    # rank 0 puts, rank 1 maps the same bytes.
    if rank == 0:
        ref = shoal.put(np.arange(1 << 20, dtype=np.float32))
        job.kv_set("probe/object", ref.id)
        job.barrier(60)  # rank 1 has read it
    else:
        object_id = job.kv_get("probe/object", timeout=30).decode()
        v = shoal.get(object_id, timeout=30)
        check(float(v[-1]) == float((1 << 20) - 1), "store hand-over")
        del v
        job.barrier(60)
    # Blocking calls release the GIL: rank 1 arrives 0.3 s late each time,
    # and a thread of rank 0 keeps running while rank 0 waits for it.
    calls = (("barrier", lambda: job.barrier(60)),
             ("all_reduce", lambda: shoal.all_reduce(np.ones(8, np.float32))),
             ("kv_get", lambda: job.kv_get("probe/late", timeout=30)))
    for what, call in calls:
        if rank == 1:
            time.sleep(0.3)
            if what == "kv_get":
                job.kv_set("probe/late", "here")
            else:
                call()
        else:
            count = ticks_during(call)
            check(count >= 30, f"the GIL was held during {what} ({count})")
    job.barrier(60)
    print(f"rank {rank}: ok", flush=True)


if __name__ == "__main__":
    main()
