"""torch.distributed's "shoal" backend on CUDA tensors: the GPU bundle's
torch check (gpu-bundle/python/torch_cuda_check.py), run by run.sh as the
ranks of `shoal launch --nproc-per-node N -- python3 torch_cuda_check.py`
when the bundle carries a torch backend extension built against torch 2.x.

Each rank: all_reduce (blocking and async, through its Work), broadcast and
all_gather of CUDA tensors, each checked against the values every rank can
compute; then a barrier. Exit status 0 when all hold, 1 when one does not,
77 (skip) without a torch that sees CUDA.
"""

import os
import sys


def main():
    try:
        import torch
        import torch.distributed as dist
    except ImportError as e:
        print("no PyTorch here:", e)
        return 77
    if not torch.cuda.is_available():
        print("PyTorch", torch.__version__, "sees no CUDA device")
        return 77
    import shoal.torch  # noqa: F401  (registers the "shoal" backend)

    dist.init_process_group("shoal")
    rank, world = dist.get_rank(), dist.get_world_size()
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")) %
                          torch.cuda.device_count())
    torch.cuda.set_device(device)
    failures = []

    def check(ok, what):
        print(f"rank {rank}: " + ("ok   " if ok else "FAIL ") + what)
        if not ok:
            failures.append(what)

    n = 1 << 20
    want = float(world * (world + 1) // 2)
    t = torch.full((n,), float(rank + 1), device=device)
    dist.all_reduce(t)
    torch.cuda.synchronize(device)
    check(bool(t.eq(want).all().item()), f"all_reduce sum = {want}")

    t = torch.full((n,), float(rank + 1), device=device)
    work = dist.all_reduce(t, async_op=True)
    work.wait()
    torch.cuda.synchronize(device)
    check(bool(t.eq(want).all().item()), "async all_reduce, Work.wait()")

    b = torch.full((n,), float(rank), device=device)
    dist.broadcast(b, src=world - 1)
    torch.cuda.synchronize(device)
    check(bool(b.eq(float(world - 1)).all().item()), "broadcast from the last")

    parts = [torch.empty(1000, device=device) for _ in range(world)]
    dist.all_gather(parts, torch.full((1000,), float(rank), device=device))
    torch.cuda.synchronize(device)
    check(all(bool(p.eq(float(r)).all().item()) for r, p in enumerate(parts)),
          "all_gather")
    dist.barrier()
    dist.destroy_process_group()
    print(f"rank {rank}: torch cuda:", "FAILED" if failures else "ok")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
