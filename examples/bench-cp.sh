#!/bin/bash
# Benchmark: long sequences on P = 4 ranks, one causal transformer block
# (d_model 256, 8 heads, d_ff 1024, batch 1) forward+backward.
#  1. At sequence SEQ: collx-tp --mode zigzag against the PyTorch ring peer
#     (examples/peers/torch_ring.py, zigzag chunks, Gloo isend/irecv) and
#     against collx-tp --mode ring (contiguous chunks), and the share of
#     zigzag's ring transfer time hidden behind attention (hidden_us over
#     hidden_us + exposed_us of its ring attention rows); beside it, the
#     speedup zigzag can give over the contiguous ring by the attention
#     work counted per ring step (query-key pairs the causal mask leaves,
#     the closed form of tests/tp_seq.bats), on P cores and on CORES cores
#     that the P ranks share (steps in lock-step: a step lasts as long as
#     its busiest rank, or its ranks' work over the cores, whichever is
#     longer), and that bound with the rest of the block's time as
#     measured (the ring's step less its attention rows) added unchanged.
#  2. At sequence SEQ_LONG (a K/V block's transfer shorter than its
#     attention): the share of zigzag's and ring's transfer time hidden.
#  3. collx-tp --mode sp --overlap ring (T = 4) against max(comm, compute)
#     of the layer: compute from --overlap none's rows (its computing
#     phases' seconds), comm both from those rows (its collectives'
#     seconds, which also hold the waits for ranks that computed longer)
#     and alone: the layer's 4 allgathers and 4 reduce-scatters of
#     [SP_SEQ/4, 256] a rank (collx-allgather, collx-reduce-scatter, ring,
#     no compute beside them), launched as the layer is. With OLD_BIN,
#     that tree's --overlap ring interleaved beside it.
# On one host, and, as root with ip netns, on 2 network namespaces x 2
# ranks whose links tc holds to 1 Gbit/s (1, 2) and to SP_RATE (3)
# (tests/lib/netns.bash). Rounds interleave the runs; each run takes the
# median over ITERS iterations after one warm-up, the tables the median
# over the rounds. collx's step is the sum of rank 0's timed phases less
# the gathers that only serve the output files; the peer's is its step
# time, the slowest rank's median. One thread per rank.
# usage: examples/bench-cp.sh [ROUNDS [ITERS]]   (defaults 3 and 3)
#        SEQ=2048 SEQ_LONG=8192 SP_SEQ=2048 SP_RATE=10gbit CORES=nproc
#        NETNS=auto|no PY=/usr/bin/python3 OUT=DIR (keeps the rows)
#        ONLY=sp (part 3 alone) OLD_BIN=DIR (another tree's bin/)
set -eu
here=$(cd "$(dirname "$0")" && pwd)
export PATH="${COLLX_BIN:-$here/../bin}:$PATH"
rounds=${1:-3}
iters=${2:-3}
py=${PY:-/usr/bin/python3}
peer=$here/peers/torch_ring.py
D=256 H=8 FF=1024 B=1 S=${SEQ:-2048} P=4
SL=${SEQ_LONG:-8192} SPS=${SP_SEQ:-2048} sprate=${SP_RATE:-10gbit}
cores=${CORES:-$(nproc)}
only=${ONLY:-}
case $only in ''|sp) ;; *) echo "bench-cp.sh: ONLY is sp or unset" >&2; exit 2 ;; esac
work=$(mktemp -d "${TMPDIR:-/tmp}/collx-bench-cp.XXXXXX")
out=${OUT:-$work}
netns=no
if [ "${NETNS:-auto}" != no ] && [ "$(id -u)" -eq 0 ]; then
	. "$here/../tests/lib/netns.bash"
	netns_available && netns=yes
fi
cleanup() {
	[ "$netns" = no ] || netns_teardown
	rm -rf "$work"
}
trap cleanup EXIT
cd "$work"
mkdir -p "$out"

collx-dp --init block --dims "$D,$H,$FF,1" --seed 1 -o block.safetensors
for n in $S $SL $SPS; do
	collx-tensor create --shape "$B,$n,$D" --fill randn --seed 1 -o "x$n.npy"
	collx-tensor create --shape "$B,$n,$D" --fill randn --seed 2 -o "dy$n.npy"
