#!/usr/bin/python3
"""Single-process PyTorch (float64) reference of collx's mixture-of-experts
layer and MoE gpt, written from SPEC section 6 alone:
p = softmax(x W_router^T); the K experts of highest p (ties: lower index);
y = sum over chosen e of p_e * fc2(gelu(fc1(x))) of expert e; capacity F > 0:
each expert keeps at most ceil(F*T*K/E) of the T tokens' assignments, those
of highest p (ties: lower token); auxiliary loss A*E*sum_e f_e*P_e over the
batch (f_e the share of assignments routed to e, P_e the mean p_e).

usage:
  torch_moe.py layer CASE.safetensors GOT.safetensors
      CASE holds x, dy, router.weight, experts.E.fc1/fc2.weight/bias and
      metadata topk, capacity, aux; GOT the C results (y, dx, aux_loss,
      dropped and grad.NAME for every parameter). The loss differentiated
      is sum(y * dy) + aux. Exit 0 when all agree within 1e-5, 1 when not.
  torch_moe.py train MODEL.safetensors TOKENS.npy BATCH STEPS OPT LR RANKS OUT [MICRO]
      Trains the MoE gpt MODEL as collx-dp does over RANKS data-parallel
      ranks, each cutting its share into MICRO micro-batches (default 1;
      collx-pipe and collx-train do): the capacity per micro-batch of one
      rank, the auxiliary loss over the global batch; OPT sgd or adamw
      (torch defaults, lr LR);
      writes OUT.safetensors (trained parameters) and OUT.csv (step, loss,
      assignments dropped, the worst MoE layer's imbalance).
"""
import json
import math
import struct
import sys

try:
    import numpy as np
    import torch
    import torch.nn.functional as F
except ImportError:
    print("# torch not available")
    sys.exit(77)

DT = {"F32": "<f4", "F64": "<f8", "I32": "<i4", "I64": "<i8"}
DT_NAME = {np.dtype(v).str: k for k, v in DT.items()}


def load_st(path):
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    meta = header.pop("__metadata__", {})
    out = {}
    for name, e in header.items():
        a, b = e["data_offsets"]
        arr = np.frombuffer(raw[8 + n + a:8 + n + b], DT[e["dtype"]])
        out[name] = torch.from_numpy(arr.reshape(e["shape"]).astype(np.float64))
    return out, meta


