#!/usr/bin/python3
# Two-moons data set from a seed: X [n,2] and Y [n,1] (class 0 or 1) as f32 .npy.
# usage: moons.py N SEED X.npy Y.npy
import sys
import numpy as np

n, seed = int(sys.argv[1]), int(sys.argv[2])
rng = np.random.default_rng(seed)
half = n // 2
t = np.pi * rng.random(n)
upper = np.arange(n) < half
x = np.where(upper, np.cos(t), 1.0 - np.cos(t))
y = np.where(upper, np.sin(t), 0.5 - np.sin(t))
X = np.stack([x, y], axis=1) + 0.1 * rng.standard_normal((n, 2))
Y = (~upper).astype(np.float32).reshape(n, 1)
np.save(sys.argv[3], X.astype(np.float32))
np.save(sys.argv[4], Y)
