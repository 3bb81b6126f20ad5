"""Data-parallel training of a torch MLP under `shoal launch`.

    shoal launch --nproc-per-node 2 -- \
        /usr/bin/python3 examples/python_torch/train.py
    shoal launch --nproc-per-node gpu -- python3 examples/python_torch/train.py

The same job as examples/data_parallel, in Python: an MLP regresses the
outputs of a fixed random "teacher" network on a synthetic data set.

- The first process on each node generates the data set and puts it into the
  node's store once; every process reads its shard in place
  (torch.from_dlpack of the store object: no copy on the CPU; on a GPU, the
  shard is copied to the device once).
- The model is wrapped in torch's DistributedDataParallel over the
  torch.distributed backend "shoal" (`import shoal.torch`;
  dist.init_process_group("shoal") from the env:// variables shoal launch
  sets): DDP averages the gradients in buckets during backward through
  shoal's collectives — shared memory for CPU tensors, NCCL for CUDA
  tensors. One small all_reduce (AVG) of the loss gives every rank the
  global loss.
- Every rank applies the same SGD update; every --check-every steps a hash of
  the parameters is compared across ranks through the job's key-value store
  (rank 0 compares and stops the job if they differ).
- Rank 0 prints the loss and samples/s as it goes and writes a CSV of the
  loss curve at the end (the columns of examples/data_parallel's CSV).

N ranks with batch B per rank follow the loss curve of 1 rank with batch N*B
(the same rows make up each global batch), up to float rounding.
"""

import argparse
import hashlib
import os
import sys
import time

import torch
import torch.distributed as dist

import shoal
import shoal.torch  # noqa: F401  (registers the backend "shoal")

CSV_HEADER = "step,loss,samples_per_s,step_ms,ranks,batch_per_rank,device"


def parse_args(argv=None):
    p = argparse.ArgumentParser(
        description="Data-parallel training of a torch MLP with shoal's "
        "store and collectives (run under `shoal launch`).")
    p.add_argument("--steps", type=int, default=600, help="optimizer steps")
    p.add_argument("--loader", action="store_true",
                   help="read batches through shoal.data.DataLoader (one "
                   "worker per rank, DistributedSampler) instead of slicing "
                   "the shard")
    p.add_argument("--batch", type=int, default=64,
                   help="samples per rank and step")
    p.add_argument("--lr", type=float, default=0.05, help="SGD learning rate")
    p.add_argument("--momentum", type=float, default=0.9, help="SGD momentum")
    p.add_argument("--inputs", type=int, default=128, help="input features")
    p.add_argument("--hidden", type=int, default=1024,
                   help="width of the hidden layers")
    p.add_argument("--layers", type=int, default=3,
                   help="linear layers (2 or more)")
    p.add_argument("--outputs", type=int, default=32,
                   help="regression targets")
    p.add_argument("--teacher-hidden", type=int, default=64,
                   help="hidden width of the teacher network")
    p.add_argument("--samples", type=int, default=65536, help="data set size")
    p.add_argument("--seed", type=int, default=1,
                   help="seed of the data set and the initial model")
    p.add_argument("--device", choices=("auto", "cpu", "cuda"),
                   default="auto",
                   help="auto: CUDA when torch sees a GPU, else the CPU")
    p.add_argument("--check-every", type=int, default=50,
                   help="compare the ranks' parameter hashes every N steps")
    p.add_argument("--log-every", type=int, default=50,
                   help="print the loss every N steps")
    p.add_argument("--warmup", type=int, default=10,
                   help="steps left out of the summary's samples/s")
    p.add_argument("--csv", default="",
                   help="loss CSV (default out/python_torch/loss_<R>x<B>.csv)")
    p.add_argument("--diverge-at", type=int, default=-1,
                   help="testing: rank 1 perturbs its update at this step")
    a = p.parse_args(argv)
    if a.steps < 1 or a.batch < 1 or a.layers < 2:
        p.error("--steps and --batch must be positive, --layers at least 2")
    return a


def make_dataset(a):
    """(samples, inputs + outputs) float32 rows: x uniform in [-1, 1), then
    y = V tanh(U x + c) of a teacher whose weights come from the seed,
    scaled so that y has about unit variance."""
    g = torch.Generator().manual_seed(a.seed ^ 0x7eac4e7)
    th = a.teacher_hidden

    def uniform(*shape):
        return torch.rand(*shape, generator=g) * 2 - 1

    u = uniform(a.inputs, th) * (3.0 / a.inputs ** 0.5)
    c = uniform(th) * 0.5
    v = uniform(th, a.outputs) * (3.0 / (0.39 * th)) ** 0.5
    x = uniform(a.samples, a.inputs)
    y = torch.tanh(x @ u + c) @ v
    return torch.cat([x, y], dim=1).numpy()


def shared_dataset(job, a, prefix):
    """The data set as a read-only numpy view of a store object: the first
    process on each node generates and puts it, the others find its id in
    the key-value store. Returns (view, ref): keep both alive while reading
    (ref is the putting process's own reference, None elsewhere)."""
    key = f"{prefix}/dataset/node{job.node_rank}"
    ref = None
    if job.local_rank == 0:
        ref = shoal.put(make_dataset(a))  # one copy, into shared memory
        job.kv_set(key, ref.id)
        object_id = ref.id
    else:
        object_id = job.kv_get(key, timeout=300).decode()
    return shoal.get(object_id, timeout=60), ref


