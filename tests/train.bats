#!/usr/bin/env bats
# collx-train: the mesh (--print-mesh, refusals on every rank before any
# rank talks), and training on every factorization of 2, 4 and 8 ranks (dp,
# tp, pp alone, dp x tp, dp x pp, tp x pp, dp2 x tp2 x pp2) with uneven
# batch splits and micro-batches that do not divide them (zb-h1 on pp2 and
# tp2 x pp2 giving 1f1b's bytes; interleaved on tp2 x pp2 and
# dp2 x tp2 x pp2, and its checkpoints), checked against
# an independent float64 PyTorch training (tests/lib/piperef.py) and
# against collx-dp on one rank (tests/lib/trainref.py checks both);
# checkpoints across meshes and programs; the timing rows' axis column.
load lib/common
load lib/train

setup() {
	train_env
}

teardown() {
	common_teardown
}

# Each zb-h1 run of TAGS (tagged as meshes tags them) has the bytes and
# losses of the same mesh's 1f1b run (the tag without "schedulezbh1").
# usage: zb_as_1f1b TAGS
zb_as_1f1b() {
	local t

	for t in $1; do
		cmp "t$t.safetensors" "t${t/schedulezbh1/}.safetensors"
		[ "$(cut -d, -f1-3 "l$t.csv")" = \
		    "$(cut -d, -f1-3 "l${t/schedulezbh1/}.csv")" ]
	done
}

@test "--print-mesh lays out rank = (pp*D + dp)*T + tp and the groups, without a group" {
	run timeout 10 collx-train --print-mesh --world-size 8 --tp 2 --pp 2 \
	    --ranks-per-host 4
	[ "$status" -eq 0 ]
	[ "$output" = "$(printf '%s\n' \
	    '# mesh: dp 2 x tp 2 x pp 2 = 8 ranks' \
	    'rank,pp,dp,tp,host' \
	    '0,0,0,0,0' '1,0,0,1,0' '2,0,1,0,0' '3,0,1,1,0' \
	    '4,1,0,0,1' '5,1,0,1,1' '6,1,1,0,1' '7,1,1,1,1' \
	    'tp groups of 2: [0 1] [2 3] [4 5] [6 7]' \
	    'dp groups of 2: [0 2] [1 3] [4 6] [5 7]' \
	    'pp groups of 2: [0 4] [1 5] [2 6] [3 7]')" ]
	# -1 takes what the others leave; D is -1 unless given
	run timeout 10 collx-train --print-mesh --world-size 6 --dp 2 --pp -1
	[ "$status" -eq 0 ]
	[ "${lines[0]}" = "# mesh: dp 2 x tp 1 x pp 3 = 6 ranks" ]
	[ "${lines[7]}" = "5,2,1,0,0" ]
	[ "${lines[10]}" = "pp groups of 3: [0 2 4] [1 3 5]" ]
	run timeout 10 collx-train --print-mesh --world-size 6 --pp 3
	[ "${lines[0]}" = "# mesh: dp 2 x tp 1 x pp 3 = 6 ranks" ]
	run timeout 10 collx-train --print-mesh --world-size 6 --dp 4 --pp 2
	[ "$status" -eq 3 ]
	[ "$output" = "collx-train: mesh --dp 4 x --tp 1 x --pp 2 = 8 ranks, but the world has 6" ]
	run timeout 10 collx-train --print-mesh --world-size 6 --dp 4 --pp -1
	[ "$status" -eq 3 ]
	[ "$output" = "collx-train: mesh --dp 4 x --tp 1 x --pp -1: the world's 6 ranks are not a multiple of the other sizes' product 4" ]
	run timeout 10 collx-train --print-mesh --world-size 6 --dp -1 --pp -1
	[ "$status" -eq 3 ]
	[[ "$output" == *"only one of --dp, --tp and --pp may be -1" ]]
}

