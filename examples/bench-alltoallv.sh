#!/bin/bash
# examples/bench-alltoallv.sh: collx's alltoallv beside PyTorch Gloo's
# all_to_all_single with the same splits (examples/peers/gloo_alltoall.py
# computes collx-bench's counts again): 4 ranks on one host, then 2 network
# namespaces of 2 ranks each on links shaped with tc to each rate of
# CASES, for even counts and Zipf-skewed ones (collx-bench --skew). In
# each of ROUNDS rounds, collx (auto, pairwise, linear and, across
# namespaces, hier) and Gloo run one after the other on the same links;
# each figure is
# the median over the rounds of a run's median time (of both peers, the
# slowest rank's time of each iteration, each begun after a barrier).
# Everything is removed afterwards.
# Needs root for the namespaces (the one-host case runs without). Measure
# on an idle machine: ranks of either peer that wait for a busy CPU make
# their figures noise.
# usage: examples/bench-alltoallv.sh [OUTDIR]   (env ROUNDS=3, ITERS=10,
#        SIZES="64K 4M" bytes each rank sends, SKEWS="0 1.2",
#        CASES="1gbit: 10gbit:" each RATE:DELAY as bench-cluster.sh takes)
set -eu
here=$(cd "$(dirname "$0")" && pwd)
export PATH="${COLLX_BIN:-$here/../bin}:$PATH"
. "$here/../tests/lib/netns.bash"
. "$here/peers/detect.sh"
. "$here/peers/measure.sh"
out=$(mkdir -p "${1:-bench-out}" && cd "${1:-bench-out}" && pwd)
rounds=${ROUNDS:-3}
iters=${ITERS:-10}
sizes=${SIZES:-64K 4M}
skews=${SKEWS:-0 1.2}
cases=${CASES:-1gbit: 10gbit:}
work=$(mktemp -d)
trap 'netns_teardown; rm -rf "$work"' EXIT
bench=$(command -v collx-bench)
peer=$here/peers/gloo_alltoall.py
raw=$out/alltoallv.txt
summary=$out/alltoallv.md
peers_detect_gloo bench-alltoallv.sh
[ "$have_gloo" = 1 ] || { echo "bench-alltoallv.sh: needs PyTorch's Gloo" >&2; exit 1; }

# Bytes of a size written as collx-bench takes it (K, M: powers of 1024).
bytes_of() {
	case $1 in
	*K) echo $((${1%K} << 10)) ;;
	*M) echo $((${1%M} << 20)) ;;
	*) echo "$1" ;;
	esac
}

# collx_runs LABEL SKEW ALGOS LAUNCH...: one collx-bench launch over every
# size; "LABEL SKEW BYTES ALGO SECONDS" lines on stdout.
collx_runs() {
	local label=$1 skew=$2 algos=$3 s
	shift 3
	for s in $sizes; do
		timeout 600 "$@" "$bench" coll "${iface[@]}" --op alltoallv \
		    --skew "zipf:$skew" --algo "$algos" -b "$s" -e "$s" \
		    -n "$iters" -w 3 --csv -q |
		    awk -F, -v l="$label" -v k="$skew" -v b="$(bytes_of "$s")" '
			NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i; next }
			{ print l, k, b, $c["algo"], $c["seconds"] }'
	done
}

# gloo_runs LABEL SKEW LAUNCH...: the same sizes by Gloo, one launch.
gloo_runs() {
	local label=$1 skew=$2 s elems=()
	shift 2
	for s in $sizes; do
		elems+=($(($(bytes_of "$s") / 4)))
	done
	timeout 600 "$@" /usr/bin/python3 "$peer" "$skew" "$iters" "${elems[@]}" |
	    awk -v l="$label" -v k="$skew" '/median_s=/ {
		split($3, e, "="); split($NF, t, "=")
		print l, k, e[2] * 4, "gloo", t[2] }'
}

# ALGOS (a comma list) turned left by N places: over the rounds each
# algorithm runs in each place of its launch, as the first pays for the
# links' warm-up (auto, which is linear at 4 ranks, measured 4.1 ms
# against linear's 3.2 ms always first, at 4 MiB over 10 Gbit/s).
rotated() {
	local a b
	IFS=, read -ra a <<<"$1"
	b=("${a[@]:$(($2 % ${#a[@]}))}" "${a[@]:0:$(($2 % ${#a[@]}))}")
	(IFS=,; echo "${b[*]}")
}

