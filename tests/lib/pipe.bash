# What the collx-pipe suites share: data from a seed, a run on W ranks,
# a printed table as schedule-file rows, an mlp stack of varying widths.

# Random f32 X [n, d...] and Y as .npy from a seed.
# usage: data N XSHAPE YSHAPE SEED (shapes as "4" or "5,8")
data() {
	timeout 30 "$PY" -c '
import sys, numpy as np
from collpy import save
n, xs, ys, seed = int(sys.argv[1]), sys.argv[2], sys.argv[3], int(sys.argv[4])
r = np.random.default_rng(seed)
shape = lambda s: (n,) + tuple(int(v) for v in s.split(","))
save("X.npy", r.standard_normal(shape(xs)).astype(np.float32))
save("Y.npy", r.standard_normal(shape(ys)).astype(np.float32))' "$@"
}

# usage: pipe WORLD TAG [collx-pipe options...]: trained model tTAG, losses lTAG
pipe() {
	local w=$1 tag=$2
	shift 2
	timeout 60 collx-run -n "$w" --timeout 20 -- collx-pipe \
	    -o "t$tag.safetensors" --loss-csv "l$tag.csv" -q "$@"
}

# usage: table_rows PRINT-SCHEDULE-OPTIONS...: the rows rank,slot,action
# of the printed table, slots its clocks
table_rows() {
	timeout 10 collx-pipe --print-schedule "$@" |
	    awk 'NR > 1 && $1 ~ /^[0-9]+$/ { for (j = 2; j <= NF; j++)
		if ($j != ".") print j - 2 "," $1 "," $j }'
}

# An mlp stack whose layers change width: 3 -> 6 -> 4, 4 -> 5 -> 5 (no
# fc1 bias), 5 -> 7 -> 2, 2 -> 4 -> 3, random weights from a seed, as
# w.safetensors; with WRONG=1 layer 1 takes 3 inputs where layer 0 gives 4.
widths() {
	WRONG=${WRONG:-0} timeout 30 "$PY" -c '
import os, numpy as np
from collpy import save_st
r = np.random.default_rng(3)
t = {}
for i, (a, h, b) in enumerate([(3, 6, 4), (4, 5, 5), (5, 7, 2), (2, 4, 3)]):
    a = 3 if i == 1 and os.environ["WRONG"] == "1" else a
    g = lambda *s: (0.5 * r.standard_normal(s)).astype(np.float32)
    t[f"layers.{i}.fc1.weight"], t[f"layers.{i}.fc2.weight"] = g(h, a), g(b, h)
    t[f"layers.{i}.fc1.bias"], t[f"layers.{i}.fc2.bias"] = g(h), g(b)
del t["layers.1.fc1.bias"]
save_st("w.safetensors", t, {"collx.arch": "mlp"})'
}
