#!/usr/bin/env python3
"""Independent float64 PyTorch reference for lib/nn in bf16 (run by
test_nn_bf16).

usage: nn_bf16_ref.py DIR NAME

Every matrix product, forward and backward, takes its two inputs rounded
as collx rounds them (to f32, then to bf16, nearest even) and multiplies
them exactly in float64; everything else (LayerNorm, softmax, GELU, the
losses) is float64. NAME is a layer case (DIR/NAME.safetensors: inputs
and collx's outputs and input gradients) or a model case
(DIR/NAME-model.safetensors, a collx model and its batch.*, and
DIR/NAME-grads.safetensors, collx's gradients of the summed loss, the sum
in its metadata "loss_sum").

Each result must be within 1e-3 of the reference relative in norm
(||got - ref|| / ||ref||). The screen: an input computed in f32 by collx
and in float64 here may round to different bf16 values when it lies
within f32 noise of a rounding midpoint; the case counts the inputs within
2^-10 of a bf16 ulp of one. When none is (the case is screened), the
results must agree within TIGHT, far below bf16's own 2^-9: a collx
that multiplied in f32 instead fails it. Exit 0 when all match, 1 when
not, 77 without torch.
"""
import math
import os
import sys

try:
    import torch
    import torch.nn.functional as F
except ImportError:
    print("# torch not available")
    sys.exit(77)

sys.dont_write_bytecode = True  # no __pycache__ beside the tests
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
# nn_ref.py (test_nn_torch): its file reading and the layers without a
# matrix product
from nn_ref import layernorm, load, prefixes  # noqa: E402

LOOSE = 1e-3
TIGHT = 1e-4
NEAR = 64  # f32 ulps of a bf16 midpoint: 2^-10 of a bf16 ulp


class Screen:
    near = 0
    total = 0


def bf(x):
    """x rounded to f32, then to bf16, as float64; counts near-midpoints."""
    f = x.detach().float().contiguous()
    low = f.view(torch.int32) & 0xffff
    near = ((low - 0x8000).abs() < NEAR) & torch.isfinite(f)
    Screen.near += int(near.sum())
    Screen.total += f.numel()
    # denormals count as zero (AVX512-BF16's conversion, and collx's)
    f = torch.where(f.abs() < torch.finfo(torch.float32).tiny,
                    torch.zeros_like(f), f)
    return f.bfloat16().double()


class BF16MM(torch.autograd.Function):
    """a @ b on bf16-rounded inputs; its backward rounds alike."""
    @staticmethod
    def forward(ctx, a, b):
        ctx.save_for_backward(a, b)
        return bf(a) @ bf(b)

    @staticmethod
    def backward(ctx, g):
        a, b = ctx.saved_tensors
        gb = bf(g)
        return gb @ bf(b).transpose(-2, -1), bf(a).transpose(-2, -1) @ gb


mm = BF16MM.apply


def linear(x, w, b=None):
    y = mm(x, w.t())
    return y if b is None else y + b


def attention_core(q, k, v, heads, causal):
    b, s, c = q.shape
    hd = c // heads

    def split(t):
        return t.reshape(b, s, heads, hd).transpose(1, 2)
    q, k, v = split(q), split(k), split(v)
    att = mm(q, k.transpose(-2, -1)) / math.sqrt(hd)
    if causal:
        mask = torch.ones(s, s, dtype=torch.bool).tril()
        att = att.masked_fill(~mask, float("-inf"))
    return mm(att.softmax(-1), v).transpose(1, 2).reshape(b, s, c)


def plinear(p, name, x):
    return linear(x, p[name + ".weight"], p.get(name + ".bias"))


