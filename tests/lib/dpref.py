#!/usr/bin/python3
"""Independent NumPy references and checks for the dp and ps suites.

usage:
  dpref.py mlp MODEL X Y BATCH STEPS LR TRAINED LOSS_CSV [OPTIM]
      train the mlp (fc2(gelu(fc1(x))), exact-erf GELU, MSE) in float64 by
      hand; compare with collx-dp's trained model and loss CSV. OPTIM: sgd
      (default), sgd:MOMENTUM, or adamw (torch.optim.AdamW's defaults)
  dpref.py localsgd MODEL X Y BATCH STEPS LR WORLD H OLR OMOM TRAINED LOSS_CSV [OPTIM]
      local SGD of the mlp: WORLD replicas, each with its own OPTIM on its
      share of every batch (collx's split), synced after every H steps and
      the last: d = mean(anchor - replica), b = OMOM*b + d, anchor -=
      OLR*(d + OMOM*b) (torch.optim.SGD, nesterov=True)
  dpref.py cmp A.safetensors B.safetensors RTOL ATOL [SKIP]
      same tensors, close (names ending in SKIP not compared)
  dpref.py csvcmp A.csv B.csv RTOL                     same losses, close
  dpref.py psfiles DIR NWORKERS                        P and G0..Gn-1 files
  dpref.py psexpect P LR GOT ROUNDS G...   GOT == P - LR*mean(G), ROUNDS times
Exit 0 when all match, 1 (with a message) when not.
"""
import math
import sys

import numpy as np

from collpy import load_st, save_st

def load(path):
    """A safetensors file as ({name: float64 array}, metadata)."""
    tensors, meta = load_st(path)
    return {k: v.astype(np.float64) for k, v in tensors.items()}, meta


def save(path, tensors, meta=None):
    save_st(path, {k: np.asarray(v, "<f4") for k, v in tensors.items()}, meta)


def close(what, ref, got, rtol, atol):
    ref, got = np.asarray(ref, np.float64), np.asarray(got, np.float64)
    if ref.shape != got.shape:
        sys.exit(f"{what}: shape {got.shape}, want {ref.shape}")
    err = np.abs(got - ref)
    bad = err > atol + rtol * np.abs(ref)
    if bad.any():
        i = np.unravel_index(np.argmax(err - rtol * np.abs(ref)), ref.shape)
        sys.exit(f"{what}: {bad.sum()} values off, worst at {i}: "
                 f"{got[i]!r} vs {ref[i]!r}")
    print(f"# {what}: max abs err {err.max() if err.size else 0:.3g}")


ERF = np.vectorize(math.erf)


class Optim:
    """torch.optim.SGD (momentum, dampening 0) or AdamW, written out."""

    def __init__(self, spec, lr):
        self.kind, _, arg = spec.partition(":")
        self.lr, self.t, self.m, self.v = lr, 0, {}, {}
        self.mom = float(arg) if arg else 0.0

    def step(self, p, grads):
        self.t += 1
        for name in p:
            g = grads[name]
            if self.kind == "sgd":
                if self.mom:
                    b = self.m.get(name)
                    self.m[name] = g if b is None else self.mom * b + g
                    g = self.m[name]
                p[name] = p[name] - self.lr * g
                continue
            b1, b2, eps, wd = 0.9, 0.999, 1e-8, 0.01
            m = b1 * self.m.get(name, 0) + (1 - b1) * g
            v = b2 * self.v.get(name, 0) + (1 - b2) * g * g
            self.m[name], self.v[name] = m, v
            mhat = m / (1 - b1 ** self.t)
            vhat = v / (1 - b2 ** self.t)
            p[name] = p[name] * (1 - self.lr * wd) - \
                self.lr * mhat / (np.sqrt(vhat) + eps)


def mlp_grads(p, xb, yb):
    """The mean squared error of a batch and its gradients."""
    h = xb @ p["fc1.weight"].T + p.get("fc1.bias", 0)
    cdf = 0.5 * (1 + ERF(h / math.sqrt(2)))
    g = h * cdf
    out = g @ p["fc2.weight"].T + p.get("fc2.bias", 0)
    diff = out - yb
    dout = 2 * diff / diff.size
    grads = {"fc2.weight": dout.T @ g, "fc2.bias": dout.sum(0)}
    dh = (dout @ p["fc2.weight"]) * (
        cdf + h * np.exp(-h * h / 2) / math.sqrt(2 * math.pi))
    grads["fc1.weight"] = dh.T @ xb
    grads["fc1.bias"] = dh.sum(0)
    return np.mean(diff ** 2), grads


