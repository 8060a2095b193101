#!/usr/bin/env bats
# collx-train --ep X under --zero 1 and 2 divides the experts: ZeRO's
# ranges of no expert are cut over the D replicas, the experts' over the
# D/X replicas holding them. Without capacity the trained weights equal
# single-process training (collx-dp on one rank) within 1e-5 on every
# mesh; each rank's parameter, optimizer and gradient bytes of -v are
# their closed forms from the model file; checkpoints hold the whole
# model and resume across ep/zero/mesh changes as one unbroken run.
# Under --zero 3 the experts are cut over all D with the other units and
# the exchanges wait for ZeRO-3's collectives in flight; the same checks.

load lib/common
load lib/moe

setup() {
	moe_setup
	# vocab 32, d 8, 3 layers of 2 heads, seq 6; top-2 of 4 experts:
	# every tensor's floats a multiple of 8
	timeout 10 collx-dp --init gpt --dims 32,8,3,2,6 --seed 6 \
	    --experts 4 --topk 2 -o m.safetensors
}

teardown() {
	common_teardown
}

# usage: zrun WORLD [collx-train options]
zrun() {
	timeout 120 collx-run -n "$1" --timeout 30 -- collx-train -q "${@:2}" \
	    --data tok.npy --batch 8
}

# usage: unbroken: ref6.safetensors, 6 AdamW steps of one process, and
# dp2.ck, the first 3 on 2 replicas
opts="--lr 0.01 --optimizer adamw"
unbroken() {
	timeout 60 collx-dp -q -m m.safetensors --data tok.npy --batch 8 \
	    $opts --steps 6 -o ref6.safetensors
	zrun 2 --dp 2 -m m.safetensors $opts --steps 3 --checkpoint dp2.ck
}

# usage: same WHAT GOT REF: every tensor within 1e-5
same() {
	run collx-tensor diff "$2" "$3" --rtol 1e-5 --atol 1e-5
	echo "$1: $output" | grep "out of tolerance" | grep -v " 0 of " || true
	[ "$status" -eq 0 ]
}

@test "--zero 1 and 2 with --ep 2 equal single-process training: dp2, dp4, dp2 x tp2, dp2 x pp2, both dispatches" {
	timeout 60 collx-dp -q -m m.safetensors --data tok.npy --batch 8 \
	    --steps 3 --lr 0.5 -o ref.safetensors
	for z in 1 2; do
		for mesh in "2 --dp 2" "4 --dp 4" "4 --dp 2 --tp 2" \
		    "4 --dp 2 --pp 2 --microbatches 2"; do
			set -- $mesh
			for how in alltoall allgather; do
				zrun $1 "${@:2}" --ep 2 --zero $z --dispatch \
				    $how -m m.safetensors --steps 3 --lr 0.5 \
				    -o t.safetensors
				same "zero $z $mesh $how" t.safetensors \
				    ref.safetensors
			done
		done
	done
}

