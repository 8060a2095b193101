#!/bin/bash
# make bench: allreduce (f32 sum) on one host by collx (shared memory
# between its ranks where libcomm has it) and by collx over TCP loopback
# (collx-tcp: COLLX_SHM=0) beside Open MPI's default single-host path
# (openmpi-shm: shared memory, what a plain mpirun gives), Open MPI over
# TCP and PyTorch's Gloo, at 2 and 4 ranks and 4 KiB, 1 MiB and 64 MiB;
# then an OSU-style 8-byte ping-pong between two ranks by collx and Open
# MPI, each both ways. Every program is launched as a user launches it,
# with no placement option: collx-run places its ranks by its default
# (--bind auto: a core each), a plain mpirun by Open MPI's (a core each
# at 2 ranks, a socket at more). ROUNDS interleaved rounds, each a fresh
# launch of every case with a new input file; the tables give the median
# launch, and collx's best and worst launch beside it (a launch: rank 0's
# median over its iterations); then a chart. Peers that
# are not installed are skipped, saying so. Every time is rank 0's median
# over the timed iterations, as the peers' programs (examples/peers/,
# copies of ../shared/anchors, and mpi_pingpong.c) time it.
# usage: examples/bench.sh [OUTDIR]   (env ROUNDS=5 ITERS=10 PINGS=1000)
set -eu
here=$(cd "$(dirname "$0")" && pwd)
export PATH="${COLLX_BIN:-$here/../bin}:$PATH"
out=$(mkdir -p "${1:-bench-out}" && cd "${1:-bench-out}" && pwd)
rounds=${ROUNDS:-5}
iters=${ITERS:-10}
pings=${PINGS:-1000}
warm=$((pings / 10))
peers=$here/peers
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

. "$peers/detect.sh"
. "$peers/measure.sh"
peers_detect bench.sh "$work"

# record FILE WHO WORLD BYTES SECONDS [MORE]: one measurement, a line of
# FILE, or when SECONDS is empty (the run failed) a line on stderr.
record() {
	local file=$1
	shift
	if [ -z "${4:-}" ]; then
		echo "bench.sh: $1 at $2 ranks, $3 bytes failed" >&2
		return 0
	fi
	echo "$*" >>"$file"
}
# collx without COLLX_SHM (libcomm's choice: shared memory between ranks
# of one host, once it has it) and with COLLX_SHM=0 (TCP for every pair)
shm=(env -u COLLX_SHM)
noshm=(env COLLX_SHM=0)

raw=$out/raw.txt
pp_raw=$out/pingpong-raw.txt
: >"$raw"
: >"$pp_raw"
for ((r = 1; r <= rounds; r++)); do
	echo "bench.sh: round $r of $rounds" >&2
	for world in 2 4; do
		for bytes in 4096 1048576 67108864; do
			record "$raw" collx "$world" "$bytes" "$(collx_allreduce_s "$work" \
			    "$bytes" "$iters" "${shm[@]}" collx-run -n "$world" -- collx-allreduce)"
			record "$raw" collx-tcp "$world" "$bytes" "$(collx_allreduce_s "$work" \
			    "$bytes" "$iters" "${noshm[@]}" collx-run -n "$world" -- collx-allreduce)"
			if [ $have_mpi = 1 ]; then
				record "$raw" openmpi-shm "$world" "$bytes" \
				    "$(mpi_allreduce_s "$work" "$world" "$bytes" "$iters")"
				record "$raw" openmpi-tcp "$world" "$bytes" \
				    "$(mpi_allreduce_s "$work" "$world" "$bytes" "$iters" "${mpi_tcp[@]}")"
			fi
			if [ $have_gloo = 1 ]; then
				record "$raw" gloo "$world" "$bytes" \
				    "$(gloo_allreduce_s "$world" "$bytes" "$iters")"
			fi
		done
	done
	# the collx lines carry the transport collx-bench names (or -)
	record "$pp_raw" collx 2 8 $(collx_pingpong_s "$pings" "$warm" \
	    "${shm[@]}" collx-run -n 2 --)
	record "$pp_raw" collx-tcp 2 8 $(collx_pingpong_s "$pings" "$warm" \
	    "${noshm[@]}" collx-run -n 2 --)
	if [ $have_mpi = 1 ]; then
		record "$pp_raw" openmpi-shm 2 8 "$(mpi_pingpong_s "$work" "$pings" "$warm")"
		record "$pp_raw" openmpi-tcp 2 8 \
		    "$(mpi_pingpong_s "$work" "$pings" "$warm" "${mpi_tcp[@]}")"
	fi
done

# medians RAW: the median over rounds (launches) of each case, "WHO WORLD
# BYTES SECONDS ROUNDS BEST WORST [MORE]", MORE being the last round's.
medians() {
	sort -k1,1 -k2,2n -k3,3n -k4,4g "$1" | awk '
	{ k = $1 " " $2 " " $3; v[k, ++n[k]] = $4; more[k] = $5
		if (!(k in seen)) { seen[k] = 1; order[++m] = k } }
	END { for (i = 1; i <= m; i++) { k = order[i]; c = n[k]
		med = c % 2 ? v[k, (c + 1) / 2] : (v[k, c / 2] + v[k, c / 2 + 1]) / 2
		printf "%s %.9g %d %.9g %.9g %s\n", k, med, c, v[k, 1], v[k, c], more[k] } }'
}
medians "$raw" >"$out/median.txt"
medians "$pp_raw" >"$out/pingpong-median.txt"

