#!/usr/bin/python3
"""PyTorch CPU peer of collx's --precision bf16: torch_gpt.py's GPT (collx's
architecture), its forward pass under torch.autocast("cpu",
dtype=torch.bfloat16) (PyTorch's mixed precision: linear layers and
matmuls in bf16 through oneDNN, f32 parameters, AdamW in f32), one thread
a rank, the same data as collx (windows of seq+1 bytes of a file; step k
takes samples k*BATCH .. k*BATCH+BATCH-1, split over the ranks as collx
splits them) and DDP on Gloo when started on several ranks (RANK,
WORLD_SIZE, MASTER_ADDR, MASTER_PORT, as collx-run sets them).

The weights are PyTorch's own initialization (seed 0), or, with INIT, a
collx model file (collx-dp --init gpt) loaded into the same model.

usage: torch_autocast.py FILE D_MODEL LAYERS HEADS SEQ BATCH STEPS [LR [INIT]]
Rank 0 prints one line: "torch autocast bf16 dpN: median step S s,
T tokens/s, loss L, step 0 loss L0" (wall seconds a step, the median over
the steps after the first, which warms up; tokens/s of the global batch;
rank 0's loss at the last step and at the first).
"""
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

sys.dont_write_bytecode = True  # no __pycache__ beside the example
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_gpt import GPT  # noqa: E402
from torch_train import load_collx  # noqa: E402


def main():
    if len(sys.argv) < 8:
        sys.exit(__doc__)
    path = sys.argv[1]
    d, layers, heads, seq, batch, steps = (int(a) for a in sys.argv[2:8])
    lr = float(sys.argv[8]) if len(sys.argv) > 8 else 1e-3
    init = sys.argv[9] if len(sys.argv) > 9 else None
    torch.set_num_threads(1)
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world > 1:
        dist.init_process_group("gloo")
    me = dist.get_rank() if world > 1 else 0
    torch.manual_seed(0)
    model = GPT(256, d, layers, heads, seq)
    if init:
        model.load_state_dict(load_collx(init))
    run = DDP(model) if world > 1 else model
    opt = torch.optim.AdamW(run.parameters(), lr=lr)
    data = torch.tensor(list(open(path, "rb").read()), dtype=torch.long)
    nwin = data.numel() // (seq + 1)
    wins = data[: nwin * (seq + 1)].view(nwin, seq + 1)
    base, extra = divmod(batch, world)
    count = base + (me < extra)
    start = me * base + min(me, extra)
    times, losses = [], []
    for k in range(steps):
        tok = wins[(k * batch + start + torch.arange(count)) % nwin]
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=False)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = run(tok[:, :-1], tok[:, 1:])
        loss.backward()
        opt.step()
        times.append(time.perf_counter() - t0)
        losses.append(loss.item())
    med = statistics.median(times[1:] if len(times) > 1 else times)
    if me == 0:
        print(f"torch autocast bf16 dp{world}: median step {med:.4f} s, "
              f"{batch * seq / med:.0f} tokens/s, loss {losses[-1]:.6f}, "
              f"step 0 loss {losses[0]:.6f}", flush=True)
    if world > 1:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
