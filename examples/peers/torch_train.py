#!/usr/bin/python3
"""PyTorch peer of collx-train's dp x tp mesh: the GPT of torch_gpt.py
(collx's architecture), Megatron tensor parallelism within groups of TP
consecutive ranks (a block's q/k/v and fc1 column-parallel, its o and fc2
row-parallel, with torch_tp.py's f and g operators around Gloo
all_reduce; LayerNorms, embeddings and the tied head replicated) and DDP
on Gloo across the groups (ranks t, t+TP, ...), the same data as
collx-train (windows of seq+1 bytes of a file; step k takes samples
k*BATCH .. k*BATCH+BATCH-1, split over the replicas as collx does), AdamW
with torch.optim's defaults, one thread a rank.

The weights are PyTorch's own initialization (seed 0), or, with INIT, a
collx model file (collx-dp --init gpt) loaded into the same model.

One process a rank, with the environment torch.distributed reads (RANK,
WORLD_SIZE, MASTER_ADDR, MASTER_PORT; collx-run sets them;
GLOO_SOCKET_IFNAME for the interface).

usage: torch_train.py FILE D_MODEL LAYERS HEADS SEQ BATCH STEPS TP [LR [INIT]]
Rank 0 prints one line: "torch dpD x tpT: median step S s, T tokens/s,
loss L, step 0 loss L0" (wall seconds a step, the median over the steps
after the first, which warms up; tokens/s of the global batch; the
losses of the whole batch at the last step and at the first).
"""
import json
import os
import statistics
import struct
import sys
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

sys.dont_write_bytecode = True  # no __pycache__ beside the example
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_gpt import GPT, causal_attention  # noqa: E402
from torch_tp import CopyToTP, ReduceFromTP  # noqa: E402

ST_DTYPES = {"F32": np.float32, "F64": np.float64}


def load_collx(path):
    """A collx .safetensors model as a state dict of torch_gpt.GPT."""
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    header, out = json.loads(raw[8:8 + n]), {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        a, b = e["data_offsets"]
        arr = np.frombuffer(raw[8 + n + a:8 + n + b], ST_DTYPES[e["dtype"]])
        name = name.replace("layers.", "blocks.").replace("attn.", "")
        out[name.replace("mlp.", "")] = torch.from_numpy(
            arr.reshape(e["shape"]).astype(np.float32))
    return out


def shard(lin, dim, t, tp, bias=True):
    """Rank t's part of nn.Linear LIN: rows (dim 0, column-parallel) or
    columns (dim 1, row-parallel, whose bias is added after the sum)."""
    w = lin.weight.detach().chunk(tp, dim)[t]
    out = nn.Linear(w.shape[1], w.shape[0], bias=bias)
    out.weight.data.copy_(w)
    if bias:
        out.bias.data.copy_(lin.bias.detach().chunk(tp, 0)[t])
    return out


class TPBlock(nn.Module):
    """Rank t's shard of a torch_gpt Block in a tensor-parallel group."""
    def __init__(self, blk, t, tp, group):
        super().__init__()
        self.group, self.heads = group, blk.heads // tp
        self.ln1, self.ln2 = blk.ln1, blk.ln2
        self.q, self.k, self.v, self.fc1 = (shard(m, 0, t, tp) for m in
                                            (blk.q, blk.k, blk.v, blk.fc1))
        self.o, self.fc2 = (shard(m, 1, t, tp, False) for m in (blk.o, blk.fc2))
        self.ob, self.fc2b = blk.o.bias, blk.fc2.bias

    def forward(self, x):
        a = CopyToTP.apply(self.ln1(x), self.group)
        y = causal_attention(self.q(a), self.k(a), self.v(a), self.heads)
        h = x + ReduceFromTP.apply(self.o(y), self.group) + self.ob
        m = CopyToTP.apply(self.ln2(h), self.group)
        f = self.fc2(F.gelu(self.fc1(m)))
        return h + ReduceFromTP.apply(f, self.group) + self.fc2b


def groups(world, tp):
    """This rank's (tp group, dp group); every rank creates every group."""
    me, mine = dist.get_rank(), [None, None]
    for d in range(world // tp):
        g = dist.new_group(list(range(d * tp, d * tp + tp)))
        if me // tp == d:
            mine[0] = g
    for t in range(tp):
        g = dist.new_group(list(range(t, world, tp)))
        if me % tp == t:
            mine[1] = g
    return mine


def main():
    if len(sys.argv) < 9:
        sys.exit(__doc__)
    path = sys.argv[1]
    d, layers, heads, seq, batch, steps, tp = (int(a) for a in sys.argv[2:9])
    lr = float(sys.argv[9]) if len(sys.argv) > 9 else 1e-3
    init = sys.argv[10] if len(sys.argv) > 10 else None
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    world, me = dist.get_world_size(), dist.get_rank()
    if world % tp or heads % tp:
        sys.exit(f"torch_train.py: --tp {tp} divides neither the world "
                 f"{world} nor the {heads} heads")
    dp, t = world // tp, me % tp
    tpg, dpg = groups(world, tp)
    torch.manual_seed(0)
    model = GPT(256, d, layers, heads, seq)
    if init:
        model.load_state_dict(load_collx(init))
    model.blocks = nn.ModuleList(TPBlock(b, t, tp, tpg) for b in model.blocks)
    ddp = DDP(model, process_group=dpg)
    opt = torch.optim.AdamW(ddp.parameters(), lr=lr)
    data = torch.tensor(list(open(path, "rb").read()), dtype=torch.long)
    nwin = data.numel() // (seq + 1)
    wins = data[: nwin * (seq + 1)].view(nwin, seq + 1)
    # collx's split: the first batch % dp replicas take one more; each
    # loss is weighted so that DDP's mean is the whole batch's mean
    r = me // tp
    base, extra = divmod(batch, dp)
    count = base + (r < extra)
    start = r * base + min(r, extra)
    times, losses = [], []
    for k in range(steps):
        idx = (k * batch + start + torch.arange(count)) % nwin
        tok = wins[idx]
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=False)
        loss = ddp(tok[:, :-1], tok[:, 1:]) * (count * dp / batch)
        loss.backward()
        opt.step()
        times.append(time.perf_counter() - t0)
        losses.append(loss.detach() / dp)
    both = torch.stack([losses[0], losses[-1]])
    dist.all_reduce(both, group=dpg)
    med = statistics.median(times[1:] if len(times) > 1 else times)
    if me == 0:
        print(f"torch dp{dp} x tp{tp}: median step {med:.4f} s, "
              f"{batch * seq / med:.0f} tokens/s, loss {float(both[1]):.6f}, "
              f"step 0 loss {float(both[0]):.6f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