@test "a mesh that cannot work is refused on every rank with the numbers (exit 3), before any rank talks" {
	timeout 30 collx-dp --init gpt --dims 256,16,2,2,8 --seed 1 -o g.safetensors
	data 8 4 3 1
	timeout 30 collx-dp --init mlp --dims 4,6,3,2 --seed 1 -o m.safetensors
	G=(-m g.safetensors --data "$GPL" --batch 8)
	refused 4 "mesh: 2 layers cannot fill --pp 4 stages (a stage holds at least one)" \
	    "${G[@]}" --pp 4
	refused 3 "mesh --dp 2 x --tp 1 x --pp 1 = 2 ranks, but the world has 3" \
	    "${G[@]}" --dp 2
	refused 4 "mesh: 2 attention heads are not divisible by --tp 4" \
	    "${G[@]}" --tp 4
	refused 4 "mesh: hidden width 6 of layers.0.fc1.weight is not divisible by --tp 4" \
	    -m m.safetensors -i X.npy -t Y.npy --batch 8 --tp 4
	# a rank alone, its peers' rendezvous nowhere: refused at once, not
	# after the timeout of a rank that tried to talk
	run env COLLX_RANK=2 COLLX_WORLD_SIZE=4 COLLX_MASTER=127.0.0.1:9 \
	    timeout 10 collx-train "${G[@]}" --steps 1 --pp 4 --timeout 8
	[ "$status" -eq 3 ]
	[ "$output" = "collx-train: rank 2: mesh: 2 layers cannot fill --pp 4 stages (a stage holds at least one)" ]
	# more micro-batches than the smallest replica's share: a usage error
	run timeout 30 collx-run -n 2 --timeout 10 -- collx-train "${G[@]}" \
	    --steps 1 --dp 2 --microbatches 5
	[ "$status" -eq 2 ]
	[[ "$output" == *"--microbatches 5: more than the 4 samples of the smallest replica's share of --batch 8 over 2"* ]]
}

@test "mlp stack: dp, tp, pp and each pair on 2 and 4 ranks, batch 11, M 2, equal the reference and collx-dp on one rank; zb-h1 trains 1f1b's bytes on pp2 and tp2 x pp2" {
	data 11 4 3 1
	timeout 30 collx-dp --init mlp --dims 4,8,3,4 --seed 1 -o m.safetensors
	timeout 120 "$PY" "$REF" train mlp m.safetensors X.npy Y.npy 11 3 sgd 0.1 \
	    r.safetensors r.csv
	meshes "2:--dp,2 2:--pp,2 4:--dp,4 4:--pp,4 4:--dp,2,--pp,2 2:--tp,2
	    4:--dp,2,--tp,2 4:--tp,2,--pp,2 2:--pp,2,--schedule,zb-h1
	    4:--tp,2,--pp,2,--schedule,zb-h1" \
	    -m m.safetensors -i X.npy -t Y.npy --batch 11 --steps 3 --lr 0.1 \
	    --microbatches 2
	zb_as_1f1b "2pp2schedulezbh1 4tp2pp2schedulezbh1"
	check -m m.safetensors --data X.npy --targets Y.npy --batch 11 \
	    --steps 3 --lr 0.1
	# the loss CSV has collx-dp's columns
	[ "$(head -n 1 l4dp2pp2.csv)" = "$(head -n 1 dp1.csv)" ]
}

@test "block stack: dp, tp, pp and each pair, batch 9, M 2 and 3, gpipe and 1f1b, equal the reference and collx-dp on one rank" {
	data 9 5,8 5,8 2
	timeout 30 collx-dp --init block --dims 8,2,16,0,2 --seed 2 -o b.safetensors
	timeout 120 "$PY" "$REF" train block b.safetensors X.npy Y.npy 9 2 sgd 0.1 \
	    r.safetensors r.csv
	meshes "2:--dp,2,--microbatches,3 2:--pp,2,--schedule,gpipe,--microbatches,3
	    4:--dp,2,--pp,2,--microbatches,2 4:--dp,4,--microbatches,2
	    2:--tp,2,--microbatches,2 4:--dp,2,--tp,2,--microbatches,3
	    4:--tp,2,--pp,2,--schedule,gpipe,--microbatches,2" \
	    -m b.safetensors -i X.npy -t Y.npy --batch 9 --steps 2 --lr 0.1
	check -m b.safetensors --data X.npy --targets Y.npy --batch 9 \
	    --steps 2 --lr 0.1
}

