#!/usr/bin/env bats
# collx-dp --powersgd R: PowerSGD against PyTorch's own powerSGD_hook on a
# gloo group of two (tests/lib/psgdref.py), its bytes against the closed
# form, overlap, checkpoints and refused combinations.
load lib/common
load lib/dpmlp

REF=$COLLX_ROOT/tests/lib/psgdref.py

setup() {
	dp_env
	MLP_TRAIN=(--batch 20 --steps 8 --lr 0.1)
	# fc1 64x8 and fc2 8x64 compress at rank 1 to 3; the biases never
	timeout 30 collx-dp --init mlp --dims 8,64,8 --seed 3 -o m.safetensors
	timeout 30 collx-tensor create --shape 200,8 --fill randn --seed 4 -o X.npy
	timeout 30 collx-tensor create --shape 200,8 --fill randn --seed 5 -o Y.npy
}

teardown() {
	common_teardown
}

@test "--powersgd equals torch's powerSGD_hook on gloo (rank 3: torch's QR, 2 plain steps, 6 compressed)" {
	need python3-torch "$PY" -c "import torch"
	mlp 2 a --powersgd 3 --powersgd-start 2 --seed 5
	timeout 120 "$PY" "$REF" m.safetensors X.npy Y.npy 20 8 0.1 3 2 5 ta.safetensors la.csv
	# the reference tells a wrong first Q (another --seed) apart
	mlp 2 b --powersgd 3 --powersgd-start 2 --seed 6
	if cmp -s ta.safetensors tb.safetensors; then false; fi
}

@test "--powersgd: bytes are the closed form's, plain before --powersgd-start" {
	mlp 2 a --powersgd 2 --powersgd-start 3
	# plain: 1096 f32 and the loss (8); then P and Q of both matrices
	# (64x2 + 8x2, twice) and the 72 biases: 360 f32, each sent once
	[ "$(tail -n +2 la.csv | cut -d, -f7 | tr '\n' ' ')" = "4392 4392 4392 1448 1448 1448 1448 1448 " ]
	# rank 1: 64x1 + 8x1 twice and the biases, 216 f32
	mlp 2 b --powersgd 1 --powersgd-start 0
	[ "$(tail -n +2 lb.csv | cut -d, -f7 | sort -u)" = 872 ]
	# a rank as large as a matrix's compresses nothing: plain's bytes
	mlp 2 c --powersgd 8 --powersgd-start 0
	[ "$(tail -n +2 lc.csv | cut -d, -f7 | sort -u)" = 4392 ]
}

@test "--powersgd: overlap changes no byte; 3 ranks train close to plain DP" {
	mlp 3 o --powersgd 2 --powersgd-start 2 --bucket-mb 0.001
	mlp 3 n --powersgd 2 --powersgd-start 2 --bucket-mb 0.001 --no-overlap
	cmp to.safetensors tn.safetensors
	mlp 3 plain
	if cmp -s to.safetensors tplain.safetensors; then false; fi
	timeout 30 "$PY" "$COLLX_ROOT/tests/lib/dpref.py" csvcmp lo.csv lplain.csv 0.05
}

# The error feedback is every rank's (powersgd.ef.RANK), the warm-start
# Qs alike on every rank (powersgd.q, once a step has compressed).
@test "--powersgd: --checkpoint then --resume gives the bytes of an uninterrupted run" {
	local p="--powersgd 2 --powersgd-start 2"
	# shellcheck disable=SC2086
	mlp 2 full $p
	for h in 5 1; do
		# shellcheck disable=SC2086
		mlp 2 half $p --steps $h --checkpoint ck$h.safetensors
		# shellcheck disable=SC2086
		timeout 60 collx-run -n 2 --timeout 10 -- collx-dp --resume ck$h.safetensors \
		    --data X.npy --targets Y.npy --batch 20 --steps 8 --lr 0.1 $p \
		    -o tres.safetensors -q
		cmp tfull.safetensors tres.safetensors
	done
	info=$(timeout 30 collx-tensor info ck5.safetensors)
	for n in powersgd.ef.0 powersgd.ef.1 powersgd.q; do
		grep -q " $n " <<<"$info"
	done
	if grep -q "powersgd.q" < <(collx-tensor info ck1.safetensors); then false; fi
	"$PY" -c "
import sys; sys.path.insert(0, '$COLLX_ROOT/tests/lib')
from collpy import load_st
t, _ = load_st('ck5.safetensors')
assert all(abs(t[k]).max() > 0 for k in ('powersgd.ef.0', 'powersgd.ef.1', 'powersgd.q'))"
	run timeout 60 collx-run -n 2 --timeout 10 -- collx-dp --resume ck5.safetensors \
	    --data X.npy --targets Y.npy --batch 20 --steps 8 --lr 0.1 -q
	[ "$status" -eq 3 ]
	[[ "$output" == *"rank 0: the checkpoint holds PowerSGD state; resume it with --powersgd"* ]]
	run timeout 60 collx-run -n 3 --timeout 10 -- collx-dp --resume ck5.safetensors \
	    --data X.npy --targets Y.npy --batch 20 --steps 8 --lr 0.1 -q $p
	[ "$status" -eq 3 ]
	[[ "$output" == *"the checkpoint does not hold 'powersgd.ef' for each of this run's 3 ranks"* ]]
}

@test "--powersgd: combinations that cannot work are usage errors naming both options" {
	dp_usage --powersgd 2 --sync ps
	[ "${lines[0]}" = "collx-dp: --powersgd goes with allreduce, not --sync ps" ]
	dp_usage --powersgd 2 --zero 1
	[ "${lines[0]}" = "collx-dp: --powersgd and --zero 1: PowerSGD sums whole matrices, not ZeRO's slices" ]
	dp_usage --powersgd 2 --wire int8
	[ "${lines[0]}" = "collx-dp: --powersgd and --wire int8: PowerSGD's factors travel in f32" ]
	dp_usage --powersgd 2 --sync-every 4
	[ "${lines[0]}" = "collx-dp: --powersgd and --sync-every: local SGD syncs parameters, not gradients" ]
	dp_usage --powersgd-start 3
	[ "${lines[0]}" = "collx-dp: --powersgd-start goes with --powersgd" ]
	dp_usage --powersgd 0
	[[ "${lines[0]}" == "collx-dp: --powersgd"* ]]
}
