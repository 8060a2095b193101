#!/usr/bin/env bats
# The PyTorch peers in examples/peers/ that the benchmarks measure collx
# against: they must train the model collx trains, or the comparison says
# nothing.
load lib/common

GPL=/usr/share/common-licenses/GPL-3

setup() {
	common_setup
	unset COLLX_TOKEN COLLX_IFNAME COLLX_TIMEOUT COLLX_MASTER COLLX_RANK \
	    COLLX_WORLD_SIZE
}

teardown() {
	common_teardown
}

@test "torch_train.py dp2 x tp2 (DDP on Gloo, Megatron f/g) has collx-train's losses from collx's weights" {
	need python3-torch "$PY" -c "import torch.distributed"
	timeout 30 collx-dp --init gpt --dims 256,32,2,4,16 --seed 1 -o g.safetensors
	# batch 7: the replicas' shares are uneven (4 and 3)
	timeout 30 collx-run -n 4 --timeout 20 -- collx-train -q -m g.safetensors \
	    --data "$GPL" --batch 7 --steps 2 --optimizer adamw --dp 2 --tp 2 \
	    --loss-csv l.csv
	timeout 60 collx-run -n 4 --timeout 50 -x OPENBLAS_NUM_THREADS=1 -- \
	    "$PY" "$COLLX_ROOT/examples/peers/torch_train.py" "$GPL" 32 2 4 16 7 2 2 \
	    1e-3 g.safetensors >out 2>err
	grep -q '^torch dp2 x tp2: median step [0-9.]* s, [0-9]* tokens/s, loss' out
	# step 0 (the forward from the same weights) and step 1 (after AdamW
	# on the gradients both summed), within 1e-4 relative
	"$PY" -c '
import re, sys
got = re.search(r"loss ([0-9.]+), step 0 loss ([0-9.]+)", open("out").read())
rows = [l.split(",") for l in open("l.csv").read().split()[1:]]
pairs = [(float(rows[0][2]), float(got[2])), (float(rows[1][2]), float(got[1]))]
print(pairs)
sys.exit(any(abs(w - h) > 1e-4 * abs(w) for w, h in pairs))
'
}

@test "torch_ddp.py powersgd:4:2:S has collx-dp --powersgd 4 --seed S's losses from collx's weights and first Q" {
	need python3-torch "$PY" -c "import torch.distributed"
	timeout 30 collx-dp --init gpt --dims 256,32,2,4,16 --seed 1 -o g.safetensors
	for s in 5 6; do
		timeout 30 collx-run -n 2 --timeout 20 -- collx-dp -q -m g.safetensors \
		    --data "$GPL" --batch 8 --steps 6 --optimizer adamw \
		    --powersgd 4 --powersgd-start 2 --seed "$s" --loss-csv "l$s.csv"
	done
	timeout 60 collx-run -n 2 --timeout 50 -x OPENBLAS_NUM_THREADS=1 -- \
	    "$PY" "$COLLX_ROOT/examples/peers/torch_ddp.py" "$GPL" 32 2 4 16 8 6 \
	    powersgd:4:2:5 1e-3 g.safetensors t.csv >out 2>err
	grep -q '^torch powersgd:4:2:5: mean step [0-9.]* s, [0-9]* tokens/s, loss' out
	# steps 0 to 2 from plain allreduces, 3 to 5 after compressed
	# updates: within 1e-5 relative of --seed 5's, and a first Q of
	# another seed tells apart
	"$PY" -c '
import sys
def col(path):
    rows = [l.split(",") for l in open(path).read().split()]
    i = rows[0].index("loss")
    return [float(r[i]) for r in rows[1:]]
t, a, b = col("t.csv"), col("l5.csv"), col("l6.csv")
def off(x):
    return max(abs(u - v) / abs(u) for u, v in zip(x, t))
print(len(t), len(a), off(a), off(b))
sys.exit(not (len(t) == len(a) == 6 and off(a) < 1e-5 and off(b) > 1e-5))
'
}

@test "torch_ddp.py powersgd: ranks out of step issue the buckets' allreduces in one order and run to the end" {
	need python3-torch "$PY" -c "import torch.distributed"
	# Two buckets (a first one of 16 KiB), and timings that make the two
	# ranks issue the collectives in different orders when nothing orders
	# them: rank 0 starts the last bucket 1 s late, rank 1 its first
	# allreduce from one of Gloo's callback threads. Unordered, Gloo pairs
	# two different tensors and a rank aborts.
	cat >skew.py <<'PY'
import os, sys, threading, time
sys.path.insert(0, os.environ["PEERS"])
import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as psgd
import torch_ddp
dist._DEFAULT_FIRST_BUCKET_BYTES = 16384
real_ar, real_hook = dist.all_reduce, psgd.powerSGD_hook
def all_reduce(*a, **k):
    if os.environ["RANK"] == "1" and \
            threading.current_thread() is not threading.main_thread():
        time.sleep(1)
    return real_ar(*a, **k)
def hook(state, bucket):
    if os.environ["RANK"] == "0" and bucket.is_last() and \
            state.iter >= state.start_powerSGD_iter:
        time.sleep(1)
    return real_hook(state, bucket)
dist.all_reduce, psgd.powerSGD_hook = all_reduce, hook
sys.argv = sys.argv[1:]
torch_ddp.main()
PY
	timeout 60 collx-run -n 2 --timeout 50 -x OPENBLAS_NUM_THREADS=1 \
	    -x PEERS="$COLLX_ROOT/examples/peers" -- "$PY" skew.py \
	    "$COLLX_ROOT/examples/peers/torch_ddp.py" "$GPL" 32 2 4 16 8 4 \
	    powersgd:4:2 >out 2>err
	grep -q '^torch powersgd:4:2: mean step [0-9.]* s, [0-9]* tokens/s, loss' out
}
