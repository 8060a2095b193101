#!/usr/bin/env bats
# collx-pipe and collx-train --schedule interleaved --virtual V: each rank
# holds V chunks of layers (chunk c of rank j is virtual stage c*W + j).
# The printed table and its bubble against Megatron's closed form; mlp,
# block and gpt stacks on 2, 3 and 4 ranks at V = 2 (and 3), M below W,
# not a multiple of W and a multiple, checked against the independent
# float64 PyTorch training of tests/lib/piperef.py; schedule files with
# chunks; checkpoints from and to interleaved runs; the activations held.
# (collx-train's interleaved meshes under TP: tests/train.bats.)
load lib/common
load lib/pipe

REF=$COLLX_ROOT/tests/lib/piperef.py
GPL=/usr/share/common-licenses/GPL-3

# The models, data and references of every test, trained in one process
# (torch loads once): in $R/mlp an mlp of 8 layers, 10 samples; in $R/blk
# causal blocks and a gpt of 8 layers, 8 samples; in $R/wid the mlp of
# varying widths (lib/pipe.bash), plain and with momentum for 6 steps.
setup_file() {
	unset COLLX_TOKEN COLLX_IFNAME COLLX_TIMEOUT COLLX_MASTER COLLX_RANK COLLX_WORLD_SIZE
	export PYTHONPATH=$COLLX_ROOT/tests/lib
	export R=$BATS_FILE_TMPDIR
	mkdir "$R/mlp" "$R/blk" "$R/wid"
	(cd "$R/mlp" && data 10 4 3 1 &&
	    timeout 30 collx-dp --init mlp --dims 4,8,3,8 --seed 1 -o m.safetensors)
	(cd "$R/blk" && data 8 4,8 4,8 3 &&
	    timeout 30 collx-dp --init block --dims 8,2,0,1,8 --seed 4 -o b.safetensors &&
	    timeout 30 collx-dp --init gpt --dims 256,16,8,2,8 --seed 3 -o g.safetensors)
	(cd "$R/wid" && widths && data 10 3 3 11)
	cd "$R" && timeout 120 "$PY" "$REF" \
	    train mlp mlp/m.safetensors mlp/X.npy mlp/Y.npy 10 3 sgd 0.1 \
	    mlp/r.safetensors mlp/r.csv + \
	    train block blk/b.safetensors blk/X.npy blk/Y.npy 8 2 sgd 0.2 \
	    blk/rb.safetensors blk/rb.csv + \
	    train gpt blk/g.safetensors "$GPL" - 8 2 sgd 0.5 \
	    blk/rg.safetensors blk/rg.csv + \
	    train mlp wid/w.safetensors wid/X.npy wid/Y.npy 10 3 sgd 0.1 \
	    wid/r.safetensors wid/r.csv + \
	    train mlp wid/w.safetensors wid/X.npy wid/Y.npy 10 6 sgd 0.05 0 0.9 \
	    wid/rm.safetensors wid/rm.csv
}

setup() {
	common_setup
}

teardown() {
	common_teardown
}

