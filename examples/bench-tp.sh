#!/bin/bash
# Benchmark: one transformer block (d_model 256, 8 heads, seq 256, batch 4,
# d_ff 1024, non-causal) forward+backward, collx-tp against the PyTorch
# peer (examples/peers/torch_tp.py: torch.distributed Gloo, Megatron f/g
# operators, Ulysses all-to-all from isend/irecv), on 1, 2 and 4 ranks,
# one thread per rank. Rounds interleave the two; each run takes the
# median over ITERS iterations after 2 warm-up ones, the table the median
# over the rounds. collx's step is the sum of its timed phases on rank 0,
# less the gathers that only serve the output files; its communication
# share and bytes sent come from the same rows, and a second table splits
# them by phase (the timing rows' phase column: each collective, forward
# and backward).
# usage: examples/bench-tp.sh [ROUNDS [ITERS]]   (defaults 5 and 5)
#        WORLDS="1 2 4" PY=/usr/bin/python3 BENCH_CSV=F (keeps the rows)
set -eu
here=$(cd "$(dirname "$0")" && pwd)
export PATH="${COLLX_BIN:-$here/../bin}:$PATH"
rounds=${1:-5}
iters=${2:-5}
worlds=${WORLDS:-1 2 4}
py=${PY:-/usr/bin/python3}
warm=2
D=256 H=8 S=256 B=4 FF=1024
work=$(mktemp -d "${TMPDIR:-/tmp}/collx-bench-tp.XXXXXX")
trap 'rm -rf "$work"' EXIT
cd "$work"

collx-dp --init block --dims "$D,$H,$FF,0" --seed 1 -o block.safetensors
collx-tensor create --shape "$B,$S,$D" --fill randn --seed 1 -o x.npy
collx-tensor create --shape "$B,$S,$D" --fill randn --seed 2 -o dy.npy
: >results.csv
: >phases.csv

# The median of the numbers in a space-separated list (awk).
MEDIAN='
function median(list,   a, k, i, j, x) {
	k = split(list, a, " ")
	for (i = 2; i <= k; i++) { x = a[i]
		for (j = i - 1; j >= 1 && a[j] + 0 > x + 0; j--) a[j + 1] = a[j]
		a[j + 1] = x }
	return a[int((k + 1) / 2)]
}'

# collx MODE WORLD ROUND: a line impl,mode,world,round,seconds,comm,bytes
# in results.csv and one mode,world,round,phase,op,seconds,bytes per
# communication phase in phases.csv (medians over the iterations)
collx() {
	rm -f t.csv
	collx-run -n "$2" -- collx-tp --layer block --mode "$1" \
	    -m block.safetensors -i x.npy --backward --grad-output dy.npy \
	    --iters $((iters + warm)) --threads 1 --timing t.csv -q
	awk -F, -v w="$warm" -v m="$1" -v n="$2" -v r="$3" "$MEDIAN"'
	NR > 1 && $4 == 0 && $9 >= w && $14 !~ /\(output\)/ {
		s[$9] += $10; b[$9] += $13
		if ($2 != "compute") {
			c[$9] += $10
			if (!($14 in op)) { op[$14] = $2; order[++np] = $14 }
			pt[$14] = pt[$14] " " $10; pb[$14] = $13
		}
	}
	END {
		for (i in s) { ts = ts " " s[i]; tc = tc " " c[i] + 0; bytes = b[i] }
		printf "collx,%s,%d,%d,%.6f,%.6f,%d\n", m, n, r, median(ts),
		    median(tc), bytes
		for (i = 1; i <= np; i++)
			printf "%s,%d,%d,%s,%s,%.6f,%d\n", m, n, r, order[i],
			    op[order[i]], median(pt[order[i]]), pb[order[i]] >>"phases.csv"
	}' t.csv >>results.csv
}

for ((round = 1; round <= rounds; round++)); do
	for w in $worlds; do
		if [ "$w" -eq 1 ]; then modes=serial; else modes="tp ulysses"; fi
		for m in $modes; do collx "$m" "$w" "$round"; done
		# one thread per rank for torch's OpenBLAS too, as collx-tp has
		OPENBLAS_NUM_THREADS=1 "$py" "$here/peers/torch_tp.py" "$w" "$iters" "$warm" \
		    "$D" "$H" "$S" "$B" "$FF" 2>/dev/null |
		    awk -F, -v r="$round" '{ print $0 "," r }' |
		    awk -F, '{ printf "%s,%s,%s,%s,%s,,\n", $1, $2, $3, $5, $4 }' \
		    >>results.csv
	done
	echo "round $round of $rounds done" >&2
done

if [ -n "${BENCH_CSV:-}" ]; then cp results.csv "$BENCH_CSV"; fi
# median over rounds of each (impl, mode, world)
awk -F, "$MEDIAN"'
{ key = $2 "," $3; t[$1 "," key] = t[$1 "," key] " " $5
  if ($1 == "collx") { c[key] = c[key] " " $6; b[key] = $7 }
  if (!(key in seen)) { seen[key] = 1; order[++n] = key } }
END {
	printf "| ranks | mode | collx-tp ms | of which comm | bytes sent/rank | torch ms | torch / collx |\n"
	printf "| ---: | --- | ---: | ---: | ---: | ---: | ---: |\n"
	for (i = 1; i <= n; i++) {
		key = order[i]; split(key, f, ",")
		ct = median(t["collx," key]); tt = median(t["torch," key])
		cc = median(c[key])
		printf "| %d | %s | %.1f | %.1f (%.0f%%) | %d | %.1f | %.2fx |\n",
		    f[2], f[1], ct * 1e3, cc * 1e3, (ct > 0 ? 100 * cc / ct : 0),
		    b[key], tt * 1e3, (ct > 0 ? tt / ct : 0)
	}
}' results.csv

# each communication phase: median over rounds, share of collx's step
echo
awk -F, "$MEDIAN"'
FNR == NR { if ($1 == "collx") st[$2 "," $3] = st[$2 "," $3] " " $5; next }
{ key = $1 "," $2 "," $4; t[key] = t[key] " " $6; op[key] = $5; b[key] = $7
  if (!(key in seen)) { seen[key] = 1; order[++n] = key } }
END {
	printf "| ranks | mode | phase | collective | ms | of the step | bytes sent/rank |\n"
	printf "| ---: | --- | --- | --- | ---: | ---: | ---: |\n"
	for (i = 1; i <= n; i++) {
		key = order[i]; split(key, f, ",")
		pt = median(t[key]); s = median(st[f[1] "," f[2]])
		printf "| %d | %s | %s | %s | %.1f | %.0f%% | %d |\n", f[2], f[1],
		    f[3], op[key], pt * 1e3, (s > 0 ? 100 * pt / s : 0), b[key]
	}
}' results.csv phases.csv
