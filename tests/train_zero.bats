#!/usr/bin/env bats
# collx-train --zero 1|2: ZeRO on the DP axis of every mesh that has one
# (dp2, dp4, dp2 x tp2, dp2 x pp2, dp2 x tp2 x pp2), an mlp stack and a
# gpt under AdamW, checked against an independent float64 PyTorch training
# (tests/lib/piperef.py) and collx-dp on one rank (tests/lib/trainref.py);
# every run ends with the replicas' check that their parameters are
# bitwise the same (and the TP ranks' of their replicated tensors), which
# fails the run. Checkpoints written under ZeRO hold the state whole (the
# very file plain DP writes), resume under other meshes and, on the same
# mesh, to an uninterrupted run's bytes; each rank's optimizer state is
# its replica's slices.
load lib/common
load lib/train

setup() {
	train_env
}

teardown() {
	[ -z "${refpid:-}" ] || kill "$refpid" 2>/dev/null || true
	common_teardown
}

# An mlp stack of 3 layers 5 -> 6 -> 3, 3 -> 6 -> 3 (57 + 45 + 45 = 147
# parameters: no mesh here cuts its ranges evenly) and 11 rows of data.
mlp() {
	timeout 10 collx-tensor create --shape 11,5 --fill randn --seed 1 \
	    -o X.npy
	timeout 10 collx-tensor create --shape 11,3 --fill randn --seed 2 \
	    -o Y.npy
	timeout 30 collx-dp --init mlp --dims 5,6,3,3 --seed 1 -o m.safetensors
}

# Each mesh of MESHES (as meshes takes them) under each ZeRO stage of
# STAGES; meshes' tags, ending in zeroZ.
# usage: zeros "1 2" "2:--dp,2 4:--dp,2,--pp,2" collx-train-options...
zeros() {
	local m z spec=

	for z in $1; do
		for m in $2; do
			spec+=" $m,--zero,$z"
		done
	done
	shift 2
	meshes "$spec" "$@"
}

@test "mlp stack, AdamW: --zero 1 and 2 on dp2, dp4, dp2 x tp2 and dp2 x pp2 (batch 11, M 2) equal the reference and collx-dp on one rank; the bytes the DP axis sends" {
	mlp
	"$PY" "$REF" train mlp m.safetensors X.npy Y.npy 11 3 adamw 0.01 \
	    r.safetensors r.csv &
	refpid=$!
	O=(-m m.safetensors -i X.npy -t Y.npy --batch 11 --steps 3
	    --optimizer adamw --lr 0.01 --microbatches 2)
	zeros "1 2" "2:--dp,2 4:--dp,4 4:--dp,2,--tp,2 4:--dp,2,--pp,2" \
	    "${O[@]}"
	wait "$refpid"
	refpid=
	check -m m.safetensors --data X.npy --targets Y.npy --batch 11 \
	    --steps 3 --optimizer adamw --lr 0.01
	# rank 0 of dp2 sends a step: of the range's 147 gradients padded to
	# 2 slices of 74, the other replica's slice (296 bytes); its own 74
	# updated parameters (296); the loss sum, a double (8)
	for z in 1 2; do
		[ "$(cut -d, -f7 "l2dp2zero$z.csv" | sort -u)" = "$(printf '%s\n' 600 bytes_sent)" ]
	done
}

@test "gpt, AdamW: --zero 1 and 2 on dp2, dp4, dp2 x tp2 and dp2 x pp2, --zero 2 on dp2 x tp2 x pp2, equal the reference and collx-dp on one rank" {
	timeout 30 collx-dp --init gpt --dims 256,16,2,2,8 --seed 1 -o g.safetensors
	# batch 6: see train.bats on AdamW and an exactly-zero gradient
	"$PY" "$REF" train gpt g.safetensors "$GPL" - 6 3 adamw 0.01 \
	    r.safetensors r.csv &
	refpid=$!
	O=(-m g.safetensors --data "$GPL" --batch 6 --steps 3 --optimizer adamw
	    --lr 0.01)
	zeros "1 2" "2:--dp,2,--microbatches,2 4:--dp,4
	    4:--dp,2,--tp,2,--microbatches,2 4:--dp,2,--pp,2,--microbatches,3" \
	    "${O[@]}"
	local spec=("${outs[@]}")
	zeros 2 "8:--dp,2,--tp,2,--pp,2,--microbatches,2" "${O[@]}"
	outs+=("${spec[@]}")
	wait "$refpid"
	refpid=
	TRAINREF_SKIP=attn.k.bias check -m g.safetensors --data "$GPL" \
	    --batch 6 --steps 3 --optimizer adamw --lr 0.01
}

