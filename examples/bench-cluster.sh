#!/bin/bash
# make bench-cluster: emulated clusters on one machine. HOSTS network
# namespaces on a bridge (tests/lib/netns.bash), every link shaped with tc
# to a rate and a one-way delay; in each, iperf3's goodput between two
# hosts, then a collx-bench allreduce sweep across all of them (one rank
# per host, started by collx-run over a stand-in for ssh), and busbw as a
# fraction of the goodput. Then 2 hosts of 2 ranks each on the links of
# HIER_CASE: a 16 MiB allreduce by collx's flat ring, by its hierarchical
# allreduce (--algo hier: skipped, saying so, where collx-allreduce refuses
# it) and by PyTorch's Gloo, in ROUNDS interleaved rounds, each figure rank
# 0's median over the timed iterations as examples/bench.sh times it, with
# the busbw ratios hier/ring and hier/Gloo. Everything is removed
# afterwards. Needs root.
# usage: examples/bench-cluster.sh [OUTDIR]   (env HOSTS=3, ITERS=5,
#        CASES="1gbit: 10gbit:100us", each RATE:DELAY; ROUNDS=3,
#        HIER_CASE=1gbit: as one of CASES, or empty for no 2 x 2 case)
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
. "$here/peers/detect.sh"
. "$here/peers/measure.sh"
netns_available || { echo "bench-cluster.sh: needs root and ip netns" >&2; exit 1; }
command -v iperf3 >/dev/null || echo "bench-cluster.sh: iperf3 not installed: no goodput reference" >&2
out=$(mkdir -p "${1:-bench-out}" && cd "${1:-bench-out}" && pwd)
hosts=${HOSTS:-3}
iters=${ITERS:-5}
cases=${CASES:-1gbit: 10gbit:100us}
rounds=${ROUNDS:-3}
hier_case=${HIER_CASE-1gbit:}
work=$(mktemp -d)
trap 'netns_teardown; rm -rf "$work"' EXIT
bench=$(command -v collx-bench)
allreduce=$(command -v collx-allreduce)
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

# shaping RATE:DELAY: sets rate, delay, label and shape (netns_setup's
# options) for a case, leaving out a delay the kernel cannot add, saying so.
shaping() {
	local burst=256kb
	rate=${1%%:*} delay=${1#*:}
	case $rate in *gbit) [ "${rate%gbit}" -ge 10 ] 2>/dev/null && burst=4mb ;; esac
	label="$rate${delay:+ $delay}"
	if [ -n "$delay" ] && ! netns_can_shape delay; then
		echo "bench-cluster.sh: the kernel has no netem: $delay of delay not applied" >&2
		delay= label="$rate (no netem: delay not applied)"
	fi
	shape=(--rate "$rate" --burst "$burst" ${delay:+--delay "$delay"})
}

# start_case N WHAT: N hosts on links shaped as $shape and the ssh
# stand-in, after noting under WHAT in $notes how busy the CPUs were.
start_case() {
	local busy
	busy=$(cpu_busy)
	echo "bench-cluster.sh: $1 hosts, $2; CPUs ${busy}% busy before" >&2
	if [ "$busy" -gt 20 ]; then
		echo "bench-cluster.sh: other work keeps the CPUs ${busy}% busy: collx's busbw will be low" >&2
	fi
	netns_setup "$1" "${shape[@]}"
	netns_fake_ssh "$work/ssh"
	{
		echo
		echo "$2: CPUs ${busy}% busy just before"
		echo "  links: netns_setup $1 $(shown "${shape[@]}") (tbf on both ends of each host's veth${delay:+, netem on its sending side})"
	} >>"$notes"
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
	echo "  HOSTS=$hosts ITERS=$iters CASES='$cases' ROUNDS=$rounds HIER_CASE='$hier_case' examples/bench-cluster.sh OUTDIR"
	echo "Each case: $hosts namespaces on a bridge, host i at $NETNS_SUBNET.(i+1) on eth0;"
	echo "SSH is tests/lib/netns.bash's netns_fake_ssh (runs a command in a host's namespace)."
} >"$notes"
for c in $cases; do
	shaping "$c"
	start_case "$hosts" "$label"
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
# The 2 x 2 case: 2 hosts of 2 ranks each on HIER_CASE's links, a 16 MiB
# allreduce by collx's flat ring and its hierarchical allreduce, and by
# Gloo, once each per round; "WHO SECONDS" lines in the file $1.
two_by_two() {
	local raw=$1 bytes=16777216 hl r
	local algo ring hier gloo x=(-i X.npy --iters "$iters" --warmup 3 --timing T.csv -q)
	hl="$(netns_addr 0):2,$(netns_addr 1):2"
	algo=(collx-run -H "$hl" --ssh "$work/ssh" --master "$(netns_addr 0):29500"
		--timeout 60 -- "$allreduce" --iface eth0 --algo)
	ring=("${algo[@]}" ring)
	hier=("${algo[@]}" hier)
	gloo=(collx-run -H "$hl" --ssh "$work/ssh" --master "$(netns_addr 0):29510"
		--timeout 60 -x GLOO_SOCKET_IFNAME=eth0 --
		/usr/bin/python3 "$here/peers/gloo_rank.py" "$bytes" "$iters")
	{
		echo "  X.npy: collx-tensor create --shape $((bytes / 4)) --fill 1; time: rank 0's median of T.csv's seconds"
		echo "  collx ring: $(shown "${ring[@]}" "${x[@]}" | sed "s|$work/ssh|SSH|")"
		echo "  collx hier: $(shown "${hier[@]}" "${x[@]}" | sed "s|$work/ssh|SSH|")"
		echo "  Gloo: $(shown "${gloo[@]}" | sed "s|$work/ssh|SSH|")"
	} >>"$notes"
	: >"$raw"
	for ((r = 1; r <= rounds; r++)); do
		echo "bench-cluster.sh: 2 x 2, round $r of $rounds" >&2
		echo "ring $(collx_allreduce_s "$work" "$bytes" "$iters" "${ring[@]}")" >>"$raw"
		[ -n "$hier_skip" ] ||
			echo "hier $(collx_allreduce_s "$work" "$bytes" "$iters" "${hier[@]}")" >>"$raw"
		[ $have_gloo = 0 ] ||
			echo "gloo $(timeout 600 "${gloo[@]}" 2>/dev/null | peer_median)" >>"$raw"
	done
}

