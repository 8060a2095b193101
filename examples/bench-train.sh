#!/bin/bash
# collx-train's meshes of 4 ranks, and collx-dp's overlapped data
# parallelism, against PyTorch's dp2 x tp2
# (examples/peers/torch_train.py: DDP on Gloo across, Megatron TP with f/g
# operators within, the same GPT, data and AdamW, from the same weights):
# a GPT of d_model 256, 4 layers, 4 heads, seq 128, global batch BATCH (8),
# STEPS steps (12), one thread a rank. Tokens/s of the global batch from
# the median step after the first (collx-train's loss CSV, the peer's own
# clock), the median over ROUNDS rounds that interleave every run, and the
# ratio to the peer's. Cases:
#   local  4 ranks on this host (collx-run -n 4)
#   netns  2 network namespaces of 2 ranks each, joined by 1 Gbit/s links
#          (tests/lib/netns.bash; TP within a namespace, DP across); needs
#          root and ip netns, skipped, saying so, without them
#   planner  on the netns cluster, collx-bench mesh -H (its own model of
#          the same shape, random tokens, its default SGD, one round):
#          every mesh of 4 fastest first, with each axis's share
#   overlap  on the netns cluster, collx-train --dp 4 of OLD_BIN (a build
#          without the DP overlap) and of this build, interleaved: the
#          median step, rank 0's mean timing rows, the bytes a step over
#          a host's link, the 4 ranks' CPU seconds a step (main threads;
#          the others: the communication thread), and the most an overlap
#          confined to the backward can give (see overlap_bound below)
# Prints a markdown table per case (the planner its own table).
# usage: examples/bench-train.sh [local|netns|planner|overlap|all] [ROUNDS]
#        (all: local and netns; ROUNDS 3)
#        env STEPS=12, BATCH=8, MESHES (collx-train's, ";"-separated),
#        OLD_BIN (overlap)
set -eu
here=$(cd "$(dirname "$0")" && pwd)
export PATH="${COLLX_BIN:-$here/../bin}:$PATH"
what=${1:-all}
rounds=${2:-3}
steps=${STEPS:-12}
batch=${BATCH:-8}
seq=128
meshes=${MESHES:---dp 2 --tp 2;--dp 4;--tp 4;--pp 4 --microbatches 4;--dp 2 --pp 2 --microbatches 2;--tp 2 --pp 2 --microbatches 2}
PY=/usr/bin/python3
TEXT=/usr/share/common-licenses/GPL-3
. "$here/../tests/lib/netns.bash"
work=$(mktemp -d)
trap '[ -z "${NETNS_TAG:-}" ] || netns_teardown; rm -rf "$work"' EXIT
cd "$work"

case $what in
local | netns | planner | overlap | all) ;;
*) echo "usage: bench-train.sh [local|netns|planner|overlap|all] [ROUNDS]" >&2
   exit 2 ;;
esac
[ "$what" = planner ] || [ "$what" = overlap ] || $PY -c 'import torch.distributed' 2>/dev/null ||
    { echo "bench-train.sh: needs PyTorch (python3-torch)" >&2; exit 1; }

# Median step seconds of a loss CSV, the first step (warm-up) left out.
csv_step() {
	awk -F, 'NR > 2 { print $5 }' "$1" | sort -g |
	    awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'
}

