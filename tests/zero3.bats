#!/usr/bin/env bats
# collx-dp --zero 3 (fully sharded data parallelism): mlp and block stacks
# and a gpt under SGD with momentum and AdamW on 2, 3 and 4 ranks with
# uneven batch splits, every --prefetch and --reshard-after-forward,
# checked against the independent float64 PyTorch training
# (tests/lib/piperef.py) and against --zero 0; the bytes a step sends
# against their closed form; the parameter bytes each rank holds against
# its bound; -v and the timing rows; checkpoints streamed from the
# slices and resumed across levels and worlds; bad input.
load lib/common
load lib/train

setup() {
	train_env
}

teardown() {
	common_teardown
}

# usage: dp WORLD TAG collx-dp-options...: model tTAG, losses lTAG
dp() {
	timeout 60 collx-run -n "$1" --timeout 20 -- collx-dp -q \
	    -o "t$2.safetensors" --loss-csv "l$2.csv" "${@:3}"
}

# collx-dp on WORLD ranks of g.safetensors under GNU time's FORMAT, a
# line a rank into OUT (a file per rank: the ranks' standard errors
# interleave). usage: timed WORLD FORMAT OUT collx-dp-options...
timed() {
	rm -f tm.*
	timeout 120 collx-run -n "$1" --timeout 30 -- sh -c \
	    '/usr/bin/time -f "$0" -o "tm.$COLLX_RANK" "$@"' "$2" \
	    "$(command -v collx-dp)" -m g.safetensors --data "$GPL" \
	    --optimizer adamw -q "${@:4}"
	cat tm.* >"$3"
	[ "$(wc -l <"$3")" -eq "$1" ]
}

# TAG's model and losses against the reference REF (r REF.safetensors,
# r REF.csv) and against --zero 0's run Z (within 1e-5).
# usage: same TAG REF Z
same() {
	timeout 60 "$PY" "$REF" cmp "r$2.safetensors" "r$2.csv" 1e-5 \
	    "t$1.safetensors" "l$1.csv" >/dev/null
	timeout 30 "$PY" "$DPREF" cmp "t$1.safetensors" "t$3.safetensors" \
	    1e-5 1e-6 "${SKIP:-}" >/dev/null
	timeout 30 "$PY" "$DPREF" csvcmp "l$1.csv" "l$3.csv" 1e-5 >/dev/null
}

# An mlp stack 5 -> 6 -> 3, 3 -> 6 -> 3, 3 -> 6 -> 3 (57 + 45 + 45 = 147
# parameters: no world here cuts a layer evenly) and a block stack of 2,
# d 8; batch 11 and 9: every world splits them unevenly.
@test "mlp and block stacks, SGD with momentum and AdamW, 2-4 ranks, every prefetch and resharding, equal the PyTorch reference and --zero 0" {
	data 11 5 3 1
	timeout 30 collx-dp --init mlp --dims 5,6,3,3 --seed 1 -o m.safetensors
	mv X.npy mX.npy
	mv Y.npy mY.npy
	data 9 5,8 5,8 2
	timeout 30 collx-dp --init block --dims 8,2,16,0,2 --seed 2 -o b.safetensors
	timeout 300 "$PY" "$REF" train mlp m.safetensors mX.npy mY.npy 11 3 \
	    sgd 0.05 0 0.9 rms.safetensors rms.csv + train mlp m.safetensors \
	    mX.npy mY.npy 11 3 adamw 0.01 rma.safetensors rma.csv + train \
	    block b.safetensors X.npy Y.npy 9 2 sgd 0.1 0 0.9 rbs.safetensors \
	    rbs.csv + train block b.safetensors X.npy Y.npy 9 2 adamw 0.01 \
	    rba.safetensors rba.csv
	M=(-m m.safetensors --data mX.npy --targets mY.npy --batch 11 --steps 3)
	S=(--lr 0.05 --momentum 0.9)
	A=(--optimizer adamw --lr 0.01)
	for w in 2 3 4; do
		dp "$w" "ms$w" "${M[@]}" "${S[@]}"
		dp "$w" "ma$w" "${M[@]}" "${A[@]}"
	done
	dp 2 ms3p1 "${M[@]}" "${S[@]}" --zero 3
	same ms3p1 ms ms2
	dp 3 ms3p0 "${M[@]}" "${S[@]}" --zero 3 --prefetch 0
	same ms3p0 ms ms3
	dp 4 ms3n "${M[@]}" "${S[@]}" --zero 3 --prefetch 3 \
	    --reshard-after-forward no
	same ms3n ms ms4
	dp 2 ma3n "${M[@]}" "${A[@]}" --zero 3 --reshard-after-forward no
	same ma3n ma ma2
	dp 3 ma3p2 "${M[@]}" "${A[@]}" --zero 3 --prefetch 2
	same ma3p2 ma ma3
	dp 4 ma3p1 "${M[@]}" "${A[@]}" --zero 3 --sync ring
	same ma3p1 ma ma4
	B=(-m b.safetensors --data X.npy --targets Y.npy --batch 9 --steps 2)
	dp 3 bs0 "${B[@]}" --lr 0.1 --momentum 0.9
	dp 3 bs3 "${B[@]}" --lr 0.1 --momentum 0.9 --zero 3
	same bs3 bs bs0
	dp 4 ba0 "${B[@]}" "${A[@]}"
	dp 4 ba3 "${B[@]}" "${A[@]}" --zero 3 --prefetch 2
	PIPEREF_SKIP=attn.k.bias SKIP=attn.k.bias same ba3 ba ba0
}

