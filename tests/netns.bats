#!/usr/bin/env bats
# The collective programs across hosts: three network namespaces on a
# bridge, links shaped with tc (1 Gbit/s, a small delay), every rank in its
# own namespace talking over eth0 to real addresses; and the table of
# examples/bench-cluster.sh with the commands beside its figures. Needs root
# and `ip netns`; skipped otherwise. Everything is removed in teardown, also
# when a test fails.

load lib/common
load lib/coll
load lib/netns

setup() {
	common_setup
	need python3-numpy "$PY" -c "import numpy"
	need "root and ip netns" netns_available
	local shape=()
	netns_can_shape rate && shape+=(--rate 1gbit)
	netns_can_shape delay && shape+=(--delay 1ms)
	netns_setup 3 "${shape[@]}"
}

teardown() {
	netns_teardown
	common_teardown
}

# placed: netns_placed (tests/lib/netns.bash).
placed() {
	netns_placed "$@"
}

# hosts PROGRAM ARG...: rank i of 3 in namespace i.
hosts() {
	placed "0 1 2" "$@"
}

@test "netns: each host has its address on eth0 and its route to the others" {
	run netns_exec 1 ip -o addr show dev eth0
	[[ "$output" == *"$(netns_addr 1)/24"* ]]
	run netns_exec 1 ip route get "$(netns_addr 2)"
	[[ "$output" == *"dev eth0"* ]]
	run netns_exec 1 ip route get 127.0.0.1
	[[ "$output" != *"dev eth0"* ]]
}

@test "netns: allreduce of r+1 across three hosts, every algorithm" {
	pyx "
for r in range(3): save(f'in.{r}.npy', np.full((64, 1024), r + 1, dtype='f4'))"
	for a in ring tree rd rabenseifner naive; do
		hosts collx-allreduce --algo $a --check -i "$T/in.{rank}.npy" -o "$T/out.{rank}.$a.npy"
		all_exit 0
	done
	pyx "
for a in ['ring', 'tree', 'rd', 'rabenseifner', 'naive']:
    for r in range(3): same(load(f'out.{r}.{a}.npy'), np.full((64, 1024), 6, dtype='f4'), a)"
}

@test "netns: allgather (uneven) and broadcast across three hosts" {
	pyx "
for r in range(3): save(f'in.{r}.npy', np.arange(4 * (r + 1), dtype='i8').reshape(-1, 4) + 100 * r)
save('root.npy', np.linspace(0, 1, 50000))"
	for a in ring rd bruck; do
		hosts collx-allgather --algo $a --check -i "$T/in.{rank}.npy" -o "$T/g.{rank}.$a.npy"
		all_exit 0
	done
	for a in binomial scatter-allgather; do
		hosts sh -c 'if [ "$COLLX_RANK" = 2 ]; then set -- -i "$0/root.npy" "$@"; fi
		    exec collx-broadcast --root 2 --check -o "$0/b.$COLLX_RANK.'$a'.npy" "$@"' "$T" --algo $a
		all_exit 0
	done
	pyx "
want = np.concatenate([load(f'in.{r}.npy') for r in range(3)])
for r in range(3):
    for a in ['ring', 'rd', 'bruck']: same(load(f'g.{r}.{a}.npy'), want, a)
    for a in ['binomial', 'scatter-allgather']: same(load(f'b.{r}.{a}.npy'), load('root.npy'), a)"
}

