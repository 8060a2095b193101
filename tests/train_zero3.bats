#!/usr/bin/env bats
# collx-train --zero 3 (fully sharded data parallelism on the DP axis,
# composing with --tp and --pp): gpt and mlp stacks under SGD with
# momentum and AdamW on dp2, dp2 x tp2, dp2 x pp2, dp2 x tp2 x pp2
# (interleaved), dp2 x cp2 (with tp2, pp2), 3 and 4 ranks with uneven batch splits, each against the
# independent float64 PyTorch training (tests/lib/piperef.py) and collx-dp
# on one rank (tests/lib/trainref.py checks both) and against --zero 0 on
# the same mesh; the bytes a step sends against their closed form;
# checkpoints resumed across levels and meshes; -v and the timing rows;
# collx-bench mesh's ZeRO-3 and HSDP rows; bad input.
load lib/common
load lib/train

setup() {
	train_env
}

teardown() {
	common_teardown
}

# Each run of TAGS (tags as meshes gives them; the --zero 3 runs' tags
# end in zero3) equals the same mesh's --zero 0 run (the tag without
# zero3) within 1e-5. usage: as_zero0 TAGS
as_zero0() {
	local t

	for t in $1; do
		timeout 30 "$PY" "$DPREF" cmp "t${t/zero3/}.safetensors" \
		    "t$t.safetensors" 1e-5 1e-6 "${SKIP:-}" >/dev/null
		timeout 30 "$PY" "$DPREF" csvcmp "l${t/zero3/}.csv" "l$t.csv" \
		    1e-5 >/dev/null
	done
}

# gpt of 4 blocks (d 16, vocab 256, seq 8), batch 7: dp2 splits it 4 + 3,
# dp3 3 + 2 + 2.
@test "gpt, SGD with momentum: dp2, dp3, dp2 x tp2, dp2 x pp2 (1f1b, gpipe, zb-h1), dp2 x tp2 x pp2 interleaved, every prefetch and resharding, equal the PyTorch reference, collx-dp and --zero 0" {
	timeout 30 collx-dp --init gpt --dims 256,16,4,2,8 --seed 1 -o g.safetensors
	timeout 200 "$PY" "$REF" train gpt g.safetensors "$GPL" - 7 3 sgd 0.3 \
	    0 0.9 r.safetensors r.csv
	M="2:--dp,2 3:--dp,3,--prefetch,2,--reshard-after-forward,no
	    4:--dp,2,--tp,2,--microbatches,2,--prefetch,0
	    4:--dp,2,--pp,2,--microbatches,3
	    4:--dp,2,--pp,2,--microbatches,2,--schedule,gpipe,--reshard-after-forward,no
	    4:--dp,2,--pp,2,--microbatches,2,--schedule,zb-h1
	    8:--dp,2,--tp,2,--pp,2,--microbatches,2,--schedule,interleaved,--virtual,2,--prefetch,3"
	G=(-m g.safetensors --data "$GPL" --batch 7 --steps 3 --lr 0.3
	    --momentum 0.9)
	meshes "${M//:/:--zero,3,}" "${G[@]}"
	z3=("${outs[@]}")
	meshes "$(sed 's/,--prefetch,[0-9]//; s/,--reshard-after-forward,no//' \
	    <<<"$M")" "${G[@]}"
	outs=("${z3[@]}")
	check "${G[@]}"
	for t in 2zero3dp2 3zero3dp3prefetch2reshardafterforwardno \
	    4zero3dp2tp2microbatches2prefetch0 4zero3dp2pp2microbatches3 \
	    4zero3dp2pp2microbatches2schedulegpipereshardafterforwardno \
	    4zero3dp2pp2microbatches2schedulezbh1 \
	    8zero3dp2tp2pp2microbatches2scheduleinterleavedvirtual2prefetch3; do
		u=$(sed 's/prefetch[0-9]//; s/reshardafterforwardno//' <<<"$t")
		timeout 30 "$PY" "$DPREF" cmp "t${u/zero3/}.safetensors" \
		    "t$t.safetensors" 1e-5 1e-6 >/dev/null
		timeout 30 "$PY" "$DPREF" csvcmp "l${u/zero3/}.csv" "l$t.csv" \
		    1e-5 >/dev/null
	done
}

