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
  powersgd:R[:K] powerSGD_hook, matrix_approximation_rank R,
                 start_powerSGD_iter K (default 10)

One process a rank, with the environment torch.distributed reads (RANK,
WORLD_SIZE, MASTER_ADDR, MASTER_PORT; collx-run sets them;
GLOO_SOCKET_IFNAME for the interface).

usage: torch_ddp.py FILE D_MODEL LAYERS HEADS SEQ BATCH STEPS METHOD [LR]
Rank 0 prints one line: "torch METHOD: mean step S s, T tokens/s, loss L"
(wall seconds a step, the mean over the steps after the first, which
warms up; tokens/s of the global batch; the loss of the last step, the
mean over the ranks).
"""
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook
from torch.nn.parallel import DistributedDataParallel as DDP

sys.dont_write_bytecode = True  # no __pycache__ beside the example
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_gpt import GPT  # noqa: E402


def hook(ddp, method):
    """Registers METHOD's communication hook on ddp."""
    name, _, arg = method.partition(":")
    if name == "plain":
        return
    if name in ("fp16", "bf16"):
        ddp.register_comm_hook(None, getattr(default_hooks,
                                             name + "_compress_hook"))
        return
    if name == "powersgd":
        rank, _, start = arg.partition(":")
        state = powerSGD_hook.PowerSGDState(
            process_group=None, matrix_approximation_rank=int(rank),
            start_powerSGD_iter=int(start) if start else 10)
        ddp.register_comm_hook(state, powerSGD_hook.powerSGD_hook)
        return
    sys.exit(f"torch_ddp.py: unknown method '{method}'")


def main():
    if len(sys.argv) < 9:
        sys.exit(__doc__)
    path, d, layers, heads, seq, batch, steps, method = sys.argv[1:9]
    d, layers, heads, seq = int(d), int(layers), int(heads), int(seq)
    batch, steps = int(batch), int(steps)
    lr = float(sys.argv[9]) if len(sys.argv) > 9 else 1e-3
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    world, me = dist.get_world_size(), dist.get_rank()
    torch.manual_seed(0)
    data = torch.tensor(list(open(path, "rb").read()), dtype=torch.long)
    nwin = data.numel() // (seq + 1)
    wins = data[: nwin * (seq + 1)].view(nwin, seq + 1)
    ddp = DDP(GPT(256, d, layers, heads, seq))
    hook(ddp, method)
    opt = torch.optim.AdamW(ddp.parameters(), lr=lr)
    # collx's split: the first batch % world ranks take one more
    base, extra = divmod(batch, world)
    count = base + (me < extra)
    start = me * base + min(me, extra)
    times = []
    for k in range(steps):
        idx = (k * batch + start + torch.arange(count)) % nwin
        tok = wins[idx]
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=False)
        loss = ddp(tok[:, :-1], tok[:, 1:])
        loss.backward()
        opt.step()
        times.append(time.perf_counter() - t0)
    last = loss.detach().clone()
    dist.all_reduce(last)
    mean = statistics.fmean(times[1:] if len(times) > 1 else times)
    if me == 0:
        print(f"torch {method}: mean step {mean:.4f} s, "
              f"{batch * seq / mean:.0f} tokens/s, loss {float(last) / world:.4f}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
