#!/bin/bash
# collx demo: tensor files, a 4-rank launch, allreduce with every algorithm,
# data-parallel training of a tiny GPT with ring allreduce vs a
# parameter server, and a transformer block split by heads and by
# sequence. Runs locally on embedded defaults in under a minute.
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

say "Done. Next: man -l man/man7/collx.7, and examples/ for more."