# rounds_of LABEL ALGOS COLLX-LAUNCH... :: GLOO-LAUNCH...: ROUNDS rounds,
# each collx then Gloo for every skew.
rounds_of() {
	local label=$1 algos=$2 r k cl=() gl=()
	shift 2
	while [ "$1" != :: ]; do cl+=("$1"); shift; done
	shift
	gl=("$@")
	for ((r = 1; r <= rounds; r++)); do
		for k in $skews; do
			echo "bench-alltoallv.sh: $label, zipf:$k, round $r of $rounds" >&2
			collx_runs "$label" "$k" "$(rotated "$algos" $((r - 1)))" \
			    "${cl[@]}" >>"$raw"
			gloo_runs "$label" "$k" "${gl[@]}" >>"$raw"
		done
	done
}

: >"$raw"
{
	echo "Reproduced by (as root, on an idle machine):"
	echo "  ROUNDS=$rounds ITERS=$iters SIZES='$sizes' SKEWS='$skews' CASES='$cases' examples/bench-alltoallv.sh OUTDIR"
	echo "load average before the first run: $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc) CPUs"
} >"$work/notes"
iface=()
rounds_of "1 host x 4" auto,pairwise,linear collx-run -n 4 -- :: \
    collx-run -n 4 -x GLOO_SOCKET_IFNAME=lo --
if netns_available; then
	iface=(--iface eth0)
	for c in $cases; do
		rate=${c%%:*} delay=${c#*:} burst=256kb
		case $rate in *gbit) [ "${rate%gbit}" -ge 10 ] 2>/dev/null && burst=4mb ;; esac
		netns_setup 2 --rate "$rate" --burst "$burst" ${delay:+--delay "$delay"}
		netns_fake_ssh "$work/ssh"
		hl="$(netns_addr 0):2,$(netns_addr 1):2"
		rounds_of "2 x 2, $rate${delay:+ $delay}" auto,pairwise,linear,hier \
		    collx-run -H "$hl" --ssh "$work/ssh" --master "$(netns_addr 0):29500" \
		    --timeout 60 -- :: \
		    collx-run -H "$hl" --ssh "$work/ssh" --master "$(netns_addr 0):29510" \
		    --timeout 60 -x GLOO_SOCKET_IFNAME=eth0 --
		names="$(netns_name 0) $(netns_name 1)"
		netns_teardown
		echo "bench-alltoallv.sh: namespaces $names removed" >&2
	done
else
	echo "bench-alltoallv.sh: no root or ip netns: the one-host case only" >&2
fi

# The table: per link, counts and size, each peer's median over the
# rounds, Gloo's time over collx auto's (the speed-up; target 1.5), and
# hier's time against the faster flat algorithm's (above 1: hier wins).
{
	echo "alltoallv f32 across 4 ranks, each sending SIZE bytes split by the counts (even: zipf:0;"
	echo "collx-bench --skew); each time the median of $rounds interleaved rounds of a run's median of"
	echo "$iters iterations; Gloo: torch.distributed.all_to_all_single with the same splits"
	echo
	echo "| link | counts | size | collx auto | pairwise | linear | hier | Gloo | Gloo / collx auto | flat / hier |"
	echo "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"
	awk '{ n = NF; key = $1; for (i = 2; i <= n - 4; i++) key = key " " $i
		k = key SUBSEP $(n - 3) SUBSEP $(n - 2); who = $(n - 1)
		t[k, who] = t[k, who] " " $n; seen[k] = 1 }
	function med(s,   a, m, i, j, x) {
		m = split(s, a, " "); if (m == 0) return ""
		for (i = 2; i <= m; i++) { x = a[i]; for (j = i - 1; j >= 1 && a[j] + 0 > x + 0; j--) a[j + 1] = a[j]; a[j + 1] = x }
		return m % 2 ? a[(m + 1) / 2] : (a[m / 2] + a[m / 2 + 1]) / 2 }
	function ms(x) { return x == "" ? "-" : sprintf("%.3f ms", x * 1e3) }
	function ratio(a, b) { return a == "" || b == "" || b == 0 ? "-" : sprintf("%.2f", a / b) }
	END { for (k in seen) {
		split(k, p, SUBSEP)
		a = med(t[k, "auto"]); pw = med(t[k, "pairwise"]); li = med(t[k, "linear"])
		h = med(t[k, "hier"]); g = med(t[k, "gloo"])
		fl = pw == "" || (li != "" && li + 0 < pw + 0) ? li : pw
		printf "| %s | %s | %d KiB | %s | %s | %s | %s | %s | %s | %s |\n", p[1],
		    p[2] == 0 ? "even" : "zipf:" p[2], p[3] / 1024, ms(a), ms(pw), ms(li), ms(h),
		    ms(g), ratio(g, a), ratio(fl, h) } }' "$raw" | sort -t'|' -k2,2 -k3,3 -k4,4n
	echo
	cat "$work/notes"
} >"$summary"
cat "$summary"
echo "bench-alltoallv.sh: table in $summary, raw times in $raw" >&2
