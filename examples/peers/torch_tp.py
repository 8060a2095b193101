"""PyTorch peer of collx-tp for examples/bench-tp.sh: one transformer block
(pre-LayerNorm, exact GELU, non-causal) forward+backward with Megatron
tensor parallelism on torch.distributed Gloo (the f and g operators as
autograd Functions around all_reduce) and Ulysses sequence parallelism
(an all-to-all built from isend/irecv, since Gloo has none, and the weight
gradients summed by one fused all_reduce), the way the classic exercises
write them. One thread per rank.

usage: /usr/bin/python3 torch_tp.py WORLD ITERS WARMUP [D HEADS SEQ BATCH FF]
prints, from rank 0, one line per mode: torch,MODE,WORLD,MEDIAN_SECONDS
"""
import math
import os
import socket
import statistics
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F


class CopyToTP(torch.autograd.Function):
    """Megatron's f: identity forward, allreduce of the gradient backward
    (in GROUP, the default group when left out)."""
    @staticmethod
    def forward(ctx, x, group=None):
        ctx.group = group
        return x

    @staticmethod
    def backward(ctx, g):
        g = g.contiguous().clone()
        dist.all_reduce(g, group=ctx.group)
        return g, None


class ReduceFromTP(torch.autograd.Function):
    """Megatron's g: allreduce forward (in GROUP), identity backward."""
    @staticmethod
    def forward(ctx, x, group=None):
        x = x.contiguous().clone()
        dist.all_reduce(x, group=group)
        return x

    @staticmethod
    def backward(ctx, g):
        return g, None


def alltoall(chunks):
    """chunks[j] goes to rank j; returns what each rank sent here."""
    r, w = dist.get_rank(), dist.get_world_size()
    chunks = [c.contiguous() for c in chunks]
    out = [torch.empty_like(c) for c in chunks]
    out[r].copy_(chunks[r])
    reqs = []
    for j in range(w):
        if j != r:
            reqs.append(dist.isend(chunks[j], j))
            reqs.append(dist.irecv(out[j], j))
    for q in reqs:
        q.wait()
    return out


def seq_to_heads(t):    # [b, s/W, H, hd] -> [b, s, H/W, hd]
    w = dist.get_world_size()
    return torch.cat(alltoall(list(t.chunk(w, dim=2))), dim=1)


def heads_to_seq(t):    # [b, s, H/W, hd] -> [b, s/W, H, hd]
    w = dist.get_world_size()
    return torch.cat(alltoall(list(t.chunk(w, dim=1))), dim=2)


class SeqToHeads(torch.autograd.Function):
    @staticmethod
    def forward(ctx, t):
        return seq_to_heads(t)

    @staticmethod
    def backward(ctx, g):
        return heads_to_seq(g)


class HeadsToSeq(torch.autograd.Function):
    @staticmethod
    def forward(ctx, t):
        return heads_to_seq(t)

    @staticmethod
    def backward(ctx, g):
        return seq_to_heads(g)


def params(d, f, heads_frac, ff_frac):
    """Leaf tensors of one rank: q,k,v rows and o columns of its heads,
    fc1 rows and fc2 columns of its features (fractions 1 = whole)."""
    g = torch.Generator().manual_seed(0)
    c, fl = int(d * heads_frac), int(f * ff_frac)

    def t(*shape, scale=0.02):
        return (scale * torch.randn(*shape, generator=g)).requires_grad_()
    return {
        "ln1w": torch.ones(d, requires_grad=True), "ln1b": torch.zeros(d, requires_grad=True),
        "qw": t(c, d), "qb": t(c), "kw": t(c, d), "kb": t(c), "vw": t(c, d), "vb": t(c),
        "ow": t(d, c), "ob": t(d),
        "ln2w": torch.ones(d, requires_grad=True), "ln2b": torch.zeros(d, requires_grad=True),
        "f1w": t(fl, d), "f1b": t(fl), "f2w": t(d, fl), "f2b": t(d),
    }


def attention(q, k, v):  # [b, s, h, hd] each -> [b, s, h*hd]
    b, s, h, hd = q.shape
    q, k, v = (z.transpose(1, 2) for z in (q, k, v))
    a = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(hd), dim=-1)
    return (a @ v).transpose(1, 2).reshape(b, s, h * hd)


