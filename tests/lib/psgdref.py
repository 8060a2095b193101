#!/usr/bin/python3
"""PyTorch's own powerSGD_hook as the reference for collx-dp --powersgd.

usage: psgdref.py MODEL X Y BATCH STEPS LR RANK START SEED TRAINED LOSS_CSV

Trains the mlp of MODEL (fc2(gelu(fc1(x))), exact GELU, mean squared
error) with torch DDP on a gloo group of two processes on localhost, each
rank on its half of every batch (collx's split), SGD with LR, the
gradients through
torch.distributed.algorithms.ddp_comm_hooks.powerSGD_hook.powerSGD_hook
(matrix_approximation_rank RANK, start_powerSGD_iter START, everything
else its default). torch draws the first Q from its own generator; collx
from its own (collx-tensor create --fill randn --seed SEED+t for the
model's tensor t in name order), so torch.randn is handed collx's values, the only
thing changed. Compares the parameters after STEPS steps and every
step's loss with collx-dp's TRAINED model and LOSS_CSV: within 1e-5.
Exit 0 when they match, 1 (with a message) when not.
"""
import os
import socket
import subprocess
import sys
import tempfile

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as psgd

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from collpy import load_st  # noqa: E402

def first_qs(params, rank, seed, tmp):
    """collx's first Q (m x r) of every matrix powerSGD compresses, by
    (m, r). t counts the model's tensors in name order, as collx's file
    holds them."""
    qs = {}
    for t, name in enumerate(sorted(params)):
        w = params[name]
        n, m = w.shape[0], w.size // w.shape[0]
        r = min(n, m, rank)
        if w.ndim != 2 or (n + m) * r * 2 >= n * m:
            continue
        path = os.path.join(tmp, f"q{t}.npy")
        subprocess.run(["collx-tensor", "create", "--shape", f"{m},{r}",
                        "--fill", "randn", "--seed", str(seed + t), "-o",
                        path], check=True)
        if (m, r) in qs:
            sys.exit(f"two compressed tensors of shape {m}x{r}")
        qs[(m, r)] = torch.from_numpy(np.load(path).astype(np.float32))
    return qs


def worker(me, port, a, qs, out):
    model, x, y, batch, steps, lr, rank, start = a
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}",
                            world_size=2, rank=me)
    p, _ = load_st(model)
    din, hid, dout = p["fc1.weight"].shape[1], p["fc1.weight"].shape[0], \
        p["fc2.weight"].shape[0]
    net = torch.nn.Sequential(torch.nn.Linear(din, hid), torch.nn.GELU(),
                              torch.nn.Linear(hid, dout))
    with torch.no_grad():
        for i, name in ((0, "fc1"), (2, "fc2")):
            net[i].weight.copy_(torch.from_numpy(p[name + ".weight"]))
            net[i].bias.copy_(torch.from_numpy(p[name + ".bias"]))
    ddp = torch.nn.parallel.DistributedDataParallel(net)
    state = psgd.PowerSGDState(process_group=None,
                               matrix_approximation_rank=rank,
                               start_powerSGD_iter=start)
    ddp.register_comm_hook(state, psgd.powerSGD_hook)
    real_randn = torch.randn

    def randn(*shape, **kw):
        # the hook's q.shape: (1, m, r)
        if len(shape) == 3 and (shape[1], shape[2]) in qs:
            return qs[(shape[1], shape[2])].reshape(shape).clone()
        return real_randn(*shape, **kw)

    torch.randn = randn
    opt = torch.optim.SGD(ddp.parameters(), lr=lr)
    X = torch.from_numpy(np.load(x).astype(np.float32))
    Y = torch.from_numpy(np.load(y).astype(np.float32))
    n, half = X.shape[0], batch // 2
    losses = []
    for k in range(steps):
        idx = torch.from_numpy((k * batch + me * half + np.arange(half)) % n)
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(ddp(X[idx]), Y[idx])
        loss.backward()
        opt.step()
        t = loss.detach().clone()
        dist.all_reduce(t)
        losses.append(float(t) / 2)
    if me == 0:
        torch.save({"params": {k: v.detach().numpy().copy() for k, v in
                               net.state_dict().items()},
                    "losses": losses}, out)
    dist.destroy_process_group()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def read_losses(path):
    with open(path) as f:
        col = f.readline().strip().split(",").index("loss")
        return np.array([float(line.split(",")[col]) for line in f
                         if line.strip()])


def close(what, ref, got, tol=1e-5):
    ref, got = np.asarray(ref, np.float64), np.asarray(got, np.float64)
    err = np.abs(got - ref)
    bad = err > tol * (1 + np.abs(ref))
    if ref.shape != got.shape or bad.any():
        sys.exit(f"{what}: {int(bad.sum())} values off by more than {tol}, "
                 f"worst {err.max():.3g}")
    print(f"# {what}: max abs err {err.max():.3g}")


def main():
    if len(sys.argv) != 12:
        sys.exit(__doc__)
    model, x, y, batch, steps, lr, rank, start, seed, trained, csv = \
        sys.argv[1:]
    if int(batch) % 2:
        sys.exit("BATCH must split evenly over the two ranks")
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        params, _ = load_st(model)
        qs = first_qs(params, int(rank), int(seed), tmp)
        out = os.path.join(tmp, "ref.pt")
        a = (model, x, y, int(batch), int(steps), float(lr), int(rank),
             int(start))
        # Gloo's rendezvous on a port just found free can lose it to
        # another process and abort; the reference then runs again, on
        # another port (what it computes is deterministic).
        for attempt in (1, 2):
            try:
                mp.spawn(worker, args=(free_port(), a, qs, out), nprocs=2)
                break
            except mp.ProcessExitedException:
                if attempt == 2:
                    raise
                print("psgdref.py: the reference's ranks aborted; again",
                      file=sys.stderr)
        ref = torch.load(out)
    got, _ = load_st(trained)
    for i, name in ((0, "fc1"), (2, "fc2")):
        for kind in ("weight", "bias"):
            close(f"{name}.{kind}", ref["params"][f"{i}.{kind}"],
                  got[f"{name}.{kind}"])
    close("losses", ref["losses"], read_losses(csv))


if __name__ == "__main__":
    main()
