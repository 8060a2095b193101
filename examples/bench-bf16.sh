#!/bin/bash
# --precision bf16 against f32 and against PyTorch's autocast
# (examples/peers/torch_autocast.py: the same GPT under
# torch.autocast("cpu", dtype=torch.bfloat16), DDP on Gloo on 2 ranks), one
# thread a rank:
#   gpt    a GPT of d_model 256, 4 layers, 4 heads, seq 128, global batch
#          BATCH (8), AdamW, STEPS steps (12): collx-dp f32, collx-dp bf16
#          and the peer, on 1 rank and on 2 (collx-run -n 2)
#   tp     collx-tp --layer block --mode tp --train on 2 ranks: a block of
#          d_model 256, 4 heads, d_ff 1024 on [8, 128, 256], f32 and bf16
#   pipe   collx-pipe on 2 ranks: an mlp stack of 4 layers 1024 -> 1024
#          -> 1024 on 256 rows in 4 micro-batches, f32 and bf16
# The step time of each run is its median step after the first (collx's
# loss CSV, the peer's own clock); each figure is the median over ROUNDS
# rounds that interleave every run. Then, with perf (linux-perf), the
# share of a bf16 gpt step (1 rank) spent in oneDNN's kernels: its JIT
# code and libdnnl, against every sample of the process.
# With OLD_BIN, another build's collx-dp also runs the gpt in bf16 in the
# same rounds (column "old bf16", and "bf16 vs old": old step / this one).
# Prints markdown tables.
# usage: examples/bench-bf16.sh [ROUNDS]   (ROUNDS 3)
#        env STEPS=12, BATCH=8, OLD_BIN
set -eu
here=$(cd "$(dirname "$0")" && pwd)
export PATH="${COLLX_BIN:-$here/../bin}:$PATH"
rounds=${1:-3}
steps=${STEPS:-12}
batch=${BATCH:-8}
seq=128
PY=/usr/bin/python3
TEXT=/usr/share/common-licenses/GPL-3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"

$PY -c 'import torch.distributed' 2>/dev/null ||
    { echo "bench-bf16.sh: needs PyTorch (python3-torch)" >&2; exit 1; }
if collx-dp --precision bf16 2>&1 | grep -q 'oneDNN (libdnnl)'; then
	echo "bench-bf16.sh: this collx was built without oneDNN" >&2
	exit 1
fi

# Median step seconds of a loss CSV, the first step (warm-up) left out.
csv_step() {
	awk -F, 'NR > 2 { print $5 }' "$1" | sort -g |
	    awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'
}

collx-dp --init gpt --dims "256,256,4,4,$seq" --seed 1 -o gpt.safetensors
collx-dp --init block --dims 256,4,1024 --seed 2 -o block.safetensors
collx-dp --init mlp --dims 1024,1024,1024,4 --seed 3 -o mlp.safetensors
collx-tensor create --shape 8,128,256 --fill randn --seed 4 -o BX.npy
collx-tensor create --shape 8,128,256 --fill randn --seed 5 -o BY.npy
collx-tensor create --shape 256,1024 --fill randn --seed 6 -o MX.npy
collx-tensor create --shape 256,1024 --fill randn --seed 7 -o MY.npy

# launch N PROGRAM ARGS...: on N ranks (collx-run -n N), one thread each
launch() {
	local n=$1
	shift
	if [ "$n" -eq 1 ]; then
		"$@"
	else
		collx-run -n "$n" --timeout 300 -x OPENBLAS_NUM_THREADS=1 -- "$@"
	fi
}

