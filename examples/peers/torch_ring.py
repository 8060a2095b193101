"""PyTorch peer of collx-tp's ring and zigzag modes: one transformer block
(pre-LayerNorm, exact GELU) whose attention is ring attention over
torch.distributed Gloo, written the way ring-flash-attention writes it
(PyTorch 1.13 has no context parallelism): each rank holds its chunks of
the sequence, K and V travel to the next rank with isend/irecv while the
local queries attend to the block at hand, the partial results merge by
log-sum-exp; backward recomputes the probabilities from the saved
log-sum-exp and sends dK, dV around the ring after their blocks, home in
one more step. The rest of the block is autograd on the local positions;
weight gradients are summed by one all_reduce. One thread per rank.

usage: torch_ring.py check DIR WORLD [causal] [zigzag]
           float64: the block of DIR/w.safetensors (heads from its
           __metadata__) on DIR/X.npy with DIR/DY.npy; rank 0 writes
           DIR/Y.npy, DIR/DX.npy and DIR/GW.safetensors (whole, float64)
       torch_ring.py same DIR1 DIR2
           Y.npy, DX.npy and every tensor of GW.safetensors of DIR1 equal
           DIR2's within rtol 1e-5 (atol 1e-5 of the largest magnitude)
       torch_ring.py bench WORLD ITERS WARMUP D HEADS SEQ BATCH FF [causal] [zigzag]
           float32 forward+backward, median seconds over ITERS after
           WARMUP: prints, from rank 0, torch,ring|zigzag,WORLD,SECONDS
Ranks: WORLD processes spawned here, or, when COLLX_RANK is set (started
by collx-run, or by hand on several hosts), this process is rank
COLLX_RANK of COLLX_WORLD_SIZE and rank 0 listens on MASTER_ADDR and
MASTER_PORT (collx-run sets them), else on COLLX_MASTER's HOST:PORT.
"""
import json
import math
import os
import socket
import statistics
import struct
import sys
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F

ST = {"F32": "<f4", "F64": "<f8", "F16": "<f2"}


def load_st(path):
    with open(path, "rb") as f:
        buf = f.read()
    n = struct.unpack("<Q", buf[:8])[0]
    header = json.loads(buf[8:8 + n])
    meta = header.pop("__metadata__", {})
    data = buf[8 + n:]
    out = {}
    for name, d in header.items():
        lo, hi = d["data_offsets"]
        out[name] = np.frombuffer(data[lo:hi], ST[d["dtype"]]).reshape(d["shape"])
    return out, meta