@test "netns: hier and auto on 2 hosts x 2 ranks (blocked, interleaved), 2 + 1 and 1 + 2 + 1: every collective against numpy" {
	pyx "
for r in range(4):
    save(f'ar.{r}.npy', (np.arange(6000, dtype='i4') * (r + 1) - 50 * r).reshape(200, 30))
    save(f'ag.{r}.npy', (np.arange(4 * (r + 1), dtype='i8') + 1000 * r).reshape(-1, 2))
    save(f'rs.{r}.npy', (np.arange(12 * 700, dtype='i4') % 301 * (r + 2)).reshape(12, 700))
save('root.npy', np.arange(70000, dtype='i4') % 977 - 400)"
	local p a w k=0 hosts
	for p in "0 0 1 1" "0 1 0 1" "0 0 1" "0 1 1 2"; do
		w=$(wc -w <<<"$p")
		for a in hier auto; do
			placed "$p" collx-allreduce --algo $a --check -v -i "$T/ar.{rank}.npy" \
			    -o "$T/ar.$k.{rank}.$a.npy"
			all_exit 0
			# auto is hier here: 2 or 3 hosts, one with 2 ranks
			grep -q "algorithm hier, world $w" err.0 || { cat err.0; false; }
			placed "$p" collx-allgather --algo $a --check -i "$T/ag.{rank}.npy" \
			    -o "$T/ag.$k.{rank}.$a.npy"
			all_exit 0
			placed "$p" collx-reduce-scatter --algo $a --check -i "$T/rs.{rank}.npy" \
			    -o "$T/rs.$k.{rank}.$a.npy"
			all_exit 0
			placed "$p" sh -c 'if [ "$COLLX_RANK" = 1 ]; then set -- -i "$0/root.npy" "$@"; fi
			    exec collx-broadcast --root 1 --check -o "$0/bc.'$k'.$COLLX_RANK.'$a'.npy" "$@"' \
			    "$T" --algo $a
			all_exit 0
		done
		k=$((k + 1))
	done
	pyx "
for k, w in enumerate([4, 4, 3, 4]):
    ar = sum(load(f'ar.{r}.npy').astype('i8') for r in range(w))
    ag = np.concatenate([load(f'ag.{r}.npy') for r in range(w)])
    rs = sum(load(f'rs.{r}.npy').astype('i8') for r in range(w))
    for a in ['hier', 'auto']:
        for r in range(w):
            same(load(f'ar.{k}.{r}.{a}.npy'), ar.astype('i4'), f'allreduce {k} {a} {r}')
            same(load(f'ag.{k}.{r}.{a}.npy'), ag, f'allgather {k} {a} {r}')
            n = 12 // w
            same(load(f'rs.{k}.{r}.{a}.npy'), rs[r * n:(r + 1) * n].astype('i4'),
                 f'reduce-scatter {k} {a} {r}')
            same(load(f'bc.{k}.{r}.{a}.npy'), load('root.npy'), f'broadcast {k} {a} {r}')"
}

@test "netns: 2 hosts x 2 ranks: every collective and algorithm gives the same bytes with shared memory and with COLLX_SHM=0" {
	local prog a mode
	pyx "
rng = np.random.default_rng(7)
for r in range(4): save(f'f.{r}.npy', (rng.standard_normal(60000) * 10.0 ** rng.integers(-3, 4, 60000)).astype('f4'))"
	for mode in shm tcp; do
		[ "$mode" = tcp ] && export COLLX_SHM=0 || unset COLLX_SHM
		# the pairs of a host talk through shared memory, others over TCP
		placed "0 0 1 1" collx-bench p2p --pair 0,1 -b 8 -e 8 -n 5 --csv
		all_exit 0
		[ "$(tail -n 1 stdout.0 | awk -F, '{ print $NF }')" = \
		    "$([ $mode = shm ] && echo shm || echo tcp)" ]
		placed "0 0 1 1" collx-bench p2p --pair 1,2 -b 8 -e 8 -n 5 --csv
		all_exit 0
		[ "$(tail -n 1 stdout.0 | awk -F, '{ print $NF }')" = tcp ]
		for prog in allreduce:naive,ring,tree,rd,rabenseifner,hier \
		    allgather:ring,rd,bruck,hier reduce-scatter:ring,pairwise,halving,hier \
		    alltoall:pairwise,linear broadcast:linear,binomial,scatter-allgather,ring,hier; do
			for a in $(echo "${prog#*:}" | tr , ' '); do
				placed "0 0 1 1" collx-"${prog%%:*}" --algo "$a" \
				    -i "$T/f.{rank}.npy" -o "$T/o.$mode.${prog%%:*}.$a.{rank}.npy"
				all_exit 0
			done
		done
	done
	unset COLLX_SHM
	local f n=0
	for f in o.shm.*; do
		cmp "$f" "o.tcp.${f#o.shm.}"
		n=$((n + 1))
	done
	# 21 algorithms of 5 programs, 4 ranks each
	[ "$n" = 84 ]
}

