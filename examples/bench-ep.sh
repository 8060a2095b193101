#!/bin/bash
# Expert parallelism on one host: collx-train --dp 2 --ep 2 against the
# PyTorch expert-parallel peer (examples/peers/torch_ep.py: Gloo
# all_to_all_single, the same MoE gpt, data and AdamW, from the same
# weights), and collx's alltoall against its allgather dispatch at E = 4
# and 8 experts. An MoE gpt of d_model D (128), 2 layers of 4 heads, seq
# 64, top-2, every block an MoE; global batch BATCH (8), STEPS steps (8),
# 2 ranks of one thread. Step seconds: the median step after the first
# (collx-train's loss CSV, the peer's own clock); each figure the median
# over ROUNDS rounds that interleave every run. Prints a markdown table:
# per E the step of each, collx alltoall's speed-up over the peer and
# over allgather, the peer's and collx's last loss (the same model: they
# agree to float rounding), and the bytes one rank sent per step in the
# EP exchanges (the timing rows).
# usage: examples/bench-ep.sh [ROUNDS]   env STEPS=8 BATCH=8 D=128
set -eu
here=$(cd "$(dirname "$0")" && pwd)
export PATH="${COLLX_BIN:-$here/../bin}:$PATH"
rounds=${1:-3}
steps=${STEPS:-8}
batch=${BATCH:-8}
d=${D:-128}
PY=/usr/bin/python3
TEXT=/usr/share/common-licenses/GPL-3
$PY -c 'import torch.distributed' 2>/dev/null ||
    { echo "bench-ep.sh: needs PyTorch (python3-torch)" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"

# Median of the numbers on standard input.
median() {
	sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'
}

# Median step seconds of a loss CSV, the first step (warm-up) left out.
csv_step() {
	awk -F, 'NR > 2 { print $5 }' "$1" | median
}

run_collx() {	# E DISPATCH: one line "collx_DISPATCH_E SECONDS LOSS BYTES"
	collx-run -n 2 --timeout 120 -x OPENBLAS_NUM_THREADS=1 -- \
	    collx-train -q --dp 2 --ep 2 --dispatch "$2" -m "e$1.safetensors" \
	    --data "$TEXT" --batch "$batch" --steps "$steps" \
	    --optimizer adamw --loss-csv l.csv --timing "t.csv"
	echo "collx_$2_$1 $(csv_step l.csv) $(awk -F, 'END { print $3 }' \
	    l.csv) $(awk -F, '$13 == "ep" && $4 == 0 && $9 == 1 \
	    { b += $8 } END { print b }' t.csv)"
	rm -f t.csv
}

run_torch() {	# E: one line "torch_E SECONDS LOSS"
	local out
	out=$(collx-run -n 2 --timeout 120 -- "$PY" \
	    "$here/peers/torch_ep.py" "e$1.safetensors" "$TEXT" "$batch" \
	    "$steps")
	echo "$out" | sed -E "s/.*median step ([0-9.]+) s.*, loss ([0-9.]+),.*/torch_$1 \\1 \\2/"
}

for E in 4 8; do
	collx-dp --init gpt --dims "256,$d,2,4,64" --seed 1 --experts "$E" \
	    --topk 2 -o "e$E.safetensors"
done
: >raw.txt
for r in $(seq "$rounds"); do
	echo "bench-ep.sh: round $r of $rounds" >&2
	for E in 4 8; do
		run_collx "$E" alltoall >>raw.txt
		run_torch "$E" >>raw.txt
		run_collx "$E" allgather >>raw.txt
	done
done

# field F (2 seconds, 3 loss, 4 bytes) of WHO: the median over rounds
get() {
	awk -v w="$1" -v f="$2" '$1 == w { print $f }' raw.txt | median
}
echo "2 ranks of one host, MoE gpt d_model $d, 2 layers, top-2, batch $batch, median of $rounds rounds"
echo
echo "| E | collx alltoall s | torch ep s | collx allgather s | alltoall vs torch | alltoall vs allgather | loss collx / torch | EP bytes/step alltoall / allgather |"
echo "|---|---|---|---|---|---|---|---|"
for E in 4 8; do
	a=$(get "collx_alltoall_$E" 2)
	t=$(get "torch_$E" 2)
	g=$(get "collx_allgather_$E" 2)
	awk -v E="$E" -v a="$a" -v t="$t" -v g="$g" \
	    -v la="$(get "collx_alltoall_$E" 3)" -v lt="$(get "torch_$E" 3)" \
	    -v ba="$(get "collx_alltoall_$E" 4)" \
	    -v bg="$(get "collx_allgather_$E" 4)" 'BEGIN {
		printf "| %d | %.6f | %.6f | %.6f | %.2fx | %.2fx | %s / %s | %d / %d |\n",
		    E, a, t, g, t / a, g / a, la, lt, ba, bg }'
done
