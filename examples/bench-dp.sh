#!/bin/bash
# collx-dp speed, side by side with what it is measured against.
# 1. Overlap: a GPT (d_model 256, 4 layers, 4 heads, seq 128, batch 8,
#    AdamW) on 2 ranks in 2 network namespaces joined by 1 Gbit/s links:
#    median step time with overlapped bucket allreduces against
#    --no-overlap, rounds interleaved, and the share of communication the
#    overlap hid (from the --timing rows). Needs root (ip netns, tc).
# 2. One rank: training tokens/s of collx-dp against PyTorch on the CPU
#    (examples/peers/torch_gpt.py, one thread, same model and AdamW) at
#    d_model 64 (seq 64), 128 and 256 (seq 128), 4 layers, 4 heads,
#    batch 8: wall-clock time a step.
# 3. Slow links (slow, not in all): the GPT of 1. on 2 ranks in 2 network
#    namespaces joined by 1 Gbit/s links, then on 4 ranks as 2 namespaces
#    of 2 ranks (collx-dp's --sync auto picks the hierarchical allreduce),
#    STEPS steps (200): tokens/s and the loss after the last step of every
#    method, both toolkits. collx-dp:
#    plain (overlapped), --wire bf16, --wire int8, --powersgd R
#    (--powersgd-start K), --sync-every 16. PyTorch DDP on Gloo
#    (examples/peers/torch_ddp.py, the same architecture and data, its own
#    initialization): plain, fp16_compress_hook (PyTorch 1.13 runs
#    bf16_compress_hook on CUDA only), powerSGD_hook rank R from step K.
#    tokens/s from the mean step after the first (a local SGD step that
#    syncs counts with the ones that do not), rounds interleaved, each
#    figure the median over rounds. Needs root. Env STEPS=200,
#    PSGD_RANK=4, PSGD_START=10, BATCH=8, CASES="2 2x2" (the layouts to
#    run: 2 ranks, 2 x 2). Says how long each round took
#    on stderr and the whole on stdout. With the defaults a round of one
#    layout trains 8 x 200 steps, about 25 minutes on an idle machine of
#    2 cores (steps of 0.7 s for collx, 1.2 s for PyTorch), so 3 rounds of
#    both take about 2.5 hours. A check that everything runs, 13 minutes
#    on a loaded machine: STEPS=20 PSGD_START=4 bench-dp.sh slow 1
# usage: examples/bench-dp.sh [overlap|single|slow|all] [ROUNDS]   (all, 3)
set -eu
here=$(cd "$(dirname "$0")" && pwd)
export PATH="${COLLX_BIN:-$here/../bin}:$PATH"
what=${1:-all}
rounds=${2:-3}
PY=/usr/bin/python3
TEXT=/usr/share/common-licenses/GPL-3
work=$(mktemp -d)
cleanup() {
	if [ -n "${NETNS_TAG:-}" ]; then netns_teardown; fi
	rm -rf "$work"
}
trap cleanup EXIT
cd "$work"

median() { sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }

# Median step seconds of a loss CSV, the first step (warm-up) left out.
csv_step() { awk -F, 'NR > 2 { print $5 }' "$1" | median; }

overlap() {
	local steps=12 bucket=${BUCKET_MB:-2} batch=${BATCH:-8} r o t
	. "$here/../tests/lib/netns.bash"
	netns_available || { echo "bench-dp.sh: overlap needs root and ip netns" >&2; return 1; }
	netns_setup 2 --rate 1gbit
	netns_fake_ssh "$work/ssh"
	collx-dp --init gpt --dims 256,256,4,4,128 --seed 1 -o gpt.safetensors
	echo "overlap: gpt d_model 256, 4 layers, seq 128, batch $batch, adamw," \
	    "2 ranks on 1 Gbit/s links, --bucket-mb $bucket, $steps steps x $rounds rounds"
	for r in $(seq "$rounds"); do
		for o in overlap no-overlap; do
			t=$o
			[ "$o" = overlap ] && o=""
			collx-run -H "$(netns_hosts)" --ssh "$work/ssh" \
			    --master "$(netns_addr 0):29500" -- \
			    "$(command -v collx-dp)" -m "$work/gpt.safetensors" \
			    --data "$TEXT" --batch "$batch" --steps "$steps" \
			    --optimizer adamw --bucket-mb "$bucket" --iface eth0 -q \
			    --loss-csv "$work/l-$t-$r.csv" \
			    --timing "$work/t-$t-$r-{rank}.csv" ${o:+--$o}
			echo "$(csv_step "l-$t-$r.csv")" >>"s-$t"
		done
	done
	local a b
	a=$(median <s-overlap)
	b=$(median <s-no-overlap)
	# rank 0, steps after the first: communication, hidden, exposed
	for t in overlap no-overlap; do
		awk -F, -v t="$t" '$9 > 0 && $2 == "compute" { k += $10; n++ }
		    $9 > 0 && $2 == "allreduce" { c += $10 }
		    $9 > 0 && $2 == "allreduce_hidden" { h += $10 }
		    $9 > 0 && $2 == "allreduce_exposed" { e += $10 }
		    END { printf "  %-11s compute %.1f ms, communication %.1f ms (hidden %.1f, exposed %.1f: %.0f%% hidden) a step\n",
		        t ":", k / n * 1e3, c / n * 1e3, h / n * 1e3, e / n * 1e3, (c > 0 ? 100 * h / c : 0) }' \
		    t-"$t"-*-0.csv
	done
	awk -v a="$a" -v b="$b" 'BEGIN { printf "  median step: overlap %.1f ms, no-overlap %.1f ms, ratio %.2f\n",
	    a * 1e3, b * 1e3, a / b }'
	netns_teardown
}