@test "netns: alltoallv on 2 hosts x 2 ranks (blocked, interleaved), 2 + 1 and 1 + 2 + 1, random counts with zeros: NumPy's blocks, shared memory and TCP bit for bit" {
	pyx "
rng = np.random.default_rng(31)
for w in (3, 4):
    c = rng.integers(0, 300, (w, w)) * (rng.random((w, w)) > 0.3)
    c[1, :] = 0
    save(f'C.{w}.npy', c.astype('i8'))
    for r in range(w):
        save(f'in.{w}.{r}.npy', rng.integers(0, 2**32, (c[r].sum(), 5), dtype='u8').astype('<u4').view('<f4'))"
	local p a mode w k=0
	for p in "0 0 1 1" "0 1 0 1" "0 0 1" "0 1 1 2"; do
		w=$(wc -w <<<"$p")
		for mode in shm tcp; do
			[ "$mode" = tcp ] && export COLLX_SHM=0 || unset COLLX_SHM
			for a in auto pairwise linear hier; do
				placed "$p" collx-alltoall --send-counts "$T/C.$w.npy" --algo $a --check -v \
				    -i "$T/in.$w.{rank}.npy" -o "$T/o.$k.$mode.$a.{rank}.npy"
				all_exit 0
				# auto is linear: hier only when asked for
				[ $a != auto ] || grep -q "algorithm linear, world $w" err.0
			done
		done
		unset COLLX_SHM
		k=$((k + 1))
	done
	pyx "
for k, w in enumerate([4, 4, 3, 4]):
    c = load(f'C.{w}.npy')
    ins = [load(f'in.{w}.{r}.npy') for r in range(w)]
    for r in range(w):
        want = np.concatenate([ins[q][c[q, :r].sum():c[q, :r + 1].sum()] for q in range(w)])
        for mode in ['shm', 'tcp']:
            for a in ['auto', 'pairwise', 'linear', 'hier']:
                got = load(f'o.{k}.{mode}.{a}.{r}.npy')
                assert got.shape == want.shape and got.tobytes() == want.tobytes(), (k, r, mode, a)"
}

@test "netns: timing rows from every host" {
	pyx "save('x.npy', np.ones(1 << 18, dtype='f4'))"
	hosts collx-allreduce --iters 3 --warmup 1 --timing "$T/t.csv" -i "$T/x.npy"
	all_exit 0
	pyx "
import csv
rows = list(csv.DictReader(open('t.csv')))
assert len(rows) == 9, rows
assert sorted({x['rank'] for x in rows}) == ['0', '1', '2']
assert all(x['bytes'] == str(1 << 20) and float(x['seconds']) > 0 for x in rows)"
}

@test "netns: a host's rank killed mid-run: the others exit 1 naming a peer" {
	pyx "save('big.npy', np.zeros(4 << 20, dtype='f4'))"
	HOST_TIMEOUT=5 hosts sh -c 'if [ "$COLLX_RANK" = 1 ]; then (sleep 2; kill -9 $$) & fi
	    exec collx-allreduce --iters 500 -i "$0/big.npy" "$@"' "$T"
	[ "${RCS[0]}" = 1 ] && [ "${RCS[2]}" = 1 ] || { cat err.*; false; }
	grep -Eq '^collx-allreduce: rank 0: .*peer rank [12] \(10\.78\.0\.[23]:[0-9]+\)' err.0
	grep -Eq '^collx-allreduce: rank 2: .*peer rank [01] \(10\.78\.0\.[12]:[0-9]+\)' err.2
}

@test "netns: collx-run over a stand-in ssh places one rank per host" {
	netns_fake_ssh "$T/ssh" "$T/ssh.log"
	pyx "save('x.npy', np.arange(12, dtype='i4'))"
	run timeout 60 collx-run --ssh "$T/ssh" -H "$(netns_hosts)" --master "$(netns_addr 0):29501" \
	    -- "$COLLX_BIN/collx-allreduce" --iface eth0 -i "$T/x.npy" -o "$T/out.{rank}.npy"
	[ "$status" = 0 ] || { echo "$output"; false; }
	pyx "
for r in range(3): same(load(f'out.{r}.npy'), np.arange(12, dtype='i4') * 3)"
	[ "$(sort -u "$T/ssh.log" | wc -l)" = 3 ]
}

