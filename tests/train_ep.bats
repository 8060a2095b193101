#!/usr/bin/env bats
# collx-train --ep X --dispatch alltoall|allgather: the experts of each
# MoE block over X consecutive DP replicas. Without capacity the trained
# weights and the loss CSV equal single-process training (collx-dp on one
# rank) within 1e-5, for --ep 2 alone and with dp4, tp2 and pp2 (ZeRO:
# train_ep_zero.bats);
# with capacity the drops are those of the independent float64 PyTorch
# MoE of examples/peers/torch_moe.py cutting each replica's share into the
# same micro-batches; the EP rows of --timing carry the bytes the
# allgather dispatch sends by its closed form; settings that do not fit
# are exit 3 on every rank naming the numbers, before any data moves.

load lib/common
load lib/moe

setup() {
	moe_setup
	# vocab 32, d 8, 3 layers of 2 heads, seq 6; top-2 of 4 experts
	timeout 10 collx-dp --init gpt --dims 32,8,3,2,6 --seed 6 \
	    --experts 4 --topk 2 -o m.safetensors
}

teardown() {
	common_teardown
}

# usage: single: the single-process run, ref.safetensors and ref.csv
single() {
	timeout 60 collx-dp -q -m m.safetensors --data tok.npy --batch 8 \
	    --steps 3 --lr 0.5 -o ref.safetensors --loss-csv ref.csv
}

# usage: ep_run WORLD [collx-train options]: t.safetensors, l.csv
ep_run() {
	timeout 120 collx-run -n "$1" --timeout 30 -- collx-train -q "${@:2}" \
	    -m m.safetensors --data tok.npy --batch 8 --steps 3 --lr 0.5 \
	    -o t.safetensors --loss-csv l.csv
}

# usage: same_as_single WHAT: t.safetensors and l.csv against the
# single-process run: every tensor and each step's loss within 1e-5, the
# moe columns alike
same_as_single() {
	run collx-tensor diff t.safetensors ref.safetensors --rtol 1e-5 \
	    --atol 1e-5
	echo "$1: $output" | grep "out of tolerance" | grep -v " 0 of " || true
	[ "$status" -eq 0 ]
	"$PY" - "$1" <<'EOF'
import csv, sys
got = list(csv.DictReader(open("l.csv")))
ref = list(csv.DictReader(open("ref.csv")))
assert len(got) == len(ref) == 3, (sys.argv[1], len(got))
for g, r in zip(got, ref):
    assert abs(float(g["loss"]) - float(r["loss"])) <= 1e-5, (sys.argv[1], g, r)
    assert g["moe_dropped"] == r["moe_dropped"] == "0", (sys.argv[1], g, r)
    assert abs(float(g["moe_imbalance"]) - float(r["moe_imbalance"])) < 1e-6, (sys.argv[1], g, r)
EOF
}

@test "--ep 2 equals single-process training, alltoall and allgather (capacity 0)" {
	single
	for how in alltoall allgather; do
		ep_run 2 --dp 2 --ep 2 --dispatch $how
		same_as_single "dp2 ep2 $how"
	done
	# the default dispatch is alltoall
	ep_run 2 --dp 2 --ep 2 --timing tm.csv
	same_as_single "dp2 ep2"
	grep -q ",dispatch,alltoall," tm.csv
}

@test "dp4 x ep2, ep2 x tp2 and ep2 x pp2 equal single-process training, both dispatches" {
	single
	for how in alltoall allgather; do
		ep_run 4 --dp 4 --ep 2 --dispatch $how
		same_as_single "dp4 ep2 $how"
		ep_run 4 --dp 2 --tp 2 --ep 2 --dispatch $how
		same_as_single "dp2 tp2 ep2 $how"
		ep_run 4 --dp 2 --pp 2 --ep 2 --microbatches 2 --dispatch $how
		same_as_single "dp2 pp2 ep2 $how"
	done
}

