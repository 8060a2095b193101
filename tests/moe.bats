#!/usr/bin/env bats
# Mixture-of-experts gpt models: collx-dp --init's tensors and metadata,
# the refusals of settings that do not fit (exit 3 naming the numbers,
# before any data moves), and training by collx-dp on 1 to 3 ranks checked
# against the independent float64 PyTorch MoE of
# examples/peers/torch_moe.py trained the same steps: parameters within
# 1e-5, and per step the loss, the assignments the capacity dropped and
# the imbalance (the loss CSV's moe_dropped and moe_imbalance).
load lib/common
load lib/moe

setup() {
	moe_setup
}

teardown() {
	common_teardown
}

# usage: init OUT [collx-dp --init options]: vocab 32, d 8, 2 layers of
# 2 heads, seq 6
init() {
	timeout 10 collx-dp --init gpt --dims 32,8,2,2,6 --seed 5 -o "$1" "${@:2}"
}

# usage: same_steps MODEL: l.csv (collx) and ref.csv (torch_moe.py) agree:
# loss within 1e-5, dropped assignments and imbalance exactly.
same_steps() {
	"$PY" - "$1" <<'EOF'
import csv, sys
from collpy import load_st
tensors, meta = load_st(sys.argv[1])
layers = sum(name.endswith("router.weight") for name in tensors)
got = list(csv.DictReader(open("l.csv")))
ref = list(csv.DictReader(open("ref.csv")))
assert len(got) == len(ref) > 0, (len(got), len(ref))
k = int(meta["moe.topk"])
for g, r in zip(got, ref):
    n = int(g["tokens"]) * k * layers
    assert abs(float(g["loss"]) - float(r["loss"])) <= 1e-5 * float(r["loss"]), (g, r)
    assert round(float(g["moe_dropped"]) * n) == int(r["dropped"]), (g, r, n)
    assert abs(float(g["moe_imbalance"]) - float(r["imbalance"])) < 1e-5, (g, r)
print("dropped", [r["dropped"] for r in ref])
EOF
}

# usage: check_run WORLD BATCH STEPS MODEL [collx-dp options]: trains
# MODEL with SGD lr 0.5 on WORLD ranks and the reference the same way;
# both agree.
check_run() {
	need "python3 torch" "$PY" -c 'import torch'
	timeout 60 collx-run -n "$1" --timeout 20 -- collx-dp -q -m "$4" \
	    --data tok.npy --batch "$2" --steps "$3" --lr 0.5 \
	    -o t.safetensors --loss-csv l.csv "${@:5}"
	timeout 60 "$PY" "$REF" train "$4" tok.npy "$2" "$3" sgd 0.5 "$1" ref
	run collx-tensor diff t.safetensors ref.safetensors --rtol 1e-5 \
	    --atol 1e-5
	echo "$output" | grep "out of tolerance" | grep -v " 0 of " || true
	[ "$status" -eq 0 ]
	same_steps "$4"
}

@test "--init --experts writes the router, the experts and the moe.* metadata" {
	init m.safetensors --experts 4 --topk 2 --moe-every 2 --capacity 1.25 \
	    --aux-loss 0.01
	run collx-tensor info m.safetensors
	[ "$status" -eq 0 ]
	echo "$output" | grep -q "moe.experts = 4"
	echo "$output" | grep -q "moe.topk = 2"
	echo "$output" | grep -q "moe.every = 2"
	echo "$output" | grep -q "moe.capacity = 1.25"
	echo "$output" | grep -q "moe.aux = 0.01"
	# every 2nd block: layer 1 has experts, layer 0 the plain mlp
	echo "$output" | grep -Eq "layers.1.mlp.router.weight +f32 +\[4,8\]"
	for e in 0 1 2 3; do
		echo "$output" | grep -Eq "layers.1.mlp.experts.$e.fc1.weight +f32 +\[32,8\]"
		echo "$output" | grep -Eq "layers.1.mlp.experts.$e.fc1.bias +f32 +\[32\]"
		echo "$output" | grep -Eq "layers.1.mlp.experts.$e.fc2.weight +f32 +\[8,32\]"
		echo "$output" | grep -Eq "layers.1.mlp.experts.$e.fc2.bias +f32 +\[8\]"
	done
	echo "$output" | grep -Eq "layers.0.mlp.fc1.weight +f32 +\[32,8\]"
	if echo "$output" | grep -q "layers.0.mlp.router"; then false; fi
	if echo "$output" | grep -q "layers.1.mlp.fc1"; then false; fi
	# defaults: top-1, every block, no capacity, no auxiliary loss
	init d.safetensors --experts 2
	run collx-tensor info d.safetensors
	echo "$output" | grep -q "moe.topk = 1"
	echo "$output" | grep -q "moe.every = 1"
	echo "$output" | grep -q "moe.capacity = 0"
	echo "$output" | grep -q "moe.aux = 0"
	echo "$output" | grep -q "layers.0.mlp.router.weight"
}

