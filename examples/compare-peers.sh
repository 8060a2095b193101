#!/bin/bash
# Allreduce (f32 sum, loopback) beside the peers (their scripts in
# examples/peers/), in one run: collx (auto and each large-message
# algorithm), Open MPI over TCP and PyTorch's Gloo. Prints the median time
# and busbw of each; a peer that is not installed is skipped, saying why.
# usage: examples/compare-peers.sh [ITERS]
set -eu
here=$(cd "$(dirname "$0")" && pwd)
export PATH="${COLLX_BIN:-$here/../bin}:$PATH"
peers=$here/peers
iters=${1:-20}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

. "$peers/detect.sh"
peers_detect compare-peers.sh "$work"

# collx: rank 0's median seconds over the timed runs.
collx() {
	local world=$1 bytes=$2 algo=$3
	collx-tensor create --shape $((bytes / 4)) --fill 1 -o "$work/x.npy"
	rm -f "$work/t.csv"
	collx-run -n "$world" -- collx-allreduce -i "$work/x.npy" --algo "$algo" \
		--iters "$iters" --warmup 3 --timing "$work/t.csv" -q
	awk -F, '$4 == 0 { print $10 }' "$work/t.csv" | sort -g |
		awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'
}

row() {
	awk -v w="$1" -v b="$2" -v who="$3" -v s="$4" 'BEGIN {
		printf "%5d %10d  %-22s %10.1f %8.3f\n", w, b, who, s * 1e6,
			b / s / 1e9 * 2 * (w - 1) / w }'
}

printf '%5s %10s  %-22s %10s %8s\n' ranks bytes who median_us busbw
for world in 2 4; do
	for bytes in 4096 1048576 67108864; do
		row "$world" "$bytes" "collx auto" "$(collx "$world" "$bytes" auto)"
		if [ "$bytes" -gt 4096 ]; then
			for algo in ring rabenseifner tree; do
				row "$world" "$bytes" "collx $algo" "$(collx "$world" "$bytes" "$algo")"
			done
		fi
		if [ $have_mpi = 1 ]; then
			s=$(mpirun --allow-run-as-root --oversubscribe --mca btl tcp,self \
				--mca btl_tcp_if_include lo -n "$world" "$work/mpi" "$bytes" "$iters" 2>/dev/null |
				sed -n 's/.*median_s=\([0-9.e-]*\).*/\1/p')
			[ -n "$s" ] && row "$world" "$bytes" "Open MPI TCP" "$s"
		fi
		if [ $have_gloo = 1 ]; then
			s=$(/usr/bin/python3 "$peers/gloo_allreduce.py" "$world" "$bytes" "$iters" 2>/dev/null |
				sed -n 's/.*median_s=\([0-9.e-]*\).*/\1/p')
			[ -n "$s" ] && row "$world" "$bytes" "Gloo" "$s"
		fi
	done
done
