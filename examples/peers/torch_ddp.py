#!/usr/bin/python3
"""PyTorch DDP peer of collx-dp on Gloo: the GPT of torch_gpt.py (collx-dp's
architecture, PyTorch's own initialization), the same data (windows of
seq+1 bytes of a file, global batch BATCH, rank r taking its share of each
as collx-dp does), AdamW with torch.optim's defaults, one thread a rank,
the gradients synced by one of DDP's communication methods:

  plain          DDP's own allreduce (no hook)
  fp16           fp16_compress_hook
  bf16           bf16_compress_hook (PyTorch 1.13 runs it only on CUDA with
                 NCCL 2.10+: on Gloo it stops with torch's message)
  powersgd:R[:K[:S]]
                 powerSGD_hook, matrix_approximation_rank R,
                 start_powerSGD_iter K (default 10); with S (and INIT),
                 the first Q of every compressed tensor is collx's
                 (collx-tensor create --fill randn --seed S+t, t the
                 tensor's place in INIT's name order), as collx-dp
                 --powersgd R --seed S draws it, so that the two toolkits
                 can be compared step by step

PyTorch 1.13's powerSGD_hook runs a bucket's P and Q allreduces from the
callbacks of Gloo's worker threads while the backward goes on and starts
the next bucket's allreduce from the main thread. Each rank issues them in
the order its own timing gives, and Gloo pairs the collectives of the
ranks by that order: two ranks a few tenths of a second apart (load, slow
links) pair different tensors, one aborts ("op.preamble.length <=
op.nbytes") and the other sees "Connection reset by peer". So each bucket
waits here for the previous one's chain before it starts (in_order): the
order is then the same on every rank. The wait costs little, since the
backward has finished by the time the last bucket is ready.

The weights are PyTorch's own initialization (seed 0), or, with INIT, a
collx model file (collx-dp --init gpt) loaded into the same model.

One process a rank, with the environment torch.distributed reads (RANK,
WORLD_SIZE, MASTER_ADDR, MASTER_PORT; collx-run sets them;
GLOO_SOCKET_IFNAME for the interface).

usage: torch_ddp.py FILE D_MODEL LAYERS HEADS SEQ BATCH STEPS METHOD
           [LR [INIT [LOSS_CSV]]]
Rank 0 prints one line: "torch METHOD: mean step S s, T tokens/s, loss L"
(wall seconds a step, the mean over the steps after the first, which
warms up; tokens/s of the global batch; the loss of the last step, the
mean over the ranks). With LOSS_CSV, rank 0 writes every step's loss
there (columns step,loss; the mean over the ranks).
"""
import os
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch
import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook
from torch.nn.parallel import DistributedDataParallel as DDP

sys.dont_write_bytecode = True  # no __pycache__ beside the example
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_gpt import GPT  # noqa: E402
from torch_train import load_collx  # noqa: E402


def collx_first_qs(ddp, init, rank, seed):
    """The first Q (m x r) of every tensor that powerSGD_hook compresses,
    by the parameter's data_ptr(), drawn as collx-dp --powersgd RANK --seed
    SEED draws it: collx-tensor create --fill randn --seed SEED+t, t the
    tensor's place in the collx file INIT, whose tensors collx writes in
    name order."""
    place = {name: t for t, name in enumerate(load_collx(init))}
    qs = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, p in ddp.module.named_parameters():
            n, m = p.shape[0], p.numel() // p.shape[0]
            r = min(n, m, rank)
            if p.dim() < 2 or (n + m) * r * 2 >= n * m:
                continue
            out = os.path.join(tmp, "q.npy")
            subprocess.run(["collx-tensor", "create", "--shape", f"{m},{r}",
                            "--fill", "randn", "--seed",
                            str(seed + place[name]), "-o", out], check=True)
            qs[p.data_ptr()] = torch.from_numpy(
                np.load(out).astype(np.float32))
    return qs


