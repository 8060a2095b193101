#!/bin/bash
# Allreduce (f32 sum, one host) beside the peers (their programs in
# examples/peers/), in one run: collx (auto and each large-message
# algorithm), Open MPI on its default path (shared memory) and over TCP,
# and PyTorch's Gloo. Prints the median time and busbw of each; a peer
# that is not installed is skipped, saying why.
# usage: examples/compare-peers.sh [ITERS]
set -eu
here=$(cd "$(dirname "$0")" && pwd)
export PATH="${COLLX_BIN:-$here/../bin}:$PATH"
peers=$here/peers
iters=${1:-20}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

. "$peers/detect.sh"
. "$peers/measure.sh"
peers_detect compare-peers.sh "$work"

# row WORLD BYTES WHO SECONDS (SECONDS empty: the run failed)
row() {
	if [ -z "$4" ]; then
		echo "compare-peers.sh: $3 at $1 ranks, $2 bytes failed" >&2
		return 0
	fi
	awk -v w="$1" -v b="$2" -v who="$3" -v s="$4" 'BEGIN {
		printf "%5d %10d  %-22s %10.1f %8.3f\n", w, b, who, s * 1e6,
			b / s / 1e9 * 2 * (w - 1) / w }'
}

printf '%5s %10s  %-22s %10s %8s\n' ranks bytes who median_us busbw
for world in 2 4; do
	for bytes in 4096 1048576 67108864; do
		algos=auto
		[ "$bytes" -gt 4096 ] && algos="auto ring rabenseifner tree"
		for algo in $algos; do
			row "$world" "$bytes" "collx $algo" "$(collx_allreduce_s "$work" \
			    "$bytes" "$iters" collx-run -n "$world" -- collx-allreduce --algo "$algo")"
		done
		if [ $have_mpi = 1 ]; then
			row "$world" "$bytes" "Open MPI shm" \
			    "$(mpi_allreduce_s "$work" "$world" "$bytes" "$iters")"
			row "$world" "$bytes" "Open MPI TCP" \
			    "$(mpi_allreduce_s "$work" "$world" "$bytes" "$iters" "${mpi_tcp[@]}")"
		fi
		if [ $have_gloo = 1 ]; then
			row "$world" "$bytes" "Gloo" "$(gloo_allreduce_s "$world" "$bytes" "$iters")"
		fi
	done
done
