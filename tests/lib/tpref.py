"""Independent PyTorch reference for collx-tp's suite (float64 math).

  tpref.py make LAYER D_IN HIDDEN D_OUT SEED [nobias] [heads=H] [batch=B] [seq=S]
      writes w.safetensors, X.npy, DY.npy, T.npy (targets) for the layer:
      column/row: weight [D_OUT, D_IN]; mlp: fc1 [HIDDEN, D_IN], fc2
      [D_OUT, HIDDEN]; block: d_model D_IN, d_ff HIDDEN, heads H.
  tpref.py check LAYER Y.npy [DX.npy GW.safetensors] [causal] [act=relu] [norm=post] [heads=H]
      the whole layer in torch on w.safetensors, X.npy (DY.npy): forward
      output, input gradient and every weight gradient within rtol 1e-5
      (atol 1e-5 of the largest magnitude of each tensor).
  tpref.py train LAYER STEPS LR LOSS.csv TRAINED.safetensors [options as check]
      full-batch SGD on the mean-squared error against T.npy in torch: the
      losses and the trained weights.
"""
import csv
import math
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from collpy import load, load_st, save, save_st  # noqa: E402

torch.set_default_dtype(torch.float64)


def opts(args):
    o = {"causal": False, "act": "gelu", "norm": "pre", "heads": None}
    rest = []
    for a in args:
        if a == "causal":
            o["causal"] = True
        elif "=" in a:
            k, v = a.split("=", 1)
            o[k] = v
        else:
            rest.append(a)
    return o, rest


def make(layer, din, hid, dout, seed, extra):
    o, _ = opts(extra)
    rng = np.random.default_rng(seed)
    nob = "nobias" in extra
    b, s = int(o.get("batch", 3)), int(o.get("seq", 12))

    def mat(r, c):
        return (rng.standard_normal((r, c)) / math.sqrt(c)).astype("<f4")

    def vec(n, mean=0.0):
        return (mean + 0.3 * rng.standard_normal(n)).astype("<f4")
    w = {}
    if layer in ("column", "row"):
        w["weight"] = mat(dout, din)
        w["bias"] = vec(dout)
        xs, ys = (b * s, din), (b * s, dout)
    elif layer == "mlp":
        w.update({"fc1.weight": mat(hid, din), "fc1.bias": vec(hid),
                  "fc2.weight": mat(dout, hid), "fc2.bias": vec(dout)})
        xs, ys = (b * s, din), (b * s, dout)
    else:
        d = din
        for n in ("q", "k", "v", "o"):
            w[f"attn.{n}.weight"] = mat(d, d)
            w[f"attn.{n}.bias"] = vec(d)
        for n in ("ln1", "ln2"):
            w[f"{n}.weight"] = vec(d, 1.0)
            w[f"{n}.bias"] = vec(d)
        w.update({"mlp.fc1.weight": mat(hid, d), "mlp.fc1.bias": vec(hid),
                  "mlp.fc2.weight": mat(d, hid), "mlp.fc2.bias": vec(d)})
        xs = ys = (b, s, d)
    if nob:
        w = {k: v for k, v in w.items() if not k.endswith(".bias") and k != "bias"}
    meta = {"heads": o["heads"]} if o["heads"] else None
    save_st("w.safetensors", w, meta)
    save("X.npy", rng.standard_normal(xs).astype("<f4"))
    save("DY.npy", rng.standard_normal(ys).astype("<f4"))
    save("T.npy", (0.5 * rng.standard_normal(ys)).astype("<f4"))


def params():
    w, meta = load_st("w.safetensors")
    return {k: torch.tensor(np.asarray(v, dtype=np.float64), requires_grad=True)
            for k, v in w.items()}, meta


