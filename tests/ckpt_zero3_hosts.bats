#!/usr/bin/env bats
# collx-train --zero 3 --shard-group host (hybrid sharding) checkpoints
# on two network namespaces of two ranks each: each host holds every
# slice, so the first host's ranks send theirs alone. The file holds
# what plain DP's checkpoint of the same run holds, every tensor and
# moment within float rounding (the route before this one, which
# gathered the state onto replica 0, crashed here), and resumes to an
# uninterrupted run's bytes. Needs root and `ip netns`; skipped
# otherwise.
load lib/common
load lib/netns
load lib/train

setup() {
	train_env
	need "root and ip netns" netns_available
	netns_setup 2
	timeout 30 collx-dp --init gpt --dims 256,16,8,2,8 --seed 1 -o g.safetensors
	G=(-m g.safetensors --data "$GPL" --batch 4 --optimizer adamw --lr 0.01
	    -q)
}

teardown() {
	netns_teardown
	common_teardown
}

# AdamW: attn.k.bias's exactly-zero gradient is rounding noise (zero3.bats).
@test "hybrid sharding on 2 hosts x 2 ranks, dp4 and dp2 x pp2: the checkpoint holds plain DP's; resumed, an uninterrupted run's bytes" {
	H=(--zero 3 --shard-group host)
	for m in dp4 dp2pp2; do
		M=() P="0 0 1 1"
		[ $m = dp4 ] || M=(--dp 2 --pp 2) P="0 1 0 1"
		netns_placed "$P" collx-train "${G[@]}" "${M[@]}" --steps 2 \
		    --checkpoint p.safetensors -o plain.safetensors
		[ "${RCS[*]}" = "0 0 0 0" ]
		netns_placed "$P" collx-train "${G[@]}" "${M[@]}" "${H[@]}" \
		    --steps 2 --checkpoint c.safetensors -o half.safetensors
		[ "${RCS[*]}" = "0 0 0 0" ]
		timeout 30 "$PY" "$DPREF" cmp p.safetensors c.safetensors \
		    1e-5 1e-6 attn.k.bias >/dev/null
		netns_placed "$P" collx-train "${G[@]}" "${M[@]}" "${H[@]}" \
		    --steps 4 -o full.safetensors
		[ "${RCS[*]}" = "0 0 0 0" ]
		netns_placed "$P" collx-train "${G[@]}" "${M[@]}" "${H[@]}" \
		    --steps 4 --resume c.safetensors -o resumed.safetensors
		[ "${RCS[*]}" = "0 0 0 0" ]
		cmp full.safetensors resumed.safetensors
	done
}