: >times.txt
for r in $(seq "$rounds"); do
	echo "bench-bf16.sh: round $r of $rounds" >&2
	for n in 1 2; do
		for p in f32 bf16 ${OLD_BIN:+old_bf16}; do
			dp=$(command -v collx-dp)
			[ "$p" != old_bf16 ] || dp=$OLD_BIN/collx-dp
			launch "$n" "$dp" -m gpt.safetensors \
			    --data "$TEXT" --batch "$batch" --steps "$steps" \
			    --optimizer adamw -q --precision "${p#old_}" \
			    --loss-csv l.csv
			echo "gpt_$n collx_$p $(csv_step l.csv)" >>times.txt
		done
		launch "$n" "$PY" "$here/peers/torch_autocast.py" "$TEXT" 256 4 4 \
		    "$seq" "$batch" "$steps" >torch.log 2>&1 || true
		sed -n "s/^torch autocast bf16 dp$n: median step \([0-9.]*\) s,.*/gpt_$n torch_autocast \1/p" \
		    torch.log | grep . >>times.txt ||
		    echo "bench-bf16.sh: torch failed: $(grep -v -i warn torch.log | tail -n 1)" >&2
	done
	for p in f32 bf16; do
		launch 2 "$(command -v collx-tp)" --layer block --mode tp \
		    -m block.safetensors -i BX.npy --train --targets BY.npy \
		    --steps "$steps" -q --precision "$p" --loss-csv l.csv
		echo "tp_block_2 collx_$p $(csv_step l.csv)" >>times.txt
		launch 2 "$(command -v collx-pipe)" -m mlp.safetensors -i MX.npy \
		    -t MY.npy --batch 256 --microbatches 4 --steps "$steps" -q \
		    --precision "$p" --loss-csv l.csv
		echo "pipe_mlp_2 collx_$p $(csv_step l.csv)" >>times.txt
	done
done

echo
echo "Step seconds, median of $rounds interleaved rounds (gpt: d_model 256, 4 layers, 4 heads, seq $seq, batch $batch; one thread a rank):"
echo
awk '{ k = $1 " " $2; s[k] = s[k] " " $3
    if (!($1 in seen)) { seen[$1] = 1; order[++n] = $1 } }
    function med(str,   a, m, i, j, t) {
	m = split(str, a, " ")
	for (i = 1; i <= m; i++) for (j = i + 1; j <= m; j++)
		if (a[j] + 0 < a[i] + 0) { t = a[i]; a[i] = a[j]; a[j] = t }
	return a[int((m + 1) / 2)] }
    END {
	print "| case | collx f32 | collx bf16 | torch autocast bf16 | bf16 vs f32 | bf16 vs torch |" \
	    (old ? " old bf16 | bf16 vs old |" : "")
	print "| --- | ---: | ---: | ---: | ---: | ---: |" (old ? " ---: | ---: |" : "")
	for (i = 1; i <= n; i++) { c = order[i]
		f = med(s[c " collx_f32"]); b = med(s[c " collx_bf16"])
		t = (c " torch_autocast") in s ? med(s[c " torch_autocast"]) : 0
		o = (c " collx_old_bf16") in s ? med(s[c " collx_old_bf16"]) : 0
		x = o ? sprintf(" %.4f | %.2fx |", o, o / b) : " - | - |"
		printf "| %s | %.4f | %.4f | %s | %.2fx | %s |%s\n", c, f, b,
		    t ? sprintf("%.4f", t) : "-", f / b,
		    t ? sprintf("%.2fx", t / b) : "-", old ? x : "" } }' \
    old="${OLD_BIN:+1}" times.txt

if command -v perf >/dev/null 2>&1 &&
    perf record -q -F 2000 -o perf.data -- collx-dp -m gpt.safetensors \
	--data "$TEXT" --batch "$batch" --steps "$steps" --optimizer adamw -q \
	--precision bf16 >/dev/null 2>&1; then
	echo
	perf report -i perf.data --no-children --sort dso --stdio 2>/dev/null |
	    awk '/^ +[0-9.]+%/ { p = $1; sub(/%/, "", p); all += p
		if ($0 ~ /\[JIT\]|libdnnl/) g += p }
		END { printf "GEMM share of a bf16 gpt step (perf, 1 rank): %.0f%% in oneDNN (JIT kernels and libdnnl)\n", g }'
else
	echo
	echo "GEMM share: perf is not installed or not permitted (apt-get install linux-perf)"
fi
