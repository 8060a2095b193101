# Independent full-batch reference for collx-pipe: the same stack (mlp or
# block layers.{i}.*, or a gpt) trained in one process with PyTorch autograd
# in float64 and torch.optim; nothing here uses collx.
#
# piperef.py train ARCH MODEL X Y|- BATCH STEPS OPT LR [WD [MORE]] OUT CSV
#   writes the reference's trained model and per-step losses (ARCH mlp,
#   block or gpt; for gpt X is the token file, raw bytes unless .npy;
#   MORE: sgd's MOMENTUM, adamw's B1 B2 EPS).
# piperef.py cmp REF.safetensors REF.csv RTOL TRAINED CSV [TRAINED CSV...]
#   checks collx-pipe outputs against it (|got-ref| <= 1e-6 + RTOL |ref|).
#   PIPEREF_SKIP=SUFFIX leaves out tensors named ...SUFFIX (AdamW turns the
#   rounding noise of an exactly-zero gradient, attn.k.bias, into lr steps).
# Several commands may run in one process, separated by "+" arguments:
# torch, which only train needs, then loads once (seconds on a busy host).
import math
import os
import sys

import numpy as np

from collpy import load_st, save_st

torch = F = None


def load_torch():
    global torch, F
    if torch is None:
        import torch as t
        import torch.nn.functional as f
        torch, F = t, f
        torch.set_default_dtype(torch.float64)


def gelu(x):
    return 0.5 * x * (1 + torch.erf(x / math.sqrt(2)))


def lin(p, name, x):
    y = x @ p[name + ".weight"].T
    b = p.get(name + ".bias")
    return y if b is None else y + b


def mlp_layer(p, pre, x):
    return lin(p, pre + "fc2", gelu(lin(p, pre + "fc1", x)))


def layernorm(p, name, x):
    mu = x.mean(-1, keepdim=True)
    var = ((x - mu) ** 2).mean(-1, keepdim=True)
    y = (x - mu) / torch.sqrt(var + 1e-5)
    w, b = p.get(name + ".weight"), p.get(name + ".bias")
    return y * (1 if w is None else w) + (0 if b is None else b)


def attention(p, pre, x, heads, causal):
    b, s, d = x.shape
    hd = d // heads
    q, k, v = (lin(p, pre + n, x).view(b, s, heads, hd).transpose(1, 2)
               for n in ("q", "k", "v"))
    sc = q @ k.transpose(-1, -2) / math.sqrt(hd)
    if causal:
        sc = sc.masked_fill(torch.triu(torch.ones(s, s, dtype=torch.bool), 1),
                            float("-inf"))
    y = (torch.softmax(sc, -1) @ v).transpose(1, 2).reshape(b, s, d)
    return lin(p, pre + "o", y)


def block(p, pre, x, heads, causal):
    h = x + attention(p, pre + "attn.", layernorm(p, pre + "ln1", x), heads, causal)
    return h + mlp_layer(p, pre + "mlp.", layernorm(p, pre + "ln2", h))


def nlayers(p):
    return 1 + max(int(k.split(".")[1]) for k in p if k.startswith("layers."))


def loss_fn(arch, p, meta, xb, yb):
    L = nlayers(p)
    if arch == "mlp":
        x = xb
        for i in range(L):
            x = mlp_layer(p, f"layers.{i}.", x)
        return F.mse_loss(x, yb)
    heads = int(meta.get("heads", "1"))
    if arch == "block":
        x = xb
        for i in range(L):
            x = block(p, f"layers.{i}.", x, heads, meta.get("causal", "0") == "1")
        return F.mse_loss(x, yb)
    inp, tgt = xb[:, :-1], xb[:, 1:]
    s = inp.shape[1]
    x = p["wte"][inp] + p["wpe"][:s]
    for i in range(L):
        x = block(p, f"layers.{i}.", x, heads, True)
    logits = layernorm(p, "lnf", x) @ p["wte"].T
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), tgt.reshape(-1))


def close(what, ref, got, rtol, atol):
    err = np.abs(got - ref)
    bad = err > atol + rtol * np.abs(ref)
    if bad.any():
        i = np.unravel_index(np.argmax(err - rtol * np.abs(ref)), ref.shape)
        sys.exit(f"{what}: {bad.sum()} values off, worst at {i}: "
                 f"{got[i]!r} vs {ref[i]!r}")
    return err.max() if err.size else 0


