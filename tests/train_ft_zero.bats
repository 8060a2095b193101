#!/usr/bin/env bats
# collx-train --ft with --zero 1 and 2 on the DP axis: the replicas of
# each (pp, tp) coordinate hold its stage's ZeRO slices, each rank a
# mirror of its ring successor's. A rank killed (SIGKILL) takes its
# replica out; the slices are cut again over the replicas left from their
# owners and mirrors, and a replica started again (COLLX_REJOIN=1) takes
# its slices in the same cut. The trained weights are those of a
# failure-free run of the same mesh and --zero within 1e-5, which are
# those of --zero 0 within 1e-5; the loss CSV holds every step once.
# killed_train and rejoin_train are train_ft.bats's (the checks of a
# departure and of a rejoin), and gpt_inputs, read from that suite;
# kill_in_allgather is lib/ftzero's.
load lib/common
load lib/netns
load lib/ftsuite
load lib/ftzero
bats_require_minimum_version 1.5.0

eval "$(sed -n '/^killed_train() {$/,/^}$/p; /^rejoin_train() {$/,/^}$/p
    /^gpt_inputs() {$/,/^}$/p' "$BATS_TEST_DIRNAME/train_ft.bats")"

TARGS=(-m m.safetensors --data X.npy --targets Y.npy --batch 512 --steps 100
    --optimizer adamw --lr 0.001)

# same_as_zero0 N MESH...: ref.safetensors (the failure-free run under
# --zero) is --zero 0's of the same mesh within 1e-5.
same_as_zero0() {
	local n=$1
	shift
	collx-run -n "$n" -- collx-train "${TARGS[@]}" "$@" --zero 0 -q \
	    -o z0.safetensors
	collx-tensor diff z0.safetensors ref.safetensors --atol 1e-5 --rtol 0
}

@test "--ft --zero 1 --dp 2 --tp 2: rank 3 killed at step 10, rank 2 leaves with it; replica 0 ends with the weights of a run without failures" {
	killed_train 4 " 10:3" 2 "2 1" --dp 2 --tp 2 --zero 1
	same_as_zero0 4 --dp 2 --tp 2
}

@test "--ft --zero 2 --dp 2 --pp 2: rank 1 killed, rank 3 leaves with it; replica 0's slices from the mirrors" {
	killed_train 4 " 10:1" 3 "2 1" --dp 2 --pp 2 --zero 2
	same_as_zero0 4 --dp 2 --pp 2
}

@test "--ft --zero 2 --dp 3 --pp 2: rank 4 killed at step 10, then rank 0 at step 20; the slices cut over 3, 2 and 1 replicas" {
	killed_train 6 " 10:4 20:0" "1 3" "3 2 1" --dp 3 --pp 2 --zero 2
	same_as_zero0 6 --dp 3 --pp 2
}

@test "--ft rejoin --zero 2 --dp 2 --tp 2: rank 3 killed at step 10 and rank 2, its peer, started again: replica 1 rejoins with its slices; the weights of a run without failures" {
	# steps long beside a restart (the whole data set a step): the replica
	# started again finds the other still training
	TARGS[7]=2048
	rejoin_train "10:3" "3:2" "2 1 2" --dp 2 --tp 2 --zero 2
}

@test "--ft rejoin --zero 1 --dp 2 --pp 2: rank 2 killed, rank 0 leaves with it; both started again rejoin; the weights of a run without failures" {
	TARGS[7]=2048	# --batch: as above
	rejoin_train "10:2" "2:0" "2 1 2" --dp 2 --pp 2 --zero 1
	same_as_zero0 4 --dp 2 --pp 2
}

@test "--ft rejoin --zero 2 on a gpt, --dp 2 --pp 2 --microbatches 2 (the tied embedding's stages): rank 0 killed, rank 2 leaves with it; both rejoin; the weights of a run without failures" {
	gpt_inputs 256 400
	rejoin_train "10:0" "0:2" "2 1 2" --dp 2 --pp 2 --microbatches 2 \
	    --zero 2
	same_as_zero0 4 --dp 2 --pp 2 --microbatches 2
}

