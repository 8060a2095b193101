#!/usr/bin/env bats
# collx-dp --ft with --zero 3: a rank holds 1/W of the parameters, of the
# reduced gradients and of the optimizer state of every layer, and mirrors
# its ring successor's parameters and moments, so a rank killed (SIGKILL)
# takes nothing with it. ft_zero.bats runs its cases under ZeRO-3 too
# (no failures, kills at step lines with and without rejoins, the mirror's
# closed forms); here what is ZeRO-3's own: a rank killed inside a step's
# reduce-scatters and gathers, the weights those of a run without failures
# within 1e-5 and every step once; two ring neighbours killed at once
# lose a slice of the parameters too: exit 1 naming it; hybrid refused.
load lib/common
load lib/netns
load lib/ftsuite
load lib/ftzero
bats_require_minimum_version 1.5.0

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