# AdamW: attn.k.bias's exactly-zero gradient is rounding noise
# (zero3.bats); batch 6 on 4 ranks is 2 + 2 + 1 + 1.
@test "gpt, AdamW: dp4, dp2 x tp2, dp2 x pp2, --wire f32: equal the PyTorch reference, collx-dp and --zero 0" {
	timeout 30 collx-dp --init gpt --dims 256,16,2,2,8 --seed 1 -o g.safetensors
	timeout 200 "$PY" "$REF" train gpt g.safetensors "$GPL" - 6 3 adamw \
	    0.01 ra.safetensors ra.csv
	G=(-m g.safetensors --data "$GPL" --batch 6 --steps 3 --optimizer adamw
	    --lr 0.01)
	meshes "4:--zero,3,--dp,4 4:--zero,3,--dp,2,--tp,2
	    4:--zero,3,--dp,2,--pp,2,--microbatches,2" "${G[@]}"
	z3=("${outs[@]}")
	meshes "4:--dp,4 4:--dp,2,--tp,2 4:--dp,2,--pp,2,--microbatches,2" \
	    "${G[@]}"
	outs=("${z3[@]}")
	REF_TAG=a TRAINREF_SKIP=attn.k.bias check "${G[@]}"
	SKIP=attn.k.bias as_zero0 "4zero3dp4 4zero3dp2tp2 \
	    4zero3dp2pp2microbatches2"
}

# mlp 4 -> 8 -> 3 -> 8 -> 4 (three layers), batch 11.
@test "mlp stack, SGD with momentum and AdamW: dp2, dp3, dp2 x pp2, dp2 x tp2: equal the PyTorch reference, collx-dp and --zero 0" {
	data 11 4 4 1
	timeout 30 collx-dp --init mlp --dims 4,8,4,3 --seed 1 -o m.safetensors
	timeout 200 "$PY" "$REF" train mlp m.safetensors X.npy Y.npy 11 3 sgd \
	    0.1 0 0.9 r.safetensors r.csv + train mlp m.safetensors X.npy \
	    Y.npy 11 3 adamw 0.01 ra.safetensors ra.csv
	M="2:--zero,3,--dp,2 3:--zero,3,--dp,3,--prefetch,0
	    4:--zero,3,--dp,2,--pp,2,--microbatches,2
	    4:--zero,3,--dp,2,--tp,2"
	P="2:--dp,2 3:--dp,3 4:--dp,2,--pp,2,--microbatches,2 4:--dp,2,--tp,2"
	S=(-m m.safetensors --data X.npy --targets Y.npy --batch 11 --steps 3 --lr 0.1
	    --momentum 0.9)
	A=(-m m.safetensors --data X.npy --targets Y.npy --batch 11 --steps 3
	    --optimizer adamw --lr 0.01)
	meshes "$M" "${S[@]}"
	z3=("${outs[@]}")
	meshes "$P" "${S[@]}"
	outs=("${z3[@]}")
	check "${S[@]}"
	Z="2zero3dp2 4zero3dp2pp2microbatches2 4zero3dp2tp2"
	as_zero0 "$Z"
	timeout 30 "$PY" "$DPREF" cmp t3dp3.safetensors \
	    t3zero3dp3prefetch0.safetensors 1e-5 1e-6 >/dev/null
	meshes "$M" "${A[@]}"
	z3=("${outs[@]}")
	meshes "$P" "${A[@]}"
	outs=("${z3[@]}")
	REF_TAG=a check "${A[@]}"
	as_zero0 "$Z"
}

# --cp: the DP sync group is dp x cp, over which ZeRO-3 cuts each unit;
# the ring holds the links as a TP sum does. Batch 7 on dp2: 4 + 3.
@test "dp2 x cp2 (zigzag, ring), dp2 x cp2 x tp2, dp2 x cp2 x pp2 (zb-h1) at --zero 3 equal the PyTorch reference, collx-dp on one rank and --zero 2" {
	timeout 30 collx-dp --init gpt --dims 256,16,2,2,8 --seed 1 -o g.safetensors
	timeout 120 "$PY" "$REF" train gpt g.safetensors "$GPL" - 7 3 sgd 0.5 \
	    r.safetensors r.csv
	M="4:--dp,2,--cp,2 4:--dp,2,--cp,2,--cp-mode,ring,--prefetch,0
	    8:--dp,2,--cp,2,--tp,2,--microbatches,2
	    8:--dp,2,--cp,2,--pp,2,--microbatches,2,--schedule,zb-h1"
	G=(-m g.safetensors --data "$GPL" --batch 7 --steps 3 --lr 0.5)
	meshes "${M//:/:--zero,3,}" "${G[@]}"
	z3=("${outs[@]}")
	meshes "$(sed 's/,--prefetch,0//; s/:/:--zero,2,/g' <<<"$M")" "${G[@]}"
	outs=("${z3[@]}")
	check "${G[@]}"
	for t in 4zero3dp2cp2 4zero3dp2cp2cpmoderingprefetch0 \
	    8zero3dp2cp2tp2microbatches2 \
	    8zero3dp2cp2pp2microbatches2schedulezbh1; do
		u=${t/prefetch0/}
		timeout 30 "$PY" "$DPREF" cmp "t${u/zero3/zero2}.safetensors" \
		    "t$t.safetensors" 1e-5 1e-6 >/dev/null
		timeout 30 "$PY" "$DPREF" csvcmp "l${u/zero3/zero2}.csv" \
		    "l$t.csv" 1e-5 >/dev/null
	done
}