# run_case NAME LAUNCH...: ROUNDS interleaved rounds of every mesh and the
# peer, started by LAUNCH (collx-run and its options up to "--"); "WHO
# SECONDS" lines in NAME.txt. Env IFACE: the interface both use.
run_case() {
	local name=$1 r m cx
	shift
	local io=() tx=(-x OPENBLAS_NUM_THREADS=1)
	if [ -n "${IFACE:-}" ]; then
		io=(--iface "$IFACE")
		tx+=(-x "GLOO_SOCKET_IFNAME=$IFACE")
	fi
	cx=$(command -v collx-train)
	: >"$name.txt"
	for r in $(seq "$rounds"); do
		echo "bench-train.sh: $name, round $r of $rounds" >&2
		IFS=';' read -r -a ms <<<"$meshes"
		for m in "${ms[@]}"; do
			# shellcheck disable=SC2086
			"$@" --timeout 120 -- "$cx" -m "$work/gpt.safetensors" \
			    --data "$TEXT" --batch "$batch" --steps "$steps" \
			    --optimizer adamw -q --loss-csv "$work/l.csv" \
			    "${io[@]}" $m
			echo "collx_${m// /_} $(csv_step l.csv)" >>"$name.txt"
		done
		# pure data parallelism as collx-dp runs it: buckets reduced
		# while the backward runs, --sync auto (hier across hosts)
		"$@" --timeout 120 -- "$(command -v collx-dp)" \
		    -m "$work/gpt.safetensors" --data "$TEXT" --batch "$batch" \
		    --steps "$steps" --optimizer adamw -q --loss-csv "$work/l.csv" \
		    "${io[@]}"
		echo "collx-dp_overlapped,_--sync_auto $(csv_step l.csv)" >>"$name.txt"
		timeout 600 "$@" --timeout 120 "${tx[@]}" -- "$PY" \
		    "$here/peers/torch_train.py" "$TEXT" 256 4 4 "$seq" "$batch" \
		    "$steps" 2 1e-3 "$work/gpt.safetensors" >torch.log 2>&1 || true
		sed -n 's/^torch dp2 x tp2: median step \([0-9.]*\) s,.*/torch_--dp_2_--tp_2 \1/p' \
		    torch.log | grep . >>"$name.txt" ||
		    echo "bench-train.sh: torch failed: $(grep -v -i warn torch.log | tail -n 1)" >&2
	done
}

# table NAME TITLE: the medians over rounds of NAME.txt as markdown.
table() {
	echo
	echo "$2"
	echo
	awk -v tok=$((batch * seq)) '{ s[$1] = s[$1] " " $2
	    if (!($1 in seen)) { seen[$1] = 1; order[++n] = $1 } }
	    function med(str,   a, m, i, j, t) { m = split(str, a, " ")
		for (i = 1; i <= m; i++) for (j = i + 1; j <= m; j++)
			if (a[j] + 0 < a[i] + 0) { t = a[i]; a[i] = a[j]; a[j] = t }
		return a[int((m + 1) / 2)] }
	    END { peer = ("torch_--dp_2_--tp_2" in s) ? med(s["torch_--dp_2_--tp_2"]) : 0
		print "| toolkit | mesh | tokens/s | vs torch dp2 x tp2 |"
		print "| --- | --- | ---: | ---: |"
		for (i = 1; i <= n; i++) { k = order[i]; t = med(s[k])
			who = k; sub(/_.*/, "", who); mesh = k; sub(/^[a-z-]*_/, "", mesh)
			gsub(/_/, " ", mesh)
			printf "| %s | %s | %.0f | %s |\n", who, mesh, tok / t,
			    peer ? sprintf("%.2fx", peer / t) : "-" } }' "$1.txt"
}

# thread_cpu: until $work/stop appears, every 0.1 s, the CPU ticks (user
# + system) of each thread of the collx-train processes started from
# $work; at the end "MAIN OTHERS" seconds summed over the ranks in cpu.txt
# (MAIN: the ranks' first threads; OTHERS: the rest, the communication
# thread where there is one).
thread_cpu() {
	local p t s
	declare -A last
	while [ ! -e "$work/stop" ]; do
		for p in $(pgrep -x collx-train); do
			grep -q "$work" "/proc/$p/cmdline" 2>/dev/null || continue
			for t in /proc/"$p"/task/*; do
				s=$(cat "$t/stat" 2>/dev/null) || continue
				s=${s##*) }
				# shellcheck disable=SC2086
				set -- $s
				last[$p.${t##*/}]=$((${12} + ${13}))
			done
		done
		sleep 0.1
	done
	for t in "${!last[@]}"; do echo "$t ${last[$t]}"; done |
	    awk -v hz="$(getconf CLK_TCK)" '{ split($1, a, ".")
		if (a[1] == a[2]) m += $2; else o += $2 }
		END { printf "%.3f %.3f\n", m / hz, o / hz }' >"$work/cpu.txt"
}