@test "gpt: dp, tp, pp, each pair and dp2 x tp2 x pp2, SGD and AdamW, equal the reference and collx-dp on one rank; zb-h1 trains 1f1b's bytes on pp2 and tp2 x pp2" {
	timeout 30 collx-dp --init gpt --dims 256,16,2,2,8 --seed 1 -o g.safetensors
	timeout 120 "$PY" "$REF" train gpt g.safetensors "$GPL" - 7 3 sgd 0.5 \
	    r.safetensors r.csv
	# AdamW on batch 6: at batch 7 and 8 an exactly-zero first gradient
	# follows the rounding (tests/pipe.bats says more)
	timeout 120 "$PY" "$REF" train gpt g.safetensors "$GPL" - 6 3 adamw 0.01 \
	    ra.safetensors ra.csv
	meshes "2:--dp,2,--microbatches,3 2:--pp,2,--microbatches,2
	    4:--dp,2,--pp,2,--microbatches,3 4:--dp,4 2:--tp,2
	    4:--tp,2,--pp,2,--microbatches,2 8:--dp,2,--tp,2,--pp,2,--microbatches,2
	    2:--pp,2,--microbatches,2,--schedule,zb-h1
	    4:--tp,2,--pp,2,--microbatches,2,--schedule,zb-h1" \
	    -m g.safetensors --data "$GPL" --batch 7 --steps 3 --lr 0.5
	zb_as_1f1b "2pp2microbatches2schedulezbh1 4tp2pp2microbatches2schedulezbh1"
	check -m g.safetensors --data "$GPL" --batch 7 --steps 3 --lr 0.5
	meshes "4:--dp,2,--pp,2,--microbatches,2 4:--dp,4
	    4:--dp,2,--tp,2,--microbatches,2 4:--tp,2,--pp,2" -m g.safetensors \
	    --data "$GPL" --batch 6 --steps 3 --optimizer adamw --lr 0.01
	REF_TAG=a TRAINREF_SKIP=attn.k.bias check -m g.safetensors --data "$GPL" --batch 6 \
	    --steps 3 --optimizer adamw --lr 0.01
}

@test "interleaved --virtual 2 under TP: tp2 x pp2 on an mlp and a gpt stack, dp2 x tp2 x pp2 on the gpt, equal the reference and collx-dp on one rank" {
	data 11 4 3 1
	timeout 30 collx-dp --init mlp --dims 4,8,3,4 --seed 1 -o m.safetensors
	timeout 30 collx-dp --init gpt --dims 256,16,4,2,8 --seed 1 -o g.safetensors
	timeout 120 "$PY" "$REF" train mlp m.safetensors X.npy Y.npy 11 3 sgd 0.1 \
	    r.safetensors r.csv + train gpt g.safetensors "$GPL" - 7 2 sgd 0.5 \
	    rg.safetensors rg.csv
	# each chunk's tp_stage sums over the TP group; a run whose replicated
	# tensors differ between TP ranks fails (pipe_tp_verify)
	meshes "4:--tp,2,--pp,2,--schedule,interleaved,--microbatches,3" \
	    -m m.safetensors -i X.npy -t Y.npy --batch 11 --steps 3 --lr 0.1
	check -m m.safetensors --data X.npy --targets Y.npy --batch 11 \
	    --steps 3 --lr 0.1
	meshes "4:--tp,2,--pp,2,--schedule,interleaved,--microbatches,2
	    8:--dp,2,--tp,2,--pp,2,--schedule,interleaved,--virtual,2" \
	    -m g.safetensors --data "$GPL" --batch 7 --steps 2 --lr 0.5
	REF_TAG=g check -m g.safetensors --data "$GPL" --batch 7 --steps 2 \
	    --lr 0.5
}