def choose_device(job, a, prefix):
    """CUDA or CPU, the same on every rank (the collectives must match):
    each rank's choice goes through the key-value store and is compared."""
    if a.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("--device cuda: torch sees no GPU")
    use_cuda = a.device == "cuda" or (a.device == "auto" and
                                      torch.cuda.is_available())
    kind = "cuda" if use_cuda else "cpu"
    job.kv_set(f"{prefix}/device/{job.rank}", kind)
    for r in range(job.world_size):
        theirs = job.kv_get(f"{prefix}/device/{r}", timeout=300).decode()
        if theirs != kind:
            raise SystemExit(
                f"rank {job.rank} chose {kind} but rank {r} chose {theirs}: "
                "pass --device to make them agree")
    if not use_cuda:
        return torch.device("cpu")
    # Under `--nproc-per-node gpu` each process sees just its own GPU;
    # with more GPUs visible, local rank k takes GPU k.
    return torch.device("cuda", job.local_rank % torch.cuda.device_count())


def make_model(a):
    """The student MLP (ReLU between layers), initialised from the seed:
    weights uniform in +-sqrt(6/in) (+-sqrt(3/in) for the linear output
    layer), biases zero — the same on every rank."""
    g = torch.Generator().manual_seed(a.seed)
    widths = [a.inputs] + [a.hidden] * (a.layers - 1) + [a.outputs]
    layers = []
    for i, (n_in, n_out) in enumerate(zip(widths, widths[1:])):
        lin = torch.nn.Linear(n_in, n_out)
        bound = ((3.0 if i == a.layers - 1 else 6.0) / n_in) ** 0.5
        with torch.no_grad():
            lin.weight.copy_((torch.rand(lin.weight.shape, generator=g) * 2
                              - 1) * bound)
            lin.bias.zero_()
        layers += [lin, torch.nn.ReLU()]
    return torch.nn.Sequential(*layers[:-1])