# big_train STEPS Z: TARGS of a larger mlp (so that a kill lands inside
# a collective), STEPS steps, --dp 2 --pp 2 --zero Z; ref.safetensors
# and ref.csv its run without failures.
big_train() {
	collx-dp --init mlp --dims 256,4096,256,4 --seed 1 -o big.safetensors
	collx-tensor create --shape 512,256 --fill randn --seed 3 -o BX.npy
	collx-tensor create --shape 512,256 --fill randn --seed 4 -o BY.npy
	TARGS=(-m big.safetensors --data BX.npy --targets BY.npy --batch 64
	    --steps "$1" --optimizer adamw --lr 0.001 --dp 2 --pp 2 --zero "$2")
	collx-run -n 4 -- collx-train "${TARGS[@]}" -q -o ref.safetensors \
	    --loss-csv ref.csv
}

# kill_train N WHAT: the 4 ranks of TARGS with --ft, traced (dbg.R), rank
# 1 killed at its second collective WHAT after its N-th allreduce of 8
# bytes; rank 3 leaves with it (exit 1), ranks 0 and 2 finish (exit 0)
# with the weights of the run without failures and every step once.
kill_train() {
	local r rc master
	rm -f dbg.* ft.csv ft.safetensors
	PIDS=()
	master=127.0.0.1:$(free_port)
	for r in 0 1 2 3; do
		COLLX_DEBUG=trace COLLX_DEBUG_FILE=dbg.$r COLLX_RANK=$r \
		    COLLX_WORLD_SIZE=4 COLLX_MASTER=$master COLLX_TIMEOUT=10 \
		    collx-train "${TARGS[@]}" --ft -v -o ft.safetensors \
		    --loss-csv ft.csv 2>"err$r.log" &
		PIDS+=($!)
	done
	kill_in_allgather dbg.1 "${PIDS[1]}" "$1" "$2"
	for r in 0 2 3; do
		rc=0
		wait "${PIDS[r]}" || rc=$?
		[ "$rc" -eq $((r == 3)) ]
	done
	collx-tensor diff ref.safetensors ft.safetensors --atol 1e-5 --rtol 0
	[ "$(tail -n +2 ft.csv | cut -d, -f1 | tr '\n' ' ')" = "$(seq -s ' ' 0 $((TARGS[9] - 1))) " ]
}

# A rank killed within the parameters' allgather (its stage's, after the
# step's commit, two allreduces of 8 bytes a step: the replicas' loss and
# the mesh's commit): its DP peer, rank 0, past its update, does not
# update again in the recovery (seen to fail when it does); the step is
# kept, its record once.
@test "--ft --zero 1 --dp 2 --pp 2: rank 1 killed inside the allgather of a step past its commit, rank 3 leaves; the survivors keep the step: the weights of a run without failures, every step once" {
	big_train 30 1
	kill_train 20 "allgather of"
	# rank 0 found the death inside its stage's allgather
	grep -q 'warn: failed: .* of allgather' dbg.0
	grep -q '^collx-train: step [0-9]*: rank 1 left, taking 1 replica out; 1 of 2 replicas go on' err0.log
	[ "$(tail -n +2 ft.csv | cut -d, -f8 | uniq | tr '\n' ' ')" = "2 1 " ]
}

# The mirror's memory (-v), closed forms: the MLP's layers hold P =
# 64*1024 + 1024 + 1024*64 + 64 floats, a stage of --pp 2 two of them, a
# slice over 2 replicas c = P floats. AdamW: the slice's m and v (2c), the
# mirror's m, v and parameters (3c); the gradients: the stage's whole
# vector (--zero 1) or the reduced slice (--zero 2), and the mirror's c.
@test "--ft --zero 1 and 2, --dp 2 --pp 2: the optimizer state and gradients of -v gain the mirror's (closed forms)" {
	local z r P=$((64 * 1024 + 1024 + 1024 * 64 + 64)) c
	c=$P
	TARGS[9]=3	# --steps
	for z in 1 2; do
		collx-run -n 4 -- collx-train "${TARGS[@]}" --dp 2 --pp 2 \
		    --zero "$z" --ft -v -o ft.safetensors 2>run.err
		for r in 0 1 2 3; do
			grep -q "^collx-train: rank $r: zero $z: optimizer state $((4 * 5 * c)) bytes, reduced gradients $((z == 1 ? 4 * (2 * P + c) : 4 * 2 * c)) bytes$" run.err
		done
	done
}

