#!/bin/bash
# The planner's validation (issue 34): on W ranks of this host, fit a cost
# model for each model, then `collx-bench plan --validate`, which runs
# every mesh collx-bench mesh runs and prints predicted beside measured;
# per model the median and worst absolute error and whether the predicted
# fastest mesh is the measured fastest (or within 5% of it). Targets:
# median <= 10%, worst <= 25%, fastest within 5%. Run it on an idle
# machine: a busy one moves millisecond steps by tens of percent, and the
# fit and the runs then see different machines.
# Results in OUTDIR: cost-MODEL.json, validate-MODEL.csv (plan's CSV with
# measured_s and error), predicted-MODEL.svg and breakdown-MODEL.svg
# (collx-plot), summary.txt (the verdict lines and the load).
# usage: examples/bench-plan.sh [OUTDIR]
#   env W=4 (ranks), STEPS=8 (per run, the first not timed), REPEAT=3
#   (rounds at most), COLLX_BIN=DIR (the programs; default bin/)
set -eu
out=${1:-bench-out/plan}
bin=${COLLX_BIN:-$(cd "$(dirname "$0")/.." && pwd)/bin}
W=${W:-4}
STEPS=${STEPS:-8}
REPEAT=${REPEAT:-3}
mkdir -p "$out"
: >"$out/summary.txt"
echo "# $(date -u +%FT%TZ) $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg), W=$W" |
    tee -a "$out/summary.txt"

# name arch dims batch: a gpt whose every mesh of 4 collx-train admits
# (4 heads, 4 layers) and an mlp of 4 layers
run() {
	local name=$1 arch=$2 dims=$3 batch=$4
	"$bin/collx-bench" fit -N "$W" --arch "$arch" --dims "$dims" -q \
	    -o "$out/cost-$name.json"
	"$bin/collx-bench" plan --cost "$out/cost-$name.json" --hosts 1 \
	    --ranks-per-host "$W" --arch "$arch" --dims "$dims" --batch "$batch" \
	    --validate --steps "$STEPS" --repeat "$REPEAT" --csv \
	    >"$out/validate-$name.csv" 2>"$out/verdict-$name.txt"
	echo "$name ($arch $dims, batch $batch): $(cat "$out/verdict-$name.txt")" |
	    tee -a "$out/summary.txt"
	"$bin/collx-bench" plan --cost "$out/cost-$name.json" --hosts 1 \
	    --ranks-per-host "$W" --arch "$arch" --dims "$dims" --batch "$batch" \
	    --top 20 --csv >"$out/plan-$name.csv"
	if command -v gnuplot >/dev/null; then
		"$bin/collx-plot" -q "$out/validate-$name.csv" -o "$out/predicted-$name.svg"
		"$bin/collx-plot" -q "$out/plan-$name.csv" -o "$out/breakdown-$name.svg"
	fi
}

run gpt gpt 256,128,4,4,64 32
run mlp mlp 256,1024,256,4 256
echo "# load after: $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$out/summary.txt"