@test "checkpoints of interleaved under TP (AdamW): tp2 x pp2 resumed on its mesh gives its bytes; as dp2, and dp2's as dp2 x tp2 x pp2 under ZeRO 1, equal an uninterrupted run" {
	data 12 4 4 5
	timeout 30 collx-dp --init mlp --dims 4,8,4,4 --seed 5 -o m.safetensors
	O=(-i X.npy -t Y.npy --batch 9 --microbatches 2 --optimizer adamw
	    --lr 0.01)
	IL=(--tp 2 --pp 2 --schedule interleaved)
	train 4 full -m m.safetensors "${O[@]}" "${IL[@]}" --steps 6
	timeout 60 collx-run -n 4 --timeout 20 -- collx-train -m m.safetensors \
	    "${O[@]}" "${IL[@]}" --steps 3 --checkpoint il.safetensors -q
	timeout 60 collx-run -n 2 --timeout 20 -- collx-train -m m.safetensors \
	    "${O[@]}" --dp 2 --steps 3 --checkpoint d2.safetensors -q
	train 4 same --resume il.safetensors "${O[@]}" "${IL[@]}" --steps 6
	train 2 ild2 --resume il.safetensors "${O[@]}" --dp 2 --steps 6
	train 8 d2il --resume d2.safetensors "${O[@]}" --dp 2 "${IL[@]}" \
	    --zero 1 --steps 6
	resumed_equal "ild2 d2il"
}

@test "checkpoints: dp2 resumed as pp2 and back equal an uninterrupted run; the same mesh gives its bytes; collx-dp and collx-pipe files resume too" {
	data 10 4 4 3
	timeout 30 collx-dp --init mlp --dims 4,8,4,4 --seed 3 -o m.safetensors
	O=(-i X.npy -t Y.npy --batch 5 --microbatches 2 --lr 0.05 --momentum 0.9)
	train 2 full -m m.safetensors "${O[@]}" --dp 2 --steps 6
	timeout 60 collx-run -n 2 --timeout 20 -- collx-train -m m.safetensors \
	    "${O[@]}" --dp 2 --steps 3 --checkpoint dp.safetensors -q
	timeout 60 collx-run -n 2 --timeout 20 -- collx-train -m m.safetensors \
	    "${O[@]}" --pp 2 --steps 3 --checkpoint pp.safetensors -q
	train 2 same --resume dp.safetensors "${O[@]}" --dp 2 --steps 6
	train 2 dppp --resume dp.safetensors "${O[@]}" --pp 2 --steps 6
	train 2 ppdp --resume pp.safetensors "${O[@]}" --dp 2 --steps 6
	train 4 pp4 --resume dp.safetensors "${O[@]}" --pp 4 --steps 6
	resumed_equal "dppp ppdp pp4"
	# collx-train's file resumed by collx-dp; collx-pipe's and collx-dp's
	# by collx-train
	D=(--data X.npy --targets Y.npy --batch 5 --lr 0.05 --momentum 0.9 -q)
	timeout 60 collx-dp --resume dp.safetensors "${D[@]}" --steps 6 \
	    -o tdp.safetensors
	timeout 60 collx-run -n 2 --timeout 20 -- collx-pipe -m m.safetensors \
	    "${O[@]}" --steps 3 --checkpoint pipe.safetensors -q
	timeout 60 collx-dp -m m.safetensors "${D[@]}" --steps 3 \
	    --checkpoint dpck.safetensors
	train 4 frompipe --resume pipe.safetensors "${O[@]}" --dp 2 --pp 2 \
	    --steps 6
	train 4 fromdp --resume dpck.safetensors "${O[@]}" --dp 2 --pp 2 \
	    --steps 6
	for t in dp frompipe fromdp; do
		timeout 30 "$PY" "$DPREF" cmp tfull.safetensors "t$t.safetensors" \
		    1e-5 1e-6 >/dev/null
	done
}

# Two steps of a 2-layer mlp stack (4 -> 8 -> 3, 3 -> 8 -> 3), batch 8 in
# 2 micro-batches, on 4 ranks with timing rows t{rank}.csv, a trace tr.json
# and -v; its output in $output.
# usage: timed MESH-OPTIONS...
timed() {
	data 8 4 3 4
	timeout 30 collx-dp --init mlp --dims 4,8,3,2 --seed 4 -o m.safetensors
	run timeout 60 collx-run -n 4 --timeout 20 -- collx-train -m m.safetensors \
	    -i X.npy -t Y.npy --batch 8 --steps 2 --microbatches 2 \
	    --timing 't{rank}.csv' --trace tr.json -v "$@"
	echo "$output"
	[ "$status" -eq 0 ]
}