# One rank against PyTorch: wall-clock seconds a step, both measured the
# same way (batch, forward, backward and the AdamW update; the first,
# warm-up step left out): collx-dp's loss CSV, torch_gpt.py's own clock.
# One thread each: collx-dp --threads 1, and for PyTorch set_num_threads(1)
# plus OPENBLAS_NUM_THREADS=1, since torch's BLAS (OpenBLAS) otherwise
# starts a thread per core of its own. Both link the same OpenBLAS, so any
# OPENBLAS_CORETYPE in the environment applies to both alike. Rounds are
# interleaved (collx, torch, collx, ...) so that load from others on the
# machine falls on both; the figure is the median over rounds of each
# run's median step.
single() {
	local spec d s k r c t
	echo "single rank: gpt, 4 layers, 4 heads, batch 8, adamw, one thread;" \
	    "wall seconds a step, median of $rounds interleaved rounds"
	# D_MODEL:SEQ:STEPS, each run a second or two
	for spec in 64:64:40 128:128:16 256:128:8; do
		IFS=: read -r d s k <<<"$spec"
		collx-dp --init gpt --dims "256,$d,4,4,$s" --seed 1 \
		    -o "g$d.safetensors"
		for r in $(seq "$rounds"); do
			collx-dp -m "g$d.safetensors" --data "$TEXT" --batch 8 \
			    --steps "$k" --optimizer adamw --threads 1 -q \
			    --loss-csv "l$d.csv"
			csv_step "l$d.csv" >>"c$d"
			OPENBLAS_NUM_THREADS=1 "$PY" "$here/peers/torch_gpt.py" \
			    "$TEXT" "$d" 4 4 "$s" 8 "$k" |
			    sed -n 's/.*median step \([0-9.]*\) s.*/\1/p' >>"t$d"
		done
		c=$(median <"c$d")
		t=$(median <"t$d")
		awk -v d="$d" -v s="$s" -v c="$c" -v t="$t" 'BEGIN {
		    printf "  d_model %3d seq %3d: collx-dp %7.0f tokens/s, torch %7.0f tokens/s, ratio %.2fx\n",
		    d, s, 8 * s / c, 8 * s / t, t / c }'
	done
}

# Mean seconds of the steps after the first, and the last step's loss, of
# a loss CSV: "SECONDS LOSS".
csv_mean_loss() {
	awk -F, 'NR > 2 { s += $5; n++ } NR > 1 { l = $3 }
	    END { printf "%.6f %s\n", n ? s / n : 0, l }' "$1"
}

