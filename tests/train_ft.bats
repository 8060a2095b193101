#!/usr/bin/env bats
# collx-train --ft: a rank killed (SIGKILL) while training takes its
# whole replica out (its TP or PP peer leaves, saying why, exit 1); the
# other replica runs the step again with the whole batch and goes on.
# The trained weights are those of a failure-free collx-train run of the
# same mesh (no --ft) within 1e-5, the loss CSV holds every step once
# with the replicas that ran it, /dev/shm is left as it was. Bad input:
# one usage line naming the options.
load lib/common
load lib/netns
load lib/ftsuite
bats_require_minimum_version 1.5.0

setup_file() {
	ft_setup_file
}

setup() {
	ft_setup
}

teardown() {
	ft_teardown
}

TARGS=(-m m.safetensors --data X.npy --targets Y.npy --batch 512 --steps 40
    --optimizer adamw --lr 0.001)

# killed_train K PEER MESH...: 4 ranks of collx-train --ft on MESH, rank
# K killed after step 10 (the line of the rank 0 of those left); PEER,
# the other rank of K's replica, leaves with it; the other replica ends
# with the weights of a failure-free run and every step once.
killed_train() {
	local k=$1 peer=$2 master r line step killed= rc want shm
	shift 2
	collx-run -n 4 -- collx-train "${TARGS[@]}" "$@" -q \
	    -o ref.safetensors --loss-csv ref.csv
	shm=$(ls -A /dev/shm | sort)
	master=127.0.0.1:$(free_port)
	mkfifo err.fifo
	for r in 0 1 2 3; do
		COLLX_RANK=$r COLLX_WORLD_SIZE=4 COLLX_MASTER=$master \
		    COLLX_TIMEOUT=10 collx-train "${TARGS[@]}" "$@" --ft -v \
		    -o ft.safetensors --loss-csv ft.csv 2>err.fifo &
		PIDS+=($!)
	done
	while IFS= read -r line; do
		echo "$line" >>err.log
		step=$(sed -n 's/^collx-train: step \([0-9]*\) epoch .*/\1/p' \
		    <<<"$line")
		if [ "$step" = 10 ] && [ -z "$killed" ]; then
			kill -KILL "${PIDS[k]}"
			killed=1
		fi
	done <err.fifo
	for r in 0 1 2 3; do
		rc=0
		timeout 60 tail --pid="${PIDS[r]}" -f /dev/null
		wait "${PIDS[r]}" || rc=$?
		echo "rank $r: exit $rc"
		want=0
		[ "$r" = "$k" ] && want=137
		[ "$r" = "$peer" ] && want=1
		[ "$rc" -eq "$want" ]
	done
	grep -v ': step [0-9]* epoch ' err.log
	# the peer's line, and the departure's by the rank 0 of those left
	grep -q "^collx-train: rank $peer: --ft: rank $k left, taking replica [01] out; this rank leaves with it (1 replica go on)$" err.log
	grep -q "^collx-train: step [0-9]*: rank $k left, taking 1 replica out; 1 of 2 replicas go on (0.[0-9]* s to agree and set up again)$" err.log
	[ "$(grep -c '^collx-train: 40 steps, final loss ' err.log)" -eq 1 ]
	collx-tensor diff ref.safetensors ft.safetensors --atol 1e-5 --rtol 0
	[ "$(head -1 ft.csv)" = "step,epoch,loss,tokens,seconds,tokens_per_s,bytes_sent,replicas" ]
	[ "$(tail -n +2 ft.csv | cut -d, -f1 | tr '\n' ' ')" = "$(seq -s ' ' 0 39) " ]
	[ "$(tail -n +2 ft.csv | cut -d, -f8 | uniq | tr '\n' ' ')" = "2 1 " ]
	paste -d, <(tail -n +2 ref.csv | cut -d, -f3) \
	    <(tail -n +2 ft.csv | cut -d, -f3) |
	    awk -F, '{ d = $1 - $2; if (d < 0) d = -d; if (d > 1e-5 * $1) exit 1 }'
	[ "$(ls -A /dev/shm | sort)" = "$shm" ]
}

@test "--ft --dp 2 --tp 2: rank 3 killed at step 10, rank 2 leaves with it; replica 0 ends with the weights of a run without failures" {
	killed_train 3 2 --dp 2 --tp 2
}

@test "--ft --dp 2 --tp 2: rank 0 killed, rank 1 leaves with it; replica 1 takes the outputs over" {
	killed_train 0 1 --dp 2 --tp 2
}

@test "--ft --dp 2 --pp 2: rank 2 (the last stage of replica 0) killed, rank 0 leaves with it; replica 1 takes the outputs over" {
	killed_train 2 0 --dp 2 --pp 2
}

@test "--ft --dp 2 --pp 2: rank 1 killed, rank 3 leaves with it" {
	killed_train 1 3 --dp 2 --pp 2
}

@test "--ft refusals: one usage line naming the options" {
	local o
	export COLLX_WORLD_SIZE=2 COLLX_RANK=0 COLLX_MASTER=127.0.0.1:1
	for o in "--zero 1" "--wire int8" "--sync-every 4" "--checkpoint c.safetensors" \
	    "--trace t.json"; do
		# shellcheck disable=SC2086
		usage_refused collx-train "${TARGS[@]}" --dp 2 --ft $o
		[[ "${lines[0]}" == "collx-train: --ft goes with plain allreduce on --dp, --tp and --pp, not ${o%% *}" ]]
	done
	usage_refused collx-train "${TARGS[@]}" --dp 1 --tp 2 --ft
	[ "${lines[0]}" = "collx-train: --ft needs two replicas or more (--dp 1)" ]
}