def save_st(path, tensors):
    header, blobs, off = {}, [], 0
    for name in sorted(tensors):
        b = np.ascontiguousarray(tensors[name], "<f8").tobytes()
        header[name] = {"dtype": "F64", "shape": list(tensors[name].shape),
                        "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


# ---- which positions a rank holds --------------------------------------------

def positions(seq, world, rank, zigzag):
    """The global positions of rank's chunks, in the order it holds them."""
    if not zigzag:
        n = seq // world
        return torch.arange(rank * n, (rank + 1) * n)
    n = seq // (2 * world)
    return torch.cat([torch.arange(c * n, (c + 1) * n)
                      for c in (rank, 2 * world - 1 - rank)])


# ---- ring attention -------------------------------------------------------------

def neighbours():
    r, w = dist.get_rank(), dist.get_world_size()
    return (r + 1) % w, (r - 1) % w


def pass_on(kv, i):
    """Step i: the block at hand to the next rank and the next one from
    the previous rank, in flight (nothing at the last step)."""
    w = dist.get_world_size()
    if i == w - 1:
        return None, []
    nxt, prv = neighbours()
    recv = torch.empty_like(kv)
    return recv, [dist.isend(kv, nxt, tag=i), dist.irecv(recv, prv, tag=i)]


def mask_of(qpos, kpos, causal):
    """[Lq, Lk] True where query sees key; None when it sees all."""
    if not causal:
        return None
    return kpos[None, :] <= qpos[:, None]


def scores(q, k, mask):
    """q [b, H, Lq, hd], k [b, H, Lk, hd] -> scaled scores, masked -inf."""
    s = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    return s if mask is None else s.masked_fill(~mask, float("-inf"))


class RingAttention(torch.autograd.Function):
    """q, k, v [b, H, L, hd] of this rank's positions -> the attention
    output over the whole sequence, [b, H, L, hd]."""

    @staticmethod
    def forward(ctx, q, k, v, seq, zigzag, causal):
        w, r = dist.get_world_size(), dist.get_rank()
        qpos = positions(seq, w, r, zigzag)
        kv = torch.stack([k, v]).contiguous()
        out = torch.zeros_like(q)
        lse = torch.full(q.shape[:-1], float("-inf"), dtype=q.dtype)
        for i in range(w):
            recv, reqs = pass_on(kv, i)
            m = mask_of(qpos, positions(seq, w, (r - i) % w, zigzag), causal)
            if m is None or m.any():
                s = scores(q, kv[0], m)
                new = torch.logaddexp(lse, torch.logsumexp(s, dim=-1))
                out = out * torch.exp(lse - new)[..., None] + \
                    torch.exp(s - new[..., None]) @ kv[1]
                lse = new
            for x in reqs:
                x.wait()
            if i < w - 1:
                kv = recv
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.seq, ctx.zigzag, ctx.causal = seq, zigzag, causal
        return out

    @staticmethod
    def backward(ctx, dout):
        q, k, v, out, lse = ctx.saved_tensors
        seq, zigzag, causal = ctx.seq, ctx.zigzag, ctx.causal
        w, r = dist.get_world_size(), dist.get_rank()
        nxt, prv = neighbours()
        qpos = positions(seq, w, r, zigzag)
        dsum = (dout * out).sum(-1, keepdim=True)
        scale = 1 / math.sqrt(q.shape[-1])
        kv = torch.stack([k, v]).contiguous()
        dq = torch.zeros_like(q)
        sent = None                     # the dK, dV accumulator on its way
        for i in range(w):
            recv, reqs = pass_on(kv, i)
            acc = torch.zeros_like(kv)  # this rank's share of dK, dV
            m = mask_of(qpos, positions(seq, w, (r - i) % w, zigzag), causal)
            if m is None or m.any():
                p = torch.exp(scores(q, kv[0], m) - lse[..., None])
                acc[1] = p.transpose(-1, -2) @ dout
                ds = p * (dout @ kv[1].transpose(-1, -2) - dsum)
                dq += scale * ds @ kv[0]
                acc[0] = scale * ds.transpose(-1, -2) @ q
            if i > 0:                   # the ranks before this one's shares
                before = torch.empty_like(kv)
                dist.recv(before, prv, tag=w + i - 1)
                acc += before
            if sent is not None:
                sent.wait()
            sent = dist.isend(acc, nxt, tag=w + i) if w > 1 else None
            for x in reqs:
                x.wait()
            if i < w - 1:
                kv = recv
        if w > 1:
            acc = torch.empty_like(kv)
            dist.recv(acc, prv, tag=2 * w - 1)
            sent.wait()
        return dq, acc[0], acc[1], None, None, None


# ---- the block ------------------------------------------------------------------

NAMES = ["ln1.weight", "ln1.bias", "attn.q.weight", "attn.q.bias",
         "attn.k.weight", "attn.k.bias", "attn.v.weight", "attn.v.bias",
         "attn.o.weight", "attn.o.bias", "ln2.weight", "ln2.bias",
         "mlp.fc1.weight", "mlp.fc1.bias", "mlp.fc2.weight", "mlp.fc2.bias"]


def block(x, p, heads, seq, zigzag, causal):
    """x [b, L, d] this rank's positions -> the block's output there."""
    b, L, d = x.shape
    a = F.layer_norm(x, (d,), p["ln1.weight"], p["ln1.bias"], 1e-5)
    q, k, v = (F.linear(a, p[f"attn.{n}.weight"], p[f"attn.{n}.bias"])
               .view(b, L, heads, -1).transpose(1, 2) for n in "qkv")
    y = RingAttention.apply(q, k, v, seq, zigzag, causal)
    h = x + F.linear(y.transpose(1, 2).reshape(b, L, d),
                     p["attn.o.weight"], p["attn.o.bias"])
    m = F.layer_norm(h, (d,), p["ln2.weight"], p["ln2.bias"], 1e-5)
    f = F.gelu(F.linear(m, p["mlp.fc1.weight"], p["mlp.fc1.bias"]))
    return h + F.linear(f, p["mlp.fc2.weight"], p["mlp.fc2.bias"])


def whole(t, seq, zigzag):
    """Every rank's [b, L, d] positions gathered into [b, seq, d]."""
    w = dist.get_world_size()
    parts = [torch.empty_like(t) for _ in range(w)]
    dist.all_gather(parts, t.contiguous())
    out = torch.empty(t.shape[0], seq, t.shape[2], dtype=t.dtype)
    for j, part in enumerate(parts):
        out[:, positions(seq, w, j, zigzag)] = part
    return out


def run_check(dirname, seq_opts):
    causal, zigzag = seq_opts
    torch.set_default_dtype(torch.float64)
    w, r = dist.get_world_size(), dist.get_rank()
    wts, meta = load_st(os.path.join(dirname, "w.safetensors"))
    heads = int(meta["heads"])
    causal = causal or meta.get("causal") == "1"
    x = torch.from_numpy(np.load(os.path.join(dirname, "X.npy"))).double()
    dy = torch.from_numpy(np.load(os.path.join(dirname, "DY.npy"))).double()
    seq = x.shape[1]
    p = {}
    for n in NAMES:     # an absent bias is zero, and gets no gradient
        if n in wts:
            p[n] = torch.tensor(wts[n], dtype=torch.float64, requires_grad=True)
    for n in NAMES:
        p.setdefault(n, None)
    pos = positions(seq, w, r, zigzag)
    xl = x[:, pos].clone().requires_grad_()
    y = block(xl, p, heads, seq, zigzag, causal)
    y.backward(dy[:, pos])
    present = [n for n in NAMES if p[n] is not None]
    flat = torch.cat([p[n].grad.reshape(-1) for n in present])
    dist.all_reduce(flat)
    yw, dxw = whole(y.detach(), seq, zigzag), whole(xl.grad, seq, zigzag)
    if r == 0:
        np.save(os.path.join(dirname, "Y.npy"), yw.numpy())
        np.save(os.path.join(dirname, "DX.npy"), dxw.numpy())
        gw, off = {}, 0
        for n in present:
            k = p[n].numel()
            gw[n] = flat[off:off + k].view(p[n].shape).numpy()
            off += k
        save_st(os.path.join(dirname, "GW.safetensors"), gw)


def run_bench(args, seq_opts):
    causal, zigzag = seq_opts
    iters, warmup, d, heads, seq, batch, ff = (int(a) for a in args)
    w, r = dist.get_world_size(), dist.get_rank()
    g = torch.Generator().manual_seed(0)
    shapes = {"ln1.weight": (d,), "ln1.bias": (d,), "ln2.weight": (d,),
              "ln2.bias": (d,), "mlp.fc1.weight": (ff, d), "mlp.fc1.bias": (ff,),
              "mlp.fc2.weight": (d, ff), "mlp.fc2.bias": (d,)}
    for n in "qkvo":
        shapes[f"attn.{n}.weight"], shapes[f"attn.{n}.bias"] = (d, d), (d,)
    p = {n: (0.02 * torch.randn(*s, generator=g)).requires_grad_()
         for n, s in shapes.items()}
    pos = positions(seq, w, r, zigzag)
    x = torch.randn(batch, seq, d, generator=g)[:, pos].contiguous()
    dy = torch.randn(batch, seq, d, generator=g)[:, pos].contiguous()
    times = []
    for i in range(warmup + iters):
        t0 = time.perf_counter()
        for t in p.values():
            t.grad = None
        block(x, p, heads, seq, zigzag, causal).backward(dy)
        flat = torch.cat([t.grad.reshape(-1) for t in p.values()])
        dist.all_reduce(flat)
        if i >= warmup:
            times.append(time.perf_counter() - t0)
    t = torch.tensor([statistics.median(times)])
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    if r == 0:
        mode = "zigzag" if zigzag else "ring"
        print(f"torch,{mode},{w},{t.item():.6f}", flush=True)


def worker(rank, world, master, what, args, seq_opts):
    torch.set_num_threads(1)
    host, port = master.rsplit(":", 1)
    os.environ.update(MASTER_ADDR=host, MASTER_PORT=port)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    if what == "check":
        run_check(args[0], seq_opts)
    else:
        run_bench(args, seq_opts)
    dist.barrier()
    dist.destroy_process_group()


def same(d1, d2):
    def close(name, a, b):
        a, b = np.asarray(a, "f8"), np.asarray(b, "f8")
        tol = 1e-5 * max(np.abs(b).max(), 1.0) if b.size else 0
        bad = np.abs(a - b) > tol + 1e-5 * np.abs(b)
        if a.shape != b.shape or bad.any():
            sys.exit(f"{d1} vs {d2}: {name} differs")
    for n in ("Y.npy", "DX.npy"):
        close(n, np.load(os.path.join(d1, n)), np.load(os.path.join(d2, n)))
    g1 = load_st(os.path.join(d1, "GW.safetensors"))[0]
    g2 = load_st(os.path.join(d2, "GW.safetensors"))[0]
    if sorted(g1) != sorted(g2):
        sys.exit(f"{d1} vs {d2}: gradients of {sorted(g1)} and {sorted(g2)}")
    for n in g1:
        close(n, g1[n], g2[n])


def main():
    what = sys.argv[1]
    if what == "same":
        return same(sys.argv[2], sys.argv[3])
    flags = sys.argv[2:]
    seq_opts = ("causal" in flags, "zigzag" in flags)
    flags = [a for a in flags if a not in ("causal", "zigzag")]
    world = int(flags[1] if what == "check" else flags[0])
    args = [flags[0]] if what == "check" else flags[1:]
    if "COLLX_RANK" in os.environ:
        master = os.environ.get("COLLX_MASTER", "")
        if "MASTER_ADDR" in os.environ and "MASTER_PORT" in os.environ:
            master = os.environ["MASTER_ADDR"] + ":" + os.environ["MASTER_PORT"]
        return worker(int(os.environ["COLLX_RANK"]),
                      int(os.environ["COLLX_WORLD_SIZE"]),
                      master, what, args, seq_opts)
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    mp.spawn(worker, args=(world, f"127.0.0.1:{port}", what, args, seq_opts),
             nprocs=world)


if __name__ == "__main__":
    main()
