#!/bin/bash
# make bench-cluster: emulated clusters on one machine. HOSTS network
# namespaces on a bridge (tests/lib/netns.bash), every link shaped with tc
# to a rate and a one-way delay; in each, iperf3's goodput between two
# hosts, then a collx-bench allreduce sweep across all of them (one rank
# per host, started by collx-run over a stand-in for ssh), and busbw as a
# fraction of the goodput. Everything is removed afterwards. Needs root.
# usage: examples/bench-cluster.sh [OUTDIR]   (env HOSTS=3, ITERS=5,
#        CASES="1gbit: 10gbit:100us", each RATE:DELAY)
#
# The summary (OUTDIR/cluster.md) gives under its table the command that
# reproduces it and, for each case, the shaping and the exact iperf3 and
# collx-run commands its figures come from, with how busy the CPUs were
# just before: the ranks of a ring wait for each other, so on a machine
# that runs other work their busbw falls well below the goodput while
# iperf3's single stream hardly notices. Measure on an idle machine.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
export PATH="${COLLX_BIN:-$here/../bin}:$PATH"
. "$here/../tests/lib/netns.bash"
netns_available || { echo "bench-cluster.sh: needs root and ip netns" >&2; exit 1; }
command -v iperf3 >/dev/null || echo "bench-cluster.sh: iperf3 not installed: no goodput reference" >&2
out=$(mkdir -p "${1:-bench-out}" && cd "${1:-bench-out}" && pwd)
hosts=${HOSTS:-3}
iters=${ITERS:-5}
cases=${CASES:-1gbit: 10gbit:100us}
work=$(mktemp -d)
trap 'netns_teardown; rm -rf "$work"' EXIT
bench=$(command -v collx-bench)
notes=$work/notes

# A command line as the shell reads it back: plain words bare, others in
# single quotes.
shown() {
	local w q="'" line=
	for w; do
		[[ $w =~ ^[A-Za-z0-9_./:,=+@%-]+$ ]] || w="'${w//$q/$q\\$q$q}'"
		line+=${line:+ }$w
	done
	echo "$line"
}

# Percent of all CPUs busy over one second, from /proc/stat (idle and
# iowait count as idle).
cpu_busy() {
	local a b
	a=$(head -n 1 /proc/stat)
	sleep 1
	b=$(head -n 1 /proc/stat)
	# user nice system idle iowait irq softirq steal, twice
	echo "$a $b" | awk '{ m = NF / 2
		for (i = 2; i <= 9; i++) { ta += $i; tb += $(m + i) }
		ia = $5 + $6; ib = $(m + 5) + $(m + 6)
		printf "%.0f\n", (tb > ta) ? 100 * (1 - (ib - ia) / (tb - ta)) : 0 }'
}

# iperf3 from host 1 to host 0: goodput in GB/s (10^9 B/s), or empty; both
# commands in $notes.
goodput() {
	command -v iperf3 >/dev/null || return 0
	local server=(iperf3 -s -1 -p 5211) client=(iperf3 -c "$(netns_addr 0)" -p 5211 -t 3 -J)
	local srv bps
	netns_exec 0 "${server[@]}" >/dev/null 2>&1 &
	srv=$!
	sleep 0.5
	echo "  iperf3 (goodput): host 0: $(shown "${server[@]}"); host 1: $(shown "${client[@]}")" >>"$notes"
	bps=$(netns_exec 1 timeout 30 "${client[@]}" 2>/dev/null |
		/usr/bin/python3 -c 'import json, sys; print(json.load(sys.stdin)["end"]["sum_received"]["bits_per_second"])' 2>/dev/null) || true
	wait "$srv" 2>/dev/null || true
	[ -n "$bps" ] && awk -v b="$bps" 'BEGIN { printf "%.4f\n", b / 8 / 1e9 }'
}

summary=$out/cluster.md
{
	echo "allreduce f32 across $hosts network namespaces (one rank each), links shaped with tc;"
	echo "busbw at 16 MiB (median of $iters), iperf3 goodput of one link, busbw / goodput"
	echo
	echo "| link | iperf3 GB/s | algorithm | 4 KiB latency | busbw GB/s | busbw / goodput |"
	echo "| --- | --- | --- | --- | --- | --- |"
} >"$summary"
{
	echo
	echo "Reproduced by (as root, on an idle machine):"
	echo "  HOSTS=$hosts ITERS=$iters CASES='$cases' examples/bench-cluster.sh OUTDIR"
	echo "Each case: $hosts namespaces on a bridge, host i at $NETNS_SUBNET.(i+1) on eth0;"
	echo "SSH is tests/lib/netns.bash's netns_fake_ssh (runs a command in a host's namespace)."
} >"$notes"
for c in $cases; do
	rate=${c%%:*} delay=${c#*:}
	burst=256kb
	case $rate in *gbit) [ "${rate%gbit}" -ge 10 ] 2>/dev/null && burst=4mb ;; esac
	label="$rate${delay:+ $delay}"
	if [ -n "$delay" ] && ! netns_can_shape delay; then
		echo "bench-cluster.sh: the kernel has no netem: $delay of delay not applied" >&2
		delay= label="$rate (no netem: delay not applied)"
	fi
	busy=$(cpu_busy)
	echo "bench-cluster.sh: $hosts hosts, links $label; CPUs ${busy}% busy before" >&2
	if [ "$busy" -gt 20 ]; then
		echo "bench-cluster.sh: other work keeps the CPUs ${busy}% busy: collx's busbw will be low" >&2
	fi
	shape=(--rate "$rate" --burst "$burst" ${delay:+--delay "$delay"})
	netns_setup "$hosts" "${shape[@]}"
	netns_fake_ssh "$work/ssh"
	{
		echo
		echo "$label: CPUs ${busy}% busy just before"
		echo "  links: netns_setup $hosts $(shown "${shape[@]}") (tbf on both ends of each host's veth${delay:+, netem on its sending side})"
	} >>"$notes"
	gp=$(goodput)
	# named for what was applied
	csv=$out/cluster-$rate${delay:+-$delay}.csv
	run=(collx-run -H "$(netns_hosts)" --ssh "$work/ssh"
		--master "$(netns_addr 0):29500" --timeout 60 --
		"$bench" coll --iface eth0 --algo ring,rabenseifner,tree -b 4K -e 16M -f 8
		-n "$iters" -w 1 --csv -q)
	echo "  collx (latency, busbw): $(shown "${run[@]}" | sed "s|$work/ssh|SSH|") >$(basename "$csv")" >>"$notes"
	timeout 600 "${run[@]}" >"$csv"
	netns_teardown
	awk -F, -v label="$label" -v gp="$gp" 'NR > 1 && $13 == "out" {
		if ($8 == 4096) lat[$3] = $10
		if ($8 == 16777216) bw[$3] = $12 }
		END { for (a in bw) printf "| %s | %s | %s | %.0f us | %.4f | %s |\n", label,
			gp == "" ? "-" : gp, a, lat[a] * 1e6, bw[a],
			gp == "" ? "-" : sprintf("%.2f", bw[a] / gp) }' "$csv" | sort >>"$summary"
	collx-plot --title "allreduce busbw across $hosts namespaces, links $label" \
		-o "${csv%.csv}.png" "$csv"
done
cat "$notes" >>"$summary"
cat "$summary"
echo "bench-cluster.sh: tables in $summary, CSV and charts in $out" >&2