# AdamW divides by sqrt(v): attn.k.bias's exactly-zero gradient is all
# rounding noise (dp.bats's gpt_same), left out of the comparisons.
@test "gpt, AdamW and SGD with momentum, 2-4 ranks: equal the PyTorch reference and --zero 0; a rank without samples still gathers and reduce-scatters" {
	timeout 30 collx-dp --init gpt --dims 256,16,2,2,8 --seed 1 -o g.safetensors
	timeout 300 "$PY" "$REF" train gpt g.safetensors "$GPL" - 6 3 adamw \
	    0.01 rga.safetensors rga.csv + train gpt g.safetensors "$GPL" - 3 \
	    3 sgd 0.1 0 0.9 rgs.safetensors rgs.csv
	G=(-m g.safetensors --data "$GPL" --steps 3)
	A=(--batch 6 --optimizer adamw --lr 0.01)
	S=(--batch 3 --lr 0.1 --momentum 0.9)
	dp 4 ga0 "${G[@]}" "${A[@]}"
	dp 4 ga3 "${G[@]}" "${A[@]}" --zero 3
	export PIPEREF_SKIP=attn.k.bias
	SKIP=attn.k.bias same ga3 ga ga0
	dp 2 ga02 "${G[@]}" "${A[@]}"
	dp 2 ga3n "${G[@]}" "${A[@]}" --zero 3 --prefetch 0 \
	    --reshard-after-forward no
	SKIP=attn.k.bias same ga3n ga ga02
	# batch 3 on 4 ranks: rank 3 has no sample
	dp 4 gs0 "${G[@]}" "${S[@]}"
	dp 4 gs3 "${G[@]}" "${S[@]}" --zero 3 --prefetch 2
	SKIP=attn.k.bias same gs3 gs gs0
}