def block(p, pre, x, heads, causal):
    a = layernorm(p, pre + "ln1", x)
    att = attention_core(plinear(p, pre + "attn.q", a),
                         plinear(p, pre + "attn.k", a),
                         plinear(p, pre + "attn.v", a), heads, causal)
    h = x + plinear(p, pre + "attn.o", att)
    m = layernorm(p, pre + "ln2", h)
    return h + plinear(p, pre + "mlp.fc2",
                       F.gelu(plinear(p, pre + "mlp.fc1", m)))


def model_loss_sum(p, meta, batch):
    arch = meta["collx.arch"]
    if arch == "mlp":
        x, y = batch["batch.x"], batch["batch.y"]
        for pre in prefixes(p):
            x = plinear(p, pre + "fc2", F.gelu(plinear(p, pre + "fc1", x)))
        return F.mse_loss(x, y) * y.shape[0]
    heads = int(meta["heads"])
    if arch == "block":
        n = int(meta["batch_n"])
        x, y = batch["batch.x"], batch["batch.y"]
        x, y = x.reshape(n, -1, x.shape[-1]), y.reshape(n, -1, y.shape[-1])
        causal = meta.get("causal", "0") in ("1", "true")
        for pre in prefixes(p):
            x = block(p, pre, x, heads, causal)
        return F.mse_loss(x, y) * n
    tok = batch["batch.tokens"]
    inp, tgt = tok[:, :-1], tok[:, 1:]
    x = p["wte"][inp] + p["wpe"][:inp.shape[1]]
    for pre in prefixes(p):
        x = block(p, pre, x, heads, True)
    logits = mm(layernorm(p, "lnf", x), p["wte"].t())
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                           tgt.reshape(-1)) * tok.shape[0]


def layer_case(t, meta, name):
    """{result name: reference} of a layer case."""
    if name == "linear":
        x, w, b = (t[k].clone().requires_grad_(True) for k in "xwb")
        out = linear(x, w, b)
        out.backward(t["dout"])
        return {"out": out, "dx": x.grad, "dw": w.grad, "db": b.grad}
    q, k, v = (t[n].clone().unsqueeze(0).requires_grad_(True) for n in "qkv")
    out = attention_core(q, k, v, int(meta["heads"]), meta["causal"] == "1")
    out.backward(t["dout"].unsqueeze(0))
    return {"out": out[0], "dq": t["dq0"] + q.grad[0],
            "dk": t["dk0"] + k.grad[0], "dv": t["dv0"] + v.grad[0]}


def main():
    d, name = sys.argv[1], sys.argv[2]
    if os.path.exists("%s/%s.safetensors" % (d, name)):
        t, meta = load("%s/%s.safetensors" % (d, name))
        ref, got = layer_case(t, meta, name), t
    else:
        t, meta = load("%s/%s-model.safetensors" % (d, name))
        got, gmeta = load("%s/%s-grads.safetensors" % (d, name))
        batch = {k: v for k, v in t.items() if k.startswith("batch.")}
        p = {k: v.clone().requires_grad_(True) for k, v in t.items()
             if not k.startswith("batch.")}
        loss = model_loss_sum(p, meta, batch)
        loss.backward()
        ref = {k: v.grad for k, v in p.items()}
        ref["loss_sum"] = loss.detach().reshape(1)
        got["loss_sum"] = torch.tensor([float(gmeta["loss_sum"])],
                                       dtype=torch.float64)
    screened = Screen.near == 0
    print("# %s: %d of %d matmul inputs near a bf16 midpoint: %s" % (
        name, Screen.near, Screen.total,
        "screened, tolerance %g" % TIGHT if screened else
        "not screened, tolerance %g" % LOOSE))
    tol, ok = TIGHT if screened else LOOSE, True
    for k in sorted(ref):
        r, g = ref[k].detach(), got[k]
        err = (g - r).norm().item() / max(r.norm().item(), 1e-30)
        bad = not err <= tol
        ok &= not bad
        print("# %s %s: ||err||/||ref|| %.3g%s" % (name, k, err,
                                                   " NOT CLOSE" if bad else ""))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