def save_st(path, tensors, meta):
    header, blobs, off = {"__metadata__": meta}, [], 0
    for name in sorted(tensors):
        a = np.ascontiguousarray(tensors[name].detach().numpy().astype("<f4"))
        b = a.tobytes()
        header[name] = {"dtype": DT_NAME[a.dtype.str], "shape": list(a.shape),
                        "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def linear(p, name, x):
    return F.linear(x, p[name + ".weight"], p.get(name + ".bias"))


def route(probs, topk, capacity):
    """[T, E] 0/1 mask of the kept assignments, the routed counts per
    expert (before capacity) and the number dropped."""
    t, e = probs.shape
    # stable descending sort: among equal p the lower expert comes first
    order = torch.sort(probs.detach(), dim=1, descending=True, stable=True)[1]
    chosen = torch.zeros(t, e, dtype=torch.bool)
    chosen.scatter_(1, order[:, :topk], True)
    routed = chosen.sum(0).double()
    keep = chosen.clone()
    dropped = 0
    if capacity > 0:
        cap = math.ceil(capacity * t * topk / e)
        for j in range(e):
            toks = [i for i in range(t) if chosen[i, j]]
            if len(toks) <= cap:
                continue
            toks.sort(key=lambda i: (-probs[i, j].item(), i))
            for i in toks[cap:]:
                keep[i, j] = False
            dropped += len(toks) - cap
    return keep, routed, dropped


def moe(p, pre, x, topk, capacity):
    """The layer on x [T, d]: (y, routed counts, sum of p over tokens,
    dropped)."""
    probs = F.softmax(F.linear(x, p[pre + "router.weight"]), dim=-1)
    keep, routed, dropped = route(probs, topk, capacity)
    y = torch.zeros_like(x)
    for j in range(probs.shape[1]):
        idx = keep[:, j].nonzero().flatten()
        if len(idx) == 0:
            continue
        ex = "%sexperts.%d." % (pre, j)
        h = linear(p, ex + "fc2", F.gelu(linear(p, ex + "fc1", x[idx])))
        y = y.index_add(0, idx, probs[idx, j:j + 1] * h)
    return y, routed, probs.sum(0), dropped


def aux_loss(a, routed, psum, tokens):
    """A*E*sum_e f_e*P_e from whole-batch counts and p sums."""
    e = routed.shape[0]
    return a * e * ((routed / routed.sum()) * (psum / tokens)).sum()


def close(what, ref, got, tol=1e-5):
    err = (ref - got).abs().max().item() if ref.numel() else 0.0
    ok = torch.allclose(got, ref, rtol=tol, atol=tol)
    print("# %s: max abs error %.3g%s" % (what, err, "" if ok else " NOT CLOSE"))
    return ok


def layer(case, got_path):
    c, meta = load_st(case)
    got, _ = load_st(got_path)
    topk, cap, a = int(meta["topk"]), float(meta["capacity"]), float(meta["aux"])
    names = [k for k in c if k not in ("x", "dy")]
    p = {k: c[k].clone().requires_grad_(True) for k in names}
    x = c["x"].clone().requires_grad_(True)
    y, routed, psum, dropped = moe(p, "", x, topk, cap)
    aux = aux_loss(a, routed, psum, x.shape[0])
    ((y * c["dy"]).sum() + aux).backward()
    ok = close("y", y.detach(), got["y"])
    ok &= close("dx", x.grad, got["dx"])
    ok &= close("aux_loss", aux.detach().reshape(1), got["aux_loss"])
    for k in names:
        # an expert no token reached has no gradient: zero
        gk = p[k].grad if p[k].grad is not None else torch.zeros_like(p[k])
        ok &= close("grad " + k, gk, got["grad." + k])
    if int(got["dropped"].item()) != dropped:
        print("# dropped: C %d, torch %d" % (int(got["dropped"].item()), dropped))
        ok = False
    print("# dropped %d of %d assignments" % (dropped, x.shape[0] * topk))
    return 0 if ok else 1


def split(b, n):
    """b samples over n parts as collx splits them: the first b % n one
    more."""
    return [b // n + (1 if r < b % n else 0) for r in range(n)]


def gpt_loss(p, meta, tok, ranks, micro=1):
    """collx-dp's loss sum of a global batch tok [B, S+1] over RANKS ranks:
    cross-entropy summed over samples (mean over positions), plus B times
    the auxiliary loss of each MoE layer; the assignments dropped and the
    worst layer's imbalance (most routed to one expert over the mean)."""
    heads, every = int(meta["heads"]), int(meta["moe.every"])
    topk, cap = int(meta["moe.topk"]), float(meta["moe.capacity"])
    a = float(meta["moe.aux"])
    nl = 1 + max(int(k.split(".")[1]) for k in p if k.startswith("layers."))
    b = tok.shape[0]
    parts = [m for n in split(b, ranks) for m in split(n, micro)]
    x = []
    lo = 0
    for n in parts:
        inp = tok[lo:lo + n, :-1]
        x.append(p["wte"][inp] + p["wpe"][:inp.shape[1]])
        lo += n
    total_aux, dropped, imbalance = 0.0, 0, 0.0
    for i in range(nl):
        pre = "layers.%d." % i
        x = [block_attn(p, pre, h, heads) for h in x]
        if i % every != every - 1:
            x = [h + linear(p, pre + "mlp.fc2", F.gelu(linear(
                p, pre + "mlp.fc1", ln(p, pre + "ln2", h)))) for h in x]
            continue
        outs, routed, psum = [], 0, 0
        for h in x:
            bb, s, d = h.shape
            y, r, ps, dr = moe(p, pre + "mlp.", ln(p, pre + "ln2", h).reshape(-1, d),
                               topk, cap)
            outs.append(h + y.reshape(bb, s, d))
            routed, psum, dropped = routed + r, psum + ps, dropped + dr
        x = outs
        imbalance = max(imbalance, (routed.max() / routed.mean()).item())
        if a > 0:
            total_aux = total_aux + aux_loss(a, routed, psum, b * (tok.shape[1] - 1))
    loss = 0.0
    lo = 0
    for h, n in zip(x, parts):
        logits = ln(p, "lnf", h) @ p["wte"].t()
        tgt = tok[lo:lo + n, 1:]
        loss = loss + F.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                                      tgt.reshape(-1), reduction="sum") / tgt.shape[1]
        lo += n
    return loss + b * total_aux, dropped, imbalance


def ln(p, name, x):
    return F.layer_norm(x, x.shape[-1:], p[name + ".weight"],
                        p.get(name + ".bias"), eps=1e-5)


def block_attn(p, pre, x, heads):
    """x + attn(ln1(x)), causal."""
    b, s, d = x.shape
    hd = d // heads
    h = ln(p, pre + "ln1", x)

    def split(t):
        return t.view(b, s, heads, hd).transpose(1, 2)
    q, k, v = (split(linear(p, pre + "attn." + n, h)) for n in "qkv")
    att = q @ k.transpose(-2, -1) / math.sqrt(hd)
    mask = torch.ones(s, s, dtype=torch.bool).tril()
    att = att.masked_fill(~mask, float("-inf")).softmax(-1)
    y = (att @ v).transpose(1, 2).reshape(b, s, d)
    return x + linear(p, pre + "attn.o", y)


def train(model, tokens, batch, steps, opt, lr, ranks, out, micro=1):
    params, meta = load_st(model)
    tok = torch.from_numpy(np.load(tokens).astype(np.int64)).flatten()
    seq = params["wpe"].shape[0]
    nsamp = tok.shape[0] // (seq + 1)
    p = {k: v.clone().requires_grad_(True) for k, v in params.items()}
    names = sorted(p)
    o = (torch.optim.SGD if opt == "sgd" else torch.optim.AdamW)(
        [p[k] for k in names], lr=lr)
    rows = []
    for k in range(steps):
        idx = [(k * batch + i) % nsamp for i in range(batch)]
        tb = torch.stack([tok[i * (seq + 1):(i + 1) * (seq + 1)] for i in idx])
        o.zero_grad()
        loss, dropped, imb = gpt_loss(p, meta, tb, ranks, micro)
        (loss / batch).backward()
        o.step()
        rows.append("%d,%.9g,%d,%.9g" % (k, loss.item() / batch, dropped, imb))
    save_st(out + ".safetensors", {k: p[k] for k in names}, meta)
    with open(out + ".csv", "w") as f:
        f.write("step,loss,dropped,imbalance\n" + "\n".join(rows) + "\n")
    return 0


def main():
    torch.set_num_threads(1)
    if len(sys.argv) == 4 and sys.argv[1] == "layer":
        return layer(sys.argv[2], sys.argv[3])
    if len(sys.argv) in (10, 11) and sys.argv[1] == "train":
        a = sys.argv[2:]
        return train(a[0], a[1], int(a[2]), int(a[3]), a[4], float(a[5]),
                     int(a[6]), a[7], int(a[8]) if len(a) > 8 else 1)
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
