#!/usr/bin/env bats
# collx-tp's long-sequence modes (ring, zigzag, usp, sp, --overlap ring):
# forward, backward and training against an independent PyTorch computation of the whole block
# (tests/lib/tpref.py, float64), the attention work per rank and the bytes
# per layer against their closed forms, refusals of sizes that do not
# divide, and the PyTorch ring peer (examples/peers/torch_ring.py).
load lib/common
load lib/tpsuite

@test "ring and zigzag: worlds 2-4, causal and not, 2 heads (fewer than P), equal torch" {
	# sequence 24 divides by 2P for P = 2, 3 (and 12 = 2P*... for 4: 24/8 = 3)
	ref make block 24 48 0 21 heads=2 seq=24 batch=2
	for w in 2 3 4; do
		for m in ring zigzag; do
			fb $w block $m
			fb $w block $m --causal causal
		done
	done
	batch_ok
}

@test "ring: sequences no multiple of 2P, bias absent, post-norm and relu" {
	# 12 on 4 ranks and 9 on 3: chunks of 3, no multiple of 2P
	ref make block 16 32 0 22 heads=4 seq=12 nobias
	fb 4 block ring --causal causal
	fb 4 block ring "--norm post --activation relu" "norm=post act=relu"
	ref make block 16 32 0 23 heads=1 seq=9
	fb 3 block ring --causal causal
	fb 3 block ring
	batch_ok
}

train_q() {
	rundir
	tp "$1" --layer block --mode "$2" -m w.safetensors -i X.npy --train \
	    --targets T.npy --steps 4 --lr 0.2 -o $d/TR.safetensors \
	    --loss-csv $d/L.csv $3
	echo "train block $d 4 0.2 $4" >>batch
}

@test "--train ring and zigzag: losses and weights equal torch and serial" {
	ref make block 24 48 0 24 heads=3 seq=16
	train_q 1 serial --causal causal
	ser=$d
	train_q 4 ring --causal causal
	echo "same $ser $d" >>batch
	train_q 2 zigzag --causal causal
	echo "same $ser $d" >>batch
	train_q 4 zigzag --causal causal
	echo "same $ser $d" >>batch
	batch_ok
}

# usage: work FILE: the attention work each rank says it did, one a line,
# in rank order
work() {
	sed -n 's/^collx-tp: rank \([0-9]*\): attention work \([0-9]*\) query-key pairs$/\1 \2/p' "$1" |
	    sort -n | awk '{ print $2 }'
}

@test "attention work per rank (counted): zigzag even under causal masking, the contiguous ring 2P-1 times" {
	# P = 4, sequence 64, batch 2, 2 heads: zigzag chunks c = 8, ring chunks 16
	ref make block 16 32 0 25 heads=2 seq=64 batch=2
	timeout 60 collx-run -n 4 --timeout 20 -- collx-tp -v --layer block \
	    --mode zigzag --causal -m w.safetensors -i X.npy 2>zz.err
	timeout 60 collx-run -n 4 --timeout 20 -- collx-tp -v --layer block \
	    --mode ring --causal -m w.safetensors -i X.npy 2>ring.err
	# closed forms, times b*heads = 4: zigzag (2P-1)c^2 + c(c+1) = 520 on every
	# rank; ring r*C^2 + C(C+1)/2 on rank r
	[ "$(work zz.err | tr '\n' ' ')" = "2080 2080 2080 2080 " ]
	[ "$(work ring.err | tr '\n' ' ')" = "544 1568 2592 3616 " ]
	# max/min: zigzag 1 <= 1.05, ring 6.6, about 2P-1 = 7
	awk '{ a[NR] = $1 } END { exit !(a[4] / a[1] > 6.5) }' <(work ring.err)
	# not causal every rank attends to every key: s^2/P * 4
	timeout 60 collx-run -n 4 --timeout 20 -- collx-tp -v --layer block \
	    --mode ring -m w.safetensors -i X.npy 2>full.err
	[ "$(work full.err | tr '\n' ' ')" = "4096 4096 4096 4096 " ]
}

# Sum of comm_bytes and of hidden_us over the rows of FILE whose phase
# (the last column) is PHASE.
bytes_of() {
	awk -F, -v ph="$2" 'NR > 1 && $NF == ph { s += $13; n++ }
	    END { print s + 0, n + 0 }' "$1"
}