@test "--timing: pp rows and the dp allreduce with their axis and mesh place; the trace's allreduce spans; -v step lines and the summary" {
	timed --dp 2 --pp 2
	[ "$(grep -c 'collx-train: step [01] epoch [01] loss' <<<"$output")" -eq 2 ]
	grep -q 'collx-train: 2 steps, final loss' <<<"$output"
	[ "$(head -n 1 t3.csv)" = "program,op,algo,rank,world_size,dtype,count,bytes,iter,seconds,algbw_gbps,busbw_gbps,axis,pp,dp,tp,bubble,bubble_theory,peak_act_bytes" ]
	# rank 0's pipeline summary names whose figures it gives
	grep -q '^collx-train: 1f1b, 2 micro-batches, 2 stages (replica 0, shard 0): measured bubble ' <<<"$output"
	# rank 3: stage 1 of replica 1; 6 rows a step
	[ "$(grep -c ',pp,1,1,0,' t3.csv)" -eq 8 ]
	[ "$(grep -c '^collx-train,allreduce,.*,dp,1,1,0,' t3.csv)" -eq 2 ]
	[ "$(grep -c '^collx-train,step,.*,-,1,1,0,' t3.csv)" -eq 2 ]
	# its allreduce sent bytes; its sends, the gradients of its replica's
	# 4 samples at the stage's input, of width 3, back: 48 bytes a step
	awk -F, '$2 == "allreduce" && $8 <= 0 { exit 1 }' t3.csv
	[ "$(awk -F, '$2 == "send" { print $8 }' t3.csv | sort -u)" = 48 ]
	# replica 0's trace: an allreduce span per stage and step
	[ "$(grep -c '"cat":"allreduce"' tr.json)" -eq 4 ]
}

# The bubble of schedule S (1f1b, zb-h1) for M micro-batches on W stages,
# its closed form, to DIGITS decimals.
# usage: closed_form S M W DIGITS
closed_form() {
	awk -v s="$1" -v m="$2" -v w="$3" -v d="$4" 'BEGIN {
		k = s == "zb-h1" ? 3 : 1
		printf "%.*f\n", d, (w - 1) / (k * m + w - 1) }'
}

@test "--pp 2: rank 0 prints the measured bubble beside the closed form and each stage's; the timing rows' bubble columns; stage 0's peak activations are collx-pipe's" {
	data 8 4 4 7
	timeout 30 collx-dp --init mlp --dims 4,8,4,4 --seed 7 -o m.safetensors
	for s in 1f1b zb-h1; do
		run timeout 60 collx-run -n 2 --timeout 20 -- collx-train \
		    -m m.safetensors -i X.npy -t Y.npy --batch 8 --steps 2 \
		    --pp 2 --microbatches 4 --schedule $s --timing "$s{rank}.csv"
		echo "$output"
		[ "$status" -eq 0 ]
		grep -q "^collx-train: $s, 4 micro-batches, 2 stages: measured bubble 0\.[0-9]*, theory (W-1)/(.*) $(closed_form $s 4 2 4)\$" <<<"$output"
		grep -q '^  stage 0: layers 0-1, bubble 0\.[0-9]*, peak activations [0-9.]* MiB$' <<<"$output"
		grep -q '^  stage 1: layers 2-3, bubble 0\.[0-9]*, peak activations [0-9.]* MiB$' <<<"$output"
		# every pipeline row: a bubble in [0, 1) and the closed form
		awk -F, -v t="$(closed_form $s 4 2 6)" 'NR > 1 && $13 == "pp" {
			n++; if ($17 < 0 || $17 >= 1 || $18 != t) exit 1 }
		    END { exit n != 16 }' "${s}0.csv" "${s}1.csv"
	done
	# collx-pipe, the same model and micro-batches: stage 0's peak bytes
	timeout 60 collx-run -n 2 --timeout 20 -- collx-pipe -m m.safetensors \
	    -i X.npy -t Y.npy --microbatches 4 --schedule 1f1b --steps 2 -q \
	    --timing 'p{rank}.csv'
	peak=$(awk -F, 'END { print $19 }' 1f1b0.csv)
	[ "$peak" -gt 0 ]
	[ "$peak" = "$(awk -F, 'END { print $17 }' p0.csv)" ]
	# one stage: no pipeline summary
	run timeout 60 collx-run -n 2 --timeout 20 -- collx-train \
	    -m m.safetensors -i X.npy -t Y.npy --batch 8 --steps 1 \
	    --microbatches 4
	[ "$status" -eq 0 ]
	[[ "$output" == *"collx-train: 1 steps, final loss"* ]]
	[[ "$output" != *"bubble"* ]]
}

