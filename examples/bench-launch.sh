#!/bin/bash
# Same-host speed on every launch, not on most (issue 35's table): each
# case launched N times afresh (a new input file each launch, no option
# beyond a user's: collx-run's default placement), each launch's rank-0
# median over ITERS timed iterations recorded, and per case the best,
# median and worst launch. Cases, interleaved launch by launch:
#   grid      collx-run -n W -- collx-allreduce at 2 and 4 ranks, 4 KiB,
#             1 MiB, 64 MiB, beside Open MPI shm (a plain mpirun -n W of
#             examples/peers/mpi_allreduce.c), Open MPI TCP, Gloo, and
#             with OLD=DIR the collx binaries of DIR (before a change; its
#             collx-run as it launched by default)
#   launchers mpirun -n 2 and srun -n 2 of collx-allreduce (a private
#             single-host Slurm is started when none answers and this runs
#             as root with slurmctld installed, as tests/slurm.bats does)
#   noisy     2 ranks, 1 MiB, with one busy loop pinned to each CPU beside
#             the job: collx's worst launch against Open MPI shm's worst
#   shared    2 ranks, 1 MiB, both pinned to the first CPU by taskset,
#             against the same launched as a user does: the shared median
#             must be within 3x of the placed one
#   pipe      collx-pipe's mlp (examples/bench-pipe.sh's, batch 256,
#             GPipe, M = 8) at W = 2 as a user launches it, against the
#             PyTorch Gloo GPipe peer (examples/peers/torch_pipe.py)
# Each launch of the grid also runs two probes of the machine with no
# collx and no MPI in them, examples/peers/machine_probe.c's copy (1 MiB
# copied to and fro by one pinned process a CPU) and line (a cache line
# handed between two pinned processes): the machine's own spread between
# launches, printed under the table with Open MPI's spreads and how
# closely collx's 2-rank launches follow the probes (Pearson's r over the
# launches, 1 MiB against the copy, 4 KiB against the line; near 1: the
# slow launches are slow for everything on the machine at that moment).
# Then one table with the ratios the issue asks and whether each holds
# (ok or FAIL); raw launches in OUTDIR/launches.txt, the table in
# OUTDIR/table.md. Each collx launch's line there ends with what explains
# its speed, rank by rank, from the ranks' COLLX_DEBUG=info logs (the new
# binaries'): rN=A>B/mM/vV/iI/tcpT: the CPUs it was bound to (A, "all"
# unbound), the CPU it was on at the start and end of the job, its
# migrations, voluntary switches (sleeps in poll) and involuntary ones
# (preempted) while the job ran, and how many of its peers were reached
# over TCP rather than shared memory; rN=-/tcpT where the rank's log says
# nothing of its shared memory (older binaries, or all its peers on TCP).
# usage: examples/bench-launch.sh [OUTDIR]
#   env N=30 launches a case, ITERS=20, PARTS="grid launchers noisy shared
#   pipe", SIZES="4096 1048576 67108864", OLD=DIR, GRID_GLOO=0 (the grid
#   without Gloo, whose launches cost seconds each); a smoke test:
#   N=2 ITERS=5 SIZES=4096 examples/bench-launch.sh /tmp/smoke
set -eu
here=$(cd "$(dirname "$0")" && pwd)
export PATH="${COLLX_BIN:-$here/../bin}:$PATH"
out=$(mkdir -p "${1:-bench-launch-out}" && cd "${1:-bench-launch-out}" && pwd)
n=${N:-30}
iters=${ITERS:-20}
parts=" ${PARTS:-grid launchers noisy shared pipe} "
sizes=${SIZES:-4096 1048576 67108864}
old=${OLD:-}
work=$(mktemp -d "${TMPDIR:-/tmp}/collx-bench-launch.XXXXXX")
busy=()
slurm_dir=

cleanup() {
	local p
	for p in "${busy[@]}"; do
		kill "$p" 2>/dev/null || true
	done
	[ -z "$slurm_dir" ] || slurm_stop
	rm -rf "$work"
}
trap cleanup EXIT

. "$here/peers/detect.sh"
. "$here/peers/measure.sh"
. "$here/../tests/lib/slurm.bash"
peers_detect bench-launch.sh "$work"
probe=0
if cc -O2 -o "$work/machine_probe" "$here/peers/machine_probe.c"; then
	probe=1
else
	echo "bench-launch.sh: the machine's probes skipped: cc failed" >&2
fi