@test "experts settings that do not fit: exit 3 naming the numbers; misplaced options: usage" {
	run init x.safetensors --experts 2 --topk 3
	[ "$status" -eq 3 ]
	[[ "$output" == *"topk 3 is above the 2 experts"* ]]
	run init x.safetensors --experts 0
	[ "$status" -eq 3 ]
	[[ "$output" == *"--experts 0: need at least 1"* ]]
	run init x.safetensors --experts 2 --moe-every 3
	[ "$status" -eq 3 ]
	[[ "$output" == *"moe every 3 does not fit the 2 layers"* ]]
	run timeout 10 collx-dp --init block --dims 8,2 --experts 2 -o x.safetensors
	[ "$status" -eq 3 ]
	[[ "$output" == *"experts need arch gpt, not block"* ]]
	[ ! -e x.safetensors ]
	run init x.safetensors --topk 2
	[ "$status" -eq 2 ]
	[[ "$output" == *"--topk goes with --init gpt --experts E"* ]]
	run timeout 10 collx-dp -m x.safetensors --data tok.npy --batch 2 \
	    --steps 1 --experts 2
	[ "$status" -eq 2 ]
	[[ "$output" == *"--experts goes with --init gpt"* ]]
}

@test "a model claiming experts without a router, or with topk above E, is exit 3 on every rank" {
	init m.safetensors --experts 4 --topk 2
	"$PY" - <<'EOF'
from collpy import load_st, save_st
t, meta = load_st("m.safetensors")
del t["layers.1.mlp.router.weight"]
save_st("norouter.safetensors", t, meta)
t, meta = load_st("m.safetensors")
meta["moe.topk"] = "5"
save_st("topk.safetensors", t, meta)
EOF
	run timeout 30 collx-run -n 2 --timeout 10 -- collx-dp -m \
	    norouter.safetensors --data tok.npy --batch 4 --steps 1
	[ "$status" -eq 3 ]
	[[ "$output" == *"model claims 4 experts every 1 layers (moe.experts, moe.every) but has no 'layers.1.mlp.router.weight'"* ]]
	run timeout 30 collx-run -n 2 --timeout 10 -- collx-dp -m \
	    topk.safetensors --data tok.npy --batch 4 --steps 1
	[ "$status" -eq 3 ]
	[[ "$output" == *"topk 5 is above the 4 experts"* ]]
	# the auxiliary loss needs the global batch: no asynchronous servers
	run timeout 30 collx-run -n 2 --timeout 10 -- collx-dp -m \
	    m.safetensors --data tok.npy --batch 4 --steps 1 --sync ps \
	    --ps-mode async
	[ "$status" -eq 3 ]
	[[ "$output" == *"not --ps-mode async"* ]]
}

@test "collx-dp trains top-1 experts in every 2nd block as PyTorch does" {
	timeout 10 collx-dp --init gpt --dims 32,8,3,2,6 --seed 6 \
	    -o m.safetensors --experts 4 --moe-every 2
	check_run 1 8 4 m.safetensors
}

@test "collx-dp on 3 ranks, top-2 with capacity 1 and aux loss: PyTorch's drops and weights" {
	init m.safetensors --experts 4 --topk 2 --capacity 1 --aux-loss 0.05
	check_run 3 8 4 m.safetensors
	# the capacity did drop assignments, the same ones
	[ "$(cut -d, -f3 ref.csv | grep -vc '^0$')" -gt 1 ]
}

@test "collx-dp with a rank of no samples still sums the experts' counts (top-1, aux loss)" {
	init m.safetensors --experts 3 --aux-loss 0.1 --capacity 0.5
	check_run 3 2 3 m.safetensors
}

# ZeRO-3's gathers run on a thread of their own over the group the count
# sums take: each sum waits for them first, at the same event on every
# rank, and a rank without samples goes to that event to join it.
@test "collx-dp --zero 3 trains experts as PyTorch does, a rank of no samples too (top-2, capacity, aux loss)" {
	init m.safetensors --experts 3 --topk 2 --capacity 0.5 --aux-loss 0.1
	check_run 2 8 3 m.safetensors --zero 3
	check_run 3 2 3 m.safetensors --zero 3 --prefetch 2 \
	    --reshard-after-forward no
}

@test "collx-pipe trains top-2 experts as PyTorch does (gpipe and 1f1b, capacity per micro-batch)" {
	need "python3 torch" "$PY" -c 'import torch'
	timeout 10 collx-dp --init gpt --dims 32,8,3,2,6 --seed 8 --experts 4 \
	    --topk 2 --capacity 0.75 -o m.safetensors
	timeout 60 "$PY" "$REF" train m.safetensors tok.npy 10 3 sgd 0.5 1 ref 3
	for s in gpipe 1f1b; do
		timeout 60 collx-run -n 3 --timeout 20 -- collx-pipe -q \
		    -m m.safetensors -i tok.npy --batch 10 --microbatches 3 \
		    --schedule $s --steps 3 --lr 0.5 -o t.safetensors \
		    --loss-csv l.csv
		collx-tensor diff t.safetensors ref.safetensors --rtol 1e-5 \
		    --atol 1e-5 >/dev/null
		same_steps m.safetensors
	done
	[ "$(cut -d, -f3 ref.csv | grep -vc '^0$')" -gt 1 ]
}

