#!/bin/bash
# In-job recovery against a restart from a checkpoint, on the GPT of
# examples/bench-train.sh (d_model 256, 4 layers, 4 heads, seq 128, global
# batch 8, adamw, one thread a rank), 4 ranks of collx-dp, STEPS (60)
# steps, rank KILL (3) killed (SIGKILL) when step 20 is printed:
#   ft       --ft: the others go on; the rank is started again at once
#            with COLLX_REJOIN=1 (as collx-run --max-restarts does) and
#            rejoins at a step boundary, copying the state
#   restart  collx-run --max-restarts 1 and --checkpoint every 5 steps:
#            every rank stopped and started again from the checkpoint
# Prints, per round: the median step (s), from the kill to the next step
# printed (s), and for ft the departure's agreement and the rejoin's
# admission and copy of the state (s, the others' time, and in steps).
# Where: local (4 ranks on this host) or netns (2 network namespaces of 2
# ranks joined by 1 Gbit/s links, tests/lib/netns.bash; needs root).
# With PROG=train, collx-train on MESH (--dp 2 --pp 2): the killed
# rank's replica leaves (its peer PEER exits 1), the other goes on; both
# are started again with COLLX_REJOIN=1 and rejoin as one replica.
# usage: examples/bench-ft.sh [local|netns] [ROUNDS]   (local, 3)
#        env STEPS=60, KILL=3, PEER=1, PROG=dp|train, MESH='--dp 2 --pp 2'
set -eu
here=$(cd "$(dirname "$0")" && pwd)
export PATH="${COLLX_BIN:-$here/../bin}:$PATH"
where=${1:-local}
rounds=${2:-3}
steps=${STEPS:-60}
victim=${KILL:-3}
prog=collx-${PROG:-dp}
read -r -a mesh <<<"${MESH:---dp 2 --pp 2}"
[ "$prog" = collx-train ] || mesh=()
TEXT=/usr/share/common-licenses/GPL-3
. "$here/../tests/lib/netns.bash"
work=$(mktemp -d)
trap '[ -z "${NETNS_TAG:-}" ] || netns_teardown; rm -rf "$work"' EXIT
cd "$work"
case $where in
local) master=127.0.0.1:29517 ;;
netns)	netns_available ||
	    { echo "bench-ft.sh: netns needs root and ip netns" >&2; exit 1; }
	netns_setup 2 --rate 1gbit
	netns_fake_ssh "$work/ssh"
	master=$(netns_addr 0):29500 ;;
*) echo "usage: bench-ft.sh [local|netns] [ROUNDS]" >&2; exit 2 ;;
esac
collx-dp --init gpt --dims 256,256,4,4,128 --seed 1 -o gpt.safetensors
ARGS=(-m "$work/gpt.safetensors" --data "$TEXT" --batch 8 --steps "$steps"
    --optimizer adamw -v)
io=()
[ "$where" = netns ] && io=(--iface eth0)

# rank R of the --ft job, in its namespace; VAR=VALUE words before
ft_rank() {
	local r=$1 pre=()
	shift
	[ "$where" = netns ] && pre=(ip netns exec "$(netns_name $((r / 2)))")
	env "$@" COLLX_RANK="$r" COLLX_WORLD_SIZE=4 COLLX_MASTER="$master" \
	    COLLX_TIMEOUT=20 OPENBLAS_NUM_THREADS=1 "${pre[@]}" "$prog" \
	    "${ARGS[@]}" "${mesh[@]}" "${io[@]}" --ft -o "$work/ft.safetensors" \
	    --loss-csv "$work/ft.csv" 2>>"$work/err.fifo" &
	pid[r]=$!
}

# the process of rank R of a collx-run job (its ranks run the model of
# $work, in a namespace too)
rank_of() {
	local p
	for p in $(pgrep -f -- "-m $work/gpt.safetensors"); do
		[ "$(readlink "/proc/$p/exe" 2>/dev/null)" = \
		    "$(readlink -f "$(command -v "$prog")")" ] || continue
		tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null |
		    grep -qx "COLLX_RANK=$1" && { echo "$p"; return 0; }
	done
	return 1
}