@test "checkpoints under TP (AdamW): dp2 x tp2 resumed as pp2 and back, tp2 x pp2 as dp4 and back equal an uninterrupted run; the same mesh gives its bytes" {
	data 12 4 4 5
	timeout 30 collx-dp --init mlp --dims 4,8,4,4 --seed 5 -o m.safetensors
	O=(-i X.npy -t Y.npy --batch 9 --microbatches 2 --optimizer adamw
	    --lr 0.01)
	train 4 full -m m.safetensors "${O[@]}" --dp 2 --tp 2 --steps 6
	# NAME:WORLD:MESH, checkpoints after 3 steps
	for mesh in "dt:4:--dp 2 --tp 2" "tp:4:--tp 2 --pp 2" "d4:4:--dp 4" \
	    "p2:2:--pp 2"; do
		IFS=: read -r name w opts <<<"$mesh"
		timeout 60 collx-run -n "$w" --timeout 20 -- collx-train \
		    -m m.safetensors "${O[@]}" $opts --steps 3 \
		    --checkpoint "$name.safetensors" -q
	done
	train 4 same --resume dt.safetensors "${O[@]}" --dp 2 --tp 2 --steps 6
	train 2 dtpp --resume dt.safetensors "${O[@]}" --pp 2 --steps 6
	train 4 ppdt --resume p2.safetensors "${O[@]}" --dp 2 --tp 2 --steps 6
	train 4 tpd4 --resume tp.safetensors "${O[@]}" --dp 4 --steps 6
	train 4 d4tp --resume d4.safetensors "${O[@]}" --tp 2 --pp 2 --steps 6
	resumed_equal "dtpp ppdt tpd4 d4tp"
}

@test "--timing under TP: the tp allreduce rows with their bytes; -v lines and the summary give the bytes sent per axis; the trace's TP sums within forwards and backwards" {
	timed --tp 2 --pp 2
	[ "$(grep -cE 'collx-train: step [01] .*; sent pp [0-9]+ dp 0 tp [1-9][0-9]* B\)$' <<<"$output")" -eq 2 ]
	grep -qE '^collx-train: rank 0 sent pp [1-9][0-9]* dp 0 tp [1-9][0-9]* bytes$' <<<"$output"
	# rank 3: TP rank 1 of stage 1; no dp row
	[ "$(grep -c '^collx-train,allreduce,ring,.*,tp,1,0,1,' t3.csv)" -eq 2 ]
	[ "$(grep -c ',dp,1,0,1,' t3.csv)" -eq 0 ]
	# A ring allreduce of n floats over 2 ranks sends n/2 reducing and n/2
	# gathering. Stage 1 (layer 1: 3 -> 8 -> 3), per micro-batch of 4
	# samples: a sum of 4 x 3 floats forward (fc2's g) and of 4 x 3
	# backward (fc1's f, the input gradient for stage 0): 2 micro-batches
	# make 48 floats, 192 bytes a step. Stage 0 (4 -> 8 -> 3) sums no
	# input gradient: 96 bytes.
	[ "$(awk -F, '$2 == "allreduce" { print $7 "," $8 }' t3.csv | sort -u)" = 48,192 ]
	[ "$(awk -F, '$2 == "allreduce" { print $7 "," $8 }' t0.csv | sort -u)" = 24,96 ]
	# the trace of TP index 0: those sums, 2 a step on stage 0 and 4 on
	# stage 1, each within a forward or backward of its stage
	"$PY" - tr.json <<'PYEOF'
import json, sys
x = [e for e in json.load(open(sys.argv[1]))["traceEvents"]
     if e.get("ph") == "X"]
tp = [e for e in x if e["cat"] == "tp-allreduce"]
per = [sum(e["tid"] == j for e in tp) for j in (0, 1)]
assert per == [4, 8], per
for e in tp:
    assert any(o["tid"] == e["tid"] and o["cat"] in ("forward", "backward")
               and o["ts"] <= e["ts"] and
               e["ts"] + e["dur"] <= o["ts"] + o["dur"] for o in x), e
PYEOF
}