def seed_qs(state, bucket, qs):
    """Lays QS out as powerSGD_hook's warm-start memory of BUCKET, so that
    the hook orthogonalizes them instead of drawing its own: the hook's
    layout, the compressed matrices grouped by shape (n, m), the groups in
    the order their shapes first come in the bucket."""
    by_shape = {}
    for p in bucket.parameters():
        q = qs.get(p.data_ptr())
        if q is not None:
            by_shape.setdefault((p.shape[0], q.shape[0]), []).append(q)
    mine = [q.reshape(-1) for group in by_shape.values() for q in group]
    ps_size = sum(n * len(g) * g[0].shape[1] for (n, _), g in by_shape.items())
    state.p_memory_dict[bucket.index()] = torch.empty(ps_size)
    state.q_memory_dict[bucket.index()] = torch.cat(mine) if mine \
        else torch.empty(0)


def in_order(hook, qs):
    """HOOK with each bucket's chain of allreduces done before the next
    bucket starts one (see the top of the file); with QS, the first
    compressed step takes collx's first Qs."""
    last = []

    def run(state, bucket):
        if last:
            last.pop().wait()
        if qs and state.iter == state.start_powerSGD_iter and \
                bucket.index() not in state.p_memory_dict:
            seed_qs(state, bucket, qs)
        fut = hook(state, bucket)
        last.append(fut)
        return fut
    return run


def hook(ddp, method, init):
    """Registers METHOD's communication hook on ddp."""
    name, _, arg = method.partition(":")
    if name == "plain":
        return
    if name in ("fp16", "bf16"):
        ddp.register_comm_hook(None, getattr(default_hooks,
                                             name + "_compress_hook"))
        return
    if name == "powersgd":
        rank, _, rest = arg.partition(":")
        start, _, seed = rest.partition(":")
        if seed and not init:
            sys.exit("torch_ddp.py: powersgd:R:K:S needs INIT")
        state = powerSGD_hook.PowerSGDState(
            process_group=None, matrix_approximation_rank=int(rank),
            start_powerSGD_iter=int(start) if start else 10)
        qs = collx_first_qs(ddp, init, int(rank), int(seed)) if seed else {}
        ddp.register_comm_hook(state, in_order(powerSGD_hook.powerSGD_hook,
                                               qs))
        return
    sys.exit(f"torch_ddp.py: unknown method '{method}'")


def main():
    if len(sys.argv) < 9:
        sys.exit(__doc__)
    path, d, layers, heads, seq, batch, steps, method = sys.argv[1:9]
    d, layers, heads, seq = int(d), int(layers), int(heads), int(seq)
    batch, steps = int(batch), int(steps)
    lr = float(sys.argv[9]) if len(sys.argv) > 9 else 1e-3
    init = sys.argv[10] if len(sys.argv) > 10 else None
    loss_csv = sys.argv[11] if len(sys.argv) > 11 else None
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    world, me = dist.get_world_size(), dist.get_rank()
    torch.manual_seed(0)
    data = torch.tensor(list(open(path, "rb").read()), dtype=torch.long)
    nwin = data.numel() // (seq + 1)
    wins = data[: nwin * (seq + 1)].view(nwin, seq + 1)
    model = GPT(256, d, layers, heads, seq)
    if init:
        model.load_state_dict(load_collx(init))
    ddp = DDP(model)
    hook(ddp, method, init)
    opt = torch.optim.AdamW(ddp.parameters(), lr=lr)
    # collx's split: the first batch % world ranks take one more
    base, extra = divmod(batch, world)
    count = base + (me < extra)
    start = me * base + min(me, extra)
    times, losses = [], []
    for k in range(steps):
        idx = (k * batch + start + torch.arange(count)) % nwin
        tok = wins[idx]
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=False)
        loss = ddp(tok[:, :-1], tok[:, 1:])
        loss.backward()
        opt.step()
        times.append(time.perf_counter() - t0)
        losses.append(loss.detach())
    losses = torch.stack(losses)
    dist.all_reduce(losses)
    losses /= world
    mean = statistics.fmean(times[1:] if len(times) > 1 else times)
    if me == 0:
        print(f"torch {method}: mean step {mean:.4f} s, "
              f"{batch * seq / mean:.0f} tokens/s, "
              f"loss {float(losses[-1]):.4f}")
        if loss_csv:
            with open(loss_csv + ".tmp", "w") as f:
                f.write("step,loss\n")
                f.writelines(f"{k},{float(v):.9g}\n"
                             for k, v in enumerate(losses))
            os.replace(loss_csv + ".tmp", loss_csv)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
