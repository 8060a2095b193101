#!/usr/bin/python3
"""PyTorch CPU peer of collx-dp's single-rank GPT training: the same model
(token and position embeddings, pre-LayerNorm causal blocks with biased
q/k/v/o and an exact-GELU MLP of 4*d_model, a final LayerNorm, the output
projection tied to wte), the same data (windows of seq+1 bytes of a file),
AdamW with torch.optim's defaults, one thread.

usage: torch_gpt.py FILE D_MODEL LAYERS HEADS SEQ BATCH STEPS [LR]
Prints one line: "torch d_model D: median step S s, T tokens/s, cpu C s"
(wall and CPU seconds of this process, medians, the first step, which
warms up, left out).
"""
import math
import statistics
import sys
import time

import torch
import torch.nn.functional as F
from torch import nn


def causal_attention(q, k, v, heads):
    """Causal softmax attention of HEADS heads: q, k, v [b, s, heads*hd]
    -> [b, s, heads*hd]."""
    b, s, c = q.shape
    hd = c // heads

    def split(t):
        return t.view(b, s, heads, hd).transpose(1, 2)
    q, k, v = split(q), split(k), split(v)
    att = q @ k.transpose(-2, -1) / math.sqrt(hd)
    mask = torch.ones(s, s, dtype=torch.bool).tril()
    att = att.masked_fill(~mask, float("-inf")).softmax(-1)
    return (att @ v).transpose(1, 2).reshape(b, s, c)


class Block(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.q, self.k, self.v, self.o = (nn.Linear(d, d) for _ in range(4))
        self.fc1, self.fc2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def attn(self, x):
        return self.o(causal_attention(self.q(x), self.k(x), self.v(x),
                                       self.heads))

    def forward(self, x):
        h = x + self.attn(self.ln1(x))
        return h + self.fc2(F.gelu(self.fc1(self.ln2(h))))


class GPT(nn.Module):
    def __init__(self, vocab, d, layers, heads, seq):
        super().__init__()
        self.wte = nn.Parameter(torch.randn(vocab, d) * 0.02)
        self.wpe = nn.Parameter(torch.randn(seq, d) * 0.02)
        self.blocks = nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.lnf = nn.LayerNorm(d)

    def forward(self, inp, tgt):
        x = self.wte[inp] + self.wpe[: inp.shape[1]]
        for blk in self.blocks:
            x = blk(x)
        logits = self.lnf(x) @ self.wte.t()
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                               tgt.reshape(-1))


def main():
    path, d, layers, heads, seq, batch, steps = sys.argv[1:8]
    d, layers, heads, seq = int(d), int(layers), int(heads), int(seq)
    batch, steps = int(batch), int(steps)
    lr = float(sys.argv[8]) if len(sys.argv) > 8 else 1e-3
    torch.set_num_threads(1)
    torch.manual_seed(0)
    data = torch.tensor(list(open(path, "rb").read()), dtype=torch.long)
    nwin = data.numel() // (seq + 1)
    wins = data[: nwin * (seq + 1)].view(nwin, seq + 1)
    model = GPT(256, d, layers, heads, seq)
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    times, cpus = [], []
    for k in range(steps):
        idx = (k * batch + torch.arange(batch)) % nwin
        tok = wins[idx]
        t0, c0 = time.perf_counter(), time.process_time()
        opt.zero_grad(set_to_none=False)
        loss = model(tok[:, :-1], tok[:, 1:])
        loss.backward()
        opt.step()
        times.append(time.perf_counter() - t0)
        cpus.append(time.process_time() - c0)
    med = statistics.median(times[1:] if len(times) > 1 else times)
    cpu = statistics.median(cpus[1:] if len(cpus) > 1 else cpus)
    print(f"torch d_model {d}: median step {med:.4f} s, "
          f"{batch * seq / med:.0f} tokens/s, cpu {cpu:.4f} s")


if __name__ == "__main__":
    main()