# Worked by hand from the order (groups of W micro-batches through chunk 0
# then 1; rank 0 warms up with (V-1)W + 2(W-1) = 4 forwards, rank 1 with
# 2; then a forward and a backward in turn): 4 idle of 36 cells, Megatron's
# (W-1)/(VM) of the ideal time, (W-1)/(VM+W-1) = 1/9 of the step.
@test "--print-schedule: interleaved M=4 W=2 V=2 cell by cell, Megatron's bubble; M not a multiple of W, M < W" {
	run timeout 10 collx-pipe --print-schedule --schedule interleaved \
	    --virtual 2 --microbatches 4 --world-size 2 -v
	[ "$status" -eq 0 ]
	[ "$output" = "$(printf '%s\n' \
	    '# interleaved, M=4 micro-batches, W=2 stages, V=2 chunks: 18 clocks, bubble (W-1)/(VM+W-1) = 0.1111' \
	    'clock  s0      s1' \
	    '0      F0:0    .' \
	    '1      F1:0    F0:0' \
	    '2      F0:1    F1:0' \
	    '3      F1:1    F0:1' \
	    '4      F2:0    B0:1' \
	    '5      B0:1    F1:1' \
	    '6      F3:0    B1:1' \
	    '7      B1:1    F2:0' \
	    '8      F2:1    B0:0' \
	    '9      B0:0    F3:0' \
	    '10     F3:1    B1:0' \
	    '11     B1:0    F2:1' \
	    '12     .       B2:1' \
	    '13     B2:1    F3:1' \
	    '14     .       B3:1' \
	    '15     B3:1    B2:0' \
	    '16     B2:0    B3:0' \
	    '17     B3:0    .' \
	    'bubble 0.1111 (4 idle of 36 cells)')" ]
	# W=4, M=8, V=2: 2(VM+W-1) = 38 clocks, 2(W-1) idle on each rank
	run timeout 10 collx-pipe --print-schedule --schedule interleaved \
	    --microbatches 8 --world-size 4
	[ "${lines[39]}" = "bubble 0.1579 (24 idle of 152 cells)" ]
	# M = 3 on 2: no closed form, the table's, below 1F1B's 1/4
	run timeout 10 collx-pipe --print-schedule --schedule interleaved \
	    --microbatches 3 --world-size 2 -v
	[ "${lines[0]}" = "# interleaved, M=3 micro-batches, W=2 stages, V=2 chunks: 15 clocks, bubble (the table's) = 0.2000" ]
	# M = 1 < W = 3 at V = 3: every pass of each chunk once, one at a time
	run timeout 10 collx-pipe --print-schedule --schedule interleaved \
	    --virtual 3 --microbatches 1 --world-size 3
	[ "$(grep -o '[FB]0:[0-2]' <<<"$output" | sort | uniq -c | awk '{ print $1 }' | sort -u)" = 3 ]
	[ "${lines[19]}" = "bubble 0.6667 (36 idle of 54 cells)" ]
	run timeout 10 collx-pipe --print-schedule --schedule 1f1b --virtual 2 \
	    --microbatches 2
	[ "$status" -eq 2 ]
	[ "${lines[0]}" = "collx-pipe: --virtual goes with --schedule interleaved (a schedule file names its chunks)" ]
}

# usage: ilv W M V TAG [collx-pipe options...]
ilv() {
	local w=$1 m=$2 v=$3 tag=$4
	shift 4
	pipe "$w" "$tag" --schedule interleaved --virtual "$v" --microbatches "$m" "$@"
	outs+=("t$tag.safetensors" "l$tag.csv")
}