# overlap_case: OLD_BIN's and this build's collx-train --dp 4 on the
# netns cluster, ROUNDS interleaved rounds; "WHO STEP F B AR HID EXP
# BYTES MAIN OTHER" lines in overlap.txt (rank 0's mean rows over the
# steps after the first; BYTES: host 0's link, sent, a step; MAIN, OTHER:
# the 4 ranks' CPU seconds a step, whole run, thread_cpu).
overlap_case() {
	local r who b tx0 tx mon
	: >overlap.txt
	for r in $(seq "$rounds"); do
		echo "bench-train.sh: overlap, round $r of $rounds" >&2
		for who in old new; do
			b=$(dirname "$(command -v collx-train)")
			[ "$who" = old ] && b=$OLD_BIN
			rm -f l.csv t.csv "$work/stop"
			thread_cpu &
			mon=$!
			tx0=$(netns_exec 0 cat /sys/class/net/eth0/statistics/tx_bytes)
			"$b/collx-run" -q -H "$(netns_addr 0):2,$(netns_addr 1):2" \
			    --ssh "$work/ssh" --master "$(netns_addr 0):29500" \
			    --timeout 120 -- "$b/collx-train" \
			    -m "$work/gpt.safetensors" --data "$TEXT" \
			    --batch "$batch" --steps "$steps" --optimizer adamw \
			    -q --loss-csv "$work/l.csv" --timing "$work/t.csv" \
			    --iface eth0 --dp 4
			tx=$(netns_exec 0 cat /sys/class/net/eth0/statistics/tx_bytes)
			touch "$work/stop"
			wait "$mon"
			echo "$who $(csv_step l.csv) $(awk -F, -v tx=$((tx - tx0)) \
			    -v n="$steps" '$4 == 0 && $9 > 0 { s[$2] += $10; c[$2]++ }
			    END { split("forward backward allreduce allreduce_hidden allreduce_exposed", k, " ")
				for (i = 1; i <= 5; i++)
					printf "%.4f ", c[k[i]] ? s[k[i]] / c[k[i]] : 0
				printf "%d", tx / n }' t.csv) $(awk -v n="$steps" \
			    '{ printf "%.4f %.4f", $1 / n, $2 / n }' "$work/cpu.txt")" >>overlap.txt
		done
	done
}

