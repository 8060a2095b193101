# The measurements the benchmark scripts share (source it after detect.sh
# and peers_detect). Each prints a time in seconds, rank 0's median over
# the timed iterations, as every peer script times it, or nothing when the
# run failed (its errors go to stderr). Every run is bounded by a timeout.
#
#   collx_allreduce_s WORK BYTES ITERS CMD...
#       CMD (a launcher and collx-allreduce with its options, e.g.
#       env COLLX_SHM=0 collx-run -n 2 -- collx-allreduce --algo ring)
#       reduces a BYTES f32 vector of ones, ITERS timed iterations after 3
#       warm-up ones, each after a barrier.
#   mpi_allreduce_s WORK WORLD BYTES ITERS [MPIRUN-OPTION...]
#       Open MPI's MPI_Allreduce (WORK/mpi from peers_detect), on the
#       default path (shared memory on one host) or, given $mpi_tcp, TCP.
#   gloo_allreduce_s WORLD BYTES ITERS
#       PyTorch's Gloo over TCP loopback.
#   collx_pingpong_s ITERS WARMUP CMD...
#       collx-bench p2p's 8-byte ping-pong between ranks 0 and 1, half the
#       round trip, under CMD (a launcher, e.g. collx-run -n 2 --); after
#       the time, the transport collx-bench names for the pair (its CSV's
#       transport column), or - where it names none.
#   mpi_pingpong_s WORK ITERS WARMUP [MPIRUN-OPTION...]
#       The same ping-pong by Open MPI (WORK/mpi_pingpong).

# Open MPI restricted to TCP over loopback (and itself), as opposed to its
# default single-host path through shared memory.
mpi_tcp=(--mca btl tcp,self --mca btl_tcp_if_include lo)

# The median_s=SECONDS the peer programs print.
peer_median() {
	sed -n 's/.*median_s=\([0-9.e+-]*\).*/\1/p'
}

# The median of the numbers on standard input, one a line (of an even
# count, the mean of the middle two).
median() {
	sort -g | awk '{ v[NR] = $1 }
		END { if (NR) printf "%.9g\n", NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}

collx_allreduce_s() {
	local work=$1 bytes=$2 iters=$3
	shift 3
	collx-tensor create --shape $((bytes / 4)) --fill 1 -o "$work/x.npy" || return 0
	rm -f "$work/t.csv"
	timeout 600 "$@" -i "$work/x.npy" --iters "$iters" --warmup 3 \
	    --timing "$work/t.csv" -q >/dev/null || return 0
	awk -F, '$4 == 0 { print $10 }' "$work/t.csv" | median
}

mpi_allreduce_s() {
	local work=$1 world=$2 bytes=$3 iters=$4
	shift 4
	timeout 600 mpirun --allow-run-as-root --oversubscribe "$@" -n "$world" \
	    "$work/mpi" "$bytes" "$iters" 2>/dev/null | peer_median
}

gloo_allreduce_s() {
	timeout 600 /usr/bin/python3 "$(dirname "${BASH_SOURCE[0]}")/gloo_allreduce.py" \
	    "$1" "$2" "$3" 2>/dev/null | peer_median
}

collx_pingpong_s() {
	local iters=$1 warmup=$2
	shift 2
	timeout 600 "$@" collx-bench p2p --test latency --pair 0,1 -b 8 -e 8 \
	    -n "$iters" -w "$warmup" --csv -q |
	    awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) col[$i] = i; next }
		NR == 2 { print $col["seconds"], ("transport" in col) ? $col["transport"] : "-" }'
}

mpi_pingpong_s() {
	local work=$1 iters=$2 warmup=$3
	shift 3
	timeout 600 mpirun --allow-run-as-root --oversubscribe "$@" -n 2 \
	    "$work/mpi_pingpong" 8 "$iters" "$warmup" 2>/dev/null | peer_median
}