# moe.bats checks --zero 0's experts against PyTorch on this mesh.
@test "a gpt with experts (top-2) on dp2 x pp2: --zero 3 equals --zero 0" {
	timeout 10 collx-dp --init gpt --dims 256,16,2,2,8 --seed 6 \
	    -o g.safetensors --experts 4 --topk 2
	meshes "4:--zero,3,--dp,2,--pp,2 4:--dp,2,--pp,2" -m g.safetensors \
	    --data "$GPL" --batch 8 --steps 3 --lr 0.5 --microbatches 2
	as_zero0 4zero3dp2pp2
}

# 2 (W-1)/W of a vector's bytes a rank for a ring allreduce, (W-1)/W for
# an allgather or reduce-scatter; every unit here a multiple of 4 floats.
# A gpt (d 16, vocab 256, seq 8): 2 blocks of 3280 floats, the
# embeddings, final LayerNorm and head 4256: P = 10816. With resharding
# every unit is gathered twice (forward, backward) and reduce-scattered
# once, 3 (W-1)/W P: 1.5x plain DP's 2 (W-1)/W P; without, gathered once:
# 1.0x. Both also sum the step's loss, as plain DP does. --wire bf16
# halves the gathers and reduce-scatters. A unit whose next use comes
# within K + 1 uses stays whole between them (collx-dp's rule): on
# dp2 x pp2 a gpt of 4 blocks puts the embeddings (4256 less the final
# LayerNorm's 32: 4224 floats, used once, their backward reading no
# weight) and blocks 0 and 1 on stage 0, whose uses go E 0 1 1' 0': with
# resharding block 0 is gathered twice, block 1 (its backward next) once,
# so rank 0 sends (2*4224 + 3*3280 + 2*3280) / 2 floats a step on the DP
# axis, and without (2*4224 + 2*3280 + 2*3280) / 2.
@test "bytes a step: 1.5x plain DP's with resharding, 1.0x without, half in bf16 (closed forms on dp2, dp4, dp2 x pp2)" {
	timeout 30 collx-dp --init gpt --dims 256,16,2,2,8 --seed 1 -o g.safetensors
	G=(-m g.safetensors --data "$GPL" --batch 8 --steps 2)
	# rank 0's DP bytes a step (the loss CSV's bytes on a DP-only mesh),
	# the same every step
	sent() {
		[ "$(sed 1d "l$1.csv" | cut -d, -f7 | sort -u | wc -l)" -eq 1 ]
		sed -n 2p "l$1.csv" | cut -d, -f7
	}
	for w in 2 4; do
		train "$w" "p$w" "${G[@]}" --dp "$w"
		train "$w" "z$w" "${G[@]}" --dp "$w" --zero 3
		train "$w" "n$w" "${G[@]}" --dp "$w" --zero 3 \
		    --reshard-after-forward no
		train "$w" "b$w" "${G[@]}" --dp "$w" --zero 3 --wire bf16
		one=$(((w - 1) * 10816 * 4 / w))
		loss=$(($(sent "z$w") - 3 * one))
		[ "$loss" -ge 0 ]
		[ "$loss" -lt 64 ]
		[ "$(sent "n$w")" -eq $((2 * one + loss)) ]
		[ "$(sent "b$w")" -eq $((3 * one / 2 + loss)) ]
		timeout 30 "$PY" "$DPREF" csvcmp "lb$w.csv" "lz$w.csv" 1e-3 \
		    >/dev/null
	done
	# plain DP on 2 ranks: a ring allreduce, the same loss sum
	[ "$(sent p2)" -eq $((2 * 10816 * 4 / 2 + $(sent z2) - 3 * 10816 * 4 / 2)) ]
	# rank 0's DP bytes in each step line of -v, the same every step,
	# less the closed form (the loss sum)
	pploss() {
		run timeout 60 collx-run -n 4 --timeout 20 -- collx-train -v \
		    -m g4.safetensors --data "$GPL" --batch 8 --steps 2 --dp 2 \
		    --pp 2 --zero 3 "${@:2}"
		[ "$status" -eq 0 ]
		d=$(sed -n 's/^collx-train: step [0-9].* dp \([0-9]*\) tp 0 B)$/\1/p' \
		    <<<"$output" | sort -u)
		[ "$(wc -l <<<"$d")" -eq 1 ]
		echo $((d - $1 * 4 / 2))
	}
	timeout 30 collx-dp --init gpt --dims 256,16,4,2,8 --seed 1 -o g4.safetensors
	l=$(pploss $((2 * 4224 + 5 * 3280)))
	[ "$l" -ge 0 ]
	[ "$l" -lt 64 ]
	[ "$(pploss $((2 * 4224 + 4 * 3280)) --reshard-after-forward no)" -eq "$l" ]
}

