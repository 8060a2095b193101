#!/bin/bash
# Benchmark: long sequences on P = 4 ranks, one causal transformer block
# (d_model 256, 8 heads, d_ff 1024, batch 1, sequence SEQ) forward+backward:
# collx-tp --mode zigzag against the PyTorch ring peer (examples/peers/
# torch_ring.py, zigzag chunks, Gloo isend/irecv) and against collx-tp
# --mode ring (contiguous chunks), and the share of zigzag's ring transfer
# time hidden behind attention (hidden_us over hidden_us + exposed_us of
# its ring attention rows). On one host, and, as root with ip netns, on
# 2 network namespaces x 2 ranks whose links tc holds to 1 Gbit/s
# (tests/lib/netns.bash). Rounds interleave the three runs; each run takes
# the median over ITERS iterations after one warm-up, the table the median
# over the rounds. collx's step is the sum of rank 0's timed phases less
# the gathers that only serve the output files; the peer's is its step
# time, the slowest rank's median. One thread per rank.
# usage: examples/bench-cp.sh [ROUNDS [ITERS]]   (defaults 3 and 3)
#        SEQ=2048 NETNS=auto|no PY=/usr/bin/python3 OUT=DIR (keeps the rows)
set -eu
here=$(cd "$(dirname "$0")" && pwd)
export PATH="${COLLX_BIN:-$here/../bin}:$PATH"
rounds=${1:-3}
iters=${2:-3}
py=${PY:-/usr/bin/python3}
peer=$here/peers/torch_ring.py
D=256 H=8 FF=1024 B=1 S=${SEQ:-2048} P=4
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
collx-tensor create --shape "$B,$S,$D" --fill randn --seed 1 -o x.npy
collx-tensor create --shape "$B,$S,$D" --fill randn --seed 2 -o dy.npy
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

# collx MODE ROUND: a line where,impl,mode,round,seconds,hidden_share
collx() {
	rm -f t.csv
	launch collx-tp -q --layer block --mode "$1" --causal \
	    -m block.safetensors -i x.npy --backward --grad-output dy.npy \
	    --iters $((iters + 1)) --timing t.csv
	awk -F, -v where="$where" -v mode="$1" -v round="$2" "$MEDIAN"'
	    NR > 1 && $4 == 0 && $2 != "" && $NF !~ /output/ && $9 > 0 {
		step[$9] += $10 }
	    NR > 1 && $NF ~ /ring attention/ && $9 > 0 { hid += $14; wait += $15 }
	    END { for (i in step) l = l " " step[i]
		printf "%s,collx,%s,%d,%.6f,%.3f\n", where, mode, round,
		    median(l), (hid + wait > 0 ? hid / (hid + wait) : 0) }' t.csv >>"$out/results.csv"
}

# torch ROUND: the peer's zigzag step
torch() {
	launch "$py" "$peer" bench $P "$iters" 1 $D $H $S $B $FF causal zigzag |
	    awk -F, -v where="$where" -v round="$1" '$1 == "torch" {
		printf "%s,torch,zigzag,%d,%s,\n", where, round, $4 }' \
	    >>"$out/results.csv"
}

for where in host $([ "$netns" = yes ] && echo netns); do
	if [ "$where" = netns ]; then
		netns_setup 2 --rate 1gbit
		netns_fake_ssh "$work/ssh"
	fi
	for ((r = 1; r <= rounds; r++)); do
		case $((r % 3)) in	# each goes first once in three rounds
		1) collx zigzag $r; collx ring $r; torch $r ;;
		2) collx ring $r; torch $r; collx zigzag $r ;;
		0) torch $r; collx zigzag $r; collx ring $r ;;
		esac
	done
	[ "$where" = host ] || netns_teardown
	[ "$where" = host ] || netns=no
done

echo "P = $P ranks, block d=$D heads=$H d_ff=$FF, batch $B, sequence $S, causal;"
echo "forward+backward seconds, median of $rounds interleaved rounds (each the median of $iters)"
echo
echo "| where | collx zigzag | collx ring | torch ring peer (zigzag) | zigzag / peer speedup | zigzag / ring speedup | zigzag transfer hidden |"
echo "| --- | --- | --- | --- | --- | --- | --- |"
awk -F, "$MEDIAN"'
	{ k = $1 SUBSEP $2 SUBSEP $3; t[k] = t[k] " " $5; h[k] = h[k] " " $6
	  w[$1] = 1 }
	END { for (x in w) {
		z = median(t[x, "collx", "zigzag"]); r = median(t[x, "collx", "ring"])
		p = median(t[x, "torch", "zigzag"])
		printf "| %s | %.3f | %.3f | %.3f | %.2fx | %.2fx | %.0f%% |\n", \
		    x == "host" ? "one host" : "2 namespaces x 2 ranks, 1 Gbit/s", \
		    z, r, p, p / z, r / z, 100 * median(h[x, "collx", "zigzag"]) } }' \
    "$out/results.csv"