@test "comm_bytes per layer per rank: ring and zigzag, closed form; hidden_us beside it" {
	# b*s*d = 2*24*16 = 768 floats; each rank's K (or V) is 768/P floats
	ref make block 16 32 0 26 heads=2 seq=24 batch=2
	for m in ring zigzag; do
		for w in 2 3 4; do
			rm -f t*.csv
			tp $w --layer block --mode $m -m w.safetensors -i X.npy \
			    --backward --grad-output DY.npy --timing 't{rank}.csv'
			blk=$((768 / w * 4))
			for ((r = 0; r < w; r++)); do
				# forward: K and V to the next rank P-1 times
				[ "$(bytes_of t$r.csv 'fwd ring attention')" = "$((2 * (w - 1) * blk)) 1" ]
				# backward: K, V P-1 times, dK, dV P times
				[ "$(bytes_of t$r.csv 'bwd ring attention')" = "$((2 * (2 * w - 1) * blk)) 1" ]
			done
			head -1 t0.csv | grep -q ',busbw_gbps,comm_bytes,hidden_us,exposed_us,phase$'
			# hidden and exposed time is time, no more than the
			# phase took; other phases hide nothing
			awk -F, 'NR > 1 && $NF ~ /ring attention/ {
			    if ($14 < 0 || $15 < 0 || $14 + $15 > $10 * 1e6 + 1) exit 1 }
			    NR > 1 && $NF !~ /ring attention/ && $14 + $15 > 0 { exit 1 }' t0.csv
		done
	done
}

@test "usp: Ulysses groups of U, ring across: worlds 2-4, causal and not, equal torch" {
	ref make block 24 48 0 29 heads=4 seq=24 batch=2
	fb 4 block usp "--ulysses 2 --causal" causal
	fb 4 block usp "--ulysses 2"
	fb 4 block usp "--ulysses 4 --causal" causal
	fb 4 block usp "--ulysses 1 --causal" causal
	fb 2 block usp "--ulysses 2 --causal" causal
	fb 3 block usp "--ulysses 1"
	batch_ok
	train_q 4 usp "--ulysses 2 --causal" causal
	batch_ok
}

@test "comm_bytes per layer per rank: usp, closed form" {
	# b*s*d = 2*24*24 = 1152 floats, 1152/P on each rank
	ref make block 24 48 0 30 heads=4 seq=24 batch=2
	for wu in "4 2" "4 4" "2 1"; do
		set -- $wu
		w=$1 u=$2 rr=$(($1 / $2))
		rm -f t*.csv
		tp $w --layer block --mode usp --ulysses $u -m w.safetensors \
		    -i X.npy --backward --grad-output DY.npy --timing 't{rank}.csv'
		loc=$((1152 / w * 4))
		for ((r = 0; r < w; r++)); do
			# all-to-alls send (U-1)/U of q, k, v (3) and of the output
			[ "$(bytes_of t$r.csv 'fwd alltoall qkv')" = "$((3 * loc * (u - 1) / u)) 1" ]
			[ "$(bytes_of t$r.csv 'fwd alltoall out')" = "$((loc * (u - 1) / u)) 1" ]
			[ "$(bytes_of t$r.csv 'bwd alltoall dout')" = "$((loc * (u - 1) / u)) 1" ]
			[ "$(bytes_of t$r.csv 'bwd alltoall dqkv')" = "$((3 * loc * (u - 1) / u)) 1" ]
			# the ring across R groups: blocks of s/R positions, H/U heads
			[ "$(bytes_of t$r.csv 'fwd ring attention')" = "$((2 * (rr - 1) * loc)) 1" ]
			# (a ring of one group, R = 1, sends nothing)
			[ "$(bytes_of t$r.csv 'bwd ring attention')" = "$((rr > 1 ? 2 * (2 * rr - 1) * loc : 0)) 1" ]
		done
	done
}

@test "sp and --overlap ring (tp, sp): worlds 2-4, causal and not, equal torch; ring equals none" {
	PEER=$COLLX_ROOT/examples/peers/torch_ring.py
	# 12 heads, d_ff 48 and sequence 24 divide by 2, 3 and 4
	ref make block 24 48 0 32 heads=12 seq=24 batch=2
	for w in 2 3 4; do
		fb $w block sp "--overlap none --causal" causal
		none=$d
		fb $w block sp "--overlap ring --causal" causal
		timeout 60 "$PY" "$PEER" same $d $none
		fb $w block tp --causal causal
		none=$d
		fb $w block tp "--overlap ring --causal" causal
		timeout 60 "$PY" "$PEER" same $d $none
	done
	fb 3 block sp "--overlap ring --activation relu" act=relu
	ref make block 24 48 0 33 heads=4 seq=8 nobias
	fb 4 block sp --overlap\ ring
	fb 2 block tp --overlap\ ring
	batch_ok
}

