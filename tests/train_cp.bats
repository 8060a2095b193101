#!/usr/bin/env bats
# collx-train --cp: each gpt sequence sharded over C ranks, ring and zigzag,
# alone and with dp, tp, pp (interleaved too) and ZeRO, checked against an independent
# float64 PyTorch training (tests/lib/piperef.py) and collx-dp on one rank
# (tests/lib/trainref.py checks both); checkpoints across meshes with and
# without cp; the mesh's layout; the cp timing rows' bytes against their
# closed form; and the refusals, on every rank before any rank talks.
# (Experts under --cp: train_cp_moe.bats.)
load lib/common
load lib/train

setup() {
	train_env
	timeout 30 collx-dp --init gpt --dims 256,16,2,2,8 --seed 1 \
	    -o g.safetensors
}

teardown() {
	common_teardown
}

@test "gpt --cp 2 (zigzag, ring), --cp 4 ring (more ranks than heads), dp2 x cp2 (ZeRO 0 and 2), cp2 x tp2, cp2 x pp2, dp2 x cp2 x tp2 equal the reference and collx-dp on one rank" {
	timeout 120 "$PY" "$REF" train gpt g.safetensors "$GPL" - 7 3 sgd 0.5 \
	    r.safetensors r.csv
	meshes "2:--cp,2 2:--cp,2,--cp-mode,ring 4:--cp,4,--cp-mode,ring
	    4:--dp,2,--cp,2 4:--dp,2,--cp,2,--zero,2 4:--cp,2,--tp,2
	    4:--cp,2,--pp,2,--microbatches,2
	    8:--dp,2,--cp,2,--tp,2,--microbatches,2" \
	    -m g.safetensors --data "$GPL" --batch 7 --steps 3 --lr 0.5
	check -m g.safetensors --data "$GPL" --batch 7 --steps 3 --lr 0.5
}

@test "a sequence of 512 (chunks of 128 and 256: the causal diagonal blocks go in stripes) on cp2 zigzag and ring equals the reference and collx-dp on one rank" {
	timeout 30 collx-dp --init gpt --dims 256,16,1,2,512 --seed 1 \
	    -o g512.safetensors
	timeout 120 "$PY" "$REF" train gpt g512.safetensors "$GPL" - 2 2 sgd \
	    0.5 r.safetensors r.csv
	meshes "2:--cp,2 2:--cp,2,--cp-mode,ring" -m g512.safetensors \
	    --data "$GPL" --batch 2 --steps 2 --lr 0.5
	check -m g512.safetensors --data "$GPL" --batch 2 --steps 2 --lr 0.5
}

@test "AdamW: cp2 x pp2 under zb-h1 and dp2 x cp2 (ring) equal the reference and collx-dp on one rank" {
	timeout 120 "$PY" "$REF" train gpt g.safetensors "$GPL" - 6 3 adamw \
	    0.01 ra.safetensors ra.csv
	meshes "4:--cp,2,--pp,2,--microbatches,2,--schedule,zb-h1
	    4:--dp,2,--cp,2,--cp-mode,ring" -m g.safetensors --data "$GPL" \
	    --batch 6 --steps 3 --optimizer adamw --lr 0.01
	REF_TAG=a TRAINREF_SKIP=attn.k.bias check -m g.safetensors \
	    --data "$GPL" --batch 6 --steps 3 --optimizer adamw --lr 0.01
}

@test "interleaved --virtual 2 on cp2 x pp2 (a ring per chunk over one CP group) and cp2 x tp2 x pp2 equal the reference and collx-dp on one rank" {
	timeout 30 collx-dp --init gpt --dims 256,16,4,2,8 --seed 1 \
	    -o g4.safetensors
	timeout 120 "$PY" "$REF" train gpt g4.safetensors "$GPL" - 7 2 sgd 0.5 \
	    r.safetensors r.csv
	meshes "4:--cp,2,--pp,2,--schedule,interleaved,--microbatches,2
	    8:--cp,2,--tp,2,--pp,2,--schedule,interleaved,--microbatches,2" \
	    -m g4.safetensors --data "$GPL" --batch 7 --steps 2 --lr 0.5
	check -m g4.safetensors --data "$GPL" --batch 7 --steps 2 --lr 0.5
}

@test "checkpoints (momentum): cp2's resumed on cp2 gives its bytes, as dp2 x pp2 and cp2 x tp2 equals an uninterrupted run; dp2's resumed as dp2 x cp2 too" {
	# momentum, not AdamW: attn.k.bias's gradient is zero but for the
	# rounding, which AdamW's normalisation makes a step (train.bats)
	O=(--data "$GPL" --batch 6 --microbatches 2 --lr 0.5 --momentum 0.9)
	train 2 full -m g.safetensors "${O[@]}" --cp 2 --steps 6
	timeout 60 collx-run -n 2 --timeout 20 -- collx-train -m g.safetensors \
	    "${O[@]}" --cp 2 --steps 3 --checkpoint cp.safetensors -q
	timeout 60 collx-run -n 2 --timeout 20 -- collx-train -m g.safetensors \
	    "${O[@]}" --dp 2 --steps 3 --checkpoint dp.safetensors -q
	train 2 same --resume cp.safetensors "${O[@]}" --cp 2 --steps 6
	train 4 cpdppp --resume cp.safetensors "${O[@]}" --dp 2 --pp 2 \
	    --steps 6
	train 4 cptp --resume cp.safetensors "${O[@]}" --cp 2 --tp 2 \
	    --cp-mode ring --steps 6
	train 4 dpcp --resume dp.safetensors "${O[@]}" --dp 2 --cp 2 --steps 6
	resumed_equal "cpdppp cptp dpcp"
}

