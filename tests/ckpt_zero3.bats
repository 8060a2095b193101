#!/usr/bin/env bats
# ZeRO checkpoints. As bad input: one from another model (its optimizer
# state another model's, spliced by ckpt_splice.py) is refused by collx-dp
# and collx-train --zero 3 with one line per rank, exit 3, and neither the
# trained model nor a checkpoint is left behind. Written: the writer
# streams the slices from their holders (peak RSS, -v's checkpoint params
# peak), in collx-dp and collx-train alike.

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

@test "peak RSS on 4 ranks: a ZeRO-3 checkpoint adds less than P/D parameter bytes to rank 0 (collx-train dp4, dp2 x pp2)" {
	need "GNU time" test -x /usr/bin/time
	timeout 30 collx-dp --init gpt --dims 256,256,8,4,32 --seed 1 -o g.safetensors
	for d in 4 2; do
		M=(--dp $d)
		[ $d = 4 ] || M+=(--pp 2)
		a=$(peak collx-train "${M[@]}")
		b=$(peak collx-train "${M[@]}" --checkpoint c$d.safetensors)
		echo "dp$d: rank 0 peak RSS: $a KiB without, $b KiB with the checkpoint" >&2
		[ -s c$d.safetensors ]
		[ $((b - a)) -lt $((6392320 * 4 / d / 1024)) ]
	done
}

# collx-train's ZeRO slices go to the writer as pieces, as collx-dp's do.
# The 8-layer gpt of zero3.bats: a layer 3280 floats, the embeddings'
# unit 4256 (wte 256 x 16, the largest tensor, 4096), P = 30496. The
# writer holds its slices and one tensor at a time: at most P/D + the
# largest unit; on dp4 exactly its slices (8 * 3280/4 + 4256/4 = 7624)
# and wte, the others their slices alone. The files' sha256 are those of
# the route before (1ea0b1a, which gathered the state onto replica 0),
# the same run: the same tensors in the same order, byte for byte, as
# OpenBLAS's Haswell kernels compute it (other sets' f32 sums round
# differently: OpenBLAS's own choice differs from machine to machine).
@test "collx-train --zero 1, 2, 3 checkpoints on dp2 x pp2, dp2 x tp2, dp4: the writer's params peak at most P/D + the largest unit, the previous route's bytes, resumed an uninterrupted run's bytes" {
	export OPENBLAS_CORETYPE=Haswell
	timeout 30 collx-dp --init gpt --dims 256,16,8,2,8 --seed 1 -o g.safetensors
	G=(-m g.safetensors --data "$GPL" --batch 4 --optimizer adamw --lr 0.01)
	declare -A sum=(
	    [dp2pp2]=89be677b55ed1ba0cf66bb2acaf04f627497ac42ec273ed67ce7a8f107c43c85
	    [dp2tp2]=a0d6a12adfe8952c877d90202a05bfc9544f38f58691375fa627ed59c9348c62
	    [dp4]=135ff30eb07d2f7e8eb6abde0094d1b8c6dc13e2396b51d280dd16bcc9fe8e4e
	    [dp4z3]=a066138fef94dc9a415c4dd13e21afdad0691f98cbecf5a36f1e1bf2124fc352)
	for m in dp2pp2 dp2tp2 dp4; do
		case $m in
		dp2pp2) M=(--dp 2 --pp 2) D=2 ;;
		dp2tp2) M=(--dp 2 --tp 2) D=2 ;;
		dp4) M=(--dp 4) D=4 ;;
		esac
		for z in 1 2 3; do
			T=(timeout 60 collx-run -n 4 --timeout 20 -- collx-train
			    "${G[@]}" "${M[@]}" --zero $z)
			run "${T[@]}" -v --steps 2 --checkpoint c.safetensors \
			    -o half.safetensors
			[ "$status" -eq 0 ]
			s=${sum[$m]}
			[ "$m$z" != dp43 ] || s=${sum[dp4z3]}
			[ "$(sha256sum <c.safetensors | cut -d' ' -f1)" = "$s" ]
			if [ $z = 3 ]; then
				peak=$(sed -n 's/^collx-train: rank 0: checkpoint params peak \([0-9]*\) bytes$/\1/p' <<<"$output")
				echo "$m: rank 0 checkpoint params peak $peak" >&2
				[ -n "$peak" ]
				[ "$peak" -le $(((30496 / D + 4256) * 4)) ]
				[ "$peak" -ge $((4096 * 4)) ]
				for r in 1 2 3; do
					p=$(sed -n "s/^collx-train: rank $r: checkpoint params peak \([0-9]*\) bytes$/\1/p" <<<"$output")
					[ -n "$p" ]
					[ "$p" -le $((30496 / D * 4)) ]
				done
				[ $m != dp4 ] || [ "$peak" -eq $(((7624 + 4096) * 4)) ]
				[ $m != dp4 ] || [ "$p" -eq $((7624 * 4)) ]
			fi
			"${T[@]}" -q --steps 4 -o full.safetensors
			"${T[@]}" -q --steps 4 --resume c.safetensors \
			    -o resumed.safetensors
			cmp full.safetensors resumed.safetensors
		done
	done
}
