#!/usr/bin/env bats
# collx-train's DP sums running on into the next step's forward (a plain
# dp mesh): the buckets the backward leaves go in the forward's order,
# each one's tensors updated once its sum is in, and each layer's forward
# waits for its own. Checked on 2 hosts x 2 ranks at a slow rate, where
# the sums outlast the backward: the trace shows a step's sums ending
# after the next step's forward began, and the weights, losses and bytes
# are collx-dp's (which updates only after every sum). A forward that did
# not wait reads parameters not yet updated: other bytes, or the update's
# check fails the run. Needs root and `ip netns` (skipped otherwise).
load lib/common
load lib/netns
load lib/train

setup() {
	train_env
	timeout 30 collx-dp --init gpt --dims 256,64,2,2,8 --seed 1 -o g.safetensors
	G=(-m g.safetensors --data "$GPL" --batch 8 --steps 4 --lr 0.05
	    --optimizer adamw -q)
}

teardown() {
	[ -z "${NETNS_TAG:-}" ] || netns_teardown
	common_teardown
}

@test "dp4 on 2 hosts x 2 ranks at 50 Mbit/s: the sums run on into the next forward, collx-dp's bytes" {
	need "root and ip netns" netns_available
	need "tc rate shaping" netns_can_shape rate
	netns_setup 2 --rate 50mbit --burst 32kb
	netns_placed "0 0 1 1" collx-dp "${G[@]}" -o dh.safetensors \
	    --loss-csv dh.csv
	[ "${RCS[*]}" = "0 0 0 0" ]
	netns_placed "0 0 1 1" collx-train "${G[@]}" -o th.safetensors \
	    --loss-csv lh.csv --trace tr.json
	cat err.* >&2
	[ "${RCS[*]}" = "0 0 0 0" ]
	cmp th.safetensors dh.safetensors
	[ "$(cut -d, -f1,3 lh.csv)" = "$(cut -d, -f1,3 dh.csv)" ]
	[ "$(sed 1,2d lh.csv | cut -d, -f7)" = "$(sed 1,2d dh.csv | cut -d, -f7)" ]
	# steps 0-2: the sums running on end after the next forward began
	# (the last step's sums are flushed in it)
	run python3 -c '
import json, sys
ev = [e for e in json.load(open("tr.json"))["traceEvents"]
      if e.get("ph") == "X" and e["tid"] == 0]
end = {}
fwd = {}
for e in ev:
    s = e["args"]["step"]
    if e["cat"] == "allreduce-runon":
        end[s] = max(end.get(s, 0), e["ts"] + e["dur"])
    if e["cat"] == "forward":
        fwd[s] = min(fwd.get(s, 1e30), e["ts"])
print(" ".join(str(int(end[s] > fwd[s + 1])) for s in range(3)))'
	[ "$status" -eq 0 ]
	[ "$output" = "1 1 1" ]
}
