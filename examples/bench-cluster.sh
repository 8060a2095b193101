#!/bin/bash
# make bench-cluster: emulated clusters on one machine. HOSTS network
# namespaces on a bridge (tests/lib/netns.bash), every link shaped with tc
# to a rate and a one-way delay; in each, iperf3's goodput between two
# hosts, then a collx-bench allreduce sweep across all of them (one rank
# per host, started by collx-run over a stand-in for ssh), and busbw as a
# fraction of the goodput. Everything is removed afterwards. Needs root.
# usage: examples/bench-cluster.sh [OUTDIR]   (env HOSTS=3, ITERS=5,
#        CASES="1gbit: 10gbit:100us", each RATE:DELAY)
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

# iperf3 from host 1 to host 0: goodput in GB/s (10^9 B/s), or empty.
goodput() {
	command -v iperf3 >/dev/null || return 0
	netns_exec 0 iperf3 -s -1 -p 5211 >/dev/null 2>&1 &
	local srv=$! bps
	sleep 0.5
	bps=$(netns_exec 1 timeout 30 iperf3 -c "$(netns_addr 0)" -p 5211 -t 3 -J 2>/dev/null |
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
for c in $cases; do
	rate=${c%%:*} delay=${c#*:}
	burst=256kb
	case $rate in *gbit) [ "${rate%gbit}" -ge 10 ] 2>/dev/null && burst=4mb ;; esac
	label="$rate${delay:+ $delay}"
	if [ -n "$delay" ] && ! netns_can_shape delay; then
		echo "bench-cluster.sh: the kernel has no netem: $delay of delay not applied" >&2
		delay= label="$rate (no netem: delay not applied)"
	fi
	echo "bench-cluster.sh: $hosts hosts, links $label" >&2
	netns_setup "$hosts" --rate "$rate" --burst "$burst" ${delay:+--delay "$delay"}
	netns_fake_ssh "$work/ssh"
	gp=$(goodput)
	# named for what was applied
	csv=$out/cluster-$rate${delay:+-$delay}.csv
	timeout 600 collx-run -H "$(netns_hosts)" --ssh "$work/ssh" \
		--master "$(netns_addr 0):29500" --timeout 60 -- \
		"$bench" coll --iface eth0 --algo ring,rabenseifner,tree -b 4K -e 16M -f 8 \
		-n "$iters" -w 1 --csv -q >"$csv"
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
cat "$summary"
echo "bench-cluster.sh: tables in $summary, CSV and charts in $out" >&2
