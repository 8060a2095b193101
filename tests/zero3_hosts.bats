#!/usr/bin/env bats
# collx-dp --zero 3 --shard-group host (hybrid sharding) on two network
# namespaces of two ranks each, blocked and interleaved: the gpt's
# weights and losses against the float64 PyTorch reference
# (tests/lib/piperef.py) and plain DP's, its bytes against their closed
# form, its checkpoint resumed flat, and hosts of different rank counts
# refused. Needs root and `ip netns`; skipped otherwise.
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
@test "hybrid sharding on 2 hosts x 2 ranks, blocked and interleaved: the PyTorch reference's and plain DP's weights and losses; bytes; a checkpoint resumed flat" {
	timeout 300 "$PY" "$REF" train gpt g.safetensors "$GPL" - 6 3 adamw \
	    0.01 r.safetensors r.csv
	export PIPEREF_SKIP=attn.k.bias
	netns_placed "0 0 1 1" collx-dp "${G[@]}" -o p.safetensors --loss-csv p.csv
	[ "${RCS[*]}" = "0 0 0 0" ]
	for place in "0 0 1 1" "0 1 0 1"; do
		tag=h${place// /}
		netns_placed "$place" collx-dp "${G[@]}" --zero 3 --shard-group host \
		    -o "$tag.safetensors" --loss-csv "$tag.csv" --sync ring
		[ "${RCS[*]}" = "0 0 0 0" ]
		timeout 60 "$PY" "$REF" cmp r.safetensors r.csv 1e-5 \
		    "$tag.safetensors" "$tag.csv" >/dev/null
		timeout 30 "$PY" "$DPREF" cmp p.safetensors "$tag.safetensors" \
		    1e-5 1e-6 attn.k.bias >/dev/null
		timeout 30 "$PY" "$DPREF" csvcmp p.csv "$tag.csv" 1e-5 >/dev/null
		# rank 0 a step: within its host, two ring gathers of its half
		# of every layer and a reduce-scatter of the other half (P/2
		# floats each); across hosts a ring allreduce of its half
		# between 2 (P/2): 2P floats of P = 10816, and the loss
		loss=$(($(sed -n 2p "$tag.csv" | cut -d, -f7) - 2 * 10816 * 4))
		[ "$loss" -ge 0 ]
		[ "$loss" -lt 64 ]
		[ "$(sed 1d "$tag.csv" | cut -d, -f7 | sort -u | wc -l)" -eq 1 ]
	done
	# in bf16 within the host (the gathers' and reduce-scatter's 6P
	# bytes halved) and f32 across (2P): 5P bytes a step
	netns_placed "0 0 1 1" collx-dp "${G[@]}" --zero 3 --shard-group host \
	    -o hb.safetensors --loss-csv hb.csv --sync ring --wire bf16
	[ "${RCS[*]}" = "0 0 0 0" ]
	[ "$(sed 1d hb.csv | cut -d, -f7 | sort -u)" -eq $((5 * 10816 + loss)) ]
	timeout 30 "$PY" "$DPREF" csvcmp hb.csv p.csv 1e-3 >/dev/null
	# interleaved: host 0 is ranks 0 and 2, which write the checkpoint
	netns_placed "0 1 0 1" collx-dp "${G[@]}" --zero 3 --shard-group host \
	    --checkpoint c.safetensors
	[ "${RCS[*]}" = "0 0 0 0" ]
	timeout 60 collx-run -n 2 --timeout 20 -- collx-dp -q --resume \
	    c.safetensors --data "$GPL" --batch 6 --optimizer adamw --lr 0.01 \
	    --steps 6 -o res.safetensors
	netns_placed "0 0 1 1" collx-dp "${G[@]}" --steps 6 -o full.safetensors
	timeout 30 "$PY" "$DPREF" cmp full.safetensors res.safetensors 1e-5 \
	    1e-6 attn.k.bias >/dev/null
}

@test "hybrid sharding on hosts of 2 and 1 ranks: refused on every rank, exit 3, no output" {
	netns_placed "0 0 1" collx-dp "${G[@]}" --zero 3 --shard-group host \
	    -o out.safetensors
	[ "${RCS[*]}" = "3 3 3" ]
	for r in 0 1 2; do
		[ "$(wc -l <"err.$r")" -eq 1 ]
		grep -q "^collx-dp: rank $r: --shard-group host: host 0 holds 2 ranks, host 1 1" "err.$r"
	done
	[ ! -e out.safetensors ]
}