# The medians as timing CSV (for collx-plot) and as tables: allreduce with
# the ratios, the ping-pong latencies.
{
	echo program,op,algo,rank,world_size,dtype,count,bytes,iter,seconds,algbw_gbps,busbw_gbps,hosts
	awk '{ alg = $3 / $4 / 1e9; printf "%s,allreduce,%s %d ranks,0,%d,f32,%d,%d,%d,%.9g,%.6g,%.6g,1\n",
		$1, $1, $2, $2, $3 / 4, $3, $5, $4, alg, alg * 2 * ($2 - 1) / $2 }' "$out/median.txt"
} >"$out/allreduce.csv"

{
awk -v rounds="$rounds" -v iters="$iters" '
	{ t[$1, $2, $3] = $4; lo[$1, $2, $3] = $6; hi[$1, $2, $3] = $7 }
	function show(s, w, b) {
		if (b == 4096) return sprintf("%.1f", s * 1e6)
		return sprintf("%.3f", b / s / 1e9 * 2 * (w - 1) / w)
	}
	# collx: the median launch, then its best and worst
	function cell(who, w, b,   s) {
		s = t[who, w, b]
		if (s == "") return " skipped |"
		if (who != "collx") return " " show(s, w, b) (b == 4096 ? " us" : "") " |"
		return " " show(s, w, b) " (" show(lo[who, w, b], w, b) "-" \
		    show(hi[who, w, b], w, b) ")" (b == 4096 ? " us" : "") " |"
	}
	# time of a over time of b
	function ratio(a, b, w, n, fmt) {
		if (t[a, w, n] == "" || t[b, w, n] == "") return " |"
		return sprintf(fmt, t[a, w, n] / t[b, w, n])
	}
	END {
		printf "allreduce f32 sum on one host, the median of %d fresh launches of %d iterations each, every one\n", rounds, iters
		printf "placed by its launcher'"'"'s default (collx: the median launch, its best and worst launch in parentheses;\n"
		printf "collx: shared memory where libcomm has it; collx TCP: COLLX_SHM=0; Open MPI shm: a plain mpirun;\n"
		printf "4 KiB: median time; 1 and 64 MiB: busbw in GB/s; collx / OMPI shm: collx time over Open MPI shm time,\n"
		printf "<1 = collx faster; vs PEER: the peer time over collx time, >1 = collx faster)\n\n"
		printf "| ranks, size | collx | collx TCP | Open MPI shm | Open MPI TCP | Gloo |"
		printf " collx / OMPI shm | vs Open MPI TCP | vs Gloo |\n"
		printf "| --- | --- | --- | --- | --- | --- | --- | --- | --- |\n"
		split("4096 1048576 67108864", sizes, " ")
		split("collx collx-tcp openmpi-shm openmpi-tcp gloo", who, " ")
		for (w = 2; w <= 4; w += 2) for (i = 1; i <= 3; i++) {
			b = sizes[i]; lab = b == 4096 ? "4 KiB latency" : b == 1048576 ? "1 MiB busbw" : "64 MiB busbw"
			line = sprintf("| %d, %s |", w, lab)
			for (j = 1; j <= 5; j++)
				line = line cell(who[j], w, b)
			line = line ratio("collx", "openmpi-shm", w, b, " %.2f |")
			line = line ratio("openmpi-tcp", "collx", w, b, " %.2fx |")
			line = line ratio("gloo", "collx", w, b, " %.2fx |")
			print line
		}
	}' "$out/median.txt"
echo
awk -v rounds="$rounds" -v pings="$pings" -v warm="$warm" '
	{ t[$1] = $4; tr[$1] = $8 }
	END {
		printf "8-byte ping-pong between ranks 0 and 1 (osu_latency: half the round trip), timed on rank 0,\n"
		printf "each launcher'"'"'s default placement (a core each); "
		printf "the median of %d after %d warm-up, median of %d rounds (ratio: time over Open MPI shm time)\n\n", pings, warm, rounds
		printf "| peer | latency | / Open MPI shm | transport |\n| --- | --- | --- | --- |\n"
		split("collx collx-tcp openmpi-shm openmpi-tcp", who, " ")
		split("collx|collx TCP (COLLX_SHM=0)|Open MPI shm (plain mpirun)|Open MPI TCP (btl tcp,self)", name, "|")
		for (j = 1; j <= 4; j++) {
			s = t[who[j]]
			how = j > 2 ? (j == 3 ? "default btl (vader)" : "tcp") : \
			    tr[who[j]] == "" || tr[who[j]] == "-" ? "not named by collx-bench" : tr[who[j]]
			if (s == "") { printf "| %s | skipped | | |\n", name[j]; continue }
			printf "| %s | %.2f us | %s | %s |\n", name[j], s * 1e6,
			    t["openmpi-shm"] == "" ? "" : sprintf("%.2f", s / t["openmpi-shm"]), how
		}
	}' "$out/pingpong-median.txt"
} | tee "$out/table.md"

collx-plot --kind busbw --title "allreduce f32 on one host: collx (shm, TCP), Open MPI (shm, TCP), Gloo (median of $rounds rounds)" \
	-o "$out/allreduce.png" "$out/allreduce.csv"
echo "bench.sh: tables in $out/table.md, chart in $out/allreduce.png"