raw=$out/launches.txt
: >"$raw"
# rec PART WHO WORLD BYTES SECONDS: one launch; a failed one (no SECONDS)
# is said on stderr and counted as failed in the table.
rec() {
	if [ -z "${5:-}" ]; then
		echo "bench-launch.sh: $1 $2 at $3 ranks, $4 bytes: a launch failed" >&2
		echo "$1 $2 $3 $4 failed" >>"$raw"
		return 0
	fi
	echo "$*" >>"$raw"
}

# counters: the ranks' counters of the launch just made (their logs
# $work/dbg.RANK), as launches.txt's lines end; nothing without logs.
counters() {
	local f
	for f in "$work"/dbg.*; do
		[ -f "$f" ] || continue
		awk -v r="${f##*.}" -v all="$(taskset -pc $$ | sed 's/.*: //')" '
		    / info: peer .*: tcp / { tcp++ }
		    / info: shm: cpus / { line = $0 }
		    END { if (line == "") { printf " r%s=-/tcp%d", r, tcp; exit }
			split(line, w, /[ ,;]+/)
			for (k = 1; w[k] != "cpus"; k++) ;
			cpus = w[k + 1]; for (k++; w[k + 1] != "on"; k++) cpus = cpus "," w[k + 1]
			match(line, /on cpu [0-9-]+ then [0-9-]+/); split(substr(line, RSTART, RLENGTH), c, " ")
			match(line, /mapped: [0-9]+ migrations, [0-9]+ voluntary and [0-9]+ involuntary/)
			split(substr(line, RSTART, RLENGTH), n, " ")
			printf " r%s=%s:%s>%s/m%s/v%s/i%s/tcp%d", r, cpus == all ? "all" : cpus,
			    c[3], c[5], n[2], n[4], n[7], tcp }' "$f"
	done
	rm -f "$work"/dbg.*
}

# collx BIN WORLD BYTES [PREFIX...]: one launch of BIN's collx-allreduce
# under BIN's collx-run, PREFIX (taskset, env) in front: its seconds and
# counters, or nothing when it failed.
collx() {
	local bin=$1 world=$2 bytes=$3 s
	shift 3
	rm -f "$work"/dbg.*
	s=$(PATH=$bin:$PATH COLLX_DEBUG=info COLLX_DEBUG_FILE="$work/dbg.%r" \
	    collx_allreduce_s "$work" "$bytes" "$iters" "$@" \
	    "$bin/collx-run" -n "$world" -- "$bin/collx-allreduce")
	[ -z "$s" ] || echo "$s$(counters)"
}
# under LAUNCHER...: collx-allreduce launched by another launcher (mpirun,
# srun), as collx() reports it.
under() {
	local bytes=$1 s
	shift
	rm -f "$work"/dbg.*
	s=$(COLLX_DEBUG=info COLLX_DEBUG_FILE="$work/dbg.%r" \
	    collx_allreduce_s "$work" "$bytes" "$iters" "$@" collx-allreduce)
	[ -z "$s" ] || echo "$s$(counters)"
}
new=$(dirname "$(command -v collx-run)")

# A private single-host Slurm (as tests/slurm.bats starts one), when no
# Slurm answers; its daemons stopped at exit.
slurm_start() {
	slurm_dir=$(mktemp -d "${TMPDIR:-/tmp}/collx-slurm.XXXXXX")
	slurm_private_start "$slurm_dir" $((20000 + RANDOM % 5000)) \
	    $((25000 + RANDOM % 5000))
}

slurm_stop() {
	local f
	scancel --quiet --user="$(id -un)" 2>/dev/null || true
	for f in slurmd slurmctld munged; do
		[ -s "$slurm_dir/$f.pid" ] && kill "$(cat "$slurm_dir/$f.pid")" 2>/dev/null
	done
	sleep 1
	rm -rf "$slurm_dir"
	slurm_dir=
}

have_srun=0
if [[ $parts == *" launchers "* ]] && command -v srun >/dev/null; then
	if timeout 20 srun -n 1 true >/dev/null 2>&1; then
		have_srun=1
	elif [ "$(id -u)" -eq 0 ] && command -v slurmctld munged >/dev/null &&
	    slurm_start; then
		have_srun=1
	else
		echo "bench-launch.sh: srun skipped: no Slurm answers and none could be started" >&2
	fi
fi

# pipe: the model and data of examples/bench-pipe.sh
if [[ $parts == *" pipe "* ]]; then
	(cd "$work" && collx-dp --init mlp --dims 512,512,512,8 --seed 1 -o mlp8.safetensors &&
	collx-tensor create --shape 256,512 --fill randn --seed 1 -o X.npy &&
	collx-tensor create --shape 256,512 --fill randn --seed 2 -o Y.npy) >/dev/null