def params_hash(params):
    h = hashlib.blake2b(digest_size=8)
    for p in params:
        h.update(p.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()


class ReplicaCheck:
    """Every rank publishes its parameter hash; rank 0 compares them and
    exits non-zero on a mismatch (which stops the whole job)."""

    def __init__(self, job, prefix):
        self.job, self.prefix, self.checks = job, prefix, 0

    def run(self, params, step):
        mine = params_hash(params)
        self.checks += 1
        key = f"{self.prefix}/params/{step}/"
        if self.job.rank != 0:
            self.job.kv_set(key + str(self.job.rank), mine)
            return
        seen = [f"rank 0 {mine}"]
        same = True
        for r in range(1, self.job.world_size):
            theirs = self.job.kv_get(key + str(r), timeout=300).decode()
            self.job.kv_delete(key + str(r))
            seen.append(f"rank {r} {theirs}")
            same = same and theirs == mine
        if not same:
            print(f"python_torch: the ranks' parameters are no longer "
                  f"bit-identical after step {step} ({', '.join(seen)}): "
                  "every rank must apply the same averaged gradients",
                  file=sys.stderr, flush=True)
            sys.exit(2)


def loader_batches(rows, batch):
    """This rank's batches, epoch after epoch, from shoal.data.DataLoader:
    DistributedSampler without shuffling gives rank r rows r, r + N, ... so
    global batch k is the same set of rows [k*N*B, (k+1)*N*B) as with the
    shard's slices (the ranks of a node share one copy in its store)."""
    from shoal.data import DataLoader, DistributedSampler
    sampler = DistributedSampler(rows, shuffle=False)
    loader = DataLoader(rows, batch_size=batch, sampler=sampler,
                        num_workers=1, persistent_workers=True)
    epoch = 0
    while True:
        sampler.set_epoch(epoch)
        yield from loader
        epoch += 1


def main(argv=None):
    a = parse_args(argv)
    job = shoal.init()
    rank, world = job.rank, job.world_size
    lead = rank == 0
    prefix = f"python_torch/{job.restart_count}"

    device = choose_device(job, a, prefix)
    view, own_ref = shared_dataset(job, a, prefix)
    rows = torch.from_dlpack(view)  # the store's memory, read-only
    width = a.inputs + a.outputs

    # Global batch k of an epoch is rows [k*world*B, (k+1)*world*B); rank r
    # takes the r-th B of them (as examples/data_parallel's Shard).
    per_epoch = a.samples // (world * a.batch)
    if per_epoch < 1:
        raise SystemExit(f"--samples {a.samples} is smaller than one global "
                         f"batch ({world} x {a.batch})")
    shard = rows[:per_epoch * world * a.batch].view(
        per_epoch, world, a.batch, width)[:, rank]
    if device.type == "cuda" and not a.loader:
        shard = shard.to(device)  # this rank's rows, copied once
    if a.loader:
        source = loader_batches(rows[:per_epoch * world * a.batch], a.batch)

    dist.init_process_group("shoal")  # env:// from shoal launch
    model = make_model(a).to(device)
    params = list(model.parameters())
    n_params = sum(p.numel() for p in params)
    ddp = torch.nn.parallel.DistributedDataParallel(
        model, gradient_as_bucket_view=True)
    opt = torch.optim.SGD(ddp.parameters(), lr=a.lr, momentum=a.momentum)
    check = ReplicaCheck(job, prefix)
    if lead:
        widths = [a.inputs] + [a.hidden] * (a.layers - 1) + [a.outputs]
        on = device.type
        if on == "cuda":
            on = f"{device} ({torch.cuda.get_device_name(device)})"
        print(f"python_torch: {world} rank{'s' if world > 1 else ''} x batch "
              f"{a.batch} (global {world * a.batch}) on {on}; torch "
              f"{torch.__version__}, {torch.get_num_threads()} thread(s) per "
              f"rank\n"
              f"  model {'-'.join(map(str, widths))}: {n_params} parameters; "
              f"gradients ({4 * n_params / 2**20:.1f} MiB) averaged by DDP "
              f"over torch.distributed's \"shoal\" backend\n"
              f"  data: {a.samples} samples ({view.nbytes / 2**20:.1f} MiB) "
              f"in the node's store (object {own_ref.id}), read in place; "
              f"{per_epoch} global batches per epoch", flush=True)

    records = []  # (step, loss, seconds, seconds in the loss all_reduce)
    window_start, window_steps, window_wait = time.perf_counter(), 0, 0.0
    for step in range(a.steps):
        t0 = time.perf_counter()
        batch = next(source).to(device) if a.loader else \
            shard[step % per_epoch]
        x, y = batch[:, :a.inputs], batch[:, a.inputs:]

        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(ddp(x), y)
        loss.backward()  # DDP averages the gradients across ranks
        t_sync = time.perf_counter()
        global_loss = loss.detach().clone()
        dist.all_reduce(global_loss, op=dist.ReduceOp.AVG)
        wait = time.perf_counter() - t_sync

        diverge = step + 1 == a.diverge_at and rank == 1
        if diverge:
            opt.param_groups[0]["lr"] = a.lr * 1.001
        opt.step()
        if diverge:
            opt.param_groups[0]["lr"] = a.lr
        global_loss = float(global_loss)  # waits for the GPU, if any
        seconds = time.perf_counter() - t0
        records.append((step + 1, global_loss, seconds, wait))
        window_steps += 1
        window_wait += wait

        last = step + 1 == a.steps
        if last or (a.check_every > 0 and (step + 1) % a.check_every == 0):
            check.run(params, step + 1)
        if lead and (last or step == 0 or
                     (a.log_every > 0 and (step + 1) % a.log_every == 0)):
            span = time.perf_counter() - window_start
            n = window_steps
            print(f"step {step + 1:6d}  loss {global_loss:.6f}  "
                  f"{world * a.batch * n / span:9.0f} samples/s  "
                  f"{1e3 * span / n:6.2f} ms/step  "
                  f"({1e3 * window_wait / n:.2f} ms in the loss all_reduce)",
                  flush=True)
            window_start, window_steps = time.perf_counter(), 0
            window_wait = 0.0

    dist.destroy_process_group()
    job.barrier()  # nobody reads the data set any more
    if not lead:
        return 0
    timed = records[a.warmup:] if len(records) > a.warmup else records
    seconds = sum(r[2] for r in timed)
    sps = world * a.batch * len(timed) / seconds
    step_ms = 1e3 * seconds / len(timed)
    wait_ms = 1e3 * sum(r[3] for r in timed) / len(timed)
    print(f"done: {a.steps} steps, final loss {records[-1][1]:.6f} (first "
          f"{records[0][1]:.6f}); {sps:.0f} samples/s ({sps / world:.0f} per "
          f"rank), {step_ms:.2f} ms/step of which {wait_ms:.2f} ms in "
          f"the loss all_reduce; parameters bit-identical across ranks at "
          f"{check.checks} checks")
    print(f"summary: ranks={world} batch={a.batch} "
          f"global_batch={world * a.batch} device={device.type} "
          f"steps={a.steps} samples_per_s={sps:.1f} step_ms={step_ms:.3f} "
          f"wait_ms={wait_ms:.3f} "
          f"final_loss={records[-1][1]:.7g} checks={check.checks}")
    csv = os.path.abspath(a.csv or os.path.join(
        "out", "python_torch", f"loss_{world}x{a.batch}.csv"))
    os.makedirs(os.path.dirname(csv), exist_ok=True)
    with open(csv, "w") as f:
        f.write(CSV_HEADER + "\n")
        for s, loss, sec, _ in records:
            f.write(f"{s},{loss:.7g},{world * a.batch / sec:.1f},"
                    f"{1e3 * sec:.3f},{world},{a.batch},{device.type}\n")
    print(f"csv:  {csv}", flush=True)
    del own_ref
    return 0


if __name__ == "__main__":
    sys.exit(main())