# The 2 x 2 case's table, from the medians of its rounds in the file $1.
two_by_two_table() {
	local med=() who
	for who in ring hier gloo; do
		med+=("$(awk -v w=$who '$1 == w && NF == 2 { print $2 }' "$1" | median)")
	done
	echo
	echo "allreduce f32 of 16 MiB across 2 namespaces of 2 ranks each, links $label; each figure rank 0's median"
	echo "of $iters iterations (each after a barrier, as examples/bench.sh times them), the median of $rounds"
	echo "interleaved rounds; busbw for 4 ranks (2(n-1)/n algbw), iperf3 goodput of one link, busbw / goodput"
	echo
	echo "| link | hosts x ranks | iperf3 GB/s | peer | 16 MiB time | busbw GB/s | busbw / goodput |"
	echo "| --- | --- | --- | --- | --- | --- | --- |"
	awk -v label="$label" -v gp="$gp" -v ring="${med[0]}" -v hier="${med[1]}" \
	    -v gloo="${med[2]}" -v skip="$hier_skip" -v have_gloo="$have_gloo" 'BEGIN {
		split("collx ring|collx hier|Gloo", name, "|")
		t[1] = ring; t[2] = hier; t[3] = gloo
		why[1] = "failed"; why[2] = skip == "" ? "failed" : "skipped"
		why[3] = have_gloo ? "failed" : "skipped (no torch)"
		for (i = 1; i <= 3; i++) {
			line = sprintf("| %s | 2 x 2 | %s | %s |", label, gp == "" ? "-" : gp, name[i])
			if (t[i] == "") { print line " " why[i] " | - | - |"; continue }
			bw[i] = 16777216 / t[i] / 1e9 * 1.5
			print line sprintf(" %.1f ms | %.4f | %s |", t[i] * 1e3, bw[i],
			    gp == "" ? "-" : sprintf("%.2f", bw[i] / gp))
		}
		printf "\nbusbw hier / ring: %s (target: 1.35 or more, ideally 1.5); hier / Gloo: %s (target: 1.3 or more)\n",
		    bw[2] && bw[1] ? sprintf("%.2f", bw[2] / bw[1]) : "-",
		    bw[2] && bw[3] ? sprintf("%.2f", bw[2] / bw[3]) : "-"
		if (skip != "")
			print "collx hier skipped: " skip
	}'
}

if [ -n "$hier_case" ]; then
	peers_detect_gloo bench-cluster.sh
	hier_skip=
	if ! e=$("$allreduce" --algo hier --help 2>&1 >/dev/null); then
		hier_skip=${e%%$'\n'*}
		echo "bench-cluster.sh: collx hier skipped: $hier_skip" >&2
	fi
	shaping "$hier_case"
	start_case 2 "2 x 2, $label"
	gp=$(goodput)
	raw=$out/cluster-2x2-$rate${delay:+-$delay}.txt
	two_by_two "$raw"
	netns_teardown
	two_by_two_table "$raw" >>"$summary"
fi
cat "$notes" >>"$summary"
cat "$summary"
echo "bench-cluster.sh: tables in $summary, CSV and charts in $out" >&2