# Three steps of a 4-layer mlp stack (64 -> 1024 -> 64 each), batch 256 in
# 2 micro-batches, on 4 ranks with timing rows o{rank}.csv; the seconds of
# the allreduce_hidden rows, all ranks and steps together, in $hidden.
# Waiting ranks sleep instead of spinning (COLLX_SPIN_US=0), so that on
# fewer cores than ranks the sums' thread gets one while the backward runs.
# usage: overlapped MESH-OPTIONS...
overlapped() {
	data 256 64 64 9
	timeout 30 collx-dp --init mlp --dims 64,1024,64,4 --seed 9 \
	    -o m.safetensors
	rm -f o?.csv
	run env COLLX_SPIN_US=0 timeout 60 collx-run -n 4 --timeout 20 -- \
	    collx-train -m m.safetensors -i X.npy -t Y.npy --batch 256 \
	    --steps 3 --microbatches 2 --timing 'o{rank}.csv' -q "$@"
	echo "$output"
	[ "$status" -eq 0 ]
	hidden=$(awk -F, '$2 == "allreduce_hidden" { s += $10 }
	    END { printf "%.9f\n", s }' o?.csv)
}

@test "the DP axis sums its buckets beside the backward on dp2 x pp2 (1f1b and gpipe: stage 0; zb-h1: both stages' weight parts) and dp2 x tp2: --timing splits the sum into hidden and exposed rows, and some of it is hidden; not with --sync-every" {
	for m in "--pp 2" "--pp 2 --schedule gpipe" "--pp 2 --schedule zb-h1" \
	    "--tp 2"; do
		# A bucket summed while the backward still computed: posted
		# only at its end, every second of it would be waited for.
		# On a loaded machine the communication thread may not run
		# before the backward ends, so up to three runs.
		for try in 1 2 3; do
			# shellcheck disable=SC2086
			overlapped --dp 2 $m
			echo "$m, run $try: hidden $hidden s"
			if awk -v h="$hidden" 'BEGIN { exit !(h > 0) }'; then
				break
			fi
		done
		awk -v h="$hidden" 'BEGIN { exit !(h > 0) }'
		for r in 0 1 2 3; do
			# ranks 2 and 3 hold stage 1, which sends its last
			# backward's input gradient before it sums
			n=3
			case $r,$m in
			[23],"--pp 2" | [23],*gpipe) n=0 ;;
			esac
			[ "$(grep -c '^collx-train,allreduce,.*,dp,' "o$r.csv")" -eq 3 ]
			[ "$(grep -c '^collx-train,allreduce_hidden,.*,dp,' "o$r.csv")" -eq "$n" ]
			[ "$(grep -c '^collx-train,allreduce_exposed,.*,dp,' "o$r.csv")" -eq "$n" ]
		done
	done
	# drifting replicas sum parameters after the update: the rows as
	# before, no split
	overlapped --dp 2 --pp 2 --sync-every 2
	[ "$(grep -c '^collx-train,allreduce,.*,dp,' o0.csv)" -eq 3 ]
	[ "$(grep -c 'allreduce_hidden\|allreduce_exposed' o0.csv)" -eq 0 ]
}
