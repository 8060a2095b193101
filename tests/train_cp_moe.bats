#!/usr/bin/env bats
# collx-train --cp on a gpt whose blocks are mixtures of experts, with the
# auxiliary loss: each rank routes its positions of every sequence as one
# rank holding the whole micro-batch would, so capacity drops the same
# assignments. The trained weights equal the independent float64 PyTorch
# MoE gpt of examples/peers/torch_moe.py (capacity per micro-batch of a
# replica, aux loss over the global batch) within 1e-5, and the loss CSV
# its losses and drops; where one rank holds the whole batch, collx-dp on
# one rank gives the same losses and drops too.

load lib/common
load lib/moe

setup() {
	moe_setup
}

teardown() {
	common_teardown
}

# usage: model NAME TOPK CAPACITY: NAME.safetensors (vocab 32, d 8, 3
# blocks of 2 heads, seq 8, 4 experts, aux loss 0.1), PyTorch's training
# of it on one replica (NAME.r1) and on two (NAME.r2), collx-dp's on one
# rank (NAME.s)
model() {
	need "python3 torch" "$PY" -c 'import torch'
	timeout 10 collx-dp --init gpt --dims 32,8,3,2,8 --seed 8 --experts 4 \
	    --topk "$2" --capacity "$3" --aux-loss 0.1 -o "$1.safetensors"
	for r in 1 2; do
		timeout 60 "$PY" "$REF" train "$1.safetensors" tok.npy 8 3 sgd \
		    0.5 $r "$1.r$r"
	done
	timeout 60 collx-dp -q -m "$1.safetensors" --data tok.npy --batch 8 \
	    --steps 3 --lr 0.5 -o "$1.s.safetensors" --loss-csv "$1.s.csv"
}

# usage: same MODEL REF WORLD [collx-train options]: collx-train on WORLD
# ranks against REF's weights and losses (a PyTorch run's: its drops as
# counts; collx-dp's: the same moe_dropped and moe_imbalance)
same() {
	run timeout 120 collx-run -n "$3" --timeout 30 -- collx-train -q \
	    "${@:4}" -m "$1.safetensors" --data tok.npy --batch 8 --steps 3 \
	    --lr 0.5 --schedule gpipe -o t.safetensors --loss-csv l.csv
	[ "$status" -eq 0 ]
	run collx-tensor diff t.safetensors "$2.safetensors" --rtol 1e-5 \
	    --atol 1e-5
	echo "${*:3} against $2: $output"
	[ "$status" -eq 0 ]
	"$PY" - "$2.csv" "$*" <<'EOF'
import csv, sys
got = list(csv.DictReader(open("l.csv")))
ref = list(csv.DictReader(open(sys.argv[1])))
assert len(got) == len(ref) == 3, (sys.argv[2], len(got))
for g, r in zip(got, ref):
    assert abs(float(g["loss"]) - float(r["loss"])) <= 1e-5, (sys.argv[2], g, r)
    if "moe_dropped" in r:
        assert g["moe_dropped"] == r["moe_dropped"], (sys.argv[2], g, r)
        assert g["moe_imbalance"] == r["moe_imbalance"], (sys.argv[2], g, r)
        continue
    # the share of 64 tokens' topk assignments in 3 blocks
    k = 2 if sys.argv[2].split()[0] == "m2" else 1
    assert round(float(g["moe_dropped"]) * 64 * k * 3) == int(r["dropped"]), (sys.argv[2], g, r)
    assert abs(float(g["moe_imbalance"]) - float(r["imbalance"])) < 1e-5, (sys.argv[2], g, r)
EOF
}

@test "capacity 0, top-2: cp2 zigzag and ring, dp2 x cp2 and cp2 x tp2 equal PyTorch and collx-dp on one rank" {
	model m2 2 0
	for ref in m2.r1 m2.s; do
		same m2 $ref 2 --cp 2
		same m2 $ref 2 --cp 2 --cp-mode ring
		same m2 $ref 4 --dp 2 --cp 2
		same m2 $ref 4 --cp 2 --tp 2
	done
}

@test "a capacity that drops, top-2 and top-1: cp2 zigzag and ring, cp2 x tp2 drop what one rank drops; dp2 x cp2 what each of PyTorch's two replicas does" {
	model m2 2 0.75
	model m1 1 1.0
	for m in m2 m1; do
		for ref in $m.r1 $m.s; do
			same $m $ref 2 --cp 2
			same $m $ref 2 --cp 2 --cp-mode ring
			same $m $ref 4 --cp 2 --tp 2
		done
		same $m $m.r2 4 --dp 2 --cp 2
		same $m $m.r2 4 --dp 2 --cp 2 --cp-mode ring
		# the capacity dropped assignments, on one replica and on two
		[ "$(cut -d, -f3 $m.r1.csv | grep -vc '^0$')" -eq 4 ]
		[ "$(cut -d, -f3 $m.r2.csv | grep -vc '^0$')" -eq 4 ]
	done
}

@test "a capacity that drops: cp2 x pp2 in two micro-batches drops per micro-batch, as PyTorch does" {
	need "python3 torch" "$PY" -c 'import torch'
	timeout 10 collx-dp --init gpt --dims 32,8,3,2,8 --seed 8 --experts 4 \
	    --topk 2 --capacity 0.75 --aux-loss 0.1 -o m2.safetensors
	timeout 60 "$PY" "$REF" train m2.safetensors tok.npy 8 3 sgd 0.5 1 \
	    m2.mb 2
	same m2 m2.mb 4 --cp 2 --pp 2 --microbatches 2
	same m2 m2.mb 4 --cp 2 --pp 2 --microbatches 2 --cp-mode ring
}

@test "--cp with --ep is a usage error (exit 2), before any rank talks" {
	timeout 10 collx-dp --init gpt --dims 32,8,3,2,8 --seed 8 --experts 4 \
	    -o m.safetensors
	run timeout 10 collx-train -m m.safetensors --data tok.npy --batch 8 \
	    --steps 1 --dp 2 --cp 2 --ep 2
	[ "$status" -eq 2 ]
	[[ "$output" == *"--cp 2 and --ep 2: experts shard over --dp replicas whose sequences are whole; take one of them"* ]]
}
