#!/bin/bash
# ZeRO-3 speed (issue 29): a GPT (d_model 256, 4 layers, 4 heads, seq 128,
# batch 8, AdamW) on 2 network namespaces x 2 ranks, links shaped to each
# RATE in turn: collx-dp --zero 3 --prefetch 1 beside --prefetch 0,
# --zero 2, hybrid sharding (--zero 3 --shard-group host) and PyTorch DDP
# on Gloo (examples/peers/torch_ddp.py, plain allreduce, the same
# architecture and data, its own initialization). Rounds interleaved (every
# method once a round); each figure the median over rounds of a run's mean
# step after the first. For collx also rank 0's bytes a step and, under
# ZeRO-3, its gather exposed share (-v). Needs root (ip netns, tc); the
# DDP rows need PyTorch. Measure on an idle machine. With OLD_BIN, another
# build's collx-dp runs each collx method too, in the same rounds (rows
# "old ..."; "vs zero2" against its own --zero 2). Under each table, the
# least exposed gather share any prefetch can reach at that rate: a step's
# two gathers bring each host the other's half of the P parameters (hier,
# 2 hosts), 4P bytes over its link, G seconds at RATE, while the compute
# they can hide behind is at most ZeRO-2's compute row (C, its median):
# the share is at least 1 - C/G. Without resharding after forward
# (--reshard-after-forward no, a row of its own) one gather a step, 2P
# bytes, all before forward uses: hidden at most behind the forward's
# compute, about C/3 (a backward computes about twice a forward).
# The ranks start as ssh starts them, with a bare environment; an
# OPENBLAS_CORETYPE set here goes with them (collx-run -x), for collx and
# the peer alike.
# usage: examples/bench-fsdp.sh [ROUNDS [RATES]]   (3, "10gbit 1gbit");
# env STEPS (12), BATCH (8), OLD_BIN, OPENBLAS_CORETYPE.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
export PATH="${COLLX_BIN:-$here/../bin}:$PATH"
rounds=${1:-3}
rates=${2:-10gbit 1gbit}
steps=${STEPS:-12}
batch=${BATCH:-8}
seq=128
PY=/usr/bin/python3
TEXT=/usr/share/common-licenses/GPL-3
work=$(mktemp -d)
cleanup() {
	if [ -n "${NETNS_TAG:-}" ]; then netns_teardown; fi
	rm -rf "$work"
}
trap cleanup EXIT
cd "$work"
. "$here/../tests/lib/netns.bash"
netns_available || { echo "bench-fsdp.sh: needs root and ip netns" >&2; exit 1; }
torch=1
"$PY" -c 'import torch.distributed' 2>/dev/null || torch=0

cx=("--zero 3 --prefetch 1" "--zero 3 --prefetch 0" "--zero 2"
    "--zero 3 --prefetch 1 --shard-group host"
    "--zero 3 --prefetch 1 --reshard-after-forward no")
runs=()
for m in "${cx[@]}"; do
	runs+=("collx:$m")
	if [ -n "${OLD_BIN:-}" ]; then runs+=("old:$m"); fi