def train(a):
    """train ARCH MODEL X Y|- BATCH STEPS OPT LR [WD [MORE]] OUT CSV"""
    load_torch()
    arch, model, xf, yf, batch, steps, opt, lr = a[:8]
    batch, steps, lr = int(batch), int(steps), float(lr)
    rest, out, csv = a[8:-2], a[-2], a[-1]
    t, meta = load_st(model)
    p = {k: torch.tensor(v.astype(np.float64), requires_grad=True)
         for k, v in t.items()}
    if arch == "gpt":
        seq = p["wpe"].shape[0]
        raw = np.load(xf) if xf.endswith(".npy") else \
            np.frombuffer(open(xf, "rb").read(), np.uint8)
        n = len(raw) // (seq + 1)
        X = torch.tensor(raw[:n * (seq + 1)].astype(np.int64)).view(n, seq + 1)
        Y = None
    else:
        X = torch.tensor(np.load(xf).astype(np.float64))
        Y = torch.tensor(np.load(yf).astype(np.float64))
        n = X.shape[0]
    params = [p[k] for k in sorted(p)]
    if opt == "sgd":
        wd = float(rest[0]) if rest else 0.0
        mom = float(rest[1]) if len(rest) > 1 else 0.0
        o = torch.optim.SGD(params, lr=lr, momentum=mom, weight_decay=wd)
    else:
        wd = float(rest[0]) if rest else 0.01
        b1, b2, eps = (float(v) for v in rest[1:4]) if len(rest) > 3 else \
            (0.9, 0.999, 1e-8)
        o = torch.optim.AdamW(params, lr=lr, betas=(b1, b2), eps=eps,
                              weight_decay=wd)
    losses = []
    for k in range(steps):
        idx = torch.tensor([(k * batch + j) % n for j in range(batch)])
        o.zero_grad()
        loss = loss_fn(arch, p, meta, X[idx], None if Y is None else Y[idx])
        loss.backward()
        o.step()
        losses.append(loss.item())
    save_st(out, {k: v.detach().numpy() for k, v in p.items()}, meta)
    with open(csv, "w") as f:
        f.write("step,loss\n")
        for k, v in enumerate(losses):
            f.write(f"{k},{v!r}\n")
    print(f"# reference {arch}: {steps} steps, losses {losses[0]:.6f} .. "
          f"{losses[-1]:.6f}")


def cmp(a):
    """cmp REF.safetensors REF.csv RTOL TRAINED CSV [TRAINED CSV...]"""
    ref, _ = load_st(a[0])
    rl = [float(r.split(",")[1]) for r in open(a[1]).read().split("\n")[1:] if r]
    rtol = float(a[2])
    skip = os.environ.get("PIPEREF_SKIP")
    for trained, csv in zip(a[3::2], a[4::2]):
        got, _ = load_st(trained)
        if sorted(got) != sorted(ref):
            sys.exit(f"{trained}: tensors {sorted(got)} vs {sorted(ref)}")
        worst = 0
        for k in sorted(ref):
            if skip and k.endswith(skip):
                continue
            worst = max(worst, close(f"{trained}: {k}", ref[k],
                                     got[k].astype(np.float64), rtol, 1e-6))
        rows = [r.split(",") for r in open(csv).read().split("\n")[1:] if r]
        if [int(r[0]) for r in rows] != list(range(len(rl))):
            sys.exit(f"{csv}: steps {[r[0] for r in rows]}, want {len(rl)}")
        close(f"{csv}: loss", np.array(rl), np.array([float(r[2]) for r in rows]),
              rtol, 1e-7)
        print(f"# {trained}: max abs err {worst:.3g}")


cmds = [[]]
for arg in sys.argv[1:]:
    if arg == "+":
        cmds.append([])
    else:
        cmds[-1].append(arg)
for c in cmds:
    if c and c[0] == "train":
        train(c[1:])
    elif c and c[0] == "cmp":
        cmp(c[1:])
    else:
        sys.exit("usage: piperef.py train ... | cmp ... [+ train ... | "
                 "cmp ...]...")