# slow_case NAME HOSTS: every method of both toolkits on the ranks HOSTS
# gives collx-run (-H), ROUNDS interleaved rounds, each result a line
# "NAME TOOLKIT METHOD SECONDS LOSS" of slow.txt.
slow_case() {
	local name=$1 hosts=$2 r m t0
	for r in $(seq "$rounds"); do
		t0=$SECONDS
		for m in "${cx[@]}"; do
			port=$((port + 1))
			# shellcheck disable=SC2086
			collx-run -H "$hosts" --ssh "$ssh" --master "$(netns_addr 0):$port" -- \
			    "$(command -v collx-dp)" -m "$work/gpt.safetensors" \
			    --data "$TEXT" --batch "$batch" --steps "$steps" \
			    --optimizer adamw --iface eth0 -q --loss-csv "$work/l.csv" \
			    ${m#plain}
			echo "$name collx ${m// /_} $(csv_mean_loss l.csv)" >>slow.txt
		done
		for m in "${tx[@]}"; do
			port=$((port + 1))
			collx-run -H "$hosts" --ssh "$ssh" --master "$(netns_addr 0):$port" \
			    -x GLOO_SOCKET_IFNAME=eth0 -x OPENBLAS_NUM_THREADS=1 -- \
			    "$PY" "$here/peers/torch_ddp.py" "$TEXT" 256 4 4 "$seq" \
			    "$batch" "$steps" "$m" >torch.log 2>&1 || true
			sed -n "s/.*mean step \([0-9.]*\) s, .* loss \([0-9.]*\)$/$name torch $m \1 \2/p" \
			    torch.log | grep . >>slow.txt ||
			    echo "bench-dp.sh: $name torch $m failed: $(grep -v -i warn torch.log | tail -n 1)" >&2
		done
		echo "bench-dp.sh: slow, $name, round $r of $rounds: $((SECONDS - t0)) s" >&2
	done
}

# slow_table NAME TITLE: the medians over rounds of NAME's lines of slow.txt.
slow_table() {
	echo "$2"
	awk -v name="$1" -v tok=$((batch * seq)) '$1 == name { k = $2 " " $3
	    s[k] = s[k] " " $4; l[k] = l[k] " " $5
	    if (!(k in seen)) { seen[k] = 1; order[++n] = k } }
	    function med(str,   a, m, i, j, t) { m = split(str, a, " ")
		for (i = 1; i <= m; i++) for (j = i + 1; j <= m; j++)
			if (a[j] + 0 < a[i] + 0) { t = a[i]; a[i] = a[j]; a[j] = t }
		return a[int((m + 1) / 2)] }
	    END { base = med(s[order[1]])
		printf "  %-44s %10s %8s %9s\n", "method", "tokens/s", "loss", "vs plain"
		for (i = 1; i <= n; i++) { k = order[i]; t = med(s[k]); loss = med(l[k])
			gsub(/_/, " ", k)
			printf "  %-44s %10.0f %8.4f %8.2fx\n", k, tok / t, loss, base / t } }' slow.txt
}

slow() {
	local steps=${STEPS:-200} rk=${PSGD_RANK:-4} st=${PSGD_START:-10}
	local batch=${BATCH:-8} seq=128 ssh=$work/ssh port=29600 t0=$SECONDS a b
	local cases=${CASES:-2 2x2}
	local cx=(plain "--wire bf16" "--wire int8" "--powersgd $rk --powersgd-start $st" "--sync-every 16")
	local tx=(plain fp16 "powersgd:$rk:$st")
	. "$here/../tests/lib/netns.bash"
	netns_available || { echo "bench-dp.sh: slow needs root and ip netns" >&2; return 1; }
	/usr/bin/python3 -c 'import torch.distributed' 2>/dev/null ||
	    { echo "bench-dp.sh: slow needs PyTorch (python3-torch)" >&2; return 1; }
	netns_setup 2 --rate 1gbit
	netns_fake_ssh "$ssh"
	a=$(netns_addr 0)
	b=$(netns_addr 1)
	collx-dp --init gpt --dims "256,256,4,4,$seq" --seed 1 -o gpt.safetensors
	case " $cases " in *" 2 "*) slow_case 2 "$a,$b" ;; esac
	case " $cases " in *" 2x2 "*) slow_case 2x2 "$a:2,$b:2" ;; esac
	netns_teardown
	local desc="gpt d_model 256, 4 layers, seq $seq, batch $batch, adamw, $steps steps x $rounds rounds"
	[[ " $cases " != *" 2 "* ]] ||
	    slow_table 2 "slow links: 2 ranks in 2 namespaces on 1 Gbit/s links, $desc"
	[[ " $cases " != *" 2x2 "* ]] || slow_table 2x2 "slow links: 2 namespaces x 2 ranks (collx: --sync auto, hier) on 1 Gbit/s links, $desc"
	echo "  ($((SECONDS - t0)) s in all)"
}

case $what in
overlap) overlap ;;
single) single ;;
slow) slow ;;
all) single; overlap ;;
*) echo "usage: bench-dp.sh [overlap|single|slow|all] [ROUNDS]" >&2; exit 2 ;;
esac