def tp_block(x, p, d, hl):
    b, s, _ = x.shape
    a = CopyToTP.apply(F.layer_norm(x, (d,), p["ln1w"], p["ln1b"]))
    q, k, v = (F.linear(a, p[n + "w"], p[n + "b"]).view(b, s, hl, -1)
               for n in ("q", "k", "v"))
    h = x + ReduceFromTP.apply(F.linear(attention(q, k, v), p["ow"])) + p["ob"]
    m = CopyToTP.apply(F.layer_norm(h, (d,), p["ln2w"], p["ln2b"]))
    f = F.linear(F.gelu(F.linear(m, p["f1w"], p["f1b"])), p["f2w"])
    return h + ReduceFromTP.apply(f) + p["f2b"]


def ulysses_block(x, p, d, heads):
    b, sl, _ = x.shape
    a = F.layer_norm(x, (d,), p["ln1w"], p["ln1b"])
    q, k, v = (SeqToHeads.apply(F.linear(a, p[n + "w"], p[n + "b"]).view(b, sl, heads, -1))
               for n in ("q", "k", "v"))
    y = attention(q, k, v)                       # [b, s, H/W*hd]
    y = HeadsToSeq.apply(y.view(b, y.shape[1], q.shape[2], -1)).reshape(b, sl, d)
    h = x + F.linear(y, p["ow"], p["ob"])
    m = F.layer_norm(h, (d,), p["ln2w"], p["ln2b"])
    return h + F.linear(F.gelu(F.linear(m, p["f1w"], p["f1b"])), p["f2w"], p["f2b"])


def serial_block(x, p, d, heads):
    b, s, _ = x.shape
    a = F.layer_norm(x, (d,), p["ln1w"], p["ln1b"])
    q, k, v = (F.linear(a, p[n + "w"], p[n + "b"]).view(b, s, heads, -1)
               for n in ("q", "k", "v"))
    h = x + F.linear(attention(q, k, v), p["ow"], p["ob"])
    m = F.layer_norm(h, (d,), p["ln2w"], p["ln2b"])
    return h + F.linear(F.gelu(F.linear(m, p["f1w"], p["f1b"])), p["f2w"], p["f2b"])


def timed(step, iters, warmup):
    times = []
    for i in range(warmup + iters):
        t0 = time.perf_counter()
        step()
        if i >= warmup:
            times.append(time.perf_counter() - t0)
    return statistics.median(times)


def worker(rank, world, port, cfg, iters, warmup):
    torch.set_num_threads(1)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    d, heads, seq, batch, ff = cfg
    g = torch.Generator().manual_seed(1)
    x = torch.randn(batch, seq, d, generator=g)
    dy = torch.randn(batch, seq, d, generator=g)
    out = []

    p = params(d, ff, 1 / world, 1 / world)

    def tp_step():
        for t in p.values():
            t.grad = None
        tp_block(x, p, d, heads // world).backward(dy)
    out.append(("serial" if world == 1 else "tp", timed(tp_step, iters, warmup)))

    if world > 1:
        pu = params(d, ff, 1, 1)
        sl = seq // world
        xl = x[:, rank * sl:(rank + 1) * sl].contiguous()
        dyl = dy[:, rank * sl:(rank + 1) * sl].contiguous()

        def ulysses_step():
            for t in pu.values():
                t.grad = None
            ulysses_block(xl, pu, d, heads).backward(dyl)
            flat = torch.cat([t.grad.reshape(-1) for t in pu.values()])
            dist.all_reduce(flat)
        out.append(("ulysses", timed(ulysses_step, iters, warmup)))
    if rank == 0:
        for mode, sec in out:
            print(f"torch,{mode},{world},{sec:.6f}", flush=True)
    dist.barrier()
    dist.destroy_process_group()


def main():
    world, iters, warmup = (int(a) for a in sys.argv[1:4])
    cfg = tuple(int(a) for a in sys.argv[4:9]) if len(sys.argv) > 4 else (256, 8, 256, 4, 1024)
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    mp.spawn(worker, args=(world, port, cfg, iters, warmup), nprocs=world)


if __name__ == "__main__":
    main()