@test "divided experts: each rank's parameter bytes are the non-expert ones and E/X of the experts' (closed form from the model file)" {
	# usage: bytes_of N OPTIONS: every rank's "parameters B bytes" of -v
	bytes_of() {
		timeout 120 collx-run -n "$1" --timeout 30 -- collx-train -v \
		    "${@:2}" -m m.safetensors --data tok.npy --batch 8 \
		    --steps 1 --lr 0.5 2>&1 | sed -n \
		    's/^collx-train: rank \([0-9]*\): parameters \([0-9]*\) bytes$/\1 \2/p' |
		    sort -n
	}
	bytes_of 2 --dp 2 --ep 2 >ep2.txt
	bytes_of 4 --dp 4 --ep 2 --dispatch allgather >dp4ep2.txt
	bytes_of 2 --dp 2 >dp2.txt
	# ZeRO divides them too (train_ep_zero.bats has its state)
	bytes_of 2 --dp 2 --ep 2 --zero 1 >zero1.txt
	# AdamW's two moments and the gradients: as divided as the parameters
	timeout 120 collx-run -n 2 --timeout 30 -- collx-train -v --dp 2 \
	    --ep 2 --optimizer adamw -m m.safetensors --data tok.npy \
	    --batch 8 --steps 1 2>&1 | sed -n \
	    's/^collx-train: rank [01]: zero 0: optimizer state \([0-9]*\) bytes, reduced gradients \([0-9]*\) bytes$/\1 \2/p' \
	    >adamw.txt
	"$PY" - <<'EOF'
from collpy import load_st
t, _ = load_st("m.safetensors")
every = sum(v.size for v in t.values())
experts = sum(v.size for k, v in t.items() if ".mlp.experts." in k)
assert experts > 0 and experts % 4 == 0
divided = 4 * (every - experts + experts // 2)
for name, n, want in (("ep2.txt", 2, divided), ("dp4ep2.txt", 4, divided),
                      ("dp2.txt", 2, 4 * every), ("zero1.txt", 2, divided)):
    got = [l.split() for l in open(name)]
    assert [int(r) for r, _ in got] == list(range(n)), (name, got)
    assert all(int(b) == want for _, b in got), (name, got, want)
got = [[int(b) for b in l.split()] for l in open("adamw.txt")]
assert got == [[2 * divided, divided]] * 2, (got, divided)
EOF
}

@test "divided experts: checkpoints hold the whole model; ep2 -> ep1 and ep1 -> dp4 x ep2 resume as one unbroken run (AdamW)" {
	opts="--data tok.npy --batch 8 --lr 0.01 --optimizer adamw"
	timeout 60 collx-dp -q -m m.safetensors $opts --steps 6 \
	    -o ref.safetensors
	# usage: ckrun N [collx-train options]
	ckrun() {
		timeout 120 collx-run -n "$1" --timeout 30 -- collx-train -q \
		    "${@:2}" $opts
	}
	ckrun 2 --dp 2 --ep 2 -m m.safetensors --steps 3 --checkpoint ep2.ck
	ckrun 2 --dp 2 -m m.safetensors --steps 3 --checkpoint dp2.ck
	# the same model and moments, whichever mesh saved them
	collx-tensor diff ep2.ck dp2.ck --rtol 1e-5 --atol 1e-5 >diff.txt
	[ "$(grep -c '^optim\.[mv]\..*mlp\.experts\.3\.fc2\.weight:' diff.txt)" -eq 6 ]
	ckrun 2 --dp 2 --resume ep2.ck --steps 6 -o a.safetensors
	collx-tensor diff a.safetensors ref.safetensors --rtol 1e-5 --atol 1e-5
	ckrun 4 --dp 4 --ep 2 --resume dp2.ck --steps 6 -o b.safetensors
	collx-tensor diff b.safetensors ref.safetensors --rtol 1e-5 --atol 1e-5
	for pp in "--tp 2" "--pp 2 --microbatches 2"; do
		ckrun 4 --dp 2 $pp --ep 2 -m m.safetensors --steps 3 \
		    --checkpoint x.ck
		collx-tensor diff x.ck dp2.ck --rtol 1e-5 --atol 1e-5 >/dev/null
	done
}

@test "with capacity: PyTorch's drops per micro-batch of a replica, both dispatches" {
	need "python3 torch" "$PY" -c 'import torch'
	timeout 10 collx-dp --init gpt --dims 32,8,3,2,6 --seed 8 --experts 4 \
	    --topk 2 --capacity 0.75 -o c.safetensors
	# 9 samples: replicas of 5 and 4, micro-batches of 3, 2 and 2, 2
	timeout 60 "$PY" "$REF" train c.safetensors tok.npy 9 3 sgd 0.5 2 ref 2
	for how in alltoall allgather; do
		timeout 120 collx-run -n 4 --timeout 30 -- collx-train -q \
		    --dp 2 --pp 2 --ep 2 --dispatch $how -m c.safetensors \
		    --data tok.npy --batch 9 --microbatches 2 --steps 3 \
		    --lr 0.5 -o t.safetensors --loss-csv l.csv
		collx-tensor diff t.safetensors ref.safetensors --rtol 1e-5 \
		    --atol 1e-5 >/dev/null
		"$PY" - <<'EOF'
import csv
got = list(csv.DictReader(open("l.csv")))
ref = list(csv.DictReader(open("ref.csv")))
assert len(got) == len(ref) == 3
for g, r in zip(got, ref):
    # top-2, 3 MoE blocks
    n = int(g["tokens"]) * 2 * 3
    assert round(float(g["moe_dropped"]) * n) == int(r["dropped"]), (g, r)
    assert abs(float(g["loss"]) - float(r["loss"])) <= 1e-5, (g, r)
    assert abs(float(g["moe_imbalance"]) - float(r["imbalance"])) < 1e-5, (g, r)
EOF
	done
	# the capacity did drop assignments
	[ "$(cut -d, -f3 ref.csv | grep -vc '^0$')" -gt 1 ]
}

@test "the ep timing rows: allgather's bytes by their closed form; alltoall's fewer at top-1 of 4" {
	single
	ep_run 2 --dp 2 --ep 2 --dispatch allgather --timing ag.csv
	# per MoE block and micro-batch of n = 4 samples x 6 tokens, d 8,
	# E 4, to the one other rank: dispatch the token count (4 B), x and p
	# gathered (n(d+E) floats) and backward dy gathered (n d); combine
	# the outputs reduce-scattered (n d) and backward dx with d/dp
	# (n(d+E)); 3 blocks
	"$PY" - <<'EOF'
import csv
rows = [r for r in csv.DictReader(open("ag.csv")) if r["axis"] == "ep"]
n, d, E = 24, 8, 4
want = {"dispatch": 3 * (4 + 4 * (n * (d + E) + n * d)),
        "combine": 3 * 4 * (n * d + n * (d + E))}
assert len(rows) == 2 * 2 * 3, len(rows)  # 2 ranks, 2 phases, 3 steps
for r in rows:
    assert r["algo"] == "allgather", r
    assert int(r["bytes"]) == want[r["op"]], (r["op"], r["bytes"], want)
    assert float(r["seconds"]) > 0, r
EOF
	timeout 10 collx-dp --init gpt --dims 32,8,3,2,6 --seed 6 \
	    --experts 4 -o m.safetensors
	ep_run 2 --dp 2 --ep 2 --timing a2a.csv
	ep_run 2 --dp 2 --ep 2 --timing ag1.csv --dispatch allgather
	a2a=$(awk -F, '$0 ~ /,dispatch,/ { print $8; exit }' a2a.csv)
	ag=$(awk -F, '$0 ~ /,dispatch,/ { print $8; exit }' ag1.csv)
	[ "$a2a" -gt 0 ]
	[ "$a2a" -lt "$ag" ]
}

@test "settings --ep does not fit: exit 3 on every rank naming the numbers, nothing written" {
	timeout 10 collx-dp --init gpt --dims 32,8,2,2,6 --seed 5 --experts 3 \
	    -o e3.safetensors
	run timeout 30 collx-run -n 2 --timeout 10 -- collx-train --dp 2 \
	    --ep 2 -m e3.safetensors --data tok.npy --batch 4 --steps 1 \
	    -o t.safetensors
	[ "$status" -eq 3 ]
	[ "$(echo "$output" | grep -c "rank .: --ep 2: the model's 3 experts are not divisible by 2")" -eq 2 ]
	run timeout 30 collx-run -n 3 --timeout 10 -- collx-train --dp 3 \
	    --ep 2 -m m.safetensors --data tok.npy --batch 6 --steps 1 \
	    -o t.safetensors
	[ "$status" -eq 3 ]
	[ "$(echo "$output" | grep -c "rank .: --ep 2 does not divide the 3 data-parallel replicas")" -eq 3 ]
	"$PY" - <<'EOF'
from collpy import load_st, save_st
t, meta = load_st("m.safetensors")
meta["moe.topk"] = "5"
save_st("topk.safetensors", t, meta)
EOF
	run timeout 30 collx-run -n 2 --timeout 10 -- collx-train --dp 2 \
	    --ep 2 -m topk.safetensors --data tok.npy --batch 4 --steps 1 \
	    -o t.safetensors
	[ "$status" -eq 3 ]
	[ "$(echo "$output" | grep -c "topk 5 is above the 4 experts")" -eq 2 ]
	timeout 10 collx-dp --init gpt --dims 32,8,2,2,6 --seed 5 \
	    -o plain.safetensors
	run timeout 30 collx-run -n 2 --timeout 10 -- collx-train --dp 2 \
	    --ep 2 -m plain.safetensors --data tok.npy --batch 4 --steps 1 \
	    -o t.safetensors
	[ "$status" -eq 3 ]
	[ "$(echo "$output" | grep -c "rank .: --ep 2: the model has no experts")" -eq 2 ]
	[ ! -e t.safetensors ]
	run timeout 10 collx-train --ep 2 --dispatch scatter -m m.safetensors \
	    --data tok.npy --batch 4 --steps 1
	[ "$status" -eq 2 ]
	[[ "$output" == *"--dispatch: want alltoall or allgather, not 'scatter'"* ]]
	run timeout 10 collx-train --ep 2 --sync-every 2 -m m.safetensors \
	    --data tok.npy --batch 4 --steps 1
	[ "$status" -eq 2 ]
	[[ "$output" == *"--ep with --sync-every"* ]]
}

@test "the PyTorch expert-parallel peer (torch_ep.py) trains the same model: its first and last losses are collx-train --ep 2's" {
	need "python3 torch" "$PY" -c 'import torch.distributed'
	text=/usr/share/common-licenses/GPL-3
	[ -r $text ] || skip "no $text"
	timeout 10 collx-dp --init gpt --dims 256,32,2,2,16 --seed 3 \
	    --experts 4 --topk 2 -o g.safetensors
	timeout 120 collx-run -n 2 --timeout 30 -- collx-train -q --dp 2 \
	    --ep 2 -m g.safetensors --data $text --batch 8 --steps 4 \
	    --optimizer adamw --lr 1e-3 --loss-csv l.csv
	run timeout 120 collx-run -n 2 --timeout 30 -- "$PY" \
	    "$COLLX_ROOT/examples/peers/torch_ep.py" g.safetensors $text 8 4 1e-3
	[ "$status" -eq 0 ]
	line=$(echo "$output" | grep "^torch ep 2: median step")
	"$PY" - "$line" <<'PYEOF'
import csv, re, sys
m = re.search(r"loss ([0-9.]+), step 0 loss ([0-9.]+)", sys.argv[1])
last, first = float(m.group(1)), float(m.group(2))
rows = list(csv.DictReader(open("l.csv")))
assert abs(float(rows[0]["loss"]) - first) < 1e-5, (rows[0], first)
assert abs(float(rows[-1]["loss"]) - last) < 1e-5, (rows[-1], last)
# the steps moved the loss, so the comparison covers the updates
assert abs(last - first) > 1e-3, (first, last)
PYEOF
}

@test "bench-ep.sh end to end (tiny, one round): the table's speed-ups are its steps' quotients, collx's and the peer's losses agree, allgather's bytes are collx(7)'s" {
	need "python3 torch" "$PY" -c 'import torch.distributed'
	[ -r /usr/share/common-licenses/GPL-3 ] || skip "no GPL-3 text"
	run env STEPS=3 BATCH=4 D=32 timeout 300 "$COLLX_ROOT/examples/bench-ep.sh" 1
	[ "$status" -eq 0 ]
	echo "$output" | grep '^| [48] |' >table.txt
	[ "$(wc -l <table.txt)" -eq 2 ]
	"$PY" - <<'PYEOF'
for line in open("table.txt"):
    f = [c.strip() for c in line.strip().strip("|").split("|")]
    E, a, t, g = int(f[0]), float(f[1]), float(f[2]), float(f[3])
    assert abs(float(f[4].rstrip("x")) - t / a) < 0.01 * t / a + 0.01, f
    assert abs(float(f[5].rstrip("x")) - g / a) < 0.01 * g / a + 0.01, f
    lc, lt = (float(x) for x in f[6].split("/"))
    assert abs(lc - lt) < 1e-5, f
    ba, bg = (int(x) for x in f[7].split("/"))
    # 2 layers; per rank T = 4 / 2 samples x 64 tokens, d 32, f32, X 2
    T, d = 2 * 64, 32
    assert bg == 2 * (T * 4 * (4 * d + 2 * E) + 4), (bg, f)
    assert ba > 0, f
PYEOF
}

@test "--print-mesh --ep 2: the EP groups, two consecutive replicas of each stage and shard; a D it does not divide is exit 3" {
	run timeout 10 collx-train --print-mesh --world-size 16 --dp 4 --tp 2 \
	    --pp 2 --ep 2
	[ "$status" -eq 0 ]
	# rank = (pp*4 + dp)*2 + tp: stage 0 shard 0 replicas 0,1 -> 0 2,
	# replicas 2,3 -> 4 6; shard 1 -> 1 3, 5 7; stage 1 adds 8
	[ "${lines[-1]}" = "ep groups of 2: [0 2] [4 6] [1 3] [5 7] [8 10] [12 14] [9 11] [13 15]" ]
	run timeout 10 collx-train --print-mesh --world-size 3 --dp 3 --ep 2
	[ "$status" -eq 3 ]
	[ "$output" = "collx-train: --ep 2 does not divide the 3 data-parallel replicas (--dp 3)" ]
}

# zb-h1 and schedule files split the backward, but not an MoE block's:
# all of it runs in the block's B pass (collx-pipe(1)).
@test "the auxiliary loss under gpipe, 1f1b, interleaved, zb-h1 (ZeRO 0 and 1) and a schedule file: collx-train dp2 x pp2 x ep2 and collx-pipe train as PyTorch does (capacity and aux, f_e of the global batch)" {
	need "python3 torch" "$PY" -c 'import torch'
	timeout 10 collx-dp --init gpt --dims 32,8,4,2,6 --seed 9 --experts 4 \
	    --topk 2 --capacity 1 --aux-loss 0.05 -o ax.safetensors
	timeout 60 "$PY" "$REF" train ax.safetensors tok.npy 10 3 sgd 0.5 2 ref 2
	for s in gpipe 1f1b interleaved "1f1b --zero 2" zb-h1 \
	    "zb-h1 --zero 1"; do
		for how in alltoall allgather; do
			timeout 120 collx-run -n 4 --timeout 30 -- collx-train \
			    -q --schedule $s --dp 2 --pp 2 --ep 2 \
			    --dispatch $how -m ax.safetensors --data tok.npy \
			    --batch 10 --microbatches 2 --steps 3 --lr 0.5 \
			    -o t.safetensors --loss-csv l.csv \
			    --expert-counts ec.csv
			collx-tensor diff t.safetensors ref.safetensors \
			    --rtol 1e-5 --atol 1e-5 >/dev/null
			paste -d, l.csv ref.csv >both.csv
			"$PY" - <<'PYEOF'
import csv
for r in list(csv.reader(open("both.csv")))[1:]:
    # l.csv's loss (3rd) against ref.csv's (11th: step,loss,dropped,...)
    assert abs(float(r[2]) - float(r[10])) <= 1e-5, r
# each step routes the batch's 10 x 6 tokens to 2 experts each in every
# one of the 4 MoE blocks, once (a counting forward counts none)
sums = {}
for r in csv.DictReader(open("ec.csv")):
    k = (r["step"], r["layer"])
    sums[k] = sums.get(k, 0) + int(r["tokens"])
assert sorted(set(sums.values())) == [120] and len(sums) == 12, sums
PYEOF
		done
	done
	# one rank's three micro-batches on 2 and 4 stages, interleaved, and
	# zb-h1 as a file
	timeout 60 "$PY" "$REF" train ax.safetensors tok.npy 10 3 sgd 0.5 1 ref 3
	timeout 10 collx-pipe --print-schedule --format csv --schedule zb-h1 \
	    --microbatches 3 --world-size 2 >zb.csv
	grep -q W zb.csv
	for run in "2 --schedule gpipe" "2 --schedule 1f1b" \
	    "4 --schedule 1f1b" "2 --schedule interleaved" \
	    "2 --schedule zb-h1" "4 --schedule zb-h1" \
	    "2 --schedule-file zb.csv"; do
		set -- $run
		timeout 120 collx-run -n $1 --timeout 30 -- collx-pipe -q \
		    "${@:2}" -m ax.safetensors -i tok.npy --batch 10 \
		    --microbatches 3 --steps 3 --lr 0.5 -o t.safetensors
		collx-tensor diff t.safetensors ref.safetensors --rtol 1e-5 \
		    --atol 1e-5 >/dev/null
	done
}