fi
# pipe_s: collx-pipe's median step (rank 0, steps after the first)
pipe_s() {
	(cd "$work" && rm -f p.csv &&
	timeout 600 collx-run -n 2 -- collx-pipe -m mlp8.safetensors -i X.npy \
	    -t Y.npy --microbatches 8 --schedule gpipe --steps 6 --lr 0.01 \
	    --timing p.csv >/dev/null &&
	awk -F, '$2 == "step" && $4 == 0 && $9 > 0 { print $10 }' p.csv | median)
}
torch_pipe_s() {
	(cd "$work" && OPENBLAS_NUM_THREADS=1 timeout 600 /usr/bin/python3 \
	    "$here/peers/torch_pipe.py" mlp8.safetensors X.npy Y.npy 2 8 6 0.01 |
	    sed -n 's/.*median_step_s=\([0-9.e-]*\).*/\1/p')
}

# the noisy neighbours: one busy loop pinned to each CPU this may use
noisy_on() {
	local c
	for c in $(taskset -pc $$ | sed 's/.*: //' | tr ',' '\n' |
	    awk -F- '{ for (c = $1; c <= (NF > 1 ? $2 : $1); c++) print c }'); do
		taskset -c "$c" sh -c 'while :; do :; done' &
		busy+=($!)
	done
}
noisy_off() {
	local p
	for p in "${busy[@]}"; do
		kill "$p" 2>/dev/null || true
		wait "$p" 2>/dev/null || true
	done
	busy=()
}
first_cpu=$(taskset -pc $$ | sed 's/.*: //; s/[-,].*//')

for ((i = 1; i <= n; i++)); do
	echo "bench-launch.sh: launch $i of $n" >&2
	if [[ $parts == *" grid "* ]]; then
		if [ $probe = 1 ]; then
			rec probe copy 2 1048576 "$(timeout 60 \
			    "$work/machine_probe" copy 1048576 "$iters" |
			    peer_median)"
			rec probe line 2 4096 "$(timeout 60 \
			    "$work/machine_probe" line 10000 | peer_median)"
		fi
		for world in 2 4; do
			for bytes in $sizes; do
				rec grid collx "$world" "$bytes" "$(collx "$new" "$world" "$bytes")"
				[ -z "$old" ] ||
				    rec grid collx-old "$world" "$bytes" "$(collx "$old" "$world" "$bytes")"
				if [ $have_mpi = 1 ]; then
					rec grid openmpi-shm "$world" "$bytes" \
					    "$(mpi_allreduce_s "$work" "$world" "$bytes" "$iters")"
					rec grid openmpi-tcp "$world" "$bytes" \
					    "$(mpi_allreduce_s "$work" "$world" "$bytes" "$iters" "${mpi_tcp[@]}")"
				fi
				[ $have_gloo = 0 ] || [ "${GRID_GLOO:-1}" = 0 ] ||
				    rec grid gloo "$world" "$bytes" "$(gloo_allreduce_s "$world" "$bytes" "$iters")"
			done
		done
	fi
	if [[ $parts == *" launchers "* ]]; then
		for bytes in $sizes; do
			[ $have_mpi = 0 ] || rec launchers collx-mpirun 2 "$bytes" \
			    "$(under "$bytes" mpirun --allow-run-as-root -n 2)"
			[ $have_srun = 0 ] || rec launchers collx-srun 2 "$bytes" \
			    "$(under "$bytes" srun -n 2)"
			[ $have_mpi = 0 ] || [[ $parts == *" grid "* ]] ||
			    rec grid openmpi-shm 2 "$bytes" \
			    "$(mpi_allreduce_s "$work" 2 "$bytes" "$iters")"
		done
	fi
	if [[ $parts == *" noisy "* ]]; then
		noisy_on
		rec noisy collx 2 1048576 "$(collx "$new" 2 1048576)"
		[ -z "$old" ] || rec noisy collx-old 2 1048576 "$(collx "$old" 2 1048576)"
		[ $have_mpi = 0 ] || rec noisy openmpi-shm 2 1048576 \
		    "$(mpi_allreduce_s "$work" 2 1048576 "$iters")"
		noisy_off
	fi
	if [[ $parts == *" shared "* ]]; then
		rec shared collx-placed 2 1048576 "$(collx "$new" 2 1048576)"
		rec shared collx-one-cpu 2 1048576 \
		    "$(collx "$new" 2 1048576 taskset -c "$first_cpu")"
		[ -z "$old" ] || rec shared collx-old-one-cpu 2 1048576 \
		    "$(collx "$old" 2 1048576 taskset -c "$first_cpu")"
	fi
	if [[ $parts == *" pipe "* ]]; then
		rec pipe collx-pipe 2 0 "$(pipe_s)"
		[ $have_gloo = 0 ] || rec pipe torch-gpipe 2 0 "$(torch_pipe_s)"
	fi