# --sync ring, every layer a multiple of 4 floats: a ring allreduce sends
# 2 (W-1)/W of a vector's bytes a rank, a ring allgather and reduce-scatter
# (W-1)/W each. A gpt (d 16, vocab 256, seq 8, 2 blocks of 3280 floats,
# embeddings and final LayerNorm 4256: P = 10816) with resharding gathers
# every layer twice (forward, backward) and reduce-scatters it once:
# 3 (W-1)/W, 1.5x plain DP; without resharding it gathers once: 2 (W-1)/W,
# 1.0x. Both also sum the step's loss, as plain DP does: plain DP's bytes
# less its allreduce. A layer whose backward use comes within K + 1 uses
# of its forward one stays whole between them: an mlp stack's last layer
# (a 4 -> 8 -> 4 stack of 3, 76 floats a layer) is gathered once, so its
# step sends (2*3 - 1 + 3) (W-1)/W of a layer's bytes. --wire bf16 and
# f16 halve the gathers' and reduce-scatters' bytes.
@test "bytes a step: 1.5x plain DP's with resharding, 1.0x without, a layer needed next kept, half in bf16 and f16 (closed forms, 2 and 4 ranks)" {
	timeout 30 collx-dp --init gpt --dims 256,16,2,2,8 --seed 1 -o g.safetensors
	data 8 4 4 3
	timeout 30 collx-dp --init mlp --dims 4,8,4,3 --seed 1 -o m.safetensors
	G=(-m g.safetensors --data "$GPL" --batch 4 --steps 2 --sync ring)
	M=(-m m.safetensors --data X.npy --targets Y.npy --batch 8 --steps 2
	    --sync ring)
	# bytes of TAG's steps, checked alike
	sent() {
		[ "$(sed 1d "l$1.csv" | cut -d, -f7 | sort -u | wc -l)" -eq 1 ]
		sed -n 2p "l$1.csv" | cut -d, -f7
	}
	for w in 2 4; do
		dp "$w" "p$w" "${G[@]}"
		dp "$w" "z$w" "${G[@]}" --zero 3
		dp "$w" "k$w" "${G[@]}" --zero 3 --prefetch 0
		dp "$w" "n$w" "${G[@]}" --zero 3 --reshard-after-forward no
		dp "$w" "m$w" "${M[@]}" --zero 3
		dp "$w" "mp$w" "${M[@]}"
		one=$(((w - 1) * 10816 * 4 / w))
		loss=$(($(sent "p$w") - 2 * one))
		[ "$loss" -ge 0 ]
		[ "$loss" -lt 64 ]
		[ "$(sent "z$w")" -eq $((3 * one + loss)) ]
		[ "$(sent "k$w")" -eq $((3 * one + loss)) ]
		[ "$(sent "n$w")" -eq $((2 * one + loss)) ]
		# in bf16 and f16, gathers and reduce-scatters send half, and
		# training stays close to f32's
		for t in bf16 f16; do
			dp "$w" "$t$w" "${G[@]}" --zero 3 --wire "$t"
			[ "$(sent "$t$w")" -eq $((3 * one / 2 + loss)) ]
			timeout 30 "$PY" "$DPREF" csvcmp "l$t$w.csv" "lz$w.csv" \
			    1e-3 >/dev/null
		done
		layer=$(((w - 1) * 76 * 4 / w))
		mloss=$(($(sent "mp$w") - 2 * 3 * layer))
		[ "$(sent "m$w")" -eq $((8 * layer + mloss)) ]
	done
}

# gpt 8 layers, d 16, vocab 256, seq 8: a block 12 d^2 + 13 d = 3280
# floats, the embeddings and final LayerNorm 256*16 + 8*16 + 2*16 = 4256
# (the largest unit), P = 8*3280 + 4256 = 30496. Each rank keeps its
# slice of every unit (ceil(len/4)) and holds at most K + 1 units whole.
@test "-v: params peak within P/D + (K+1) of the largest layer on 4 ranks, below the whole model; gather exposed; timing rows gather and reduce-scatter" {
	timeout 30 collx-dp --init gpt --dims 256,16,8,2,8 --seed 1 -o g.safetensors
	slices=$((8 * ((3280 + 3) / 4) + 4256 / 4))
	for k in 0 1 2; do
		run timeout 60 collx-run -n 4 --timeout 20 -- collx-dp \
		    -m g.safetensors --data "$GPL" --batch 4 --steps 2 \
		    --zero 3 --prefetch "$k" -v --timing "t$k.{rank}.csv"
		[ "$status" -eq 0 ]
		bound=$(((slices + (k + 1) * 4256) * 4))
		for r in 0 1 2 3; do
			peak=$(grep "^collx-dp: rank $r: params peak " <<<"$output" |
			    awk '{ print $6 }')
			[ -n "$peak" ]
			[ "$peak" -le "$bound" ]
			[ "$peak" -lt $((30496 * 4)) ]
			[ "$peak" -ge $(((slices + 4256 - 1064) * 4)) ]
			[ "$(grep -c '^collx-dp,gather,auto,' "t$k.$r.csv")" -eq 2 ]
			[ "$(grep -c '^collx-dp,reduce-scatter,auto,' "t$k.$r.csv")" -eq 2 ]
		done
		[ "$(grep -c '^collx-dp: gather exposed [0-9]*%$' <<<"$output")" -eq 1 ]
		[[ "$output" == *"collx-dp: gather exposed"* ]]
	done
	# without resharding every layer stays whole through the forward pass
	run timeout 60 collx-run -n 4 --timeout 20 -- collx-dp -m g.safetensors \
	    --data "$GPL" --batch 4 --steps 1 --zero 3 \
	    --reshard-after-forward no -v
	[ "$status" -eq 0 ]
	grep -q "^collx-dp: rank 0: params peak $((30496 * 4)) bytes$" <<<"$output"
}