# Micro-batches. A unit stays whole while it is among the next K + 1
# distinct units the rank's schedule uses, but that resharding gives it
# back between a forward use and a backward one more than K + 1 uses on.
# dp2 of a gpt of 2 blocks (3280 floats each; E, the embeddings, final
# LayerNorm and head: 4256), K = 2, 2 micro-batches, uses E 0 1 E per
# forward and E' 1' 0' per backward. 1F1B (F0 B0 F1 B1): block 0's
# forward use lies 5 uses before its backward one in each micro-batch, so
# it is gathered three times (first, then for each backward); E and
# block 1 once: gathers E + 4 blocks, reduce-scatters E + 2 blocks, rank
# 0 sending (2*4256 + 6*3280) / 2 floats a step (the loss sum beside);
# the earlier rule, K + 1 uses, gathered block 1 once more. GPipe (F0 F1
# B0 B1): block 0 given back once, before the backwards: 2*4256 + 5*3280.
# The trace: each stage's layers' reduce-scatters lie within its last
# backward (zb-h1: its last weight part) of the step, the tied
# embeddings' after the schedule.
@test "micro-batches: units kept whole across them where the window holds them (bytes, closed forms); reduce-scatters within the last backward or weight part (trace, 1f1b and zb-h1)" {
	timeout 30 collx-dp --init gpt --dims 256,16,2,2,8 --seed 1 -o g.safetensors
	G=(-m g.safetensors --data "$GPL" --batch 8 --steps 2 --dp 2 --zero 3
	    --microbatches 2 --prefetch 2)
	sent() {
		[ "$(sed 1d "l$1.csv" | cut -d, -f7 | sort -u | wc -l)" -eq 1 ]
		echo $(($(sed -n 2p "l$1.csv" | cut -d, -f7) - $2 * 4 / 2))
	}
	train 2 f "${G[@]}"
	train 2 g "${G[@]}" --schedule gpipe
	l=$(sent f $((2 * 4256 + 6 * 3280)))
	[ "$l" -ge 0 ]
	[ "$l" -lt 64 ]
	[ "$(sent g $((2 * 4256 + 5 * 3280)))" -eq "$l" ]
	timeout 30 collx-dp --init gpt --dims 256,16,4,2,8 --seed 1 -o g4.safetensors
	for s in 1f1b zb-h1; do
		timeout 60 collx-run -n 4 --timeout 20 -- collx-train -q \
		    -m g4.safetensors --data "$GPL" --batch 8 --steps 2 --dp 2 \
		    --pp 2 --zero 3 --microbatches 2 --schedule "$s" \
		    --trace "tr$s.json"
		timeout 30 "$PY" - "tr$s.json" "$s" <<'PYEOF'
import json, sys
ev = [e for e in json.load(open(sys.argv[1]))["traceEvents"]
      if e.get("ph") == "X"]
last = "weight" if sys.argv[2] == "zb-h1" else "backward"
for j in (0, 1):
    for k in (0, 1):
        mine = [e for e in ev if e["tid"] == j and e["args"]["step"] == k]
        b = max((e for e in mine if e["cat"] == last), key=lambda e: e["ts"])
        z = [e for e in mine if e["cat"] == "reduce-scatter"]
        inside = [e for e in z if e["ts"] >= b["ts"] and
                  e["ts"] + e["dur"] <= b["ts"] + b["dur"] + 0.002]
        after = [e for e in z if e["ts"] >= b["ts"] + b["dur"]]
        assert len(z) == 3 and len(inside) == 2 and len(after) == 1, \
            (j, k, b, z)
PYEOF
	done
}

