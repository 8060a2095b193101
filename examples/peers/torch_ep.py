#!/usr/bin/python3
"""PyTorch expert-parallel peer of collx-train --dp X --ep X: the MoE gpt
of torch_moe.py (collx's architecture, loaded from a collx model file) in
float32, one replica a rank, the experts of every MoE block split over
the X ranks (rank k holds experts k*E/X .. (k+1)*E/X - 1 only). Each rank
routes its own tokens (top-k, capacity per rank as collx), sends every
kept assignment's row to its expert's rank with Gloo's all_to_all_single
(the per-expert counts first) and gets the outputs back the same way
(an autograd function whose backward exchanges the gradients the other
way); the dense gradients are summed over the ranks
in one flat all_reduce, the experts' need none (every token of the
group reached its expert's one holder). The same data as collx-train
(windows of seq+1 bytes of a file; step k takes samples k*BATCH ..
k*BATCH+BATCH-1, split over the ranks as collx does), AdamW with
torch.optim's defaults, one thread a rank. Under collx-run (RANK,
WORLD_SIZE, MASTER_ADDR, MASTER_PORT; GLOO_SOCKET_IFNAME).

usage: torch_ep.py MODEL.safetensors FILE BATCH STEPS [LR]
Rank 0 prints one line: "torch ep X: median step S s, T tokens/s, loss L,
step 0 loss L0" (the median over the steps after the first; the losses of
the whole batch at the last step and at the first).
"""
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F

sys.dont_write_bytecode = True  # no __pycache__ beside the example
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_moe import block_attn, linear, ln, load_st, route, split  # noqa: E402


class Exchange(torch.autograd.Function):
    """rows [sum(send), d] out, [sum(recv), d] back; backward the other
    way (torch.distributed.nn's all_to_all_single of PyTorch 1.13 sends
    its gradients with the splits of the forward)."""

    @staticmethod
    def forward(ctx, rows, send, recv):
        ctx.send, ctx.recv = send, recv
        out = rows.new_empty(sum(recv), rows.shape[1])
        dist.all_to_all_single(out, rows.contiguous(), recv, send)
        return out

    @staticmethod
    def backward(ctx, g):
        back = g.new_empty(sum(ctx.send), g.shape[1])
        dist.all_to_all_single(back, g.contiguous(), ctx.send, ctx.recv)
        return back, None, None


def exchange(rows, send, recv):
    return Exchange.apply(rows, send, recv)


def moe_ep(p, pre, x, topk, cap, me, world, per):
    """The MoE block on x [T, d] with this rank's experts only."""
    E = p[pre + "router.weight"].shape[0]
    probs = F.softmax(F.linear(x, p[pre + "router.weight"]), dim=-1)
    keep, _, _ = route(probs, topk, cap)
    ex, tok = keep.t().nonzero(as_tuple=True)  # expert-major, token order
    cnt = torch.bincount(ex, minlength=E).int()
    got = torch.empty_like(cnt)
    dist.all_to_all_single(got, cnt)  # per expert: [dest][its per experts]
    send = cnt.view(world, per).sum(1).tolist()
    recv = got.view(world, per).sum(1).tolist()
    rows = exchange(x[tok], send, recv)
    # arrived by source, within it by my expert: run each expert's rows
    # every exchange on every rank's graph, rows or not: the backward's
    # exchanges must pair up across the ranks
    out = rows * 0
    g = got.view(world, per).tolist()
    at = [sum(recv[:s]) for s in range(world)]
    for j in range(per):
        idx = torch.cat([torch.arange(at[s] + sum(g[s][:j]),
                                      at[s] + sum(g[s][:j + 1]))
                         for s in range(world)])
        if len(idx) == 0:
            continue
        e = "%sexperts.%d." % (pre, me * per + j)
        h = linear(p, e + "fc2", F.gelu(linear(p, e + "fc1", rows[idx])))
        out = out.index_copy(0, idx, h)
    back = exchange(out, recv, send)
    y = torch.zeros_like(x)
    return y.index_add(0, tok, probs[tok, ex].unsqueeze(1) * back)


def forward(p, meta, tok, me, world, per):
    """Sum over samples of the mean cross-entropy over positions."""
    heads, every = int(meta["heads"]), int(meta["moe.every"])
    topk, cap = int(meta["moe.topk"]), float(meta["moe.capacity"])
    nl = 1 + max(int(k.split(".")[1]) for k in p if k.startswith("layers."))
    inp = tok[:, :-1]
    x = p["wte"][inp] + p["wpe"][:inp.shape[1]]
    for i in range(nl):
        pre = "layers.%d." % i
        x = block_attn(p, pre, x, heads)
        h = ln(p, pre + "ln2", x)
        if i % every != every - 1:
            x = x + linear(p, pre + "mlp.fc2", F.gelu(linear(p, pre + "mlp.fc1", h)))
            continue
        b, s, d = h.shape
        x = x + moe_ep(p, pre + "mlp.", h.reshape(-1, d), topk, cap, me,
                       world, per).reshape(b, s, d)
    logits = ln(p, "lnf", x) @ p["wte"].t()
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                           tok[:, 1:].reshape(-1), reduction="sum") / inp.shape[1]


def main():
    if len(sys.argv) < 5:
        sys.exit(__doc__)
    model, path = sys.argv[1], sys.argv[2]
    batch, steps = int(sys.argv[3]), int(sys.argv[4])
    lr = float(sys.argv[5]) if len(sys.argv) > 5 else 1e-3
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    world, me = dist.get_world_size(), dist.get_rank()
    params, meta = load_st(model)
    E = int(meta["moe.experts"])
    if E % world:
        sys.exit(f"torch_ep.py: {E} experts do not split over {world} ranks")
    per = E // world
    mine = range(me * per, me * per + per)

    def held(k):
        return ".experts." not in k or int(k.split(".experts.")[1].split(".")[0]) in mine
    p = {k: v.float().requires_grad_(True) for k, v in params.items() if held(k)}
    dense = [v for k, v in sorted(p.items()) if ".experts." not in k]
    opt = torch.optim.AdamW([p[k] for k in sorted(p)], lr=lr)
    seq = p["wpe"].shape[0]
    data = torch.tensor(list(open(path, "rb").read()), dtype=torch.long)
    nwin = data.numel() // (seq + 1)
    wins = data[: nwin * (seq + 1)].view(nwin, seq + 1)
    count = split(batch, world)[me]
    start = sum(split(batch, world)[:me])
    times, losses = [], []
    for k in range(steps):
        tok = wins[(k * batch + start + torch.arange(count)) % nwin]
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=False)
        loss = forward(p, meta, tok, me, world, per) / batch
        loss.backward()
        flat = torch.cat([v.grad.flatten() for v in dense])
        dist.all_reduce(flat)
        at = 0
        for v in dense:
            v.grad.copy_(flat[at:at + v.numel()].view_as(v))
            at += v.numel()
        opt.step()
        times.append(time.perf_counter() - t0)
        losses.append(loss.detach())
    both = torch.stack([losses[0], losses[-1]])
    dist.all_reduce(both)
    med = statistics.median(times[1:] if len(times) > 1 else times)
    if me == 0:
        print(f"torch ep {world}: median step {med:.4f} s, "
              f"{batch * seq / med:.0f} tokens/s, loss {float(both[1]):.6f}, "
              f"step 0 loss {float(both[0]):.6f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