# gpt d 256, 8 layers, seq 32: P = 6392320 parameters, 25.6 MB, which
# ZeRO-2 keeps whole on every rank (and its gradients whole while the
# backward runs); ZeRO-3 a quarter and two layers of 0.8 MB at D = 4.
@test "peak RSS on 4 ranks: ZeRO-3's below ZeRO-2's by at least 0.6 of the parameter bytes" {
	need "GNU time" test -x /usr/bin/time
	timeout 30 collx-dp --init gpt --dims 256,256,8,4,32 --seed 1 -o g.safetensors
	for z in 2 3; do
		timed 4 "rss %M" "rss$z" --batch 4 --steps 2 --zero "$z"
		cat "rss$z"
		[ "$(grep -c '^rss [0-9]*$' "rss$z")" -eq 4 ]
	done
	# KB: every rank of ZeRO-3 below the least of ZeRO-2's by 0.6 P*4
	z2=$(awk '{ print $2 }' rss2 | sort -n | head -1)
	z3=$(awk '{ print $2 }' rss3 | sort -n | tail -1)
	[ $((z2 - z3)) -ge $((6392320 * 4 * 6 / 10 / 1024)) ]
}

# The same model on 2 ranks: P*4/4096 = 6243 pages. Given back to the
# kernel, each gathered page came back as a page fault (two gathers a
# step, half of each layer) and each gradient page as two (its first read
# maps the zero page, its write replaces it): about 3 x 6243 faults a
# step; populated in one call, the gradients still one a page. A
# gather's pages and a layer's gradients come from ZeRO-3's slots, moved
# in and out, resident after the first step: only the embeddings' unit
# (too small for a slot, 1/8 of a layer) faults, some 150 a step. The
# step's growth in minor faults between 2 and 8 steps checked below a
# tenth of the model's pages on every rank.
@test "page faults a step on 2 ranks: gathers and gradients fault none (the slots), under a tenth of the model's pages" {
	need "GNU time" test -x /usr/bin/time
	timeout 30 collx-dp --init gpt --dims 256,256,8,4,32 --seed 1 -o g.safetensors
	for k in 2 8; do
		timed 2 "%R" "pf$k" --batch 4 --steps "$k" --zero 3
		[ "$(grep -c '^[0-9][0-9]*$' "pf$k")" -eq 2 ]
	done
	paste pf2 pf8
	paste pf2 pf8 | awk '{ d = ($2 - $1) / 6; print d
	    if (d < 0 || d > 0.1 * 6392320 * 4 / 4096) exit 1 }'
}

# Checkpoints are plain DP's files, written a tensor at a time by rank 0
# from the slices' holders.
@test "checkpoints: plain DP's file; resumed at the same level the bytes of an uninterrupted run, at other levels and worlds equal within 1e-5; a truncated one refused" {
	timeout 30 collx-dp --init gpt --dims 256,16,2,2,8 --seed 1 -o g.safetensors
	G=(-m g.safetensors --data "$GPL" --batch 6 --optimizer adamw --lr 0.01)
	dp 2 full "${G[@]}" --steps 6 --zero 3
	dp 2 half "${G[@]}" --steps 3 --zero 3 --checkpoint c3.safetensors
	dp 2 half0 "${G[@]}" --steps 3 --checkpoint c0.safetensors
	# the same tensors (the optimizer's moments too), equal up to rounding
	timeout 30 "$PY" "$DPREF" cmp c0.safetensors c3.safetensors 1e-5 1e-6 \
	    attn.k.bias >/dev/null
	R=(--data "$GPL" --batch 6 --optimizer adamw --lr 0.01 --steps 6)
	dp 2 same --resume c3.safetensors "${R[@]}" --zero 3
	cmp tfull.safetensors tsame.safetensors
	[ "$(cut -d, -f1-3 lsame.csv)" = "$(sed -n '1p;5,$p' lfull.csv | cut -d, -f1-3)" ]
	dp 3 as0 --resume c3.safetensors "${R[@]}"
	dp 4 as2 --resume c3.safetensors "${R[@]}" --zero 2
	dp 4 from0 --resume c0.safetensors "${R[@]}" --zero 3 --prefetch 2
	for t in as0 as2 from0; do
		timeout 30 "$PY" "$DPREF" cmp tfull.safetensors "t$t.safetensors" \
		    1e-5 1e-6 attn.k.bias >/dev/null
	done
	head -c 3000 c3.safetensors >cut.safetensors
	run timeout 60 collx-run -n 2 --timeout 20 -- collx-dp -q \
	    --resume cut.safetensors "${R[@]}" --zero 3 -o bad.safetensors
	[ "$status" -eq 3 ]
	[ "$(grep -c '^collx-dp: rank [01]: cut.safetensors: ' <<<"$output")" -eq 2 ]
	[ ! -e bad.safetensors ]
}