# ZeRO-3: each rank holds its slice of its stage's units' parameters as
# well, and mirrors its successor's parameters and moments.
@test "--ft --zero 3 --dp 2 --tp 2: rank 3 killed at step 10, rank 2 leaves with it; replica 0 ends with the weights of a run without failures (those of --zero 0)" {
	killed_train 4 " 10:3" 2 "2 1" --dp 2 --tp 2 --zero 3
	same_as_zero0 4 --dp 2 --tp 2
}

@test "--ft --zero 3 --dp 3 --pp 2: rank 4 killed at step 10, then rank 0 at step 20; the slices of parameters and moments cut over 3, 2 and 1 replicas" {
	killed_train 6 " 10:4 20:0" "1 3" "3 2 1" --dp 3 --pp 2 --zero 3
	same_as_zero0 6 --dp 3 --pp 2
}

@test "--ft rejoin --zero 3 --dp 2 --pp 2: rank 0 killed, rank 2 leaves with it; both started again rejoin with their slices; the weights of a run without failures" {
	TARGS[7]=2048	# --batch: as above
	rejoin_train "10:0" "0:2" "2 1 2" --dp 2 --pp 2 --zero 3
	same_as_zero0 4 --dp 2 --pp 2
}

# Inside the step: rank 1 killed at its second parameter gather (then
# reduce-scatter) of a pass after 20 of its allreduces of 8 bytes (two a
# step: the loss and the commit), before the step's commit: the pass
# breaks off, replica 0 runs step 10 again alone.
@test "--ft --zero 3 --dp 2 --pp 2: rank 1 killed inside a parameter gather, then inside a reduce-scatter, of a step's pass, rank 3 leaves; the step run again: the weights of a run without failures, every step once" {
	local what
	big_train 20 3
	for what in "allgather of" "reduce-scatter of"; do
		kill_train 20 "$what"
		grep 'warn: failed' dbg.0
		grep -q '^collx-train: step 10: rank 1 left, taking 1 replica out; 1 of 2 replicas go on' err0.log
		[ "$(tail -n +2 ft.csv | cut -d, -f8 | tr '\n' ' ')" = "$(printf '2 %.0s' $(seq 10))$(printf '1 %.0s' $(seq 10))" ]
	done
}

# As above for --zero 3: the slice's m and v (2c) and the mirror's m, v
# and parameters (3c); the gradients the reduced slice and the mirror's.
@test "--ft --zero 3, --dp 2 --pp 2: the optimizer state and gradients of -v gain the mirror's (closed forms)" {
	local r P=$((64 * 1024 + 1024 + 1024 * 64 + 64)) c
	c=$P
	TARGS[9]=3	# --steps
	collx-run -n 4 -- collx-train "${TARGS[@]}" --dp 2 --pp 2 --zero 3 \
	    --ft -v -o ft.safetensors 2>run.err
	for r in 0 1 2 3; do
		grep "^collx-train: rank $r: zero 3: " run.err
		grep -q "^collx-train: rank $r: zero 3: optimizer state $((4 * 5 * c)) bytes, reduced gradients $((4 * 2 * c)) bytes" run.err
	done
}

@test "--ft --zero 3 --shard-group host is refused: one usage line naming it" {
	export COLLX_WORLD_SIZE=2 COLLX_RANK=0 COLLX_MASTER=127.0.0.1:1
	usage_refused collx-train "${TARGS[@]}" --dp 2 --ft --zero 3 \
	    --shard-group host
	[ "${lines[0]}" = "collx-train: --ft goes with plain allreduce on --dp, --tp and --pp, not --shard-group host" ]
}