def forward(layer, P, x, o, heads):
    def lin(t, n):
        p = n + "." if n else ""
        return F.linear(t, P[p + "weight"], P.get(p + "bias"))
    act = F.relu if o["act"] == "relu" else F.gelu
    if layer in ("column", "row"):
        return lin(x, "")
    if layer == "mlp":
        return lin(act(lin(x, "fc1")), "fc2")
    b, s, d = x.shape
    hd = d // heads

    def ln(t, n):
        return F.layer_norm(t, (d,), P[n + ".weight"], P.get(n + ".bias"), 1e-5)

    def attn(t):
        q, k, v = (lin(t, "attn." + n).view(b, s, heads, hd).transpose(1, 2)
                   for n in ("q", "k", "v"))
        sc = q @ k.transpose(-1, -2) / math.sqrt(hd)
        if o["causal"]:
            sc = sc.masked_fill(torch.triu(torch.ones(s, s, dtype=torch.bool), 1),
                                float("-inf"))
        y = (torch.softmax(sc, -1) @ v).transpose(1, 2).reshape(b, s, d)
        return lin(y, "attn.o")

    def mlp(t):
        return lin(act(lin(t, "mlp.fc1")), "mlp.fc2")
    if o["norm"] == "post":
        h = ln(x + attn(x), "ln1")
        return ln(h + mlp(h), "ln2")
    h = x + attn(ln(x, "ln1"))
    return h + mlp(ln(h, "ln2"))


def close(what, got, want, rtol=1e-5):
    got = np.asarray(got, dtype=np.float64).reshape(-1)
    want = np.asarray(want, dtype=np.float64).reshape(-1)
    if got.shape != want.shape:
        sys.exit(f"{what}: {got.size} elements, want {want.size}")
    # a floor for gradients that are zero in exact math (k bias)
    atol = rtol * max(0.1, float(np.abs(want).max()) if want.size else 1.0)
    bad = np.abs(got - want) > atol + rtol * np.abs(want)
    if bad.any():
        i = int(np.argmax(bad))
        sys.exit(f"{what}: {int(bad.sum())} of {want.size} differ, first at "
                 f"{i}: got {got[i]!r}, want {want[i]!r}")


def heads_of(o, meta):
    return int(o["heads"] or meta.get("heads", 1))


def check(layer, args):
    o, rest = opts(args)
    P, meta = params()
    x = torch.tensor(load("X.npy").astype(np.float64), requires_grad=True)
    y = forward(layer, P, x, o, heads_of(o, meta))
    close("Y", load(rest[0]), y.detach().numpy())
    if len(rest) < 3:
        return
    y.backward(torch.tensor(load("DY.npy").astype(np.float64)))
    close("DX", load(rest[1]), x.grad.numpy())
    gw, _ = load_st(rest[2])
    if sorted(gw) != sorted(P):
        sys.exit(f"gradient names {sorted(gw)}, want {sorted(P)}")
    for k, p in P.items():
        close("grad " + k, gw[k], p.grad.numpy())


def train(layer, args):
    o, rest = opts(args)
    steps, lr, lossf, outf = int(rest[0]), float(rest[1]), rest[2], rest[3]
    P, meta = params()
    x = torch.tensor(load("X.npy").astype(np.float64))
    t = torch.tensor(load("T.npy").astype(np.float64))
    losses = []
    for _ in range(steps):
        for p in P.values():
            p.grad = None
        loss = F.mse_loss(forward(layer, P, x, o, heads_of(o, meta)), t)
        losses.append(loss.item())
        loss.backward()
        with torch.no_grad():
            for p in P.values():
                p -= lr * p.grad
    with open(lossf) as f:
        rows = list(csv.DictReader(f))
    if len(rows) != steps:
        sys.exit(f"{lossf}: {len(rows)} rows, want {steps}")
    close("losses", [float(r["loss"]) for r in rows], losses, 1e-4)
    tw, _ = load_st(outf)
    if sorted(tw) != sorted(P):
        sys.exit(f"trained names {sorted(tw)}, want {sorted(P)}")
    for k, p in P.items():
        close("trained " + k, tw[k], p.detach().numpy(), 1e-4)


if __name__ == "__main__":
    cmd, layer = sys.argv[1], sys.argv[2]
    if cmd == "make":
        a = sys.argv[3:]
        make(layer, int(a[0]), int(a[1]), int(a[2]), int(a[3]), a[4:])
    elif cmd == "check":
        check(layer, sys.argv[3:])
    elif cmd == "train":
        train(layer, sys.argv[3:])
    else:
        sys.exit("unknown command " + cmd)