done
collx-tensor create --shape "$((B * SPS / P)),$D" --fill randn --seed 3 -o ag.npy
collx-tensor create --shape "$((B * SPS)),$D" --fill randn --seed 3 -o rs.npy
: >"$out/results.csv"

MEDIAN='
function median(list,   a, k, i, j, x) {
	k = split(list, a, " ")
	for (i = 2; i <= k; i++) { x = a[i]
		for (j = i - 1; j >= 1 && a[j] + 0 > x + 0; j--) a[j + 1] = a[j]
		a[j + 1] = x }
	return a[int((k + 1) / 2)]
}'

# launch: the 4 ranks of a command, here or 2 per namespace
launch() {
	if [ "$where" = host ]; then
		collx-run -n $P --timeout 120 -- "$@"
	else
		collx-run -H "$(netns_addr 0):2,$(netns_addr 1):2" --ssh "$work/ssh" \
		    --master "$(netns_addr 0):29500" --wdir "$work" --timeout 120 \
		    -x GLOO_SOCKET_IFNAME=eth0 -x COLLX_IFNAME=eth0 \
		    -x OPENBLAS_NUM_THREADS=1 -- "$@"
	fi
}

# collx MODE ROUND [SEQ [OPTIONS [LABEL]]]: a line
# where,impl,mode,round,seconds,hidden_share,attention_seconds,seq,comm,compute
# (attention: rank 0's ring attention rows; comm and compute: its
# collectives' and its other phases' seconds)
collx() {
	local n=${3:-$S} tp=collx-tp
	[ "${5:-}" != old ] || tp=$OLD_BIN/collx-tp
	rm -f t.csv
	launch "$tp" -q --layer block --mode "$1" ${4:-} --causal \
	    -m block.safetensors -i "x$n.npy" --backward --grad-output "dy$n.npy" \
	    --iters $((iters + 1)) --timing t.csv
	awk -F, -v where="$where" -v mode="$1${4:+ ${4#--}}${5:+ $5}" -v round="$2" -v n="$n" "$MEDIAN"'
	    NR > 1 && $4 == 0 && $2 != "" && $NF !~ /output/ && $9 > 0 {
		step[$9] += $10
		if ($NF ~ /ring attention/) att[$9] += $10
		else if ($2 == "compute") cmp[$9] += $10
		else com[$9] += $10 }
	    NR > 1 && ($NF ~ /ring attention/ || $2 ~ /\+/) && $9 > 0 {
		hid += $14; wait += $15 }
	    END { for (i in step) { l = l " " step[i]; a = a " " att[i] + 0
		    c = c " " cmp[i] + 0; m = m " " com[i] + 0 }
		printf "%s,collx,%s,%d,%.6f,%.3f,%.6f,%d,%.6f,%.6f\n", where,
		    mode, round, median(l), (hid + wait > 0 ? hid / (hid + wait) : 0),
		    median(a), n, median(m), median(c) }' t.csv >>"$out/results.csv"
}

# alone ROUND: the layer's 4 allgathers and 4 reduce-scatters, nothing
# beside them (rank 0's median of each, over ITERS after one warm-up;
# their rows kept as OUT/ag.WHERE.ROUND.csv and rs.WHERE.ROUND.csv)
alone() {
	rm -f ag.csv rs.csv
	launch collx-allgather -q -i ag.npy --algo ring --iters "$iters" \
	    --warmup 1 --timing ag.csv
	launch collx-reduce-scatter -q -i rs.npy --algo ring --iters "$iters" \
	    --warmup 1 --timing rs.csv
	cp ag.csv "$out/ag.$where.$1.csv"
	cp rs.csv "$out/rs.$where.$1.csv"
	cat ag.csv rs.csv | awk -F, -v where="$where" -v round="$1" \
	    -v n="$SPS" "$MEDIAN"'
	    $1 == "program" { k++ } $1 != "program" && $4 == 0 { t[k] = t[k] " " $10 }
	    END { printf "%s,collx,sp comm alone,%d,%.6f,,,%d,%.6f,\n", where,
		round, 4 * (median(t[1]) + median(t[2])), n,
		4 * (median(t[1]) + median(t[2])) }' >>"$out/results.csv"
}

