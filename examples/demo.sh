#!/bin/bash
# collx demo: tensor files, a 4-rank launch, allreduce with every algorithm,
# data-parallel training of a tiny GPT with ring allreduce vs a parameter
# server, a transformer block split by heads and by sequence, a 2-stage
# 1F1B pipeline with its schedule table, measured bubble and trace, and a
# collx-bench sweep with its chart (the trace and the chart kept, at the
# paths the demo prints).
# Runs locally on embedded defaults in about a minute.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
export PATH="${COLLX_BIN:-$here/../bin}:$PATH"
work=$(mktemp -d "${TMPDIR:-/tmp}/collx-demo.XXXXXX")
trap 'rm -rf "$work"' EXIT
cd "$work"

ranks=${DEMO_RANKS:-4}
text=${DEMO_TEXT:-/usr/share/common-licenses/GPL-3}
say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
run() { printf '$'; printf ' %q' "$@"; printf '\n'; "$@"; }

say "1. Tensor files: create, inspect, pack"
run collx-tensor create --shape 2,3 --dtype f32 --fill arange -o a.npy
run collx-tensor print a.npy
run collx-tensor create --shape 256,1024 --fill randn --seed 7 -o x.npy
run collx-tensor print x.npy
run collx-tensor pack a=a.npy x=x.npy -o both.safetensors
run collx-tensor info both.safetensors

say "2. Launch $ranks ranks: each sees its place in the group"
run collx-run -n "$ranks" --tag-output -- \
	sh -c 'echo "rank $COLLX_RANK of $COLLX_WORLD_SIZE, rendezvous at $COLLX_MASTER"'

say "3. Allreduce 1 MiB over $ranks ranks with every algorithm (checked)"
for algo in naive ring tree rd rabenseifner; do
	collx-run -n "$ranks" -- collx-allreduce -i x.npy -o "sum-$algo.npy" \
		--algo "$algo" --iters 20 --warmup 3 --timing timing.csv --check -q
done
# Rank 0's result equals ranks * x (x is the same on every rank).
collx-run -n "$ranks" -- collx-allreduce -i x.npy -o sum-ref.npy --op avg -q
run collx-tensor diff sum-ref.npy x.npy
printf '  %-13s %12s %14s\n' algorithm "median (us)" "busbw (GB/s)"
for algo in naive ring tree rd rabenseifner; do
	# rank 0's rows: column 10 is seconds, 12 busbw; the median of 20.
	awk -F, -v a="$algo" '$3 == a && $4 == 0 { print $10, $12 }' timing.csv |
		sort -n | awk -v a="$algo" '{ s[NR] = $1; b[NR] = $2 }
		END { m = int((NR + 1) / 2); printf "  %-13s %12.1f %14.2f\n", a, s[m] * 1e6, b[m] }'
done

say "4. Data-parallel training of a tiny GPT on $(basename "$text"), 2 ranks"
run collx-dp --init gpt --dims 256,32,2,2,16 --seed 1 -o gpt.safetensors
for sync in ring ps; do
	printf '\n-- gradients synced by %s\n' "$sync"
	collx-run -n 2 -- collx-dp -m gpt.safetensors --data "$text" --batch 16 \
		--steps 200 --optimizer adamw --lr 0.003 --sync "$sync" \
		-o "trained-$sync.safetensors" --loss-csv "loss-$sync.csv" -q
	awk -F, 'NR > 1 && ($1 % 25 == 0 || $1 == 199) {
		printf "  step %3d  loss %.4f  %8.0f tokens/s\n", $1, $3, $6 }' "loss-$sync.csv"
done
echo
collx-tensor diff trained-ring.safetensors trained-ps.safetensors --rtol 1e-4 --atol 1e-6 >diff.txt
echo "ring and parameter-server training agree: $(wc -l <diff.txt) tensors within tolerance"

say "5. A transformer block split over 2 ranks: by heads (tp) and by sequence (ulysses)"
run collx-dp --init block --dims 64,8,256,1 --seed 2 -o block.safetensors
run collx-tensor create --shape 2,32,64 --fill randn --seed 3 -o bx.npy
run collx-tensor create --shape 2,32,64 --fill randn --seed 4 -o bdy.npy
for mode in tp ulysses; do
	run collx-run -n 2 -- collx-tp --layer block --mode "$mode" \
		-m block.safetensors -i bx.npy -o "by-$mode.npy" --backward \
		--grad-output bdy.npy --check --timing "tp-$mode.csv"
	# rank 0's rows: communication phases and the bytes they sent
	awk -F, -v m="$mode" '$4 == 0 && $2 != "compute" && NR > 1 {
		printf "  %-8s %-28s %8d bytes sent\n", m, $14, $13 }' "tp-$mode.csv"
done

say "6. Pipeline parallelism: an 8-layer mlp stack on 2 stages, 1F1B, 8 micro-batches"
trace=${DEMO_TRACE:-${TMPDIR:-/tmp}/collx-demo-pipe.json}
run collx-pipe --print-schedule --schedule 1f1b --microbatches 8 --world-size 2
run collx-dp --init mlp --dims 256,256,256,8 --seed 1 -o mlp8.safetensors
collx-tensor create --shape 256,256 --fill randn --seed 1 -o px.npy
collx-tensor create --shape 256,256 --fill randn --seed 2 -o py.npy
run collx-run -n 2 -- collx-pipe -m mlp8.safetensors -i px.npy -t py.npy \
	--microbatches 8 --schedule 1f1b --steps 10 --lr 0.01 --trace "$trace"
echo "pipeline trace: $trace (open it in https://ui.perfetto.dev: a track per stage)"

say "7. collx-bench: an allreduce sweep of every algorithm on $ranks ranks"
chart=${DEMO_CHART:-${TMPDIR:-/tmp}/collx-demo-busbw.png}
run collx-run -n "$ranks" -- collx-bench coll --algo all -b 4K -e 4M -f 32 \
	-n 5 -w 2 --check --table -q
collx-run -n "$ranks" -- collx-bench coll --algo all -b 4K -e 4M -f 32 \
	-n 5 -w 2 --csv -q >sweep.csv
run collx-plot -o "$chart" sweep.csv
echo "busbw chart of the sweep: $chart"

say "Done. Next: man -l man/man7/collx.7, and examples/ for more."
