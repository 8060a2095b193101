#!/bin/bash
# The classic tensor-parallel exercise: train an MLP (2 -> 64 -> 1) on
# two-moons with its hidden layer split over ranks (Megatron: fc1 column-
# parallel, fc2 row-parallel, one allreduce forward and one backward) and
# check that the TP loss curve and the trained weights equal plain
# single-process training. The data is made here (awk writes the .npy
# files, no Python); the model comes from collx-dp --init.
# usage: examples/tp-moons.sh [RANKS [STEPS]]   (defaults 2 and 200)
set -eu
here=$(cd "$(dirname "$0")" && pwd)
export PATH="${COLLX_BIN:-$here/../bin}:$PATH"
ranks=${1:-2}
steps=${2:-200}
work=$(mktemp -d "${TMPDIR:-/tmp}/collx-tp-moons.XXXXXX")
trap 'rm -rf "$work"' EXIT
cd "$work"

# Two interleaved half circles with Gaussian noise (sd 0.1), n points:
# X.npy [n, 2] and Y.npy [n, 1] (labels 0 and 1), float32 .npy files.
moons() {
	LC_ALL=C awk -v n="$1" -v seed=7 '
	function byte4(bits) {
		printf "%c%c%c%c", bits % 256, int(bits / 256) % 256,
		    int(bits / 65536) % 256, int(bits / 16777216) % 256 >out
	}
	# IEEE 754 binary32, little-endian (normal numbers and zero)
	function f32(x,   s, e, m) {
		if (x == 0) { byte4(0); return }
		s = x < 0; if (s) x = -x
		e = int(log(x) / log(2))
		while (x >= 2 ^ (e + 1)) e++
		while (x < 2 ^ e) e--
		m = int((x / 2 ^ e - 1) * 8388608 + 0.5)
		if (m == 8388608) { m = 0; e++ }
		byte4(s * 2147483648 + (e + 127) * 8388608 + m)
	}
	function gauss() { return sqrt(-2 * log(1 - rand())) * cos(6.283185307179586 * rand()) }
	# the .npy header: magic, version 1.0, length, dict padded to 64
	function header(shape,   h, len) {
		h = "{'"'"'descr'"'"': '"'"'<f4'"'"', '"'"'fortran_order'"'"': False, '"'"'shape'"'"': " shape ", }"
		len = 64 * int((10 + length(h) + 1 + 63) / 64) - 10
		while (length(h) < len - 1) h = h " "
		printf "\223NUMPY%c%c%c%c%s\n", 1, 0, len % 256, int(len / 256), h >out
	}
	BEGIN {
		srand(seed)
		out = "X.npy"; header("(" n ", 2)")
		for (i = 0; i < n; i++) {
			t = 3.141592653589793 * (i % (n / 2)) / (n / 2 - 1)
			if (i < n / 2) { x = cos(t); y = sin(t) }
			else { x = 1 - cos(t); y = 0.5 - sin(t) }
			f32(x + 0.1 * gauss()); f32(y + 0.1 * gauss())
		}
		out = "Y.npy"; header("(" n ", 1)")
		for (i = 0; i < n; i++) f32(i < n / 2 ? 0 : 1)
	}'
}

echo "== two-moons, 200 points, and a fresh MLP 2 -> 64 -> 1"
moons 200
collx-tensor info X.npy Y.npy
collx-dp --init mlp --dims 2,64,1 --seed 1 -o mlp.safetensors

train() {	# MODE RANKS TAG
	collx-run -n "$2" -- collx-tp --layer mlp --mode "$1" -m mlp.safetensors \
	    -i X.npy --train --targets Y.npy --steps "$steps" --lr 0.5 \
	    -o "trained-$3.safetensors" --loss-csv "loss-$3.csv" \
	    --timing "timing-$3.csv" -q
}
echo "== training $steps full-batch SGD steps: serial, tp and ulysses on $ranks ranks"
train serial 1 serial
train tp "$ranks" tp
train ulysses "$ranks" ulysses

echo "== loss (mean squared error) of each step"
printf '%6s %12s %12s %12s\n' step serial tp ulysses
paste -d, loss-serial.csv loss-tp.csv loss-ulysses.csv | awk -F, -v s="$steps" '
	NR > 1 && ((NR - 2) % (s / 10 < 1 ? 1 : int(s / 10)) == 0 || NR == s + 1) {
		printf "%6d %12.6f %12.6f %12.6f\n", $1, $3, $9, $15
	}'

echo "== the trained weights agree (collx-tensor diff, rtol 1e-4)"
for t in tp ulysses; do
	for name in fc1.weight fc1.bias fc2.weight fc2.bias; do
		collx-tensor get -o "a.npy" "trained-serial.safetensors" "$name"
		collx-tensor get -o "b.npy" "trained-$t.safetensors" "$name"
		collx-tensor diff -q --rtol 1e-4 --atol 1e-5 b.npy a.npy
	done
	echo "$t: trained weights equal serial training's"
done

echo "== where a tp step's time goes (rank 0, median over the steps)"
awk -F, 'NR > 1 && $4 == 0 { if (!($14 in t)) order[++k] = $14
		t[$14] = t[$14] " " $10; b[$14] = $13 }
	END { for (i = 1; i <= k; i++) { p = order[i]; n = split(t[p], v, " "); asort_(v, n)
		printf "  %-28s %9.1f us  %6d bytes sent\n", p, v[int((n + 1) / 2)] * 1e6, b[p] } }
	function asort_(a, n,   i, j, x) { for (i = 2; i <= n; i++) { x = a[i]
		for (j = i - 1; j >= 1 && a[j] > x; j--) a[j + 1] = a[j]; a[j + 1] = x } }' \
    timing-tp.csv

echo "== the loss curves, TP and Ulysses against serial training, as a chart"
chart=${TP_MOONS_CHART:-${TMPDIR:-/tmp}/collx-tp-moons-loss.png}
collx-plot --kind loss --title "two-moons MLP: tp and ulysses on $ranks ranks vs serial" \
    -o "$chart" loss-serial.csv loss-tp.csv loss-ulysses.csv
echo "chart (kept): $chart"