done
collx-dp --init gpt --dims "256,256,4,4,$seq" --seed 1 -o gpt.safetensors
port=29700
t0=$SECONDS
for rate in $rates; do
	netns_setup 2 --rate "$rate"
	netns_fake_ssh "$work/ssh"
	hosts="$(netns_addr 0):2,$(netns_addr 1):2"
	fwd=()
	[ -z "${OPENBLAS_CORETYPE:-}" ] || fwd=(-x OPENBLAS_CORETYPE)
	for r in $(seq "$rounds"); do
		for run in "${runs[@]}"; do
			tool=${run%%:*} m=${run#*:}
			dp=$(command -v collx-dp)
			[ "$tool" = collx ] || dp=$OLD_BIN/collx-dp
			port=$((port + 1))
			tm=()
			if [ "$tool $m" = "collx --zero 2" ]; then
				rm -f t.csv
				tm=(--timing "$work/t.csv")
			fi
			# shellcheck disable=SC2086
			collx-run -H "$hosts" --ssh "$work/ssh" "${fwd[@]}" \
			    --master "$(netns_addr 0):$port" -- \
			    "$dp" -m "$work/gpt.safetensors" \
			    --data "$TEXT" --batch "$batch" --steps "$steps" \
			    --optimizer adamw --iface eth0 -v "${tm[@]}" \
			    --loss-csv "$work/l.csv" $m 2>log >/dev/null
			# rank 0's mean compute a step after the first, and P
			[ ${#tm[@]} -eq 0 ] || awk -F, '$2 == "compute" &&
			    $4 == 0 && $9 > 0 { s += $10; n++; p = $7 }
			    END { print s / n, p }' t.csv >>"$rate.c"
			# mean step after the first, bytes a step, exposed gathers
			awk -F, 'NR > 2 { s += $5; n++ } NR == 2 { b = $7 }
			    END { printf "%.6f %s ", s / n, b }' l.csv >>"$rate.txt"
			g=$(sed -n 's/.*gather exposed \([0-9]*\)%$/\1/p' log)
			echo "${g:--} $tool ${m// /_}" >>"$rate.txt"
		done
		if [ "$torch" = 1 ]; then
			port=$((port + 1))
			collx-run -H "$hosts" --ssh "$work/ssh" "${fwd[@]}" \
			    --master "$(netns_addr 0):$port" \
			    -x GLOO_SOCKET_IFNAME=eth0 -x OPENBLAS_NUM_THREADS=1 -- \
			    "$PY" "$here/peers/torch_ddp.py" "$TEXT" 256 4 4 "$seq" \
			    "$batch" "$steps" plain >torch.log 2>&1 || true
			sed -n 's/.*mean step \([0-9.]*\) s, .*/\1 - - torch DDP/p' \
			    torch.log | grep . >>"$rate.txt" ||
			    echo "bench-fsdp.sh: torch DDP failed: $(tail -n 1 torch.log)" >&2
		fi
		echo "bench-fsdp.sh: $rate, round $r of $rounds: $((SECONDS - t0)) s" >&2
	done
	netns_teardown
	echo "2 namespaces x 2 ranks at $rate: gpt d_model 256, 4 layers, seq $seq," \
	    "batch $batch, adamw, $steps steps x $rounds rounds (median)"
	awk -v tok=$((batch * seq)) '{ k = $4 " " $5; s[k] = s[k] " " $1
	    b[k] = $2; g[k] = g[k] " " $3
	    if (!(k in seen)) { seen[k] = 1; order[++n] = k } }
	    function med(str,   a, m, i, j, t) { m = split(str, a, " ")
		for (i = 1; i <= m; i++) for (j = i + 1; j <= m; j++)
			if (a[j] + 0 < a[i] + 0) { t = a[i]; a[i] = a[j]; a[j] = t }
		return a[int((m + 1) / 2)] }
	    END { printf "  %-56s %9s %9s %12s %8s %9s\n", "method", "step_ms",
		    "tokens/s", "bytes/step", "exposed", "vs zero2"
		for (i = 1; i <= n; i++) { k = order[i]; t = med(s[k])
			split(k, w, " "); base = med(s[w[1] " --zero_2"])
			if (base == "") base = med(s["collx --zero_2"])
			e = med(g[k]); name = k; gsub(/_/, " ", name)
			printf "  %-56s %9.1f %9.0f %12s %8s %8.2fx\n", name,
			    t * 1e3, tok / t, b[k], e == "-" ? "-" : e "%",
			    t / base } }' "$rate.txt"
	case $rate in
	*gbit) bits=${rate%gbit}e9 ;;
	*mbit) bits=${rate%mbit}e6 ;;
	*) bits= ;;
	esac
	[ -z "$bits" ] || awk -v bits="$bits" '{ c = c " " $1; p = $2 }
	    function med(str,   a, m, i, j, t) { m = split(str, a, " ")
		for (i = 1; i <= m; i++) for (j = i + 1; j <= m; j++)
			if (a[j] + 0 < a[i] + 0) { t = a[i]; a[i] = a[j]; a[j] = t }
		return a[int((m + 1) / 2)] }
	    END { for (k = 4; k >= 2; k -= 2) { g = k * p * 8 / bits
		cm = k == 4 ? med(c) : med(c) / 3
		printf "  gathers over a link %.1f ms a step (%dP bytes, P %d), " \
		    "compute %.1f ms: exposed share >= %.0f%%%s\n", g * 1e3, k,
		    p, cm * 1e3, (g > cm ? 100 * (1 - cm / g) : 0),
		    k == 2 ? " without resharding (the forward alone)" : "" } }' "$rate.c"
done
echo "  ($((SECONDS - t0)) s in all)"