@test "--train sp and tp --overlap ring: losses and weights equal torch and serial" {
	ref make block 24 48 0 34 heads=12 seq=12
	train_q 1 serial --causal causal
	ser=$d
	for mo in "4 sp none" "3 sp ring" "2 tp ring"; do
		set -- $mo
		train_q $1 $2 "--overlap $3 --causal" causal
		echo "same $ser $d" >>batch
	done
	batch_ok
}

@test "sp --overlap ring: each ring's transfers on the transfers track beside its computes; hidden_us within the phase" {
	# T = 3 (odd) and 4, batch 2: every ring has W computes and W-1
	# transfers (run by the communication thread)
	ref make block 24 48 0 40 heads=12 seq=24 batch=2
	for w in 3 4; do
		rm -f t*.csv tr.json
		tp $w --layer block --mode sp --overlap ring --causal \
		    -m w.safetensors -i X.npy --backward --grad-output DY.npy \
		    --timing 't{rank}.csv' --trace tr.json
		timeout 30 "$PY" - tr.json $w <<'PY'
import json, sys
ev = json.load(open(sys.argv[1]))["traceEvents"]
W = int(sys.argv[2])
x = [e for e in ev if e["ph"] == "X"]
ag = ["fwd allgather ln1", "fwd allgather ln2", "bwd allgather dy", "bwd allgather dh"]
rs = ["fwd reduce-scatter attn.o", "fwd reduce-scatter mlp.fc2",
      "bwd reduce-scatter mlp.fc1", "bwd reduce-scatter attn.qkv"]
for r in range(W):
    for name in ag + rs:
        comp = sorted((e for e in x if e["tid"] == 2 * r and e["name"] == name),
                      key=lambda e: e["ts"])
        send = sorted((e for e in x if e["tid"] == 2 * r + 1 and e["name"] == name),
                      key=lambda e: e["ts"])
        assert len(comp) == W and len(send) == W - 1, (r, name, len(comp), len(send))
        assert all(e["cat"] == "send" for e in send), (r, name)
        # one thread: each step's transfer after the one before
        for a, b in zip(send, send[1:]):
            assert b["ts"] >= a["ts"] + a["dur"] - 1, (r, name, a, b)
        for i in range(W - 1):
            # step i+1 computes with what step i's transfer brought
            assert send[i]["ts"] + send[i]["dur"] <= comp[i + 1]["ts"] + comp[i + 1]["dur"] + 1, (r, name, i)
            # a reduce-scatter's step i sends what step i computed
            if name in rs:
                assert send[i]["ts"] >= comp[i]["ts"] + comp[i]["dur"] - 1, (r, name, i)
PY
		for ((r = 0; r < w; r++)); do
			# the 8 overlapped rings; hidden and exposed time no
			# more than the phase took; other phases hide nothing
			[ "$(awk -F, 'NR > 1 && $2 ~ /[+]/' t$r.csv | wc -l)" -eq 8 ]
			awk -F, 'NR > 1 && $2 ~ /[+]/ {
			    if ($14 < 0 || $15 < 0 || $14 + $15 > $10 * 1e6 + 1) exit 1 }
			    NR > 1 && $2 !~ /[+]/ && $14 + $15 > 0 { exit 1 }' t$r.csv
		done
	done
}

@test "comm_bytes per layer per rank: sp and tp --overlap ring, closed form" {
	# b*s*d = 2*24*24 = 1152 floats; 6*24 = 144 of LayerNorms and biases
	ref make block 24 48 0 35 heads=12 seq=24 batch=2
	for w in 2 3 4; do
		for o in none ring; do
			rm -f t*.csv
			tp $w --layer block --mode sp --overlap $o -m w.safetensors \
			    -i X.npy --backward --grad-output DY.npy --timing 't{rank}.csv'
			ag=$((1152 * (w - 1) / w * 4))
			for ((r = 0; r < w; r++)); do
				# two allgathers and two reduce-scatters each way
				for ph in 'fwd allgather ln1' 'fwd reduce-scatter attn.o' \
				    'fwd allgather ln2' 'fwd reduce-scatter mlp.fc2' \
				    'bwd allgather dy' 'bwd reduce-scatter mlp.fc1' \
				    'bwd allgather dh' 'bwd reduce-scatter attn.qkv'; do
					[ "$(bytes_of t$r.csv "$ph")" = "$ag 1" ]
				done
				# the sequence-sharded gradients: one ring allreduce
				[ "$(bytes_of t$r.csv 'bwd allreduce ln and bias grads')" = "$((2 * (w - 1) * 144 / w * 4)) 1" ]
			done
		done
		# tp: --overlap ring sends what the allreduces send, 8(W-1)/W*b*s*d*4
		for o in none ring; do
			rm -f t0.csv
			tp $w --layer block --mode tp --overlap $o -m w.safetensors \
			    -i X.npy --backward --grad-output DY.npy --timing 't{rank}.csv'
			awk -F, 'NR > 1 && $NF !~ /output/ { s += $13 } END { print s }' \
			    t0.csv >sum.$o
		done
		[ "$(cat sum.none)" = "$((8 * 1152 * (w - 1) / w * 4))" ]
		[ "$(cat sum.ring)" = "$(cat sum.none)" ]
	done
}

