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