def mlp_train(p, x, y, batch, steps, lr, optim="sgd"):
    opt = Optim(optim, lr)
    losses = []
    n = x.shape[0]
    for k in range(steps):
        idx = (k * batch + np.arange(batch)) % n
        loss, grads = mlp_grads(p, x[idx], y[idx])
        losses.append(loss)
        opt.step(p, grads)
    return p, losses


def local_sgd(p, x, y, batch, steps, lr, world, h, olr, omom, optim):
    """Replica r takes samples [start, start+count) of every batch, its
    part of an even split (the first batch % world one more)."""
    n, base, extra = x.shape[0], batch // world, batch % world
    reps = [dict(p) for _ in range(world)]
    opts = [Optim(optim, lr) for _ in range(world)]
    anchor, buf, losses = dict(p), {k: 0.0 for k in p}, []
    for k in range(steps):
        total = 0.0
        for r in range(world):
            count = base + (r < extra)
            start = r * base + min(r, extra)
            if count == 0:
                continue
            idx = (k * batch + start + np.arange(count)) % n
            loss, grads = mlp_grads(reps[r], x[idx], y[idx])
            total += loss * count
            opts[r].step(reps[r], grads)
        losses.append(total / batch)
        if (k + 1) % h and k + 1 != steps:
            continue
        for name in p:
            d = np.mean([anchor[name] - q[name] for q in reps], axis=0)
            buf[name] = omom * buf[name] + d
            anchor[name] = anchor[name] - olr * (d + omom * buf[name])
        reps = [dict(anchor) for _ in range(world)]
    return anchor, losses


def cmd_localsgd(model, xf, yf, batch, steps, lr, world, h, olr, omom,
                 trained, csv, optim="sgd"):
    p, _ = load(model)
    x = np.load(xf).astype(np.float64)
    y = np.load(yf).astype(np.float64)
    p, losses = local_sgd(p, x, y, int(batch), int(steps), float(lr),
                          int(world), int(h), float(olr), float(omom), optim)
    got, _ = load(trained)
    for name in sorted(p):
        close(name, p[name], got[name], 1e-5, 1e-6)
    close("losses", losses, read_losses(csv), 1e-5, 1e-7)


def read_losses(path):
    with open(path) as f:
        head = f.readline().strip().split(",")
        col = head.index("loss")
        return np.array([float(line.split(",")[col]) for line in f if line.strip()])


def cmd_mlp(model, xf, yf, batch, steps, lr, trained, csv, optim="sgd"):
    p, _ = load(model)
    x = np.load(xf).astype(np.float64)
    y = np.load(yf).astype(np.float64)
    p, losses = mlp_train(p, x, y, int(batch), int(steps), float(lr), optim)
    got, _ = load(trained)
    for name in sorted(p):
        close(name, p[name], got[name], 1e-5, 1e-6)
    close("losses", losses, read_losses(csv), 1e-5, 1e-7)


def cmd_cmp(a, b, rtol, atol, skip=None):
    ta, _ = load(a)
    tb, _ = load(b)
    if sorted(ta) != sorted(tb):
        sys.exit(f"tensors differ: {sorted(ta)} vs {sorted(tb)}")
    for name in sorted(ta):
        if skip and name.endswith(skip):
            continue
        close(name, tb[name], ta[name], float(rtol), float(atol))


def cmd_psfiles(d, n):
    rng = np.random.default_rng(7)
    p = {"a.weight": rng.standard_normal((3, 5)), "a.bias": rng.standard_normal(3),
         "b": rng.standard_normal((2, 2, 2))}
    save(f"{d}/P.safetensors", p, {"note": "ps test"})
    for i in range(int(n)):
        save(f"{d}/G{i}.safetensors",
             {k: rng.standard_normal(v.shape) for k, v in p.items()})


def cmd_psexpect(pf, lr, got, rounds, *gf):
    p, _ = load(pf)
    gs = [load(f)[0] for f in gf]
    res, meta = load(got)
    for name in sorted(p):
        mean = np.mean([np.float32(g[name]) for g in gs], axis=0)
        want = p[name]
        for _ in range(int(rounds)):
            want = want - float(lr) * mean
        close(name, want, res[name], 1e-6, 1e-7)
    if meta.get("note") != "ps test":
        sys.exit(f"metadata lost: {meta}")


def main():
    cmd, args = sys.argv[1], sys.argv[2:]
    if cmd == "mlp":
        cmd_mlp(*args)
    elif cmd == "localsgd":
        cmd_localsgd(*args)
    elif cmd == "cmp":
        cmd_cmp(*args)
    elif cmd == "csvcmp":
        close("losses", read_losses(args[1]), read_losses(args[0]),
              float(args[2]), 1e-7)
    elif cmd == "psfiles":
        cmd_psfiles(*args)
    elif cmd == "psexpect":
        cmd_psexpect(*args)
    else:
        sys.exit(f"unknown command {cmd}")


if __name__ == "__main__":
    main()