# The communication thread's order (dp_fsdp.c's plan), dp2 on a gpt of 4
# blocks, K = 1, uses E 0 1 2 3 E | E' 3' 2' 1' 0': the forward gathers
# E 0 1 2 3 E, and block 3, freed after its forward with its backward
# next but for the head, again at once (G3'); each backward use then
# gathers the next block before the reduce-scatter of the one above it:
# G2' at 3', G1' R3 at 2', G0' R2 at 1', R1 at 0', then R0 and E's. So
# the jobs start G x 9, R, G, R x 4, and 7 gathers start before the
# step's backward does (the old order, G3' at the head's backward and
# each R before the next gather: G x 8, R, G, R, G, R x 3; 6 before).
@test "the communication thread's order: the last block's backward gather beside the head, a backward's gathers before the reduce-scatter above (trace, dp2, K = 1)" {
	timeout 30 collx-dp --init gpt --dims 256,16,4,2,8 --seed 1 -o g4.safetensors
	timeout 60 collx-run -n 2 --timeout 20 -- collx-train -q \
	    -m g4.safetensors --data "$GPL" --batch 8 --steps 2 --dp 2 \
	    --zero 3 --trace tr.json
	timeout 30 "$PY" - tr.json <<'PYEOF'
import json, sys
ev = [e for e in json.load(open(sys.argv[1]))["traceEvents"]
      if e.get("ph") == "X" and e["tid"] == 0]
for k in (0, 1):
    mine = sorted((e for e in ev if e["args"]["step"] == k),
                  key=lambda e: e["ts"])
    jobs = [e for e in mine if e["cat"] in ("gather", "reduce-scatter")]
    kinds = "".join("G" if e["cat"] == "gather" else "R" for e in jobs)
    assert kinds == "G" * 9 + "RG" + "R" * 4, (k, kinds)
    b = min(e["ts"] for e in mine if e["cat"] == "backward")
    assert sum(e["ts"] < b for e in jobs) == 7, (k, jobs, b)
PYEOF
}

# dp2 x pp2 on a gpt of 4 blocks (3280 floats each): stage 0 holds the
# embeddings (4224 floats, the largest unit) and blocks 0 and 1, 10784
# floats; each replica keeps half of each unit, 5392, and holds at most
# K + 1 units whole beside them.
@test "-v: params peak within P/D + (K+1) of the largest unit, below the whole stage; gather exposed; timing rows gather and reduce-scatter on the dp axis" {
	timeout 30 collx-dp --init gpt --dims 256,16,4,2,8 --seed 1 -o g4.safetensors
	run timeout 60 collx-run -n 4 --timeout 20 -- collx-train -v \
	    -m g4.safetensors --data "$GPL" --batch 8 --steps 2 --dp 2 --pp 2 \
	    --zero 3 --timing tm.csv
	[ "$status" -eq 0 ]
	for r in 0 1; do
		p=$(sed -n "s/^collx-train: rank $r: params peak \([0-9]*\) bytes$/\1/p" <<<"$output")
		[ "$p" -gt $((5392 * 4)) ]
		[ "$p" -le $(((5392 + 2 * 4224) * 4)) ]
		[ "$p" -lt $((10784 * 4)) ]
	done
	[ "$(grep -c '^collx-train: rank [0-3]: params peak [0-9]* bytes$' <<<"$output")" -eq 4 ]
	grep -Eq '^collx-train: gather exposed [0-9]+%$' <<<"$output"
	for ph in gather reduce-scatter; do
		[ "$(grep -c "^collx-train,$ph,auto,.*,dp," tm.csv)" -eq 8 ]
	done
}

