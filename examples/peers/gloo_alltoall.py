#!/usr/bin/python3
# One rank of PyTorch Gloo's all_to_all_single with per-peer splits, the
# peer of collx-bench coll --op alltoallv --skew zipf:S: the same counts
# (every rank sends ELEMENTS f32 values, split over the ranks by a Zipf law
# of exponent S over the same fixed-seed shuffle of the ranks, largest
# remainders rounding), checked once, then timed: ITERS iterations after 3
# warm-up ones, each after a barrier, each iteration's time the slowest
# rank's (as collx-bench times it). Under collx-run (env RANK WORLD_SIZE
# MASTER_ADDR MASTER_PORT; GLOO_SOCKET_IFNAME for the interface).
# usage: gloo_alltoall.py S ITERS ELEMENTS...
#   -> rank 0 prints per size: gloo world=W elements=N skew=S median_s=T
import statistics
import sys
import time

import torch
import torch.distributed as dist

M64 = (1 << 64) - 1


def counts(n, world, s):
    """collx-bench's bench_skew_counts, written again."""
    place, h = list(range(world)), 0x5eed0a2a
    for d in range(world - 1, 0, -1):
        h = (h + 0x9e3779b97f4a7c15) & M64
        z = h
        z = ((z ^ (z >> 30)) * 0xbf58476d1ce4e5b9) & M64
        z = ((z ^ (z >> 27)) * 0x94d049bb133111eb) & M64
        j = (z ^ (z >> 31)) % (d + 1)
        place[d], place[j] = place[j], place[d]
    share = [(p + 1) ** -s for p in place]
    total = sum(share)
    x = [n * v / total for v in share]
    c = [int(v) for v in x]
    rest = [v - k for v, k in zip(x, c)]
    while sum(c) < n:
        best = max(range(world), key=lambda d: (rest[d], -d))
        c[best] += 1
        rest[best] = -1
    return c


def main():
    s, iters, sizes = float(sys.argv[1]), int(sys.argv[2]), [int(a) for a in sys.argv[3:]]
    dist.init_process_group("gloo")
    torch.set_num_threads(1)
    world, rank = dist.get_world_size(), dist.get_rank()
    for n in sizes:
        c = counts(n, world, s)
        at = sum(c[:rank])
        x = torch.arange(n, dtype=torch.float32) + rank * 1e7
        y = torch.empty(c[rank] * world, dtype=torch.float32)
        dist.all_to_all_single(y, x, [c[rank]] * world, c)
        want = torch.cat([torch.arange(at, at + c[rank], dtype=torch.float32) + q * 1e7
                          for q in range(world)])
        if not torch.equal(y, want):
            sys.exit(f"gloo_alltoall.py: rank {rank}: wrong result for {n} elements")
        for _ in range(3):
            dist.all_to_all_single(y, x, [c[rank]] * world, c)
        ts = []
        for _ in range(iters):
            dist.barrier()
            t = time.perf_counter()
            dist.all_to_all_single(y, x, [c[rank]] * world, c)
            ts.append(time.perf_counter() - t)
        # each iteration's slowest rank, as collx-bench times it
        t = torch.tensor(ts, dtype=torch.float64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        if rank == 0:
            print(f"gloo world={world} elements={n} skew={s:g} counts={','.join(map(str, c))} "
                  f"median_s={statistics.median(t.tolist()):.6f}", flush=True)
    dist.destroy_process_group()


main()