# torch ROUND: the peer's zigzag step
torch() {
	launch "$py" "$peer" bench $P "$iters" 1 $D $H $S $B $FF causal zigzag |
	    awk -F, -v where="$where" -v round="$1" '$1 == "torch" {
		printf "%s,torch,zigzag,%d,%s,,,%d,,\n", where, round, $4, '"$S"' }' \
	    >>"$out/results.csv"
}

for where in host $([ "$netns" = yes ] && echo $([ -z "$only" ] && echo netns) sp-netns); do
	case $where in
	netns) netns_setup 2 --rate 1gbit ;;
	sp-netns) netns_setup 2 --rate "$sprate" ;;
	esac
	[ "$where" = host ] || netns_fake_ssh "$work/ssh"
	for ((r = 1; r <= rounds; r++)); do
		if [ "$where" != sp-netns ] && [ -z "$only" ]; then
			case $((r % 3)) in	# each goes first once in three
			1) collx zigzag $r; collx ring $r; torch $r ;;
			2) collx ring $r; torch $r; collx zigzag $r ;;
			0) torch $r; collx zigzag $r; collx ring $r ;;
			esac
			collx zigzag $r "$SL"
			collx ring $r "$SL"
		fi
		if [ "$where" != netns ]; then
			for k in 0 1 2 3; do	# each goes first in turn
				case $(((r + k) % 4)) in
				0) collx sp $r "$SPS" "--overlap none" ;;
				1) collx sp $r "$SPS" "--overlap ring" ;;
				2) alone $r ;;
				3) [ -z "${OLD_BIN:-}" ] ||
				    collx sp $r "$SPS" "--overlap ring" old ;;
				esac
			done
		fi
	done
	[ "$where" = host ] || netns_teardown
done
netns=no

# the rows of one where, impl, mode and sequence: median of column COL
pick='
function pick(w, i, m, n, col,   l, k) {
	for (k = 1; k <= nr; k++)
		if (W[k] == w && I[k] == i && M[k] == m && N[k] == n)
			l = l " " F[k, col]
	return l == "" ? -1 : median(l)
}
{ nr++; W[nr] = $1; I[nr] = $2; M[nr] = $3; N[nr] = $8
  for (c = 1; c <= NF; c++) F[nr, c] = $c; seen[$1] = 1 }'
name='function name(w) { if (w == "host") return "one host"
	if (w == "netns") return "2 namespaces x 2 ranks, 1 Gbit/s"
	return "2 namespaces x 2 ranks, " r }'

echo "P = $P ranks, block d=$D heads=$H d_ff=$FF, batch $B, causal;"
echo "forward+backward seconds, median of $rounds interleaved rounds (each the median of $iters)"
echo
if [ -z "$only" ]; then
echo "Sequence $S:"
echo
echo "| where | collx zigzag | collx ring | torch ring peer (zigzag) | zigzag / peer speedup | zigzag / ring speedup | zigzag transfer hidden |"
echo "| --- | --- | --- | --- | --- | --- | --- |"
awk -F, -v S="$S" -v r="$sprate" "$MEDIAN$pick$name"'
	END { for (x in seen) { if (x == "sp-netns") continue
		z = pick(x, "collx", "zigzag", S, 5); g = pick(x, "collx", "ring", S, 5)
		p = pick(x, "torch", "zigzag", S, 5)
		printf "| %s | %.3f | %.3f | %.3f | %.2fx | %.2fx | %.0f%% |\n", \
		    name(x), z, g, p, p / z, g / z, 100 * pick(x, "collx", "zigzag", S, 6) } }' \
    "$out/results.csv"
