#!/bin/bash
# make bench: allreduce (f32 sum, TCP loopback) by collx beside PyTorch's
# Gloo and Open MPI over TCP, at 2 and 4 ranks and 4 KiB, 1 MiB and 64 MiB,
# in ROUNDS interleaved rounds (each case once per round, the median of the
# rounds reported), then a chart. Peers that are not installed are skipped,
# saying so. Every time is rank 0's median over the timed iterations, as
# the peers' scripts (examples/peers/, copies of ../shared/anchors) time it.
# usage: examples/bench.sh [OUTDIR]   (env ROUNDS=3 ITERS=10)
set -eu
here=$(cd "$(dirname "$0")" && pwd)
export PATH="${COLLX_BIN:-$here/../bin}:$PATH"
out=$(mkdir -p "${1:-bench-out}" && cd "${1:-bench-out}" && pwd)
rounds=${ROUNDS:-3}
iters=${ITERS:-10}
peers=$here/peers
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

. "$peers/detect.sh"
peers_detect bench.sh "$work"

# One measurement: "WHO WORLD BYTES SECONDS" appended to raw.txt. Every
# one is rank 0's median over the timed iterations, each after a barrier,
# the way the peers' scripts time theirs (collx-bench would report the
# slowest rank's time, which no peer script measures).
collx() {
	local s
	collx-tensor create --shape $(($2 / 4)) --fill 1 -o "$work/x.npy"
	rm -f "$work/t.csv"
	timeout 600 collx-run -n "$1" -- collx-allreduce -i "$work/x.npy" \
		--iters "$iters" --warmup 3 --timing "$work/t.csv" -q || return 1
	s=$(awk -F, '$4 == 0 { print $10 }' "$work/t.csv" | sort -g |
		awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }')
	[ -n "$s" ] && echo "collx $1 $2 $s" >>"$out/raw.txt"
}
mpi() {
	local s
	s=$(timeout 600 mpirun --allow-run-as-root --oversubscribe --mca btl tcp,self \
		--mca btl_tcp_if_include lo -n "$1" "$work/mpi" "$2" "$iters" 2>/dev/null |
		sed -n 's/.*median_s=\([0-9.e-]*\).*/\1/p')
	[ -n "$s" ] && echo "openmpi-tcp $1 $2 $s" >>"$out/raw.txt"
}
gloo() {
	local s
	s=$(timeout 600 /usr/bin/python3 "$peers/gloo_allreduce.py" "$1" "$2" "$iters" 2>/dev/null |
		sed -n 's/.*median_s=\([0-9.e-]*\).*/\1/p')
	[ -n "$s" ] && echo "gloo $1 $2 $s" >>"$out/raw.txt"
}

: >"$out/raw.txt"
for ((r = 1; r <= rounds; r++)); do
	echo "bench.sh: round $r of $rounds" >&2
	for world in 2 4; do
		for bytes in 4096 1048576 67108864; do
			collx "$world" "$bytes" || echo "bench.sh: collx $world $bytes failed" >&2
			[ $have_mpi = 1 ] && { mpi "$world" "$bytes" || true; }
			[ $have_gloo = 1 ] && { gloo "$world" "$bytes" || true; }
		done
	done
done

# The median over rounds of each case, as timing CSV (for collx-plot) and
# as a table with ratios to collx.
sort -k1,1 -k2,2n -k3,3n -k4,4g "$out/raw.txt" | awk '
	{ k = $1 " " $2 " " $3; v[k, ++n[k]] = $4; if (!(k in seen)) { seen[k] = 1; order[++m] = k } }
	END { for (i = 1; i <= m; i++) { k = order[i]; c = n[k]
		med = c % 2 ? v[k, (c + 1) / 2] : (v[k, c / 2] + v[k, c / 2 + 1]) / 2
		print k, med, c } }' >"$out/median.txt"
{
	echo program,op,algo,rank,world_size,dtype,count,bytes,iter,seconds,algbw_gbps,busbw_gbps,hosts
	awk '{ alg = $3 / $4 / 1e9; printf "%s,allreduce,%s %d ranks,0,%d,f32,%d,%d,%d,%.9g,%.6g,%.6g,1\n",
		$1, $1, $2, $2, $3 / 4, $3, $5, $4, alg, alg * 2 * ($2 - 1) / $2 }' "$out/median.txt"
} >"$out/allreduce.csv"

awk -v rounds="$rounds" -v iters="$iters" '
	{ t[$1, $2, $3] = $4 }
	END {
		printf "allreduce f32 sum over TCP loopback, median of %d rounds of %d iterations\n", rounds, iters
		printf "(4 KiB: median time; 1 and 64 MiB: busbw in GB/s; ratio: collx over the peer, >1 = collx faster)\n\n"
		printf "| ranks, size | collx | Open MPI TCP | Gloo | vs Open MPI | vs Gloo |\n| --- | --- | --- | --- | --- | --- |\n"
		split("4096 1048576 67108864", sizes, " ")
		for (w = 2; w <= 4; w += 2) for (i = 1; i <= 3; i++) {
			b = sizes[i]; lab = b == 4096 ? "4 KiB latency" : b == 1048576 ? "1 MiB busbw" : "64 MiB busbw"
			line = sprintf("| %d, %s |", w, lab)
			for (j = 1; j <= 3; j++) {
				who = j == 1 ? "collx" : j == 2 ? "openmpi-tcp" : "gloo"; s = t[who, w, b]
				if (s == "") line = line " skipped |"
				else if (b == 4096) line = line sprintf(" %.1f us |", s * 1e6)
				else line = line sprintf(" %.3f |", b / s / 1e9 * 2 * (w - 1) / w)
			}
			for (j = 2; j <= 3; j++) {
				who = j == 2 ? "openmpi-tcp" : "gloo"
				if (t["collx", w, b] == "" || t[who, w, b] == "") line = line " |"
				else line = line sprintf(" %.2fx |", t[who, w, b] / t["collx", w, b])
			}
			print line
		}
	}' "$out/median.txt" | tee "$out/table.md"

collx-plot --kind busbw --title "allreduce f32 over TCP loopback: collx, Open MPI, Gloo (median of $rounds rounds)" \
	-o "$out/allreduce.png" "$out/allreduce.csv"
echo "bench.sh: table in $out/table.md, chart in $out/allreduce.png"
