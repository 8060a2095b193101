"""Independent PyTorch reference for collx-tp's suite (float64 math).

  tpref.py make LAYER D_IN HIDDEN D_OUT SEED [nobias] [heads=H] [batch=B] [seq=S]
      writes w.safetensors, X.npy, DY.npy, T.npy (targets) for the layer:
      column/row: weight [D_OUT, D_IN]; mlp: fc1 [HIDDEN, D_IN], fc2
      [D_OUT, HIDDEN]; block: d_model D_IN, d_ff HIDDEN, heads H.
  tpref.py check LAYER DIR [causal] [act=relu] [norm=post] [heads=H]
      the whole layer in torch on DIR/w.safetensors, X.npy (DY.npy):
      DIR/Y.npy, and when DIR/DX.npy exists DX.npy and every weight
      gradient in DIR/GW.safetensors, within rtol 1e-5 (atol 1e-5 of the
      largest magnitude of each tensor, at least 1e-5).
  tpref.py train LAYER DIR STEPS LR [options as check]
      full-batch SGD on the mean-squared error against DIR/T.npy in torch:
      the losses in DIR/L.csv and the weights in DIR/TR.safetensors.
  tpref.py same SERIAL DIR
      DIR/L.csv and DIR/TR.safetensors (tp or ulysses training) equal
      serial training's in SERIAL within rtol 1e-5, as check compares.
  tpref.py batch FILE
      each line of FILE a check, train or same command as above, in one
      process (torch takes seconds to import).
"""
import csv
import math
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from collpy import load, load_st, save, save_st  # noqa: E402

torch = F = None


def need_torch():
    global torch, F
    if torch is None:
        import torch as t
        import torch.nn.functional as f
        torch, F = t, f
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


def params(d):
    w, meta = load_st(os.path.join(d, "w.safetensors"))
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
    atol = rtol * max(1.0, float(np.abs(want).max()) if want.size else 1.0)
    bad = np.abs(got - want) > atol + rtol * np.abs(want)
    if bad.any():
        i = int(np.argmax(bad))
        sys.exit(f"{what}: {int(bad.sum())} of {want.size} differ, first at "
                 f"{i}: got {got[i]!r}, want {want[i]!r}")


def heads_of(o, meta):
    return int(o["heads"] or meta.get("heads", 1))


def check(layer, d, args):
    need_torch()
    o, _ = opts(args)
    P, meta = params(d)
    f = lambda n: os.path.join(d, n)  # noqa: E731
    x = torch.tensor(load(f("X.npy")).astype(np.float64), requires_grad=True)
    y = forward(layer, P, x, o, heads_of(o, meta))
    close(d + ": Y", load(f("Y.npy")), y.detach().numpy())
    if not os.path.exists(f("DX.npy")):
        return
    y.backward(torch.tensor(load(f("DY.npy")).astype(np.float64)))
    close(d + ": DX", load(f("DX.npy")), x.grad.numpy())
    gw, _ = load_st(f("GW.safetensors"))
    if sorted(gw) != sorted(P):
        sys.exit(f"{d}: gradient names {sorted(gw)}, want {sorted(P)}")
    for k, p in P.items():
        close(f"{d}: grad {k}", gw[k], p.grad.numpy())


def losses_of(d):
    with open(os.path.join(d, "L.csv")) as fh:
        return [float(r["loss"]) for r in csv.DictReader(fh)]


def train(layer, d, args):
    need_torch()
    o, rest = opts(args)
    steps, lr = int(rest[0]), float(rest[1])
    P, meta = params(d)
    f = lambda n: os.path.join(d, n)  # noqa: E731
    x = torch.tensor(load(f("X.npy")).astype(np.float64))
    t = torch.tensor(load(f("T.npy")).astype(np.float64))
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
    got = losses_of(d)
    if len(got) != steps:
        sys.exit(f"{d}: {len(got)} loss rows, want {steps}")
    # 5 steps of f32 SGD stay within 1e-5 of float64 torch (the suite's
    # runs passed at 1e-6 too), so training gets check's tolerance
    close(d + ": losses", got, losses)
    tw, _ = load_st(f("TR.safetensors"))
    if sorted(tw) != sorted(P):
        sys.exit(f"{d}: trained names {sorted(tw)}, want {sorted(P)}")
    for k, p in P.items():
        close(f"{d}: trained {k}", tw[k], p.detach().numpy())


def same(ser, d):
    want, got = losses_of(ser), losses_of(d)
    if len(got) != len(want):
        sys.exit(f"{d}: {len(got)} loss rows, serial {len(want)}")
    close(d + ": losses against serial", got, want)
    a, _ = load_st(os.path.join(d, "TR.safetensors"))
    b, _ = load_st(os.path.join(ser, "TR.safetensors"))
    if sorted(a) != sorted(b):
        sys.exit(f"{d}: trained names {sorted(a)}, serial {sorted(b)}")
    for k in b:
        close(f"{d}: trained {k} against serial", a[k], b[k])


def command(a):
    if a[0] == "check":
        check(a[1], a[2], a[3:])
    elif a[0] == "train":
        train(a[1], a[2], a[3:])
    elif a[0] == "same":
        same(a[1], a[2])
    else:
        sys.exit("unknown command " + a[0])


if __name__ == "__main__":
    cmd = sys.argv[1]
    if cmd == "make":
        a = sys.argv[3:]
        make(sys.argv[2], int(a[0]), int(a[1]), int(a[2]), int(a[3]), a[4:])
    elif cmd == "batch":
        with open(sys.argv[2]) as fh:
            for line in fh:
                if line.split():
                    command(line.split())
    else:
        command(sys.argv[1:])
