#!/usr/bin/env bats
# collx-train --zero 3 --shard-group host (hybrid sharding on the DP
# axis) on two network namespaces of two ranks each: a gpt's weights and
# losses against the float64 PyTorch reference (tests/lib/piperef.py)
# and plain DP's, alone and beside --pp 2; its bytes against their closed
# form; hosts of different rank counts refused. Needs root and
# `ip netns`; skipped otherwise.
load lib/common
load lib/netns
load lib/train

setup() {
	train_env
	need "root and ip netns" netns_available
	netns_setup 2
	timeout 30 collx-dp --init gpt --dims 256,16,2,2,8 --seed 1 -o g.safetensors
	G=(-m g.safetensors --data "$GPL" --batch 6 --optimizer adamw --lr 0.01
	    --steps 3 -q)
}

teardown() {
	netns_teardown
	common_teardown
}

# AdamW: attn.k.bias's exactly-zero gradient is rounding noise (zero3.bats).
@test "hybrid sharding on 2 hosts x 2 ranks, dp4 and (across hosts) dp2 x pp2: the PyTorch reference's and plain DP's weights and losses; bytes" {
	timeout 300 "$PY" "$REF" train gpt g.safetensors "$GPL" - 6 3 adamw \
	    0.01 r.safetensors r.csv
	export PIPEREF_SKIP=attn.k.bias
	netns_placed "0 0 1 1" collx-train "${G[@]}" -o p.safetensors \
	    --loss-csv p.csv
	[ "${RCS[*]}" = "0 0 0 0" ]
	netns_placed "0 0 1 1" collx-train "${G[@]}" --zero 3 --shard-group host \
	    -o h.safetensors --loss-csv h.csv
	[ "${RCS[*]}" = "0 0 0 0" ]
	# dp2 x pp2, rank = pp*2 + dp: each stage's replicas on two hosts,
	# one rank each (the shard group of one, the replicas across)
	netns_placed "0 1 0 1" collx-train "${G[@]}" --zero 3 --shard-group host \
	    --dp 2 --pp 2 -o hp.safetensors --loss-csv hp.csv
	[ "${RCS[*]}" = "0 0 0 0" ]
	for t in h hp; do
		timeout 60 "$PY" "$REF" cmp r.safetensors r.csv 1e-5 \
		    "$t.safetensors" "$t.csv" >/dev/null
		timeout 30 "$PY" "$DPREF" cmp p.safetensors "$t.safetensors" \
		    1e-5 1e-6 attn.k.bias >/dev/null
		timeout 30 "$PY" "$DPREF" csvcmp p.csv "$t.csv" 1e-5 >/dev/null
	done
	# rank 0 a step on dp4: within its host two gathers of its half of
	# every unit and a reduce-scatter of the other half (P/2 floats
	# each), across hosts an allreduce of its half between 2 (P/2):
	# 2P floats of P = 10816, and the loss (steps after the first: its
	# groups' first collectives send a little more, plain DP's too)
	loss=$(($(sed -n 3p h.csv | cut -d, -f7) - 2 * 10816 * 4))
	[ "$loss" -ge 0 ]
	[ "$loss" -lt 64 ]
	[ "$(sed 1,2d h.csv | cut -d, -f7 | sort -u | wc -l)" -eq 1 ]
}

@test "hybrid sharding on hosts of 2 and 1 ranks: refused on every rank, exit 3, no output" {
	netns_placed "0 0 1" collx-train "${G[@]}" --zero 3 --shard-group host \
	    -o out.safetensors
	[ "${RCS[*]}" = "3 3 3" ]
	for r in 0 1 2; do
		grep -q "^collx-train: stage 0, replica $r: --shard-group host: host 0 holds 2 ranks, host 1 1 (hybrid sharding needs as many on every host)$" "err.$r"
	done
	[ ! -e out.safetensors ]
}