# usage: ckpt WORLD FILE collx-train-options...: 3 steps, then FILE
ckpt() {
	timeout 60 collx-run -n "$1" --timeout 20 -- collx-train -q \
	    --steps 3 --checkpoint "$2" "${@:3}"
}

@test "checkpoints under --zero are plain DP's files (dp2, dp2 x tp2); dp2 --zero 2 resumed as pp2 and back, dp2 x tp2 --zero 1 as dp4 --zero 2 and pp2, equal an uninterrupted run; the same mesh gives its bytes" {
	mlp
	O=(-i X.npy -t Y.npy --batch 9 --microbatches 2 --optimizer adamw
	    --lr 0.01)
	train 2 full -m m.safetensors "${O[@]}" --dp 2 --zero 2 --steps 6
	ckpt 2 d2z2.safetensors -m m.safetensors "${O[@]}" --dp 2 --zero 2
	ckpt 2 d2.safetensors -m m.safetensors "${O[@]}" --dp 2
	ckpt 4 dt2z1.safetensors -m m.safetensors "${O[@]}" --dp 2 --tp 2 \
	    --zero 1
	ckpt 4 dt2.safetensors -m m.safetensors "${O[@]}" --dp 2 --tp 2
	ckpt 2 p2.safetensors -m m.safetensors "${O[@]}" --pp 2
	# the optimizer state gathered whole: the file plain DP writes
	cmp d2z2.safetensors d2.safetensors
	cmp dt2z1.safetensors dt2.safetensors
	train 2 same --resume d2z2.safetensors "${O[@]}" --dp 2 --zero 2 \
	    --steps 6
	train 2 d2pp --resume d2z2.safetensors "${O[@]}" --pp 2 --steps 6
	train 2 ppd2 --resume p2.safetensors "${O[@]}" --dp 2 --zero 2 \
	    --steps 6
	train 4 dtd4 --resume dt2z1.safetensors "${O[@]}" --dp 4 --zero 2 \
	    --steps 6
	train 2 dtpp --resume dt2z1.safetensors "${O[@]}" --pp 2 --steps 6
	resumed_equal "d2pp ppd2 dtd4 dtpp"
}

@test "-v: each rank's optimizer state is its replica's slice (stage 2: its reduced gradients too); --timing's dp rows are the reduce-scatter; --zero 4 is refused" {
	mlp
	O=(-m m.safetensors -i X.npy -t Y.npy --batch 8 --steps 2
	    --optimizer adamw --lr 0.01)
	# 147 parameters: AdamW keeps 2 floats a parameter. Replica 0's slice
	# is ceil(147 / 2) = 74 floats, replica 1's the other 73.
	for z in 0 1 2; do
		run timeout 60 collx-run -n 2 --timeout 20 -- collx-train \
		    "${O[@]}" --dp 2 --zero "$z" -v --timing "t$z.{rank}.csv"
		echo "$output"
		[ "$status" -eq 0 ]
		case $z in
		0) m0=147 m1=147 g0=147 g1=147 ;;
		1) m0=74 m1=73 g0=147 g1=147 ;;
		2) m0=74 m1=73 g0=74 g1=73 ;;
		esac
		grep -qx "collx-train: rank 0: zero $z: optimizer state $((m0 * 8)) bytes, reduced gradients $((g0 * 4)) bytes" <<<"$output"
		grep -qx "collx-train: rank 1: zero $z: optimizer state $((m1 * 8)) bytes, reduced gradients $((g1 * 4)) bytes" <<<"$output"
	done
	# rank 1: replica 1; a dp row a step, named for the collective
	[ "$(grep -c '^collx-train,allreduce,auto,.*,dp,0,1,0,' t0.1.csv)" -eq 2 ]
	for z in 1 2; do
		[ "$(grep -c '^collx-train,reduce_scatter,auto,.*,dp,0,1,0,' "t$z.1.csv")" -eq 2 ]
		awk -F, '$2 == "reduce_scatter" && $8 <= 0 { exit 1 }' "t$z.1.csv"
	done
	# ZeRO-3 trains (train_zero3.bats); a stage beyond it is refused
	run timeout 10 collx-train "${O[@]}" --dp 2 --zero 4
	[ "$status" -eq 2 ]
	[[ "$output" == "collx-train: --zero"* ]]
}