@test "netns: collx-bench mesh -H on 2 hosts x 2 ranks: a row for every factorization of 4, each run in both namespaces" {
	netns_fake_ssh "$T/ssh" "$T/ssh.log"
	# a tiny gpt: 4 heads and 4 layers admit tp 4 and pp 4
	run timeout -k 5 60 env TMPDIR="$T" collx-bench mesh \
	    -H "$(netns_addr 0):2,$(netns_addr 1):2" --ssh "$T/ssh" \
	    --master "$(netns_addr 0):29600" --iface eth0 --timeout 20 \
	    --dims 256,16,4,4,8 --steps 2 --repeat 1 --csv
	[ "$status" = 0 ] || { echo "$output"; false; }
	# each axis of more than one rank spent part of the step communicating
	# (the gpt's cp rows, column 25 above 1, are train_cp.bats' and
	# bench.bats')
	echo "$output" | tail -n +2 | awk -F, '$25 > 1 { next }
		$5 != 4 || $16 <= 0 { print; exit 1 }
		($13 > 1) != ($17 > 0) || ($14 > 1) != ($18 > 0) { print; exit 1 }
		($15 > 1) != ($19 > 0) { print; exit 1 }
		{ print $13 "," $14 "," $15 }' | sort >"$T/got"
	for d in 1 2 4; do for t in 1 2 4; do
		if [ $((4 % (d * t))) = 0 ]; then echo "$d,$t,$((4 / d / t))"; fi
	done; done | sort >"$T/want"
	diff "$T/want" "$T/got"
	# six runs, each starting its two ranks in each namespace over ssh
	[ "$(grep -cx "$(netns_addr 0)" "$T/ssh.log")" -ge 6 ]
	[ "$(grep -cx "$(netns_addr 1)" "$T/ssh.log")" -ge 6 ]
	[ "$(sort -u "$T/ssh.log" | wc -l)" = 2 ]
	[ -z "$(ls "$T" | grep collx-bench)" ]
}