# overlap_bound: medians of overlap.txt as markdown, then the bounds. The
# sums can run only beside the backward, from the first bucket complete
# (the last layer's, which waits for the head's and that layer's backward)
# to the backward's end, and the link carries BYTES a step: the new step
# is at least T_old - B_old (1 - first), first the head and one layer's
# share of the backward's work (per token: head 4Vd, layer 4 (4d^2 +
# 2d ff) + 8sd multiply-adds), and at least the link's time plus the
# forward and the head's and last layer's backward. Running on into the
# next forward (today's), the sums are bound by the link's time alone, or
# the step by its forward and backward.
overlap_bound() {
	awk -v rate=1e9 -v V=256 -v d=256 -v L=4 -v ff=1024 -v s="$seq" '
	    function med(str,   a, m, i, j, t) { m = split(str, a, " ")
		for (i = 1; i <= m; i++) for (j = i + 1; j <= m; j++)
			if (a[j] + 0 < a[i] + 0) { t = a[i]; a[i] = a[j]; a[j] = t }
		return a[int((m + 1) / 2)] }
	    { for (i = 2; i <= 10; i++) v[$1, i] = v[$1, i] " " $i }
	    END { print "| collx-train dp4 | step s | forward | backward | allreduce | hidden | exposed | bytes/step on a link | CPU s/step: main threads | other threads | vs old |"
		print "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
		to = med(v["old", 2])
		for (w = 0; w < 2; w++) { who = w ? "new" : "old"
			printf "| %s |", who
			for (i = 2; i <= 7; i++) printf " %.4f |", med(v[who, i])
			printf " %d | %.4f | %.4f | %.2fx |\n", med(v[who, 8]),
			    med(v[who, 9]), med(v[who, 10]), to / med(v[who, 2]) }
		head = 4 * V * d; lay = 4 * (4 * d * d + 2 * d * ff) + 8 * s * d
		first = (head + lay) / (head + L * lay)
		bo = med(v["old", 4]); fo = med(v["old", 3])
		link = med(v["new", 8]) * 8 / rate
		hide = to - bo * (1 - first)
		lb = fo + bo * first + link
		printf "\nbackward-only overlap: first bucket after %.0f%% of the backward;", 100 * first
		printf " step >= %.4f s (old - hidden backward), >= %.4f s (forward + first + link %.4f s):", hide, lb, link
		printf " at most %.2fx old\n", to / (hide > lb ? hide : lb)
		ro = link > fo + bo ? link : fo + bo
		printf "run-on (the sums beside the next forward too): step >= %.4f s (the link, or forward + backward): at most %.2fx old\n", ro, to / ro }' overlap.txt
}

collx-dp --init gpt --dims "256,256,4,4,$seq" --seed 1 -o gpt.safetensors
desc="gpt d_model 256, 4 layers, 4 heads, seq $seq, batch $batch, adamw, $steps steps, median of $rounds interleaved rounds"
if [ "$what" = planner ]; then
	netns_available ||
	    { echo "bench-train.sh: planner needs root and ip netns" >&2; exit 1; }
	netns_setup 2 --rate 1gbit
	netns_fake_ssh "$work/ssh"
	echo
	echo "2 namespaces x 2 ranks on 1 Gbit/s links: collx-bench mesh"
	echo
	# its directory under $work: every namespace sees it
	TMPDIR=$work collx-bench mesh -H "$(netns_addr 0):2,$(netns_addr 1):2" \
	    --ssh "$work/ssh" --master "$(netns_addr 0):29500" --iface eth0 \
	    --timeout 120 --dims "256,256,4,4,$seq" --batch "$batch" \
	    --steps "$steps" --table -q
	exit 0
fi
if [ "$what" = overlap ]; then
	[ -x "${OLD_BIN:-}/collx-train" ] ||
	    { echo "bench-train.sh: overlap needs OLD_BIN (a build's bin)" >&2; exit 2; }
	netns_available ||
	    { echo "bench-train.sh: overlap needs root and ip netns" >&2; exit 1; }
	netns_setup 2 --rate 1gbit
	netns_fake_ssh "$work/ssh"
	overlap_case
	echo
	echo "2 namespaces x 2 ranks on 1 Gbit/s links, collx-train --dp 4: $desc"
	echo
	overlap_bound
	exit 0
fi
if [ "$what" != netns ]; then
	run_case local collx-run -n 4
	table local "One host, 4 ranks: $desc"
fi
if [ "$what" != local ]; then
	if ! netns_available; then
		echo "bench-train.sh: netns case skipped: needs root and ip netns" >&2
		[ "$what" = all ] || exit 1
	else
		netns_setup 2 --rate 1gbit
		netns_fake_ssh "$work/ssh"
		IFACE=eth0 run_case netns collx-run \
		    -H "$(netns_addr 0):2,$(netns_addr 1):2" --ssh "$work/ssh" \
		    --master "$(netns_addr 0):29500"
		netns_teardown
		table netns "2 namespaces x 2 ranks on 1 Gbit/s links: $desc"
	fi
fi