# the median of column 5 (step seconds) of a loss CSV, the first step
# (warm-up) and the steps run again left out
median_step() {
	awk -F, 'NR > 2 && $1 != p { print $5 } { p = $1 }' "$1" | sort -g |
	    awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'
}

# read the step lines from the fifo; kill at step 20; the time to the
# next step line (restart: the first after collx-run's restart line);
# ACTION (ft: start the rank again) right after the kill
watch_kill() {
	local action=$1 line t_kill= t_next= step restarted=
	[ "$action" = ft ] && restarted=1
	while IFS= read -r line; do
		echo "$line" >>"$work/err.log"
		case $line in
		collx-run:\ restart*) restarted=1 ;;
		esac
		step=$(sed -n "s/^$prog: step \([0-9]*\) epoch.*/\1/p" \
		    <<<"$line")
		[ -n "$step" ] || continue
		if [ -z "$t_kill" ] && [ "$step" = 20 ]; then
			kill -KILL "$(rank_of "$victim")"
			t_kill=$EPOCHREALTIME
			[ "$action" != ft ] || ft_rank "$victim" COLLX_REJOIN=1
			# collx-train: its replica's peer, once it left
			if [ "$action" = ft ] && [ "$prog" = collx-train ]; then
				# polled every 10 ms (tail waits 1 s by default,
				# which the next step line would wait behind)
				tail -s 0.01 --pid="${pid[${PEER:-1}]}" -f /dev/null
				ft_rank "${PEER:-1}" COLLX_REJOIN=1
			fi
		elif [ -n "$t_kill" ] && [ -z "$t_next" ] && [ -n "$restarted" ]; then
			t_next=$EPOCHREALTIME
		fi
	done <"$work/err.fifo"
	echo "$t_next - $t_kill" | bc -l
}

echo "| round | case | median step s | kill to next step s | agreement s | rejoin s | rejoin / step |"
echo "| ---: | --- | ---: | ---: | ---: | ---: | ---: |"
for round in $(seq "$rounds"); do
	rm -f err.fifo err.log ft.csv ck.safetensors l.csv
	mkfifo err.fifo
	for r in 0 1 2 3; do
		ft_rank "$r"
	done
	gap=$(watch_kill ft)
	wait
	agree=$(sed -n "s/.*rank $victim left[;,] .*(\([0-9.]*\) s to agree.*)$/\1/p" err.log)
	rejoin=$(sed -n "s/.*ranks\{0,1\} [0-9, ]*rejoined; .*(\([0-9.]*\) s to admit.*/\1/p" err.log | head -1)
	med=$(median_step ft.csv)
	ratio=-
	[ -z "$rejoin" ] || ratio=$(printf %.2f "$(echo "$rejoin / $med" | bc -l)")
	printf '| %d | ft | %.3f | %.3f | %s | %s | %s |\n' "$round" "$med" \
	    "$gap" "$agree" "${rejoin:--}" "$ratio"
	rm -f err.fifo err.log
	mkfifo err.fifo
	if [ "$where" = netns ]; then
		launch=(-H "$(netns_addr 0):2,$(netns_addr 1):2" --ssh "$work/ssh"
		    --master "$master")
	else
		launch=(-n 4)
	fi
	collx-run "${launch[@]}" --max-restarts 1 --timeout 20 -- "$prog" \
	    "${ARGS[@]}" "${mesh[@]}" "${io[@]}" --checkpoint "$work/ck.safetensors" \
	    --checkpoint-every 5 --loss-csv "$work/l.csv" 2>err.fifo &
	gap=$(watch_kill restart)
	wait
	printf '| %d | restart | %.3f | %.3f | - | - | - |\n' "$round" \
	    "$(median_step l.csv)" "$gap"
done