@test "--zero 1 and 2 with --ep (AdamW): each rank's parameters, optimizer state and gradients by their closed forms" {
	# usage: bytes_of N OPTIONS: per rank "rank params optim grads"
	bytes_of() {
		timeout 120 collx-run -n "$1" --timeout 30 -- collx-train -v \
		    "${@:2}" --optimizer adamw -m m.safetensors --data tok.npy \
		    --batch 8 --steps 1 >v.txt 2>&1
		"$PY" - <<'PYEOF'
import re
p, o = {}, {}
for l in open("v.txt"):
    m = re.match(r"collx-train: rank (\d+): parameters (\d+) bytes$", l)
    if m:
        p[int(m.group(1))] = int(m.group(2))
    m = re.match(r"collx-train: rank (\d+): zero \d: optimizer state (\d+) bytes, reduced gradients (\d+) bytes$", l)
    if m:
        o[int(m.group(1))] = (int(m.group(2)), int(m.group(3)))
for r in sorted(p):
    print(r, p[r], *o[r])
PYEOF
	}
	bytes_of 2 --dp 2 --ep 2 --zero 1 >z1dp2.txt
	bytes_of 4 --dp 4 --ep 2 --zero 1 >z1dp4.txt
	bytes_of 4 --dp 4 --ep 2 --zero 2 >z2dp4.txt
	bytes_of 4 --dp 4 --ep 4 --zero 2 --dispatch allgather >z2ep4.txt
	"$PY" - <<'PYEOF'
from collpy import load_st
t, _ = load_st("m.safetensors")
P = sum(v.size for v in t.values())
Pe = sum(v.size for k, v in t.items() if ".mlp.experts." in k)
Pn = P - Pe
assert Pe > 0 and all(v.size % 8 == 0 for v in t.values())
# ranges of no expert cut over D, the experts' (Pe/X each) over D/X: each
# rank's share is Pn/D + (Pe/X)/(D/X) floats, AdamW two moments of it
for name, D, X, z in (("z1dp2.txt", 2, 2, 1), ("z1dp4.txt", 4, 2, 1),
                      ("z2dp4.txt", 4, 2, 2), ("z2ep4.txt", 4, 4, 2)):
    rows = [[int(x) for x in l.split()] for l in open(name)]
    assert [r[0] for r in rows] == list(range(D)), (name, rows)
    held = 4 * (Pn + Pe // X)
    share = Pn // D + (Pe // X) // (D // X)
    want = [held, 2 * 4 * share, held if z == 1 else 4 * share]
    for r in rows:
        assert r[1:] == want, (name, r, want)
PYEOF
}

@test "--zero 1 and 2 with --ep: checkpoints hold the whole model and resume across ep, zero and mesh as one unbroken run (AdamW)" {
	unbroken
	zrun 4 --dp 4 --ep 2 --zero 1 -m m.safetensors $opts --steps 3 \
	    --checkpoint z1.ck
	zrun 4 --dp 2 --pp 2 --microbatches 2 --ep 2 --zero 2 \
	    -m m.safetensors $opts --steps 3 --checkpoint z2.ck
	# the same model and moments, whichever mesh saved them
	for ck in z1.ck z2.ck; do
		collx-tensor diff $ck dp2.ck --rtol 1e-5 --atol 1e-5 >diff.txt
		[ "$(grep -c '^optim\.[mv]\..*mlp\.experts\.[0-3]\.fc2\.weight:' diff.txt)" -eq 24 ]
	done
	zrun 4 --dp 4 --ep 2 --zero 2 --resume dp2.ck $opts --steps 6 \
	    -o a.safetensors
	same "dp2 -> dp4 ep2 zero2" a.safetensors ref6.safetensors
	zrun 4 --dp 2 --tp 2 --ep 2 --zero 1 --resume z2.ck $opts --steps 6 \
	    -o b.safetensors
	same "pp2 ep2 zero2 -> tp2 ep2 zero1" b.safetensors ref6.safetensors
	zrun 2 --dp 2 --resume z1.ck $opts --steps 6 -o c.safetensors
	same "dp4 ep2 zero1 -> dp2" c.safetensors ref6.safetensors
	zrun 4 --dp 4 --ep 4 --zero 2 --resume z1.ck $opts --steps 6 \
	    -o d.safetensors
	same "dp4 ep2 zero1 -> dp4 ep4 zero2" d.safetensors ref6.safetensors
}

@test "--zero 3 with --ep 2 (experts cut over all D with the rest): dp2, dp4 (prefetch 2, HSDP), dp2 x tp2, dp2 x pp2 (1f1b, zb-h1) as single-process training; capacity and aux as float64 PyTorch; checkpoints across zero stages" {
	timeout 60 collx-dp -q -m m.safetensors --data tok.npy --batch 8 \
	    --steps 3 --lr 0.5 -o ref.safetensors
	for mesh in "2 --dp 2" "4 --dp 4" "4 --dp 2 --tp 2" \
	    "4 --dp 2 --pp 2 --microbatches 2" \
	    "4 --dp 2 --pp 2 --microbatches 2 --schedule zb-h1" \
	    "4 --dp 4 --prefetch 2" \
	    "4 --dp 4 --shard-group host --ranks-per-host 2"; do
		set -- $mesh
		for how in alltoall allgather; do
			zrun $1 "${@:2}" --ep 2 --zero 3 --dispatch $how \
			    -m m.safetensors --steps 3 --lr 0.5 \
			    -o t.safetensors
			same "zero 3 $mesh $how" t.safetensors ref.safetensors
		done
	done
	need "python3 torch" "$PY" -c 'import torch'
	timeout 10 collx-dp --init gpt --dims 32,8,4,2,6 --seed 9 --experts 4 \
	    --topk 2 --capacity 1 --aux-loss 0.05 -o ax.safetensors
	timeout 60 "$PY" "$REF" train ax.safetensors tok.npy 10 3 sgd 0.5 2 ref 2
	for how in alltoall allgather; do
		timeout 120 collx-run -n 4 --timeout 30 -- collx-train -q \
		    --schedule gpipe --zero 3 --dp 2 --pp 2 --ep 2 \
		    --dispatch $how -m ax.safetensors --data tok.npy \
		    --batch 10 --microbatches 2 --steps 3 --lr 0.5 \
		    -o t.safetensors
		same "zero 3 aux $how" t.safetensors ref.safetensors
	done
	unbroken
	zrun 4 --dp 4 --ep 2 --zero 3 -m m.safetensors $opts --steps 3 \
	    --checkpoint z3.ck
	collx-tensor diff z3.ck dp2.ck --rtol 1e-5 --atol 1e-5 >/dev/null
	zrun 4 --dp 4 --ep 2 --zero 2 --resume z3.ck $opts --steps 6 \
	    -o a.safetensors
	same "dp4 ep2 zero3 -> zero2" a.safetensors ref6.safetensors
	zrun 4 --dp 2 --pp 2 --microbatches 2 --schedule zb-h1 --ep 2 \
	    --zero 3 --resume dp2.ck $opts --steps 6 -o b.safetensors
	same "dp2 -> pp2 zb-h1 ep2 zero3" b.safetensors ref6.safetensors
}
