#!/usr/bin/env bats
# ZeRO-3 checkpoints as bad input: one from another model (its optimizer
# state another model's, spliced by ckpt_splice.py) is refused by collx-dp
# and collx-train --zero 3 with one line per rank, exit 3, and neither the
# trained model nor a checkpoint is left behind.

load lib/common
load lib/train

setup() {
	train_env
}

teardown() {
	common_teardown
}

@test "a ZeRO-3 checkpoint from another model: one line per rank, exit 3, nothing written" {
	G=(--data "$GPL" --batch 6 --optimizer adamw --lr 0.01 --zero 3)
	timeout 30 collx-dp --init gpt --dims 256,16,2,2,8 --seed 1 -o g.safetensors
	timeout 30 collx-dp --init gpt --dims 256,32,2,2,8 --seed 1 -o h.safetensors
	for m in g h; do
		timeout 60 collx-run -n 2 --timeout 20 -- collx-dp -q \
		    -m $m.safetensors "${G[@]}" --steps 2 \
		    --checkpoint c$m.safetensors -o t$m.safetensors
	done
	"$PY" "$BATS_TEST_DIRNAME/ckpt_splice.py" cg.safetensors \
	    ch.safetensors x.safetensors
	for p in collx-dp collx-train; do
		O=()
		[ $p = collx-dp ] || O=(--dp 2)
		run timeout 60 collx-run -n 2 --timeout 20 -- $p -q \
		    --resume x.safetensors "${G[@]}" "${O[@]}" --steps 4 \
		    --checkpoint bc.safetensors -o bad.safetensors
		[ "$status" -eq 3 ]
		[ "$(grep -c "^$p: rank [01]: x.safetensors: 'optim\.m\..*' is not 16 f32 values$" <<<"$output")" -eq 2 ]
		[ ! -e bad.safetensors ]
		[ ! -e bc.safetensors ]
	done
}

# gpt d 256, 8 layers: P = 6392320 parameters, 25.6 MB. Rank 0 writes a
# ZeRO-3 checkpoint a tensor at a time from the slices' holders, so the
# checkpoint adds to its peak RSS less than a quarter of the parameter
# bytes (gathering the model whole would add them all, and its moments).
# usage: peak PROGRAM EXTRA...: rank 0's peak RSS in KiB
peak() {
	rm -f rss.*
	timeout 120 collx-run -n 4 --timeout 30 -- sh -c \
	    '/usr/bin/time -f "%M" -o "rss.$COLLX_RANK" "$@"' sh \
	    "$(command -v "$1")" -m g.safetensors --data "$GPL" --batch 4 \
	    --steps 2 --optimizer adamw --zero 3 -q "${@:2}" >&2
	cat rss.0
}

@test "peak RSS on 4 ranks: a ZeRO-3 checkpoint adds less than P/4 parameter bytes to rank 0 (collx-dp)" {
	need "GNU time" test -x /usr/bin/time
	timeout 30 collx-dp --init gpt --dims 256,256,8,4,32 --seed 1 -o g.safetensors
	a=$(peak collx-dp)
	b=$(peak collx-dp --checkpoint c.safetensors)
	echo "rank 0 peak RSS: $a KiB without, $b KiB with the checkpoint" >&2
	[ -s c.safetensors ]
	[ $((b - a)) -lt $((6392320 * 4 / 4 / 1024)) ]
}
