#!/usr/bin/env bats
# Option refusals of collx-train, collx-dp and collx-bench that no other
# suite pins: each ends the program before any rank talks, with its
# documented exit code (2 usage, 3 bad input) and one line whose text is
# written out here in full, so that a change to the checks (now in
# lib/prog/meshopt.c, dpcli.c, trainopt_check.c and lib/bench/bench_opts.c)
# cannot alter what a user reads.
load lib/common

setup() {
	common_setup
	timeout 30 "$PY" "$COLLX_ROOT/tests/lib/moons.py" 16 1 X.npy Y.npy
	timeout 30 collx-dp --init mlp --dims 2,8,1,2 --seed 3 -o m.safetensors
}

teardown() {
	common_teardown
}

# refused CODE MESSAGE PROG ARGS...: PROG ARGS exits CODE and its first
# line is "PROG: MESSAGE" (a usage error adds the --help hint).
refused() {
	local code=$1 msg=$2 prog=$3
	shift 3
	run timeout 30 "$prog" "$@"
	echo "$output"
	[ "$status" -eq "$code" ]
	[ "${lines[0]}" = "$prog: $msg" ]
	if [ "$code" -eq 2 ]; then
		[ "${lines[1]}" = "Try '$prog --help'." ]
	fi
}

TRAIN=(--world-size 1 --rank 0 -m m.safetensors -i X.npy -t Y.npy)
DP=(--world-size 1 --rank 0 -m m.safetensors --data X.npy --targets Y.npy)

@test "collx-train: axes, batch and steps, --ep with local SGD, and meshes that do not fit" {
	refused 2 "--dp: want a positive size or -1, not 0" collx-train --dp 0
	refused 2 "--batch B is required" collx-train "${TRAIN[@]}" --steps 1
	refused 2 "give one of --steps and --epochs" collx-train \
	    "${TRAIN[@]}" --batch 4 --steps 1 --epochs 2
	refused 2 "give --steps K or --epochs E" collx-train "${TRAIN[@]}" \
	    --batch 4
	refused 2 "--ep with --sync-every: a replica's local steps would move the experts it runs on its rows only" \
	    collx-train "${TRAIN[@]}" --batch 4 --steps 1 --ep 2 --sync-every 2
	refused 3 "mesh --dp 2 x --tp 1 x --pp 1 = 2 ranks, but the world has 1" \
	    collx-train "${TRAIN[@]}" --batch 4 --steps 1 --dp 2
	refused 3 "--ep 3 does not divide the 4 data-parallel replicas (--dp 4)" \
	    collx-train --print-mesh --world-size 8 --dp 4 --tp 2 --ep 3
}

@test "collx-train --ft: a model with experts is refused after the options" {
	timeout 30 collx-dp --init gpt --dims 256,8,2,2,4 --experts 2 -o moe.safetensors
	printf 'abcdefghijklmnopqrstuvwxyz%.0s' 1 2 3 4 >tok.txt
	refused 2 "--ft and a model with experts: their counts' sums come after the update" \
	    collx-train --world-size 2 --rank 0 --master 127.0.0.1:9 \
	    --timeout 1 --data tok.txt -m moe.safetensors --batch 4 --steps 1 --ft
}

@test "collx-dp: the servers' options, --sync and the checkpoints they refuse" {
	refused 2 "--sync: unknown algorithm 'foo'" collx-dp --sync foo
	refused 2 "--batch B is required" collx-dp "${DP[@]}" --steps 1
	refused 2 "give one of --steps and --epochs" collx-dp "${DP[@]}" --batch 4
	refused 2 "--ps and --ps-servers go with --sync ps" collx-dp "${DP[@]}" \
	    --batch 4 --steps 1 --ps-servers 1
	refused 2 "--ps (external servers) and --ps-servers (colocated) exclude each other" \
	    collx-dp "${DP[@]}" --batch 4 --steps 1 --ps 127.0.0.1:1 --ps-servers 1
	refused 2 "--staleness goes with --sync ps --ps-mode async" collx-dp \
	    "${DP[@]}" --batch 4 --steps 1 --sync ps --staleness 1
	refused 2 "--checkpoint and --resume go with allreduce or synchronous colocated servers (external and asynchronous servers keep the optimizer state themselves)" \
	    collx-dp "${DP[@]}" --batch 4 --steps 1 --sync ps --ps 127.0.0.1:1 \
	    --checkpoint c.safetensors
	refused 2 "--ps-servers 2: more servers than the 1 ranks" collx-dp \
	    "${DP[@]}" --batch 4 --steps 1 --sync ps --ps-servers 2
	refused 2 "--ft needs two replicas or more (--world-size 1)" collx-dp \
	    "${DP[@]}" --batch 4 --steps 1 --ft
}

@test "collx-bench: the subcommand, and options given to one they do not go with" {
	refused 2 "missing subcommand: coll, p2p, dp, mesh, fit or plan" collx-bench
	refused 2 "unknown subcommand 'foo': want coll, p2p, dp, mesh, fit or plan" \
	    collx-bench foo
	refused 2 "--ranks-per-host, --top, --mem-per-rank, --mesh, --validate and --export go with plan" \
	    collx-bench dp --top 3
	refused 2 "--topk, --capacity and --moe-every go with plan" \
	    collx-bench dp --topk 2
	refused 2 "mesh: --sync, --wire, PowerSGD and local SGD go with dp" \
	    collx-bench mesh --wire bf16
	refused 2 "--cost goes with plan and coll" collx-bench dp --cost c.json
	refused 2 "-o goes with fit" collx-bench dp -o c.json
	refused 2 "fit: -o COST.json is required" collx-bench fit
	refused 2 "plan: --hosts N is required" collx-bench plan --cost c.json
	refused 2 "--export astra-sim: missing DIR" collx-bench plan --export astra-sim
	refused 2 "--pair: want two different ranks A,B, not '1,1'" \
	    collx-bench p2p --pair 1,1
	refused 2 "-e 4 is below -b 8" collx-bench coll --world-size 1 --rank 0 -e 4 -b 8
}
