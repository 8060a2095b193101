#!/usr/bin/env python3
"""Independent PyTorch reference for lib/nn (run by test_nn_torch).

usage: nn_ref.py DIR NAME OPTIMIZER STEPS

Reads DIR/NAME-model.safetensors (a collx model: collx.arch, heads, causal)
and DIR/NAME-batch.safetensors (x, y or tokens), rebuilds the model from
torch.nn.functional in float64, and compares with the C results:
NAME-grads.safetensors (gradients of the summed per-sample loss, the sum
in its metadata "loss_sum") and NAME-trained.safetensors (parameters after
STEPS steps of torch.optim.SGD(momentum 0.9) or AdamW (eps 1e-4), lr 0.01,
weight decay 0.01, on the mean batch loss). Exit 0 when all match, 1 when not, 77 when
torch is missing.
"""
import math
import os
import sys

try:
    import numpy as np
    import torch
    import torch.nn.functional as F
except ImportError:
    print("# torch not available")
    sys.exit(77)

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
from collpy import load_st  # noqa: E402


def load(path):
    """A safetensors file as ({name: float64 or int64 tensor}, metadata)."""
    arrays, meta = load_st(path)
    out = {}
    for name, arr in arrays.items():
        t = torch.from_numpy(arr.copy())
        out[name] = t.double() if t.is_floating_point() else t.long()
    return out, meta


def linear(p, name, x):
    return F.linear(x, p[name + ".weight"], p.get(name + ".bias"))


def layernorm(p, name, x):
    return F.layer_norm(x, x.shape[-1:], p[name + ".weight"],
                        p.get(name + ".bias"), eps=1e-5)


def attention(p, pre, x, heads, causal):
    b, s, d = x.shape
    hd = d // heads

    def split(t):
        return t.view(b, s, heads, hd).transpose(1, 2)
    q = split(linear(p, pre + "attn.q", x))
    k = split(linear(p, pre + "attn.k", x))
    v = split(linear(p, pre + "attn.v", x))
    att = q @ k.transpose(-2, -1) / math.sqrt(hd)
    if causal:
        mask = torch.ones(s, s, dtype=torch.bool).tril()
        att = att.masked_fill(~mask, float("-inf"))
    y = (att.softmax(-1) @ v).transpose(1, 2).reshape(b, s, d)
    return linear(p, pre + "attn.o", y)


def block(p, pre, x, heads, causal):
    h = x + attention(p, pre, layernorm(p, pre + "ln1", x), heads, causal)
    m = layernorm(p, pre + "ln2", h)
    return h + linear(p, pre + "mlp.fc2",
                      F.gelu(linear(p, pre + "mlp.fc1", m)))


def prefixes(p):
    """"layers.0.", "layers.1.", ... for a stack, else [""]."""
    ids = {int(k.split(".")[1]) for k in p if k.startswith("layers.")}
    return ["layers.%d." % i for i in sorted(ids)] if ids else [""]


def batch_loss(p, meta, batch):
    """The mean batch loss (F.mse_loss / F.cross_entropy) and n."""
    arch = meta["collx.arch"]
    if arch == "mlp":
        x, y = batch["x"], batch["y"]
        for pre in prefixes(p):
            x = linear(p, pre + "fc2", F.gelu(linear(p, pre + "fc1", x)))
        return F.mse_loss(x, y), y.shape[0]
    heads = int(meta["heads"])
    if arch == "block":
        x, y = batch["x"], batch["y"]
        causal = meta.get("causal", "0") in ("1", "true")
        for pre in prefixes(p):
            x = block(p, pre, x, heads, causal)
        return F.mse_loss(x, y), y.shape[0]
    tok = batch["tokens"]
    inp, tgt = tok[:, :-1], tok[:, 1:]
    s = inp.shape[1]
    x = p["wte"][inp] + p["wpe"][:s]
    for pre in prefixes(p):
        x = block(p, pre, x, heads, True)
    logits = layernorm(p, "lnf", x) @ p["wte"].t()
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                           tgt.reshape(-1)), tok.shape[0]


def compare(what, ref, got, rtol, atol):
    """Prints the worst error of each tensor; True when all are close."""
    ok = True
    for name in sorted(ref):
        r, g = ref[name], got[name]
        err = (r - g).abs().max().item()
        bad = not torch.allclose(g, r, rtol=rtol, atol=atol)
        ok &= not bad
        if bad:
            print("# %s %s: max abs error %.3g (|ref| max %.3g) NOT CLOSE"
                  % (what, name, err, r.abs().max().item()))
    if set(ref) != set(got):
        print("# %s: names differ: %s vs %s" % (what, sorted(ref), sorted(got)))
        ok = False
    return ok


def main():
    d, name, opt, steps = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    params, meta = load("%s/%s-model.safetensors" % (d, name))
    batch, _ = load("%s/%s-batch.safetensors" % (d, name))
    grads, gmeta = load("%s/%s-grads.safetensors" % (d, name))
    trained, _ = load("%s/%s-trained.safetensors" % (d, name))

    p = {k: v.clone().requires_grad_(True) for k, v in params.items()}
    loss, n = batch_loss(p, meta, batch)
    (loss * n).backward()
    c_loss = float(gmeta["loss_sum"])
    ok = abs(c_loss - loss.item() * n) <= 1e-5 * abs(loss.item() * n) + 1e-6
    print("# %s: loss_sum C %.9g, torch %.9g" % (name, c_loss, loss.item() * n))
    ok &= compare(name + " grad", {k: v.grad for k, v in p.items()}, grads,
                  2e-4, 2e-5)

    p = {k: v.clone().requires_grad_(True) for k, v in params.items()}
    names = sorted(p)
    if opt == "sgd":
        o = torch.optim.SGD([p[k] for k in names], lr=0.01, momentum=0.9,
                            weight_decay=0.01)
    else:
        o = torch.optim.AdamW([p[k] for k in names], lr=0.01,
                              weight_decay=0.01, eps=1e-4)
    for _ in range(steps):
        o.zero_grad()
        loss, _ = batch_loss(p, meta, batch)
        loss.backward()
        o.step()
    ok &= compare(name + " trained", {k: p[k].detach() for k in names},
                  trained, 1e-4, 2e-5)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
