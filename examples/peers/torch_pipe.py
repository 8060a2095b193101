#!/usr/bin/python3
# Peer for collx-pipe: GPipe pipeline training of an mlp stack (the
# layers.{i}.fc1/fc2 safetensors collx-dp --init mlp writes) over
# torch.distributed send/recv on Gloo, as the classic exercises do (torch
# 1.13 has no pipelining module): all forwards of the micro-batches, then
# all backwards, gradients accumulated, one SGD step. One thread per rank;
# layers split evenly, contiguous. Rank 0 prints the median step time.
# usage: torch_pipe.py MODEL X.npy Y.npy WORLD MICRO STEPS LR
import json
import math
import os
import statistics
import struct
import sys
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def load_st(path):
    buf = open(path, "rb").read()
    n = struct.unpack("<Q", buf[:8])[0]
    head = json.loads(buf[8:8 + n])
    head.pop("__metadata__", None)
    out = {}
    for k, d in head.items():
        lo, hi = d["data_offsets"]
        out[k] = np.frombuffer(buf[8 + n + lo:8 + n + hi], "<f4").reshape(d["shape"])
    return out


class Layer(torch.nn.Module):
    def __init__(self, p, pre):
        super().__init__()
        w1, w2 = p[pre + "fc1.weight"], p[pre + "fc2.weight"]
        self.fc1 = torch.nn.Linear(w1.shape[1], w1.shape[0])
        self.fc2 = torch.nn.Linear(w2.shape[1], w2.shape[0])
        with torch.no_grad():
            self.fc1.weight.copy_(torch.from_numpy(w1.copy()))
            self.fc1.bias.copy_(torch.from_numpy(p[pre + "fc1.bias"].copy()))
            self.fc2.weight.copy_(torch.from_numpy(w2.copy()))
            self.fc2.bias.copy_(torch.from_numpy(p[pre + "fc2.bias"].copy()))

    def forward(self, x):
        return self.fc2(torch.nn.functional.gelu(self.fc1(x)))


def run(rank, world, args, port):
    model, xf, yf, micro, steps, lr = args
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    p = load_st(model)
    L = 1 + max(int(k.split(".")[1]) for k in p)
    per = math.ceil(L / world)
    stage = torch.nn.Sequential(*[Layer(p, f"layers.{i}.")
                                  for i in range(rank * per, min(L, (rank + 1) * per))])
    opt = torch.optim.SGD(stage.parameters(), lr=lr)
    X = torch.from_numpy(np.load(xf).astype(np.float32))
    Y = torch.from_numpy(np.load(yf).astype(np.float32))
    B = X.shape[0]
    xs, ys = X.tensor_split(micro), Y.tensor_split(micro)
    d_in = stage[0].fc1.in_features
    d_out = stage[-1].fc2.out_features
    times, losses = [], []
    for _ in range(steps):
        dist.barrier()
        t0 = time.perf_counter()
        opt.zero_grad()
        ins, outs, loss = [], [], 0.0
        for i in range(micro):
            if rank == 0:
                x = xs[i]
            else:
                x = torch.empty(xs[i].shape[0], d_in)
                dist.recv(x, rank - 1)
                x.requires_grad_()
            y = stage(x)
            if rank == world - 1:
                # mean squared error over the whole batch
                l = torch.nn.functional.mse_loss(y, ys[i], reduction="sum") / (B * d_out)
                loss += l.item()
                outs.append(l)
            else:
                dist.send(y.detach(), rank + 1)
                outs.append(y)
            ins.append(x)
        for i in range(micro):
            if rank == world - 1:
                outs[i].backward()
            else:
                g = torch.empty_like(outs[i])
                dist.recv(g, rank + 1)
                outs[i].backward(g)
            if rank > 0:
                dist.send(ins[i].grad, rank - 1)
        opt.step()
        times.append(time.perf_counter() - t0)
        losses.append(loss)
    if rank == world - 1:
        dist.send(torch.tensor(losses, dtype=torch.float64), 0) if world > 1 else None
    if rank == 0:
        if world > 1:
            lt = torch.empty(steps, dtype=torch.float64)
            dist.recv(lt, world - 1)
            losses = lt.tolist()
        med = statistics.median(times[1:] if steps > 1 else times)
        print(f"torch_pipe world={world} micro={micro} median_step_s={med:.6f} "
              f"loss0={losses[0]:.6f} loss_last={losses[-1]:.6f}")
    dist.destroy_process_group()


def main():
    model, xf, yf, world, micro, steps, lr = sys.argv[1:8]
    world = int(world)
    args = (model, xf, yf, int(micro), int(steps), float(lr))
    port = 29500 + os.getpid() % 20000
    mp.spawn(run, args=(world, args, port), nprocs=world, join=True)


if __name__ == "__main__":
    main()
