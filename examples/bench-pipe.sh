#!/bin/bash
# Pipeline benchmark: an 8-layer mlp stack (width 512) on W = 2 and 4
# stages, M = 1..32 micro-batches, GPipe, 1F1B, ZB-H1 and interleaved
# 1F1B (V = 2 chunks per rank): median step time, measured bubble beside
# the schedule's formula (collx-pipe's summary: (W-1)/(M+W-1), ZB-H1's
# (W-1)/(3M+W-1) for M >= W, interleaved's (W-1)/(VM+W-1) for M a
# multiple of W, its table's otherwise), every stage's peak activation
# memory;
# then collx-pipe against the PyTorch Gloo peer (examples/peers/torch_pipe.py,
# GPipe over send/recv) at M = 8, one thread per rank, median of
# interleaved rounds (ROUNDS=0 leaves the peer out); and a chart of the
# bubble against M beside the formula. examples/results/README.md's chart comes from
# `examples/bench-pipe.sh examples/results`.
# usage: examples/bench-pipe.sh [OUTDIR]   (OUTDIR keeps pipe-sweep.csv,
#        pipe-peer.csv and pipe-bubble.png; env BATCH, STEPS, ROUNDS)
set -eu
here=$(cd "$(dirname "$0")" && pwd)
export PATH="${COLLX_BIN:-$here/../bin}:$PATH"
out=${1:-.}
mkdir -p "$out"
out=$(cd "$out" && pwd)
batch=${BATCH:-256} steps=${STEPS:-6} rounds=${ROUNDS:-5}
work=$(mktemp -d "${TMPDIR:-/tmp}/collx-bench-pipe.XXXXXX")
trap 'rm -rf "$work"' EXIT
cd "$work"

collx-dp --init mlp --dims 512,512,512,8 --seed 1 -o mlp8.safetensors
collx-tensor create --shape "$batch",512 --fill randn --seed 1 -o X.npy
collx-tensor create --shape "$batch",512 --fill randn --seed 2 -o Y.npy

# One collx-pipe run; prints: median step seconds (rank 0, steps after the
# first), measured bubble, the schedule's formula's, and every stage's
# peak activation bytes (joined by ';').
pipe() {
	local w=$1 m=$2 s=$3 sum
	rm -f t.csv
	sum=$(collx-run -n "$w" -- collx-pipe -m mlp8.safetensors -i X.npy \
		-t Y.npy --microbatches "$m" --schedule "$s" --steps "$steps" \
		--lr 0.01 --timing t.csv)
	awk -F, '$2 == "step" && $4 == 0 && $9 > 0 { print $10 }' t.csv | sort -g |
		awk '{ v[NR] = $1 } END { printf "%s ", v[int((NR + 1) / 2)] }'
	sed -n 's/.*measured bubble \([0-9.]*\), theory .* \([0-9.]*\)$/\1 \2/p' \
		<<<"$sum" | tr '\n' ' '
	awk -F, '$2 == "step" { p[$4] = $NF; if ($4 + 1 > n) n = $4 + 1 }
		END { for (j = 0; j < n; j++) printf "%s%s", j ? ";" : "", p[j]; print "" }' t.csv
}

echo "world,micro,schedule,step_s,bubble,bubble_theory,peak_act_bytes_by_stage" \
	>"$out/pipe-sweep.csv"
printf '%5s %5s %-11s %10s %8s %8s  %s\n' W M sched step_ms bubble theory \
	"peak_act_KiB by stage"
for w in 2 4; do
	for m in 1 2 4 8 16 32; do
		for s in gpipe 1f1b zb-h1 interleaved; do
			read -r t b th p < <(pipe "$w" "$m" "$s")
			echo "$w,$m,$s,$t,$b,$th,$p" >>"$out/pipe-sweep.csv"
			awk -v w="$w" -v m="$m" -v s="$s" -v t="$t" -v b="$b" -v th="$th" -v p="$p" \
				'BEGIN { printf "%5d %5d %-11s %10.2f %8.4f %8.4f ", w, m, s, t * 1e3, b, th
				n = split(p, v, ";")
				for (j = 1; j <= n; j++) printf " %8.1f", v[j] / 1024; print "" }'
		done
	done
done