@test "sequences, heads and --ulysses that do not divide: exit 3 on every rank, naming the numbers" {
	ref make block 16 32 0 27 heads=2 seq=12
	refused 4 "zigzag: sequence length 12 is not divisible by 8 (2 x world size 4)" \
	    --layer block --mode zigzag -m w.safetensors -i X.npy
	refused 5 "sequence length 12 is not divisible by world size 5" \
	    --layer block --mode ring -m w.safetensors -i X.npy --causal
	refused 4 "--ulysses 3 does not divide world size 4" \
	    --layer block --mode usp --ulysses 3 -m w.safetensors -i X.npy
	refused 4 "2 heads are not divisible by --ulysses 4" \
	    --layer block --mode usp --ulysses 4 -m w.safetensors -i X.npy
	refused 3 "--overlap ring: mode zigzag has no collective matmul to overlap (tp and sp have)" \
	    --layer block --mode zigzag --overlap ring -m w.safetensors -i X.npy
	ref make block 24 48 0 37 heads=12 seq=10
	refused 4 "sequence length 10 is not divisible by world size 4" \
	    --layer block --mode sp -m w.safetensors -i X.npy
	refused 4 "--overlap ring: sequence length 10 is not divisible by world size 4" \
	    --layer block --mode tp --overlap ring -m w.safetensors -i X.npy
	run timeout 20 collx-tp --layer block --mode sp --norm post \
	    -m w.safetensors -i X.npy
	[ "$status" -eq 2 ]
	ref make mlp 12 24 3 36
	refused 2 "--overlap ring: layer mlp has no collective matmul to overlap (block has)" \
	    --layer mlp --overlap ring -m w.safetensors -i X.npy
	ref make block 16 32 0 27 heads=2 seq=12
	run timeout 20 collx-tp --layer block --mode ring --ulysses 2 \
	    -m w.safetensors -i X.npy
	[ "$status" -eq 2 ]
	[ "${lines[0]}" = "collx-tp: --mode usp and --ulysses U go together" ]
	run timeout 20 collx-tp --layer mlp --mode ring -m w.safetensors -i X.npy
	[ "$status" -eq 2 ]
	echo "$output"
	[ "${lines[0]}" = "collx-tp: --mode ring goes with --layer block" ]
}

@test "--check: ring and zigzag match the serial layer" {
	ref make block 16 32 0 28 heads=2 seq=24
	run tp 3 --layer block --mode zigzag -m w.safetensors -i X.npy --check \
	    --causal --backward --grad-output DY.npy
	[ "$status" -eq 0 ]
	run tp 4 --layer block --mode ring -m w.safetensors -i X.npy --check \
	    --backward --grad-output DY.npy
	[ "$status" -eq 0 ]
}

@test "the PyTorch ring peer (float64) equals torch's whole block, and collx-tp equals the peer" {
	PEER=$COLLX_ROOT/examples/peers/torch_ring.py
	ref make block 24 48 0 31 heads=2 seq=24 batch=2 nobias
	for a in "3 zigzag causal" "4 ring"; do
		set -- $a
		mkdir p$1
		cp w.safetensors X.npy DY.npy p$1/
		timeout 120 "$PY" "$PEER" check p$1 $1 ${3:-} $([ $2 = zigzag ] && echo zigzag)
		echo "check block p$1 ${3:-}" >>batch
		fb $1 block $2 ${3:+--causal} ${3:-}
		timeout 60 "$PY" "$PEER" same $d p$1
	done
	batch_ok
	# the comparison can fail: ring output against the zigzag causal peer's
	if timeout 60 "$PY" "$PEER" same $d p3; then false; fi
}