@test "checkpoints: a --zero 3 run resumed on its mesh gives the bytes of an uninterrupted run; resumed under --zero 0, 1 and other meshes, and --zero 0's under --zero 3, equal within 1e-5; a truncated one refused" {
	timeout 30 collx-dp --init gpt --dims 256,16,2,2,8 --seed 1 -o g.safetensors
	O=(--data "$GPL" --batch 6 --optimizer adamw --lr 0.01)
	train 4 full -m g.safetensors "${O[@]}" --steps 6 --zero 3 --dp 2 --pp 2
	timeout 60 collx-run -n 4 --timeout 20 -- collx-train -q -m g.safetensors \
	    "${O[@]}" --steps 3 --zero 3 --dp 2 --pp 2 --checkpoint c3.safetensors
	timeout 60 collx-run -n 2 --timeout 20 -- collx-train -q -m g.safetensors \
	    "${O[@]}" --steps 3 --dp 2 --checkpoint c0.safetensors
	train 4 same --resume c3.safetensors "${O[@]}" --steps 6 --zero 3 \
	    --dp 2 --pp 2
	train 2 as0 --resume c3.safetensors "${O[@]}" --steps 6 --dp 2
	train 4 as1 --resume c3.safetensors "${O[@]}" --steps 6 --zero 1 \
	    --dp 2 --tp 2
	train 3 from0 --resume c0.safetensors "${O[@]}" --steps 6 --zero 3 \
	    --dp 3 --prefetch 2
	cmp tfull.safetensors tsame.safetensors
	[ "$(cut -d, -f1-3 lsame.csv)" = "$(sed -n '1p;5,$p' lfull.csv | cut -d, -f1-3)" ]
	for t in as0 as1 from0; do
		timeout 30 "$PY" "$DPREF" cmp tfull.safetensors "t$t.safetensors" \
		    1e-5 1e-6 attn.k.bias >/dev/null
	done
	head -c 3000 c3.safetensors >cut.safetensors
	run timeout 60 collx-run -n 2 --timeout 20 -- collx-train -q \
	    --resume cut.safetensors "${O[@]}" --steps 6 --zero 3 --dp 2 \
	    -o bad.safetensors
	[ "$status" -eq 3 ]
	[[ "${lines[0]}" == "collx-train: "*"cut.safetensors"* ]]
	[ ! -e bad.safetensors ]
}

# The three meshes of 2 ranks, and dp2's at --zero 3 too; on 2 hosts of
# 2 ranks (as -H names them) every mesh with dp above 1 at --zero 3,
# flat and by host.
@test "collx-bench mesh --zero 3: a ZeRO-3 row for each mesh with dp, and HSDP rows on several hosts; shares in [0,1]; --zero 4 refused" {
	run timeout -k 5 200 collx-bench mesh -N 2 --dims 256,16,2,2,8 \
	    --steps 2 --batch 4 --repeat 1 --zero 3 --csv
	[ "$status" -eq 0 ]
	csv=$(grep '^collx-bench,mesh,' <<<"$output")
	# a gpt's meshes (the cp one too), and ZeRO-3 where dp is 2
	[ "$(wc -l <<<"$csv")" -eq 5 ]
	[ "$(cut -d, -f3 <<<"$csv" | sort | tr '\n' ' ')" = \
	    "dp1.tp1.pp1.cp2 dp1.tp1.pp2 dp1.tp2.pp1 dp2.tp1.pp1 dp2.tp1.pp1.zero3 " ]
	awk -F, '$17 < 0 || $17 + $18 + $19 > 1 || $10 <= 0 { print; exit 1 }' \
	    <<<"$csv"
	run timeout -k 5 300 collx-bench mesh -N 4 -H localhost:2,127.0.0.1:2 \
	    --dims 256,16,2,2,8 --steps 2 --batch 8 --repeat 1 --zero 3 --csv
	[ "$status" -eq 0 ]
	for v in zero3 hsdp; do
		[ "$(grep -c "^collx-bench,mesh,dp[24]\.tp[12]\.pp[12]\.$v," \
		    <<<"$output")" -eq 3 ]
	done
	run timeout 30 collx-bench mesh -N 2 --zero 0,4
	[ "$status" -eq 2 ]
	[[ "${lines[0]}" == "collx-bench: --zero: want stages 0 to 3, not '4'" ]]
}

@test "bad input: --prefetch negative or beyond the layers, --zero 3 with --powersgd, --prefetch without --zero 3: one line, exit 2, no output" {
	timeout 30 collx-dp --init gpt --dims 256,16,2,2,8 --seed 1 -o g.safetensors
	G=(-m g.safetensors --data "$GPL" --batch 6 --steps 2 -o out.safetensors)
	bad() {
		usage_refused collx-train "${G[@]}" "$@"
	}
	bad --zero 3 --prefetch -1
	bad --zero 3 --prefetch 3
	[[ "$output" == *"--prefetch 3: the model has 2 layers"* ]]
	bad --zero 3 --powersgd 2
	[[ "$output" == *--powersgd*--zero\ 3* ]]
	bad --zero 2 --prefetch 1
	[[ "$output" == *"--prefetch goes with --zero 3"* ]]
}