@test "--print-mesh: rank = ((pp*D + dp)*C + cp)*T + tp, a cp column and the cp groups" {
	run timeout 10 collx-train --print-mesh --world-size 8 --tp 2 --cp 2 \
	    --ranks-per-host 4
	[ "$status" -eq 0 ]
	[ "$output" = "$(printf '%s\n' \
	    '# mesh: dp 2 x cp 2 x tp 2 x pp 1 = 8 ranks' \
	    'rank,pp,dp,cp,tp,host' \
	    '0,0,0,0,0,0' '1,0,0,0,1,0' '2,0,0,1,0,0' '3,0,0,1,1,0' \
	    '4,0,1,0,0,1' '5,0,1,0,1,1' '6,0,1,1,0,1' '7,0,1,1,1,1' \
	    'tp groups of 2: [0 1] [2 3] [4 5] [6 7]' \
	    'cp groups of 2: [0 2] [1 3] [4 6] [5 7]' \
	    'dp groups of 2: [0 4] [1 5] [2 6] [3 7]' \
	    'pp groups of 1: [0] [1] [2] [3] [4] [5] [6] [7]')" ]
	run timeout 10 collx-train --print-mesh --world-size 12 --cp 3 --pp -1
	[ "$status" -eq 0 ]
	[ "${lines[0]}" = "# mesh: dp 1 x cp 3 x tp 1 x pp 4 = 12 ranks" ]
	[ "${lines[12]}" = "10,3,0,1,0,0" ]
}

@test "--timing: the cp rows carry the ring's bytes, 2(3C-2) x B x S/C x d x layers floats a step, and hidden_us within their time; -v names the cp bytes" {
	for c in 2:zigzag 4:ring; do
		C=${c%%:*}
		run timeout 60 collx-run -n "$C" --timeout 20 -- collx-train \
		    -m g.safetensors --data "$GPL" --batch 7 --steps 2 --lr 0.5 \
		    --cp "$C" --cp-mode "${c#*:}" --timing "t$C.{rank}.csv" -v
		[ "$status" -eq 0 ]
		[[ "$output" == *"rank 0 sent pp 0 dp "*" tp 0 cp "*" bytes"* ]]
		head -n 1 "t$C.0.csv" | grep -q ',axis,pp,dp,cp,tp,bubble,bubble_theory,peak_act_bytes,hidden_us$'
		want=$((2 * (3 * C - 2) * 7 * (8 / C) * 16 * 2))
		for ((r = 0; r < C; r++)); do
			awk -F, -v w="$want" -v r="$r" -v a="${c#*:}" '
			    $13 == "cp" { n++
				if ($2 != "sendrecv" || $3 != a || $7 != w ||
				    $8 != 4 * w || $16 != r || $21 < 0 ||
				    $21 > $10 * 1e6 + 1) { print; bad = 1 } }
			    END { exit bad || n != 2 }' "t$C.$r.csv"
		done
	done
}

@test "refusals: a sequence the ranks do not divide, a model that is not a gpt, a mesh that is not the world (exit 3 on every rank, before any rank talks); --sync-every, --cp 0 and a bad --cp-mode (usage)" {
	G=(-m g.safetensors --data "$GPL" --batch 8)
	refused 3 "--cp 3 --cp-mode zigzag: sequence length 8 is not divisible by 2 x --cp = 6" \
	    "${G[@]}" --cp 3
	refused 3 "--cp 3 --cp-mode ring: sequence length 8 is not divisible by --cp 3" \
	    "${G[@]}" --cp 3 --cp-mode ring
	timeout 30 collx-dp --init gpt --dims 256,16,2,2,6 --seed 1 \
	    -o g6.safetensors
	refused 2 "--cp 2 --cp-mode zigzag: sequence length 6 is not divisible by 2 x --cp = 4" \
	    -m g6.safetensors --data "$GPL" --batch 8 --cp 2
	data 8 4 3 1
	timeout 30 collx-dp --init mlp --dims 4,6,3,2 --seed 1 -o m.safetensors
	refused 2 "--cp 2: context parallelism shards a gpt's sequences, and the model is mlp" \
	    -m m.safetensors -i X.npy -t Y.npy --batch 8 --cp 2
	refused 3 "mesh --dp 2 x --tp 1 x --pp 1 x --cp 2 = 4 ranks, but the world has 3" \
	    "${G[@]}" --dp 2 --cp 2
	# the ring divides 6 where zigzag's 4 chunks do not
	run timeout 60 collx-run -n 2 --timeout 20 -- collx-train -q \
	    -m g6.safetensors --data "$GPL" --batch 4 --steps 1 --cp 2 \
	    --cp-mode ring
	[ "$status" -eq 0 ]
	run timeout 30 collx-run -n 2 --timeout 10 -- collx-train "${G[@]}" \
	    --steps 1 --cp 2 --sync-every 2
	[ "$status" -eq 2 ]
	[[ "$output" == *"--cp 2 and --sync-every 2: the ranks of a sequence must step with the same gradients"* ]]
	run timeout 10 collx-train "${G[@]}" --steps 1 --cp 0
	[ "$status" -eq 2 ]
	run timeout 10 collx-train "${G[@]}" --steps 1 --cp 2 --cp-mode spiral
	[ "$status" -eq 2 ]
	[[ "$output" == *"--cp-mode: want ring or zigzag, not 'spiral'"* ]]
}
