#!/bin/bash
# The schedules' bubble on paper: collx-pipe --print-schedule's table for
# W = 8, 16, 32 stages and M = W, 2W, 3W, 4W micro-batches (every pass one
# clock: F = B = W = 1), idle cells over all cells, beside the published
# closed forms: GPipe and 1F1B (W-1)/(M+W-1), ZB-H1 (W-1)/(3M+W-1); with
# the argument interleaved, interleaved 1F1B at V = 2 and 4 chunks per
# rank (a chunk's pass one clock) beside Megatron's (W-1)/(VM+W-1).
# Prints the Markdown table of examples/results/README.md.
# usage: examples/pipe-bubble-table.sh [interleaved]
set -eu
here=$(cd "$(dirname "$0")" && pwd)
export PATH="${COLLX_BIN:-$here/../bin}:$PATH"

# The table's bubble line "bubble X (I idle of C cells)" as "X = I/C".
# usage: bubble W M SCHEDULE [collx-pipe options...]
bubble() {
	collx-pipe --print-schedule --world-size "$1" --microbatches "$2" \
	    --schedule "$3" "${@:4}" |
	    sed -n 's|^bubble \([0-9.]*\) (\([0-9]*\) idle of \([0-9]*\) cells)$|\1 = \2/\3|p'
}

if [ "${1:-}" = interleaved ]; then
	echo "| W | M | interleaved, V=2 | (W-1)/(2M+W-1) | interleaved, V=4 | (W-1)/(4M+W-1) |"
	echo "| --- | --- | --- | --- | --- | --- |"
	for w in 8 16 32; do
		for m in "$w" $((2 * w)) $((3 * w)) $((4 * w)); do
			printf '%s\t%s\t%s\t%s\n' "$w" "$m" \
			    "$(bubble "$w" "$m" interleaved --virtual 2)" \
			    "$(bubble "$w" "$m" interleaved --virtual 4)"
		done
	done | awk -F'\t' '{ w = $1; m = $2
		printf "| %d | %d | %s | %.4f | %s | %.4f |\n", w, m, $3,
		    (w - 1) / (2 * m + w - 1), $4, (w - 1) / (4 * m + w - 1) }'
	exit
fi
echo "| W | M | GPipe | 1F1B | (W-1)/(M+W-1) | ZB-H1 | (W-1)/(3M+W-1) |"
echo "| --- | --- | --- | --- | --- | --- | --- |"
for w in 8 16 32; do
	for m in "$w" $((2 * w)) $((3 * w)) $((4 * w)); do
		printf '%s\t%s\t%s\t%s\t%s\n' "$w" "$m" "$(bubble "$w" "$m" gpipe)" \
		    "$(bubble "$w" "$m" 1f1b)" "$(bubble "$w" "$m" zb-h1)"
	done
done | awk -F'\t' '{ w = $1; m = $2
	printf "| %d | %d | %s | %s | %.4f | %s | %.4f |\n", w, m, $3, $4,
	    (w - 1) / (m + w - 1), $5, (w - 1) / (3 * m + w - 1) }'
