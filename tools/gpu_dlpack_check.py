"""A CUDA object through the store into torch, with no copy, on the
consumer's stream: the GPU bundle's DLPack check (gpu-bundle/python/
dlpack_cuda_check.py), run by python_checks.sh as one rank of
`shoal launch --nproc-per-node 1 -- python3 dlpack_cuda_check.py HELPER`.

HELPER is tests/gpu/gpu_store_helper, the producer: a C++ process of the
same job that creates a float32 object on cuda:0, queues 40 memsets of it on
a stream of its own (the last one to 0x5A), seals it on that stream and
answers without waiting for them. This process then gets the object on a
stream of its own while that work may still run:

  - torch.from_dlpack(ref) under `torch.cuda.stream(side)` passes the side
    stream to __dlpack__, so the store makes it wait for the producer's event;
  - the tensor is the store's device memory (data_ptr == ref.address) and
    torch allocated nothing for it: no copy, through the host or otherwise;
  - a kernel on the side stream reads only 0x5A bytes: the stream waited;
  - once the tensor and the ref are gone and the stream is idle, the
    reference is released (the helper sees no referenced object).

Exit status 0 when all hold, 1 when one does not, 77 (skip) without a torch
that sees CUDA. Prints one line per check.
"""

import os
import subprocess
import sys
import time


def main():
    helper_path = sys.argv[1]
    size = int(sys.argv[2]) if len(sys.argv) > 2 else 64 << 20
    try:
        import torch
    except ImportError as e:
        print("no PyTorch here:", e)
        return 77
    if not torch.cuda.is_available():
        print("PyTorch", torch.__version__, "sees no CUDA device")
        return 77
    import shoal

    print("torch", torch.__version__, "CUDA", torch.version.cuda,
          torch.cuda.get_device_name(0), "; shoal from",
          os.path.dirname(shoal.__file__))
    helper = subprocess.Popen([helper_path], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)

    def ask(cmd):
        helper.stdin.write(cmd + "\n")
        helper.stdin.flush()
        words = helper.stdout.readline().split()
        if not words or words[0] == "error":
            raise RuntimeError(f"helper: {cmd!r} -> {' '.join(words)!r}")
        return words

    failures = []

    def check(ok, what):
        print(("ok   " if ok else "FAIL ") + what)
        if not ok:
            failures.append(what)

    try:
        object_id = ask(f"slow {size}")[1]
        side = torch.cuda.Stream()
        before = torch.cuda.memory_allocated(0)
        with torch.cuda.stream(side):
            ref = shoal.borrow(object_id)
            t = torch.from_dlpack(ref)
            all_5a = t.view(torch.uint8).eq(0x5A).all()
        side.synchronize()
        check(t.is_cuda and t.device.index == 0,
              f"the tensor is on cuda:0 ({t.device})")
        check(t.dtype == torch.float32 and t.numel() * 4 == size,
              f"float32, {size} bytes")
        check(t.data_ptr() == ref.address,
              "the tensor is the store's device memory "
              f"(data_ptr {t.data_ptr():#x}, object {ref.address:#x})")
        grown = torch.cuda.memory_allocated(0) - before
        check(grown < size,
              f"torch allocated no copy of it ({grown} bytes more, "
              f"object {size})")
        check(bool(all_5a.item()),
              "the side stream waited for the producer's 40 memsets "
              "(every byte 0x5A)")
        del t, all_5a, ref
        side.synchronize()
        absent = "f" * len(object_id)
        referenced = None
        for _ in range(100):
            try:  # any store call collects the releases whose work is done
                shoal.borrow(absent)
            except shoal.NotFoundError:
                pass
            referenced = int(ask("stats")[2])
            if referenced == 0:
                break
            time.sleep(0.02)
        check(referenced == 0,
              f"the consumer's references were released ({referenced} held)")
    except Exception as e:  # noqa: BLE001 (reported, then a failure)
        check(False, f"{type(e).__name__}: {e}")
    finally:
        helper.stdin.close()
        helper.wait(timeout=30)
    print("dlpack cuda:", "FAILED " + "; ".join(failures) if failures else "ok")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
