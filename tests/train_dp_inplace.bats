#!/usr/bin/env bats
# collx-train's DP buckets on a gpt, whose stage vector keeps its tensors
# in another order than the model's: summed in place where every sum adds
# two operands at each level (dp2; dp4 on 2 hosts of 2 ranks, hier), in
# the model's order where a ring's parts would round otherwise (dp3, and
# dp4 on one host): collx-dp's bytes, weights and losses, in every case.
# On a slow link the sums run on into the next step's forward (each
# bucket's tensors updated once its sum is in, each layer's forward
# waiting for its own): the trace shows it, and a forward that did not
# wait would read parameters not yet updated (other bytes, or the
# update's check fails the run).
# The namespace case needs root and `ip netns`; skipped otherwise.
load lib/common
load lib/netns
load lib/train

setup() {
	train_env
	timeout 30 collx-dp --init gpt --dims 256,16,2,2,8 --seed 1 -o g.safetensors
	G=(-m g.safetensors --data "$GPL" --batch 8 --steps 4 --lr 0.05
	    --optimizer adamw -q)
}

teardown() {
	[ -z "${NETNS_TAG:-}" ] || netns_teardown
	common_teardown
}

# usage: same TAG: collx-train's tTAG/lTAG.csv equal collx-dp's dTAG/dTAG.csv
# (weights byte for byte, losses, bytes sent after the first step: across
# hosts the first one splits the hier groups, a few bytes more in one)
same() {
	cmp "t$1.safetensors" "d$1.safetensors"
	[ "$(cut -d, -f1,3 "l$1.csv")" = "$(cut -d, -f1,3 "d$1.csv")" ]
	[ "$(sed 1,2d "l$1.csv" | cut -d, -f7)" = "$(sed 1,2d "d$1.csv" | cut -d, -f7)" ]
}

@test "dp2, dp3 and dp4 on one host: collx-train's buckets give collx-dp's bytes" {
	for n in 2 3 4; do
		timeout 60 collx-run -n $n --timeout 20 -- collx-dp "${G[@]}" \
		    -o "d$n.safetensors" --loss-csv "d$n.csv"
		train $n $n "${G[@]}" --dp $n
		same $n
	done
}

@test "dp4 on 2 hosts x 2 ranks (hier, summed in place): collx-dp's bytes" {
	need "root and ip netns" netns_available
	netns_setup 2
	netns_placed "0 0 1 1" collx-dp "${G[@]}" -o dh.safetensors \
	    --loss-csv dh.csv
	[ "${RCS[*]}" = "0 0 0 0" ]
	netns_placed "0 0 1 1" collx-train "${G[@]}" -o th.safetensors \
	    --loss-csv lh.csv
	[ "${RCS[*]}" = "0 0 0 0" ]
	same h
}

@test "dp4 on 2 hosts x 2 ranks at 50 Mbit/s: the sums run on into the next forward, collx-dp's bytes" {
	need "root and ip netns" netns_available
	need "tc rate shaping" netns_can_shape rate
	netns_setup 2 --rate 50mbit --burst 32kb
	timeout 30 collx-dp --init gpt --dims 256,64,2,2,8 --seed 1 -o g.safetensors
	netns_placed "0 0 1 1" collx-dp "${G[@]}" -o dh.safetensors \
	    --loss-csv dh.csv
	[ "${RCS[*]}" = "0 0 0 0" ]
	netns_placed "0 0 1 1" collx-train "${G[@]}" -o th.safetensors \
	    --loss-csv lh.csv --trace tr.json --timing tm.csv
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
	# rank 0's rows count each wait once: the wait at the backward's end
	# for the sums posted in it is the DP axis's exposed time, not the
	# backward's too, so forward + backward + exposed fit in the steps
	run awk -F, '$4 == 0 && ($2 == "forward" || $2 == "backward" ||
	    $2 == "allreduce_exposed") { rows += $10 }
	    $4 == 0 && $2 == "step" { step += $10 }
	    END { printf "%.4f %.4f\n", rows, step; exit !(step > 0 && rows <= step) }' tm.csv
	echo "$output" >&2
	[ "$status" -eq 0 ]
}