done

# stats.txt: "PART WHO WORLD BYTES BEST MEDIAN WORST LAUNCHES FAILED"
awk '{ k = $1 " " $2 " " $3 " " $4; if (!(k in seen)) { seen[k] = 1; order[++m] = k }
	if ($5 == "failed") { bad[k]++; next } v[k, ++c[k]] = $5 }
	END { for (i = 1; i <= m; i++) { k = order[i]; n = c[k]
		for (a = 1; a <= n; a++) for (b = a + 1; b <= n; b++)
			if (v[k, b] < v[k, a]) { t = v[k, a]; v[k, a] = v[k, b]; v[k, b] = t }
		med = !n ? 0 : n % 2 ? v[k, (n + 1) / 2] : (v[k, n / 2] + v[k, n / 2 + 1]) / 2
		printf "%s %.9g %.9g %.9g %d %d\n", k, n ? v[k, 1] : 0, med, n ? v[k, n] : 0, n, bad[k] } }' \
    "$raw" >"$out/stats.txt"

awk -v n="$n" -v iters="$iters" '
	{ k = $1 " " $2 " " $3 " " $4; best[k] = $5; med[k] = $6; worst[k] = $7; fail[k] = $9 }
	function us(s) { return s >= 1e-3 ? sprintf("%.2f ms", s * 1e3) : sprintf("%.1f us", s * 1e6) }
	function has(k) { return k in med && med[k] > 0 }
	function spread(k) { return has(k) ? sprintf("%s / %s / %s", us(best[k]), us(med[k]), us(worst[k])) : "-" }
	function okay(c) { return c ? "ok" : "FAIL" }
	# the collx cells of one row: spread, worst/best, worst over Open MPI shm
	function row(lab, k, w, b,   o, r) {
		o = "grid openmpi-shm " w " " b
		r = sprintf("| %s | %s |", lab, spread(k))
		if (!has(k)) return r " | | |"
		r = r sprintf(" %.2f %s |", worst[k] / best[k], okay(worst[k] <= 1.3 * best[k] && !fail[k]))
		if (has(o))
			r = r sprintf(" %.2f %s |", worst[k] / med[o], okay(worst[k] <= 0.8 * med[o] && !fail[k]))
		else r = r " |"
		return r
	}
	END {
		printf "collx on one host over %d fresh launches a case (a new input file each, no placement option),\n", n
		printf "each launch rank 0 median of %d iterations; best / median / worst launch; ok or FAIL: issue 35s bound\n\n", iters
		printf "| case | collx best / median / worst | worst / best (<= 1.3) | worst / Open MPI shm median (<= 0.8) | before (OLD) median | Open MPI shm | Open MPI TCP | Gloo |\n"
		printf "| --- | --- | --- | --- | --- | --- | --- | --- |\n"
		split("4096 1048576 67108864", sizes, " ")
		for (w = 2; w <= 4; w += 2) for (i = 1; i <= 3; i++) {
			b = sizes[i]; lab = sprintf("%d ranks, %s", w, b == 4096 ? "4 KiB" : b == 1048576 ? "1 MiB" : "64 MiB")
			if (!(("grid collx " w " " b) in med)) continue
			r = row("collx-run -n " lab, "grid collx " w " " b, w, b)
			r = r sprintf(" %s | %s | %s | %s |", has("grid collx-old " w " " b) ? us(med["grid collx-old " w " " b]) : "-",
			    has("grid openmpi-shm " w " " b) ? us(med["grid openmpi-shm " w " " b]) : "-",
			    has("grid openmpi-tcp " w " " b) ? us(med["grid openmpi-tcp " w " " b]) : "-",
			    has("grid gloo " w " " b) ? us(med["grid gloo " w " " b]) : "-")
			print r
		}
		for (i = 1; i <= 3; i++) for (j = 1; j <= 2; j++) {
			b = sizes[i]; who = j == 1 ? "mpirun" : "srun"
			k = "launchers collx-" who " 2 " b
			if (!(k in med)) continue
			print row(who " -n 2, " (b == 4096 ? "4 KiB" : b == 1048576 ? "1 MiB" : "64 MiB"), k, 2, b) \
			    sprintf(" | %s | | |", has("grid openmpi-shm 2 " b) ? us(med["grid openmpi-shm 2 " b]) : "-")
		}
		k = "noisy collx 2 1048576"; o = "noisy openmpi-shm 2 1048576"
		if (k in med) {
			printf "\nnoisy neighbours (a busy loop pinned to each CPU), 2 ranks, 1 MiB:\n"
			printf "  collx %s; before (OLD) %s; Open MPI shm %s\n", spread(k),
			    spread("noisy collx-old 2 1048576"), spread(o)
			if (has(k) && has(o))
				printf "  collx worst / Open MPI worst = %.2f (<= 1): %s\n", worst[k] / worst[o],
				    okay(worst[k] <= worst[o] && !fail[k])
		}
		k = "shared collx-one-cpu 2 1048576"; o = "shared collx-placed 2 1048576"
		if (has(k) && has(o)) {
			printf "\nforced shared core (both ranks on one CPU by taskset), 2 ranks, 1 MiB:\n"
			printf "  one CPU %s; placed (as users launch) %s; before (OLD) on one CPU %s\n",
			    spread(k), spread(o), spread("shared collx-old-one-cpu 2 1048576")
			printf "  one-CPU median / placed median = %.2f (<= 3): %s\n", med[k] / med[o],
			    okay(med[k] <= 3 * med[o] && !fail[k])
		}
		k = "pipe collx-pipe 2 0"; o = "pipe torch-gpipe 2 0"
		if (has(k)) {
			printf "\ncollx-pipe mlp (batch 256, GPipe, M = 8) at W = 2 as users launch, step time:\n"
			printf "  collx-pipe %s; PyTorch Gloo GPipe %s\n", spread(k), spread(o)
			if (has(o))
				printf "  PyTorch median / collx-pipe median = %.2fx (>= 1.5): %s\n", med[o] / med[k],
				    okay(med[o] >= 1.5 * med[k])
		}
	}' "$out/stats.txt" | tee "$out/table.md"