@test "--trace: every rank's compute and transfers as Chrome trace JSON that collx-plot draws" {
	ref make block 16 32 0 38 heads=2 seq=12
	tp 3 --layer block --mode zigzag --causal -m w.safetensors -i X.npy \
	    --backward --grad-output DY.npy --trace tr.json
	timeout 30 "$PY" - tr.json <<'PY'
import json, sys
ev = json.load(open(sys.argv[1]))["traceEvents"]
names = {e["tid"]: e["args"]["name"] for e in ev if e["ph"] == "M" and e["name"] == "thread_name"}
assert names == {2 * r + l: "rank %d %s" % (r, ("compute", "transfers")[l])
                 for r in range(3) for l in range(2)}, names
x = [e for e in ev if e["ph"] == "X"]
for r in range(3):
    mine = [e for e in x if e["tid"] // 2 == r]
    # each ring step: the attention on the compute track, the K/V (dK/dV)
    # transfer beside it on the transfers track, both in forward and backward
    # (forward: K/V in the first P-1 steps; backward also the dK/dV of
    # the ranks before in the last P-1, so every step)
    for name, cat, nsend in (("fwd ring attention", "forward", 2),
                             ("bwd ring attention", "backward", 3)):
        comp = [e for e in mine if e["name"] == name and e["tid"] % 2 == 0]
        send = [e for e in mine if e["name"] == name and e["tid"] % 2 == 1]
        assert len(comp) == 3 and all(e["cat"] == cat for e in comp), (r, name, comp)
        assert len(send) == nsend and all(e["cat"] == "send" for e in send), (r, name, send)
        # a step's transfer starts with its compute
        assert sorted(e["ts"] for e in send) == sorted(e["ts"] for e in comp)[:nsend]
    # the P dK/dV sends that run beside the next step, and the receive of
    # this rank's own block's, home
    assert len([e for e in mine if e["name"] == "bwd ring dK dV" and e["tid"] % 2]) == 4
    assert all(e["dur"] >= 0 and e["ts"] >= 0 for e in mine)
    assert any(e["cat"] == "send" and "allreduce" in e["name"] for e in mine)
PY
	collx-plot --kind pipeline --step all -o tr.png tr.json
	[ -s tr.png ]
	# its tracks are ranks' compute and transfers, not pipeline stages
	collx-plot --kind pipeline --step all -o tr.svg tr.json
	grep -q 'rank: compute, transfers' tr.svg
	grep -q 'collx-tp timeline, 6 tracks' tr.svg
	if grep -q 'pipeline stage' tr.svg; then false; fi
	# serial: this rank's compute alone
	collx-tp --layer block --mode serial -m w.safetensors -i X.npy --trace one.json
	grep -q '"name":"fwd","cat":"forward"' one.json
}

@test "a rank killed mid-run: the other exits 1 at once, naming the peer (ring transfers, overlapped matmuls)" {
	ref make block 16 32 0 39 heads=2 seq=64
	for m in zigzag "sp --overlap ring"; do
		# Each iteration also gathers the outputs and sums the weight
		# gradients, so a kill lands in the ring's exchange only most
		# of the time: up to four kills, until one does. A ring
		# failure labelled as another collective never passes.
		for try in 1 2 3 4; do
			port=$(free_port)
			for r in 0 1; do
				collx-tp -q --rank $r --world-size 2 \
				    --master 127.0.0.1:$port --timeout 10 \
				    --layer block --mode $m -m w.safetensors \
				    -i X.npy --backward --grad-output DY.npy \
				    --iters 1000000 2>r$r.err &
				eval p$r=\$!
			done
			sleep 2
			kill -9 "$p1"
			s=$(date +%s)
			rc=0
			wait "$p0" || rc=$?
			echo "# $m, try $try: rank 0 exit $rc after $(($(date +%s) - s)) s: $(cat r0.err)"
			[ "$rc" -eq 1 ]
			[ $(($(date +%s) - s)) -le 10 ]
			grep -q "^collx-tp: rank 0: peer rank 1 (127.0.0.1:[0-9]*) closed the connection" r0.err
			if [ "$m" != zigzag ]; then
				break
			fi
			# named for the ring's exchange, not the group's last
			# collective
			if grep -q "ring attention \(forward\|backward\)" r0.err; then
				break
			fi
			[ "$try" -lt 4 ]
		done
	done
}
