#!/usr/bin/python3
"""NumPy model of collx-dp's gradients on the wire (--wire), written from
collx-dp(1)'s rounding points, not from the C code.

usage: wireref.py DIR WORLD MODE WIRE STEPS LR
  DIR holds what test_par_wire's ranks wrote: NAME.STEP.RANK.f32 for a and
  b (rank's gradient p * a + b, step 0), p (step 0: the start; step k: the
  values after it), sum (step k: allreduce: the whole summed vector;
  reduce-scatter: the rank's reduced slices of both buckets, packed) and
  ef (int8: the rank's error feedback after step k). MODE: allreduce or
  reduce-scatter (both over the ring); WIRE: bf16, f16 or int8.
Exit 0 when every file is the model's bit for bit, 1 (saying where) when
not, 77 without NumPy.
"""
import sys

try:
    import numpy as np
except ImportError:
    sys.exit(77)

F32 = np.float32
BUCKETS = [(0, 701), (701, 1001)]
BLOCK = 256


def bf16(x):
    """Round f32 to bf16 (nearest, ties to even), as f32 values."""
    b = np.asarray(x, F32).view(np.uint32).astype(np.uint64)
    b = ((b + 0x7FFF + ((b >> 16) & 1)) >> 16) << 16
    return b.astype(np.uint32).view(F32)


def f16(x):
    return np.asarray(x, F32).astype(np.float16).astype(F32)


def parts(n, p):
    """Starts of n cut into p parts as evenly as possible, the first
    n % p one longer."""
    q, r = divmod(n, p)
    return [i * q + min(i, r) for i in range(p + 1)]


def ring_allreduce(gs, rnd):
    """The bucket cut into slices of about a MiB of 2-byte values, each
    into W blocks; block b summed in rank order b, b+1, ..., every partial
    sum rounded to the wire type."""
    w, n = len(gs), len(gs[0])
    ws = [rnd(g) for g in gs]
    out = np.empty(n, F32)
    sl = parts(n, max(1, -(-2 * n // (1 << 20))))
    for s0, s1 in zip(sl, sl[1:]):
        off = [s0 + o for o in parts(s1 - s0, w)]
        for b in range(w):
            lo, hi = off[b], off[b + 1]
            acc = ws[b][lo:hi]
            for k in range(1, w):
                acc = rnd(acc + ws[(b + k) % w][lo:hi])
            out[lo:hi] = acc
    return out


def ring_reduce_scatter(gs, rnd, c):
    """The bucket padded to W chunks of c; chunk b summed in rank order
    b+1, b+2, ..., b (itself last), every partial sum rounded."""
    w = len(gs)
    ws = [rnd(np.concatenate([g, np.zeros(c * w - len(g), F32)])) for g in gs]
    res = []
    for b in range(w):
        sl = slice(b * c, (b + 1) * c)
        acc = ws[(b + 1) % w][sl]
        for k in range(2, w + 1):
            acc = rnd(acc + ws[(b + k) % w][sl])
        res.append(acc)
    return res


def q8(v):
    """Quantize a chunk block by block: (dequantized values, what was lost)."""
    v = np.asarray(v, F32)
    deq = np.zeros_like(v)
    for a in range(0, len(v), BLOCK):
        blk = v[a:a + BLOCK]
        s = F32(np.max(np.abs(blk)) if len(blk) else 0) / F32(127)
        q = np.zeros(len(blk), np.int8)
        if s > 0:
            q = np.clip(np.rint(blk / s), -127, 127).astype(np.int8)
        # integers: a value that rounds to zero has no sign
        deq[a:a + BLOCK] = q.astype(F32) * s
    return deq, v - deq


def int8_reduce(gs, efs, lo, n, c):
    """Every rank's chunks of g + e quantized (e keeps the loss); chunk
    r's dequantized values summed in rank order: the list of sums."""
    w = len(gs)
    deqs = []
    for r in range(w):
        v = np.zeros(c * w, F32)
        v[:n] = gs[r][lo:lo + n] + efs[r][lo:lo + n]
        d = np.empty_like(v)
        for q in range(w):
            sl = slice(q * c, (q + 1) * c)
            d[sl], lost = q8(v[sl])
            end = min((q + 1) * c, n)
            if end > q * c:
                efs[r][lo + q * c:lo + end] = lost[:end - q * c]
        deqs.append(d)
    sums = []
    for q in range(w):
        sl = slice(q * c, (q + 1) * c)
        acc = deqs[0][sl]
        for r in range(1, w):
            acc = acc + deqs[r][sl]
        sums.append(acc)
    return sums


def int8_allreduce(gs, efs, lo, n, c):
    """int8_reduce, then each rank's sum quantized again (its loss into
    that rank's e over its chunk) and gathered."""
    out = np.zeros(c * len(gs), F32)
    for q, s in enumerate(int8_reduce(gs, efs, lo, n, c)):
        deq, lost = q8(s)
        end = min((q + 1) * c, n)
        if end > q * c:
            efs[q][lo + q * c:lo + end] += lost[:end - q * c]
        out[q * c:(q + 1) * c] = deq
    return out[:n]


def load(d, name, k, r):
    return np.fromfile(f"{d}/{name}.{k}.{r}.f32", dtype="<f4")


def same(what, want, got):
    want, got = np.asarray(want, F32), np.asarray(got, F32)
    if want.shape != got.shape:
        sys.exit(f"{what}: {got.shape[0]} values, want {want.shape[0]}")
    bad = np.nonzero(want.view(np.uint32) != got.view(np.uint32))[0]
    if len(bad):
        i = bad[0]
        sys.exit(f"{what}: {len(bad)} values differ, first at {i}: "
                 f"{got[i]!r} vs the model's {want[i]!r}")


def main():
    d, w, mode, wire, steps, lr = sys.argv[1:7]
    w, steps, lr = int(w), int(steps), F32(float(lr))
    rnd = {"bf16": bf16, "f16": f16}.get(wire)
    a = [load(d, "a", 0, r) for r in range(w)]
    b = [load(d, "b", 0, r) for r in range(w)]
    p = load(d, "p", 0, 0)
    efs = [np.zeros_like(p) for _ in range(w)]
    for k in range(1, steps + 1):
        gs = [p * a[r] + b[r] for r in range(w)]
        total = np.empty_like(p)
        mine = [[] for _ in range(w)]
        for lo, hi in BUCKETS:
            n = hi - lo
            c = -(-n // w)
            if mode == "allreduce":
                if rnd is not None:
                    total[lo:hi] = ring_allreduce([g[lo:hi] for g in gs], rnd)
                else:
                    total[lo:hi] = int8_allreduce(gs, efs, lo, n, c)
                continue
            if rnd is not None:
                sums = ring_reduce_scatter([g[lo:hi] for g in gs], rnd, c)
            else:
                sums = int8_reduce(gs, efs, lo, n, c)
            for q in range(w):
                ln = max(0, min(c, n - q * c))
                mine[q].append(sums[q][:ln])
                total[lo + q * c:lo + q * c + ln] = sums[q][:ln]
        p = p - lr * total
        for r in range(w):
            got = load(d, "sum", k, r)
            want = total if mode == "allreduce" else np.concatenate(mine[r])
            same(f"step {k} rank {r} sums", want, got)
            if wire == "int8":
                same(f"step {k} rank {r} error feedback", efs[r],
                     load(d, "ef", k, r))
            same(f"step {k} rank {r} values", p, load(d, "p", k, r))
    print(f"# {d}: {steps} steps bit for bit")


if __name__ == "__main__":
    main()