# collx-pipe (every schedule) against the peer at M = 8, rounds interleaved.
against_peer() {
	for r in $(seq "$rounds"); do
		for w in 2 4; do
			for s in gpipe 1f1b zb-h1 interleaved; do
				read -r t _ < <(pipe "$w" 8 "$s")
				echo "$r,$w,collx-pipe $s,$t" >>"$out/pipe-peer.csv"
			done
			# one thread per rank for torch's OpenBLAS too, as collx-pipe has
			t=$(OPENBLAS_NUM_THREADS=1 /usr/bin/python3 "$here/peers/torch_pipe.py" mlp8.safetensors X.npy \
				Y.npy "$w" 8 "$steps" 0.01 | sed -n 's/.*median_step_s=\([0-9.e-]*\).*/\1/p')
			echo "$r,$w,torch gloo gpipe,$t" >>"$out/pipe-peer.csv"
		done
	done
	printf '\n%5s  %-22s %12s %10s\n' W who median_ms vs_peer
	for w in 2 4; do
		peer=$(awk -F, -v w="$w" '$2 == w && $3 == "torch gloo gpipe" { print $4 }' \
			"$out/pipe-peer.csv" | sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }')
		for who in "collx-pipe gpipe" "collx-pipe 1f1b" "collx-pipe zb-h1" \
			"collx-pipe interleaved" "torch gloo gpipe"; do
			awk -F, -v w="$w" -v who="$who" '$2 == w && $3 == who { print $4 }' \
				"$out/pipe-peer.csv" | sort -g | awk -v w="$w" -v who="$who" -v p="$peer" \
				'{ v[NR] = $1 } END { m = v[int((NR + 1) / 2)]
				printf "%5d  %-22s %12.2f %9.2fx\n", w, who, m * 1e3, p / m }'
		done
	done
}
if [ "$rounds" -gt 0 ]; then
	echo "round,world,who,step_s" >"$out/pipe-peer.csv"
	against_peer
fi

# gnuplot itself: collx-plot's kinds (busbw, latency, p2p, scaling, loss,
# pipeline) have no chart of a value against M with a formula beside it
# (its loss kind would label the axes step and loss).
if ! command -v gnuplot >/dev/null; then
	echo "no gnuplot: no chart"
else
	# one data file per series: gnuplot joins the points of a file
	for w in 2 4; do
		for s in gpipe 1f1b zb-h1 interleaved; do
			awk -F, -v w="$w" -v s="$s" '$1 == w && $3 == s { print $2, $5 }' \
				"$out/pipe-sweep.csv" >"bubble-$w-$s.dat"
		done
	done
	gnuplot <<GP
set terminal pngcairo size 900,500
set output "$out/pipe-bubble.png"
set title "collx-pipe: bubble vs micro-batches (8-layer mlp, width 512)"
set xlabel "micro-batches M"
set ylabel "idle fraction of a step"
set logscale x 2
set xrange [1:32]
set yrange [0:1]
set key outside right
f(m, w) = (w - 1.0) / (m + w - 1.0)
z(m, w) = m >= w ? (w - 1.0) / (3 * m + w - 1.0) : (2 * w - m - 1.0) / (2 * m + 2 * w - 1.0)
i(m, w) = (w - 1.0) / (2 * m + w - 1.0)
plot "bubble-2-gpipe.dat" with linespoints title "W=2 GPipe", \
     "bubble-2-1f1b.dat" with linespoints title "W=2 1F1B", \
     "bubble-2-zb-h1.dat" with linespoints title "W=2 ZB-H1", \
     "bubble-4-gpipe.dat" with linespoints title "W=4 GPipe", \
     "bubble-4-1f1b.dat" with linespoints title "W=4 1F1B", \
     "bubble-4-zb-h1.dat" with linespoints title "W=4 ZB-H1", \
     "bubble-2-interleaved.dat" with linespoints title "W=2 interleaved V=2", \
     "bubble-4-interleaved.dat" with linespoints title "W=4 interleaved V=2", \
     f(x, 2) with lines dashtype 2 title "(W-1)/(M+W-1), W=2", \
     f(x, 4) with lines dashtype 2 title "(W-1)/(M+W-1), W=4", \
     z(x, 2) with lines dashtype 3 title "ZB-H1's, W=2", \
     z(x, 4) with lines dashtype 3 title "ZB-H1's, W=4", \
     i(x, 2) with lines dashtype 4 title "interleaved's (M a multiple of W), W=2", \
     i(x, 4) with lines dashtype 4 title "interleaved's (M a multiple of W), W=4"
GP
	echo "chart: $out/pipe-bubble.png"
fi