@test "bench-cluster.sh: each figure beside the commands it comes from, and nothing left behind" {
	need "the tbf qdisc" netns_can_shape rate
	local before hier=1 gloo=1
	before=$(ip netns list | wc -l)
	run timeout 300 env HOSTS=2 ITERS=1 CASES="500mbit:" ROUNDS=2 HIER_CASE="500mbit:" \
	    "$COLLX_ROOT/examples/bench-cluster.sh" "$T/out"
	echo "$output"
	[ "$status" -eq 0 ]
	[ "$(ip netns list | wc -l)" -eq "$before" ]
	# The first table's figures are the CSV's 16 MiB out-of-place busbw
	# and the 4 KiB latency, and busbw / goodput their quotient.
	"$PY" - "$T/out/cluster.md" "$T/out/cluster-500mbit.csv" <<'PYEOF'
import csv, sys
md, path = sys.argv[1], sys.argv[2]
rows = [l.split("|")[1:-1] for l in open(md) if l.startswith("| 500mbit |")
        and not l.startswith("| 500mbit | 2 x 2 |")]
assert len(rows) == 3, rows
csvrows = [r for r in csv.DictReader(open(path)) if r["place"] == "out"]
for link, gp, algo, lat, bw, ratio in ([c.strip() for c in r] for r in rows):
    mine = {int(r["bytes"]): r for r in csvrows if r["algo"] == algo}
    assert abs(float(bw) - float(mine[16 << 20]["busbw_gbps"])) < 1e-4, (algo, bw)
    assert lat == "%.0f us" % (float(mine[4096]["seconds"]) * 1e6), (algo, lat)
    if gp == "-":
        assert ratio == "-"
    else:
        busbw = float(mine[16 << 20]["busbw_gbps"])
        assert ratio == "%.2f" % (busbw / float(gp)), (algo, ratio)
PYEOF
	# The 2 x 2 table: each time the median of its rounds in the raw
	# file, busbw 16 MiB / time x 2(4-1)/4, and the ratios of those; hier
	# skipped where collx-allreduce refuses it, Gloo where torch is absent.
	"$COLLX_BIN/collx-allreduce" --algo hier --help >/dev/null 2>&1 || hier=0
	"$PY" -c 'import torch.distributed' 2>/dev/null || gloo=0
	"$PY" - "$T/out/cluster.md" "$T/out/cluster-2x2-500mbit.txt" $hier $gloo <<'PYEOF'
import statistics, sys
md, raw, hier, gloo = sys.argv[1], sys.argv[2], sys.argv[3] == "1", sys.argv[4] == "1"
text = open(md).read()
rows = [l.split("|")[1:-1] for l in text.splitlines() if l.startswith("| 500mbit | 2 x 2 |")]
assert [r[3].strip() for r in rows] == ["collx ring", "collx hier", "Gloo"], rows
times = {}
for line in open(raw):
    who, *s = line.split()
    times.setdefault(who, []).extend(float(x) for x in s)
bw = {}
for (link, hx, gp, peer, t, b, ratio), who, want in zip(
        ([c.strip() for c in r] for r in rows), ["ring", "hier", "gloo"], [True, hier, gloo]):
    if not want:
        assert t.startswith("skipped") and b == "-", (peer, t)
        assert who not in times, who
        continue
    assert len(times[who]) == 2, (who, times)
    med = statistics.median(times[who])
    bw[who] = (16 << 20) / med / 1e9 * 2 * 3 / 4
    assert t == "%.1f ms" % (med * 1e3), (peer, t, med)
    assert b == "%.4f" % bw[who], (peer, b)
    assert ratio == ("-" if gp == "-" else "%.2f" % (bw[who] / float(gp))), (peer, ratio)
hr = "%.2f" % (bw["hier"] / bw["ring"]) if hier else "-"
hg = "%.2f" % (bw["hier"] / bw["gloo"]) if hier and gloo else "-"
want = "busbw hier / ring: %s (target: 1.35 or more, ideally 1.5); hier / Gloo: %s (target: 1.3 or more)" % (hr, hg)
assert want in text.splitlines(), want
assert hier or "\ncollx hier skipped: collx-allreduce: --algo: " in text
PYEOF
	# Under the tables: how to make them again, and each case's commands.
	grep -qx "  HOSTS=2 ITERS=1 CASES='500mbit:' ROUNDS=2 HIER_CASE='500mbit:' examples/bench-cluster.sh OUTDIR" "$T/out/cluster.md"
	grep -q '^500mbit: CPUs [0-9]*% busy just before$' "$T/out/cluster.md"
	grep -q '^2 x 2, 500mbit: CPUs [0-9]*% busy just before$' "$T/out/cluster.md"
	[ "$(grep -cx '  links: netns_setup 2 --rate 500mbit --burst 256kb (tbf on both ends of each host.s veth)' "$T/out/cluster.md")" -eq 2 ]
	grep -q "^  collx (latency, busbw): collx-run -H 10.78.0.1,10.78.0.2 --ssh SSH --master 10.78.0.1:29500 --timeout 60 -- $COLLX_BIN/collx-bench coll --iface eth0 --algo ring,rabenseifner,tree -b 4K -e 16M -f 8 -n 1 -w 1 --csv -q >cluster-500mbit.csv\$" "$T/out/cluster.md"
	for algo in ring hier; do
		grep -qx "  collx $algo: collx-run -H 10.78.0.1:2,10.78.0.2:2 --ssh SSH --master 10.78.0.1:29500 --timeout 60 -- $COLLX_BIN/collx-allreduce --iface eth0 --algo $algo -i X.npy --iters 1 --warmup 3 --timing T.csv -q" "$T/out/cluster.md"
	done
	grep -qx "  Gloo: collx-run -H 10.78.0.1:2,10.78.0.2:2 --ssh SSH --master 10.78.0.1:29510 --timeout 60 -x GLOO_SOCKET_IFNAME=eth0 -- /usr/bin/python3 $COLLX_ROOT/examples/peers/gloo_rank.py 16777216 1" "$T/out/cluster.md"
	if command -v iperf3 >/dev/null; then
		[ "$(grep -cx '  iperf3 (goodput): host 0: iperf3 -s -1 -p 5211; host 1: iperf3 -c 10.78.0.1 -p 5211 -t 3 -J' "$T/out/cluster.md")" -eq 2 ]
	fi
}