echo
# counted work per ring step (units of one chunk-pair's c*c pairs, c the
# zigzag chunk, 2P of them; the ring's chunks are 2c): the diagonal block
# of c rows leaves c(c+1)/2 pairs
echo "Zigzag's bound over the contiguous ring at sequence $S, from the attention work counted per step:"
echo
awk -v P=$P -v S="$S" -v cores="$cores" -F, "$MEDIAN$pick"'
	function pairs(qc, kc, c) {	# chunk qc of c rows against chunk kc
		return kc < qc ? c * c : kc == qc ? c * (c + 1) / 2 : 0 }
	function wk(zz, r, i,   s, c, q, k, a, b, w) {	# rank r, step i
		s = (r - i + P) % P
		if (!zz) return pairs(r, s, 2 * S / (2 * P))
		c = S / (2 * P)
		for (a = 0; a < 2; a++) for (b = 0; b < 2; b++) {
			q = a ? 2 * P - 1 - r : r; k = b ? 2 * P - 1 - s : s
			w += pairs(q, k, c) }
		return w }
	function bound(zz, ncores,   i, r, t, mx, sum, x) {
		t = 0
		for (i = 0; i < P; i++) { mx = 0; sum = 0
			for (r = 0; r < P; r++) { x = wk(zz, r, i)
				sum += x; if (x > mx) mx = x }
			t += (sum / ncores > mx ? sum / ncores : mx) }
		return t }
	END {
		c = S / (2 * P)
		printf "  per step, rank by rank, in %d-pair units: ring", c * c
		for (i = 0; i < P; i++) { printf " ["; for (r = 0; r < P; r++)
			printf "%s%.2f", r ? " " : "", wk(0, r, i) / (c * c); printf "]" }
		printf "; zigzag"
		for (i = 0; i < P; i++) { printf " ["; for (r = 0; r < P; r++)
			printf "%s%.2f", r ? " " : "", wk(1, r, i) / (c * c); printf "]" }
		print ""
		bp = bound(0, P) / bound(1, P); bc = bound(0, cores) / bound(1, cores)
		printf "  attention alone: %.2fx on %d cores, %.2fx with %d ranks on %d cores\n", bp, P, bc, P, cores
		for (x in seen) { if (x == "sp-netns") continue
			g = pick(x, "collx", "ring", S, 5); a = pick(x, "collx", "ring", S, 7)
			z = pick(x, "collx", "zigzag", S, 5)
			printf "  %s: ring step %.3f s of which attention %.3f s; with the rest unchanged the bound is %.2fx (%d cores), measured %.2fx\n", \
			    x, g, a, g / (g - a + a / bc), cores, g / z } }' "$out/results.csv"
echo
echo "Sequence $SL (a K/V block's transfer shorter than its attention): transfer time hidden"
echo
echo "| where | collx zigzag | collx ring | zigzag hidden | ring hidden |"
echo "| --- | --- | --- | --- | --- |"
awk -F, -v S="$SL" -v r="$sprate" "$MEDIAN$pick$name"'
	END { for (x in seen) { if (x == "sp-netns") continue
		printf "| %s | %.3f | %.3f | %.0f%% | %.0f%% |\n", name(x),
		    pick(x, "collx", "zigzag", S, 5), pick(x, "collx", "ring", S, 5),
		    100 * pick(x, "collx", "zigzag", S, 6),
		    100 * pick(x, "collx", "ring", S, 6) } }' "$out/results.csv"
echo
fi
echo "sp --overlap ring at T = $P, sequence $SPS, against max(comm, compute) of --overlap none's phases"
echo
echo "(comm: none's collective phases, waits for other ranks included; comm alone: the same"
echo "collectives with nothing beside them; old: OLD_BIN's --overlap ring, when given)"
echo
echo "| where | sp none | comm | comm alone | compute | sp --overlap ring | ring / max(comm, compute) | ring / max(comm alone, compute) | ring hidden | old ring | old / max(comm alone, compute) |"
echo "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"
awk -F, -v S="$SPS" -v r="$sprate" "$MEDIAN$pick$name"'
	END { for (x in seen) { if (x == "netns") continue
		n = pick(x, "collx", "sp overlap none", S, 5)
		m = pick(x, "collx", "sp overlap none", S, 9)
		c = pick(x, "collx", "sp overlap none", S, 10)
		o = pick(x, "collx", "sp overlap ring", S, 5)
		a = pick(x, "collx", "sp comm alone", S, 9)
		g = pick(x, "collx", "sp overlap ring old", S, 5)
		printf "| %s | %.4f | %.4f | %.4f | %.4f | %.4f | %.2fx | %.2fx | %.0f%% | %s | %s |\n",
		    name(x), n, m, a, c, o, o / (m > c ? m : c), o / (a > c ? a : c),
		    100 * pick(x, "collx", "sp overlap ring", S, 6),
		    g < 0 ? "-" : sprintf("%.4f", g),
		    g < 0 ? "-" : sprintf("%.2fx", g / (a > c ? a : c)) } }' "$out/results.csv"