@test "collx-train dp2 x pp2 (and interleaved pp2) trains experts as PyTorch does, the drops of each micro-batch" {
	need "python3 torch" "$PY" -c 'import torch'
	timeout 10 collx-dp --init gpt --dims 32,8,4,2,6 --seed 9 --experts 3 \
	    --moe-every 2 --capacity 1 -o m.safetensors
	timeout 60 "$PY" "$REF" train m.safetensors tok.npy 10 3 sgd 0.5 2 ref 2
	timeout 60 collx-run -n 4 --timeout 20 -- collx-train -q --dp 2 --pp 2 \
	    -m m.safetensors --data tok.npy --batch 10 --microbatches 2 \
	    --steps 3 --lr 0.5 -o t.safetensors --loss-csv l.csv
	collx-tensor diff t.safetensors ref.safetensors --rtol 1e-5 \
	    --atol 1e-5 >/dev/null
	same_steps m.safetensors
	timeout 60 "$PY" "$REF" train m.safetensors tok.npy 10 3 sgd 0.5 1 ref 2
	timeout 60 collx-run -n 2 --timeout 20 -- collx-train -q --pp 2 \
	    --schedule interleaved -m m.safetensors --data tok.npy --batch 10 \
	    --microbatches 2 --steps 3 --lr 0.5 -o t.safetensors --loss-csv l.csv
	collx-tensor diff t.safetensors ref.safetensors --rtol 1e-5 \
	    --atol 1e-5 >/dev/null
	same_steps m.safetensors
}

@test "collx-tp refuses a block with experts (exit 3), serial and sharded" {
	init m.safetensors --experts 4
	"$PY" - <<'EOF'
from collpy import load_st, save_st
t, meta = load_st("m.safetensors")
save_st("blk.safetensors", {k[9:]: v for k, v in t.items()
                            if k.startswith("layers.0.")}, {"heads": "2"})
EOF
	timeout 10 collx-tensor create --shape 2,6,8 --fill randn --seed 1 -o X.npy
	run timeout 10 collx-tp --layer block --mode serial -m blk.safetensors \
	    -i X.npy -o Y.npy
	[ "$status" -eq 3 ]
	[[ "$output" == *"a block with 4 experts (mlp.router.weight): collx-tp runs blocks with an mlp"* ]]
	run timeout 30 collx-run -n 2 --timeout 10 -- collx-tp --layer block \
	    -m blk.safetensors -i X.npy -o Y.npy
	[ "$status" -eq 3 ]
	[[ "$output" == *"a block with 4 experts (mlp.router.weight): collx-tp runs blocks with an mlp"* ]]
}

@test "-v shows the tokens per expert; the loss CSV's moe columns only for experts" {
	init m.safetensors --experts 4 --topk 2
	run timeout 30 collx-dp -v -m m.safetensors --data tok.npy --batch 8 \
	    --steps 2 --loss-csv l.csv
	[ "$status" -eq 0 ]
	line=$(echo "$output" | grep "step 1 tokens per expert:")
	# 8 samples of 6 positions, 2 experts each: 96 assignments a layer
	for l in 0 1; do
		counts=$(echo "$line" | sed -E "s/.*layer $l ([0-9,]+) .*/\1/")
		[ "$(echo "$counts" | tr , '\n' | awk '{ s += $1 } END { print s }')" -eq 96 ]
	done
	[ "$(head -1 l.csv)" = "step,epoch,loss,tokens,seconds,tokens_per_s,bytes_sent,moe_dropped,moe_imbalance" ]
	# collx-train's: summed over the 2 stages (one MoE block each) and
	# the 2 replicas
	run timeout 30 collx-run -n 4 --timeout 10 -- collx-train -v --dp 2 \
	    --pp 2 -m m.safetensors --data tok.npy --batch 8 --microbatches 2 \
	    --steps 2
	[ "$status" -eq 0 ]
	line=$(echo "$output" | grep "collx-train: step 1 tokens per expert:")
	[ "$(echo "$line" | grep -o "layer [01] [0-9,]*" | wc -l)" -eq 2 ]
	for l in 0 1; do
		counts=$(echo "$line" | sed -E "s/.*layer $l ([0-9,]+) .*/\1/")
		[ "$(echo "$counts" | tr , '\n' | awk '{ s += $1 } END { print s }')" -eq 96 ]
	done
	timeout 10 collx-dp --init gpt --dims 32,8,2,2,6 -o p.safetensors
	timeout 30 collx-dp -v -m p.safetensors --data tok.npy --batch 8 \
	    --steps 1 --loss-csv p.csv 2>err
	[ "$(head -1 p.csv)" = "step,epoch,loss,tokens,seconds,tokens_per_s,bytes_sent" ]
	if grep -q "per expert" err; then false; fi
}
