#!/usr/bin/env bats
# collx-dp --ft with --zero 3: a rank holds 1/W of the parameters, of the
# reduced gradients and of the optimizer state of every layer, and mirrors
# its ring successor's parameters and moments, so a rank killed (SIGKILL)
# takes nothing with it. With ranks killed (rank 0 among them, at a step
# line or inside the step's reduce-scatters and gathers), with and without
# collx-run --max-restarts starting them again to rejoin, the trained
# weights are those of a run without failures (one process, the same
# global batch) within 1e-5 and the loss CSV holds every step once (the
# mirror's bytes a step and memory: ft_zero.bats's closed forms). Two
# ring neighbours killed at once lose a slice: exit 1 naming it.
load lib/common
load lib/netns
load lib/ftsuite
load lib/ftzero
bats_require_minimum_version 1.5.0

@test "--ft --zero 3 without failures: the weights of --zero 0 and of one process within 1e-5 (AdamW and SGD with momentum, 3 and 4 ranks)" {
	local n opt o
	for opt in "${SGD[*]}" "${ADAMW[*]}"; do
		read -ra o <<<"$opt"
		collx-dp "${ARGS[@]}" --steps 20 "${o[@]}" -q \
		    -o ref.safetensors --loss-csv ref.csv
		collx-run -n 4 -- collx-dp "${ARGS[@]}" --steps 20 "${o[@]}" -q \
		    -o z0.safetensors
		for n in 3 4; do
			zrun "$n" 0 "${ARGS[@]}" --steps 20 "${o[@]}" --zero 3
			ft_ends 0
			same_as_ref 20 "$n"
			collx-tensor diff z0.safetensors ft.safetensors \
			    --atol 1e-5 --rtol 0
		done
	done
}

# The issue's case under ZeRO-3: one rank killed every 20 steps over 100
# steps on 4 ranks (rank 0 first), each started again to rejoin with its
# slice of the parameters and of the optimizer state.
@test "--ft --zero 3, AdamW, 4 ranks, --max-restarts: ranks 0, 3, 2 and 1 killed at steps 20, 40, 60 and 80 rejoin; the weights of a run without failures, every step once" {
	local v
	collx-dp "${ARGS[@]}" -q -o ref.safetensors --loss-csv ref.csv
	zrun 4 4 "${ARGS[@]}" --zero 3
	kills 20:0 40:3 60:2 80:1
	ft_ends 0
	for v in 0 3 2 1; do
		grep -q "^collx-dp: step [0-9]*: rank $v left; 3 of 4 replicas go on" run.err
		grep -q "^collx-dp: step [0-9]*: rank $v rejoined; 4 replicas go on" run.err
	done
	same_as_ref 100 4
}

# restarts victim left: without restarts rank 1 killed leaves 2 replicas;
# with them rank 0 killed is started again and rejoins, 3 replicas.
@test "--ft --zero 3, SGD with momentum, 3 ranks: rank 1 killed at step 15, the 2 left finish (the slices cut over 2); with --max-restarts rank 0 killed rejoins; the weights of a run without failures" {
	local v k r n
	collx-dp "${ARGS[@]}" --steps 40 "${SGD[@]}" -q -o ref.safetensors \
	    --loss-csv ref.csv
	for v in 0:1:2 1:0:3; do
		IFS=: read -r k r n <<<"$v"
		zrun 3 "$k" "${ARGS[@]}" --steps 40 "${SGD[@]}" --zero 3
		kills "15:$r"
		ft_ends 0
		grep -q "^collx-dp: step [0-9]*: rank $r left; 2 of 3 replicas go on" run.err
		if [ "$k" = 1 ]; then
			grep -q "^collx-dp: step [0-9]*: rank $r rejoined; 3 replicas go on" run.err
		fi
		same_as_ref 40 "$n"
	done
}

# Inside the step: rank 1 killed at its second reduce-scatter (or
# parameter gather) of step 9's pass, after step 8's agreement (a larger
# mlp, so that the kill lands there): the survivors' pass breaks off with
# gradients half summed, they cut the slices again over 2 and run step 9
# again from its start.
@test "--ft --zero 3, AdamW, 3 ranks: rank 1 killed inside a reduce-scatter, then inside a parameter gather, of step 9: the step run again by 2, the weights of a run without failures" {
	local what
	collx-dp --init mlp --dims 256,4096,256,4 --seed 1 -o big.safetensors
	collx-tensor create --shape 512,256 --fill randn --seed 3 -o BX.npy
	collx-tensor create --shape 512,256 --fill randn --seed 4 -o BY.npy
	local big=(-m big.safetensors --data BX.npy --targets BY.npy --batch 64
	    --steps 14 --optimizer adamw --lr 0.001)
	collx-dp "${big[@]}" -q -o ref.safetensors --loss-csv ref.csv
	for what in "reduce-scatter of" "allgather of"; do
		rm -f dbg.* ft.csv ft.safetensors
		COLLX_DEBUG=trace COLLX_DEBUG_FILE=dbg.%r zrun 3 0 \
		    "${big[@]}" --zero 3
		wait_line '^collx-dp: step 2 '
		kill_in_allgather dbg.1 "$(rank_pid "$RUN" 1)" 9 "$what"
		ft_ends 0
		# the survivors found the death inside the step's pass
		grep 'warn: failed' dbg.0 dbg.2
		grep -q '^collx-dp: step 9: rank 1 left; 2 of 3 replicas go on' run.err
		same_as_ref 14 2
		[ "$(sed -n 10p ft.csv | cut -d, -f8)" = 3 ]
		[ "$(sed -n 11p ft.csv | cut -d, -f8)" = 2 ]
	done
}

@test "--ft --zero 3: ranks 1 and 3 of 4 killed at once leave nothing lost; ranks 1 and 2 (ring neighbours) lose slice 2 of the parameters and optimizer state: the others stop, exit 1, naming it" {
	neighbours 3 "ZeRO-3 parameters and optimizer state"
}

@test "--ft bad input: --zero 3 with --shard-group host (a host's shards would leave with it) is refused, naming it" {
	run -2 --separate-stderr collx-dp "${ARGS[@]}" --ft --zero 3 \
	    --shard-group host --world-size 2 --rank 0 --master 127.0.0.1:1
	[ "${stderr_lines[0]}" = "collx-dp: --ft goes with plain allreduce, not --shard-group host (the state a replica holds would leave with it)" ]
}
