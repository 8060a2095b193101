#!/bin/bash
# The schedules' bubble on paper: collx-pipe --print-schedule's table for
# W = 8, 16, 32 stages and M = W, 2W, 3W, 4W micro-batches (every pass one
# clock: F = B = W = 1), idle cells over all cells, beside the published
# closed forms: GPipe and 1F1B (W-1)/(M+W-1), ZB-H1 (W-1)/(3M+W-1).
# Prints the README's Markdown table. usage: examples/pipe-bubble-table.sh
set -eu
here=$(cd "$(dirname "$0")" && pwd)
export PATH="${COLLX_BIN:-$here/../bin}:$PATH"

# The table's bubble line "bubble X (I idle of C cells)" as "X = I/C".
bubble() {
	collx-pipe --print-schedule --world-size "$1" --microbatches "$2" \
	    --schedule "$3" |
	    sed -n 's|^bubble \([0-9.]*\) (\([0-9]*\) idle of \([0-9]*\) cells)$|\1 = \2/\3|p'
}

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