# The machine's own spread: Open MPI's launches and the probes', and how
# collx's 2-rank launches follow the probes (launch by launch).
awk -v raw="$raw" '
	function us(s) { return s >= 1e-3 ? sprintf("%.2f ms", s * 1e3) : sprintf("%.1f us", s * 1e6) }
	{ k = $1 " " $2 " " $3 " " $4; best[k] = $5; med[k] = $6; worst[k] = $7 }
	function line(lab, k) { if (k in med && best[k] > 0)
		printf "  %s: %s / %s / %s, worst / best %.2f\n", lab, us(best[k]), us(med[k]), us(worst[k]), worst[k] / best[k] }
	END {
		if (!("probe copy 2 1048576" in med) && !("grid openmpi-shm 2 1048576" in med)) exit
		printf "\nthe same launches, best / median / worst: the machine itself\n"
		split("4096 1048576 67108864", sizes, " ")
		for (w = 2; w <= 4; w += 2) for (i = 1; i <= 3; i++)
			line(sprintf("Open MPI shm, %d ranks, %s", w, sizes[i] == 4096 ? "4 KiB" : sizes[i] == 1048576 ? "1 MiB" : "64 MiB"),
			    "grid openmpi-shm " w " " sizes[i])
		line("copy probe (1 MiB to and fro, one pinned process a CPU)", "probe copy 2 1048576")
		line("line probe (round trip of a cache line between two CPUs)", "probe line 2 4096")
		while ((getline l < raw) > 0) { split(l, f, " ")
			if (f[1] == "probe") p[f[4], ++np[f[4]]] = f[5]
			if (f[1] == "grid" && f[2] == "collx" && f[3] == 2) c[f[4], ++nc[f[4]]] = f[5] }
		corr(1048576, "1 MiB", "copy")
		corr(4096, "4 KiB", "line")
	}
	# Pearson r of collx 2-rank launches of b bytes against probe pb
	function corr(b, lab, pb,   i, n, sx, sy, sxx, syy, sxy, vx, vy, x, y) {
		for (i = 1; i <= np[b] && i <= nc[b]; i++) {
			x = p[b, i]; y = c[b, i]
			if (x == "failed" || y == "failed") continue
			n++; sx += x; sy += y; sxx += x * x; syy += y * y; sxy += x * y }
		vx = n * sxx - sx * sx; vy = n * syy - sy * sy
		if (n > 2 && vx > 0 && vy > 0)
			printf "  collx 2 ranks %s against the %s probe, launch by launch: r = %.2f over %d launches\n",
			    lab, pb, (n * sxy - sx * sy) / sqrt(vx * vy), n
	}' "$out/stats.txt" | tee -a "$out/table.md"
load=$(cut -d' ' -f1-3 /proc/loadavg)
echo "(load average at the end: $load; $(nproc) CPUs)" | tee -a "$out/table.md"