# The writer of a ZeRO-3 checkpoint holds its slices and one tensor at a
# time: on the 8-layer gpt above at D = 4, its slices (7624 floats) plus
# at most the largest unit whole (4256), P/D + one layer's gather; the
# largest tensor (the 256 x 16 embeddings, 4096 floats) at least.
@test "checkpoints stream on 4 ranks of an 8-layer gpt: the writer's params peak at most P/D + one layer's gather; resumed, the bytes of an uninterrupted run" {
	timeout 30 collx-dp --init gpt --dims 256,16,8,2,8 --seed 1 -o g.safetensors
	slices=$((8 * ((3280 + 3) / 4) + 4256 / 4))
	G=(-m g.safetensors --data "$GPL" --batch 4 --optimizer adamw --lr 0.01)
	dp 4 full "${G[@]}" --steps 4 --zero 3 --prefetch 1
	run timeout 60 collx-run -n 4 --timeout 20 -- collx-dp "${G[@]}" \
	    --steps 2 --zero 3 --prefetch 1 -v --checkpoint c.safetensors \
	    --checkpoint-every 1 -o thalf.safetensors
	[ "$status" -eq 0 ]
	peak=$(sed -n 's/^collx-dp: rank 0: checkpoint params peak \([0-9]*\) bytes$/\1/p' <<<"$output")
	[ -n "$peak" ]
	[ "$peak" -le $(((slices + 4256) * 4)) ]
	[ "$peak" -ge $(((slices + 4096) * 4)) ]
	# the other ranks send their slices and hold no more
	for r in 1 2 3; do
		grep -q "^collx-dp: rank $r: checkpoint params peak $((slices * 4)) bytes$" <<<"$output"
	done
	dp 4 same --resume c.safetensors --data "$GPL" --batch 4 \
	    --optimizer adamw --lr 0.01 --steps 4 --zero 3 --prefetch 1
	cmp tfull.safetensors tsame.safetensors
	[ "$(cut -d, -f1-3 lsame.csv)" = "$(sed -n '1p;4,$p' lfull.csv | cut -d, -f1-3)" ]
}

@test "collx-bench dp --zero 0,3: each stage with each sync method, on 1 and 2 ranks; stages collx-dp refuses exit 2 first" {
	run timeout -k 5 240 collx-bench dp -N 2 --sync ring --zero 0,3 \
	    --steps 3 --batch 2 --csv
	[ "$status" -eq 0 ]
	for m in ring/z0 ring/z3; do
		for w in 1 2; do
			[ "$(grep -c "^collx-bench,dp,$m,0,$w," <<<"$output")" -eq 1 ]
		done
	done
	[ "$(grep -c '^collx-bench,dp,' <<<"$output")" -eq 4 ]
	run timeout 30 collx-bench dp --zero 0,4
	[ "$status" -eq 2 ]
	[[ "${lines[0]}" == "collx-bench: --zero: want stages 0 to 3, not '4'" ]]
	run timeout 30 collx-bench dp --zero 3 --sync ring,ps
	[ "$status" -eq 2 ]
}

@test "bad input: --prefetch negative or beyond the layers, --zero 3 with --powersgd, --sync-every 2 or --sync ps, --prefetch without --zero 3: one line, exit 2, no output" {
	data 8 4 4 3
	timeout 30 collx-dp --init mlp --dims 4,8,4,3 --seed 1 -o m.safetensors
	M=(-m m.safetensors --data X.npy --targets Y.npy --batch 8 --steps 2
	    -o out.safetensors)
	bad() {
		usage_refused collx-dp "${M[@]}" "$@"
	}
	bad --zero 3 --prefetch -1
	bad --zero 3 --prefetch 4
	[[ "$output" == *"--prefetch 4: the model has 3 layers"* ]]
	bad --zero 3 --powersgd 2
	[[ "$output" == *--powersgd*--zero\ 3* ]]
	bad --zero 3 --sync-every 2
	[[ "$output" == *--sync-every\ 2*--zero\ 3* ]]
	bad --zero 3 --sync ps
	[[ "$output" == *--zero*--sync\ ps* ]]
	bad --zero 2 --prefetch 1
	[[ "$output" == *"--prefetch goes with --zero 3"* ]]
	bad --zero 3 --no-overlap
	[[ "$output" == *--no-overlap\ and\ --zero\ 3* ]]
	bad --zero 3 --reshard-after-forward maybe
	bad --zero 4
	# the largest prefetch runs
	run timeout 30 collx-dp "${M[@]}" --zero 3 --prefetch 3 -q
	[ "$status" -eq 0 ]
}