@test "mlp of 8 layers: W 2, 3, 4 at V 2, W 1 and 2 at V 3, M below W, not a multiple and a multiple, a --split of W*V, collx-train's pipeline axis, equal the reference and 1F1B's bytes on W*V stages" {
	cp "$R"/mlp/* .
	outs=()
	for wm in 2:1 2:3 3:4 4:5 4:8; do
		ilv "${wm%:*}" "${wm#*:}" 2 "$wm" -m m.safetensors -i X.npy \
		    -t Y.npy --steps 3 --lr 0.1
	done
	ilv 2 4 2 sp -m m.safetensors -i X.npy -t Y.npy --steps 3 --lr 0.1 \
	    --split 3,1,1,3
	ilv 2 5 3 v3 -m m.safetensors -i X.npy -t Y.npy --steps 3 --lr 0.1
	ilv 1 2 3 one -m m.safetensors -i X.npy -t Y.npy --steps 3 --lr 0.1
	for mesh in "2 --pp 2" "4 --pp 2 --dp 2"; do
		set -- $mesh
		timeout 60 collx-run -n "$1" --timeout 20 -- collx-train \
		    -m m.safetensors -i X.npy -t Y.npy --batch 10 --steps 3 \
		    --lr 0.1 --microbatches 3 "${@:2}" --schedule interleaved \
		    --virtual 2 -o "tt$1.safetensors" --loss-csv "lt$1.csv" -q
		outs+=("tt$1.safetensors" "lt$1.csv")
	done
	timeout 120 "$PY" "$REF" cmp r.safetensors r.csv 1e-5 "${outs[@]}"
	# each micro-batch's gradients add up in 1F1B's order on every layer
	pipe 6 f -m m.safetensors -i X.npy -t Y.npy --steps 3 --lr 0.1 \
	    --microbatches 4
	cmp t3:4.safetensors tf.safetensors
}

@test "causal blocks and a gpt of 8 layers: W 2, 3, 4, V 2, M below and above W, equal the reference" {
	cp "$R"/blk/* .
	outs=()
	for wm in 2:1 3:4 4:5; do
		ilv "${wm%:*}" "${wm#*:}" 2 "b$wm" -m b.safetensors -i X.npy \
		    -t Y.npy --steps 2 --lr 0.2
	done
	bouts=("${outs[@]}") outs=()
	for wm in 2:3 3:2 4:4; do
		ilv "${wm%:*}" "${wm#*:}" 2 "g$wm" -m g.safetensors -i "$GPL" \
		    --batch 8 --steps 2 --lr 0.5
	done
	timeout 120 "$PY" "$REF" cmp rb.safetensors rb.csv 1e-5 "${bouts[@]}" + \
	    cmp rg.safetensors rg.csv 1e-5 "${outs[@]}"
}

@test "mlp of varying widths: interleaved equals the reference; checkpoints from and to interleaved runs" {
	cp "$R"/wid/* .
	outs=()
	ilv 2 3 2 w -m w.safetensors -i X.npy -t Y.npy --steps 3 --lr 0.1
	a=(-i X.npy -t Y.npy --momentum 0.9 --lr 0.05)
	mouts=("${outs[@]}") outs=()
	ilv 2 3 2 full -m w.safetensors "${a[@]}" --steps 6
	timeout 120 "$PY" "$REF" cmp r.safetensors r.csv 1e-5 "${mouts[@]}" + \
	    cmp rm.safetensors rm.csv 1e-5 "${outs[@]}"
	# an interleaved run stopped and resumed: the bytes of one that was
	# not; resumed under 1F1B, and 1F1B's checkpoint resumed interleaved,
	# the same model within rounding
	ilv 2 3 2 half -m w.safetensors "${a[@]}" --steps 3 --checkpoint ck.safetensors
	ilv 2 3 2 res --resume ck.safetensors "${a[@]}" --steps 6
	cmp tfull.safetensors tres.safetensors
	pipe 3 f1 --resume ck.safetensors "${a[@]}" --steps 6 --microbatches 3
	pipe 2 fh -m w.safetensors "${a[@]}" --steps 3 --microbatches 3 \
	    --checkpoint ck1.safetensors
	ilv 2 3 2 res1 --resume ck1.safetensors "${a[@]}" --steps 6
	timeout 60 "$PY" "$COLLX_ROOT/tests/lib/dpref.py" cmp tfull.safetensors \
	    tf1.safetensors 1e-5 1e-6
	timeout 60 "$PY" "$COLLX_ROOT/tests/lib/dpref.py" cmp tfull.safetensors \
	    tres1.safetensors 1e-5 1e-6
}

@test "--schedule-file with chunks: the printed interleaved table trains its bytes; out-of-order chunks, a short --split, an interleaved gpt on one TP-sharded stage are refused" {
	table_rows --schedule interleaved --microbatches 3 --world-size 2 >il.csv
	[ "$(wc -l <il.csv)" -eq 24 ]
	grep -q '^1,6,B1:1$' il.csv
	cmp <(timeout 10 collx-pipe --print-schedule --microbatches 3 \
	    --schedule-file il.csv) <(timeout 10 collx-pipe --print-schedule \
	    --microbatches 3 --world-size 2 --schedule interleaved)
	cp "$R"/mlp/* .
	pipe 2 i -m m.safetensors -i X.npy -t Y.npy --microbatches 3 \
	    --schedule interleaved --steps 2 --lr 0.1
	pipe 2 f -m m.safetensors -i X.npy -t Y.npy --microbatches 3 \
	    --schedule-file il.csv --steps 2 --lr 0.1
	cmp ti.safetensors tf.safetensors
	# rank 0's chunk 1 runs micro-batch 1 before 0, and sends them so to
	# rank 1's chunk 1, which takes 0 first
	sed 's/^0,\([0-9]*\),F\([01]\):1$/0,\1,F_\2:1/; s/F_0:1/F1:1/; s/F_1:1/F0:1/' \
	    il.csv >bad.csv
	run timeout 10 collx-pipe --print-schedule --microbatches 3 \
	    --schedule-file bad.csv
	echo "$output"
	[ "$status" -eq 3 ]
	[[ "$output" == *": rank 1 runs F0:1 where rank 0 runs F1:1 "*"neighbouring ranks take the micro-batches in one order" ]]
	# usage errors, found before any rank talks to another
	run timeout 30 collx-pipe -m m.safetensors -i X.npy -t Y.npy \
	    --microbatches 2 --schedule interleaved --split 2,2 --world-size 2 \
	    --rank 0 --master 127.0.0.1:1
	[ "$status" -eq 2 ]
	[ "${lines[0]}" = "collx-pipe: --split '2,2': want 4 positive layer counts, one per stage" ]
	# an interleaved gpt on one stage under TP would hold the tied
	# embedding twice: refused (exit 3) before the rank talks
	run timeout 10 collx-train -m "$R/blk/g.safetensors" --data "$GPL" \
	    --batch 8 --steps 1 --tp 2 --schedule interleaved --world-size 2 \
	    --rank 1 --master 127.0.0.1:1
	[ "$status" -eq 3 ]
	[ "${lines[0]}" = "collx-train: rank 1: mesh: an interleaved gpt under --tp 2 needs --pp 2 or more (one stage would hold both ends of the tied embedding)" ]
}

# An mlp of 8 equal layers (4 -> 8 -> 3, then 3 -> 8 -> 3): a micro-batch
# of n samples holds n(3 + 2*8) floats per layer (output, fc1 and GELU).
# 1F1B on 2 ranks: rank 0 holds 2 micro-batches of 4 layers; interleaved
# V=2: (V-1)W + 2(W-1) + 1 = 5 chunk micro-batches of 2 layers (rank 0
# warms up with 4 forwards and runs a fifth before its first backward).
@test "peak activations: rank 0 holds (V-1)W + 2W - 1 chunk micro-batches, 5/4 of 1F1B's at W=2, V=2" {
	data 16 4 3 1
	cp "$R"/mlp/m.safetensors .
	pipe 2 f -m m.safetensors -i X.npy -t Y.npy --microbatches 8 --steps 1 \
	    --timing tmf.csv
	pipe 2 i -m m.safetensors -i X.npy -t Y.npy --microbatches 8 --steps 1 \
	    --timing tmi.csv --schedule interleaved --trace tr.json
	peak() { grep "^collx-pipe,step,$1,0," "$2" | awk -F, '{ print $NF }'; }
	per=$((2 * (3 + 2 * 8) * 4))	# bytes of a layer's micro-batch of 2
	[ "$(peak 1f1b tmf.csv)" -eq $((2 * 4 * per)) ]
	# chunk 0 holds 3 of them, chunk 1 (virtual stage 2) 2 with their
	# inputs, 3 floats a sample
	[ "$(peak interleaved tmi.csv)" -eq $((5 * 2 * per + 2 * 2 * 3 * 4)) ]
	# the trace names each chunk's passes
	"$PY" -c '
import json, sys
ev = [e for e in json.load(open("tr.json"))["traceEvents"] if e.get("cat") == "forward"]
names = sorted({(e["tid"], e["name"]) for e in ev})
want = sorted({(j, "F%d:%d" % (i, c)) for j in (0, 1) for i in range(8) for c in (0, 1)})
sys.exit(names != want)'
}

# The table of interleaved 1F1B on paper in examples/results/README.md is what
# examples/pipe-bubble-table.sh interleaved prints from collx-pipe
# --print-schedule, and every cell is the closed form in integers: every
# rank idle 2(W-1) of 2(VM+W-1) clocks.
@test "interleaved's bubble for W = 8, 16, 32, M = W..4W, V = 2 and 4 is (W-1)/(VM+W-1), as the README's table says" {
	rows=$(grep -E '^\| [0-9]+ \| [0-9]+ \| 0\.' "$COLLX_ROOT/examples/results/README.md" |
	    awk -F'|' 'NF == 8')
	[ "$(wc -l <<<"$rows")" -eq 12 ]
	cmp <(printf '%s\n' "$rows") <("$COLLX_ROOT/examples/pipe-bubble-table.sh" \
	    interleaved | tail -n +3)
	sed 's/^| //; s/ |$//' <<<"$rows" | awk -F' [|] ' '{ w = $1; m = $2
		for (c = 3; c <= 5; c += 2) {
			v = c == 3 ? 2 : 4
			split($c, x, /[ =\/]+/)	# X, I, C
			f = sprintf("%.4f", (w - 1) / (v * m + w - 1))
			if (x[2] != 2 * w * (w - 1) || x[3] != 2 * w * (v * m + w - 1) ||
			    x[1] != f || $(c + 1) != f) {
				print "bad cell " c ": " $0
				bad = 1
			}
		}
		n++ }
		END { exit bad || n != 12 }'
}
