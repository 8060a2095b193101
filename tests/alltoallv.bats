#!/usr/bin/env bats
# collx-alltoall --send-counts (alltoallv): local ranks over shared memory
# and over TCP (COLLX_SHM=0), results against NumPy's slicing of every
# rank's input by the counts; bad counts refused on every rank before any
# data moves. The layouts across network namespaces are in netns.bats.

load lib/common
load lib/coll
load lib/netns

setup() {
	common_setup
	need python3-numpy "$PY" -c "import numpy"
}

teardown() {
	common_teardown
}

# counts W SEED: C.W.npy, random counts 0..5 with zeros (a quarter of
# them, rank 0's row and the last rank's column zero for odd seeds), and
# in.W.r.npy of every rank's rows: distinct f32 values (NaN payloads,
# infinities and -0.0 among them, which only an exact copy keeps).
counts() {
	pyx "
w, seed = $1, $2
rng = np.random.default_rng(seed)
c = rng.integers(0, 6, (w, w)) * (rng.random((w, w)) > 0.25)
if seed % 2:
    c[0, :] = 0
    c[:, w - 1] = 0
save(f'C.{w}.npy', c.astype('i8'))
for r in range(w):
    bits = rng.integers(0, 2**32, (c[r].sum(), 3), dtype='u8').astype('<u4')
    bits[:1, 0] = 0x7fc01234
    save(f'in.{w}.{r}.npy', bits.view('<f4'))"
}

# want_ok W TAG: out.TAG.r.npy is what NumPy's slicing says, bit for bit.
want_ok() {
	pyx "
w = $1
c = load(f'C.{w}.npy')
ins = [load(f'in.{w}.{r}.npy') for r in range(w)]
for r in range(w):
    want = np.concatenate([ins[q][c[q, :r].sum():c[q, :r + 1].sum()] for q in range(w)])
    got = load('out.$2.' + str(r) + '.npy')
    assert got.dtype == want.dtype and got.shape == want.shape, (r, got.shape, want.shape)
    assert got.tobytes() == want.tobytes(), ('rank', r)"
}

@test "alltoallv: 2 to 5 ranks, random counts with zeros, every algorithm, shared memory and TCP: NumPy's blocks, bit for bit" {
	local w a mode seed
	for w in 2 3 4 5; do
		seed=$((w + 10))
		[ $w = 3 ] && seed=1	# a rank sending nothing, one receiving nothing
		counts $w $seed
		for mode in shm tcp; do
			[ $mode = tcp ] && export COLLX_SHM=0 || unset COLLX_SHM
			for a in auto pairwise linear hier; do
				ok_ranks $w collx-alltoall --send-counts "C.$w.npy" --algo $a \
				    --check -i "in.$w.{rank}.npy" -o "out.$w.$mode.$a.{rank}.npy"
				want_ok $w $w.$mode.$a
			done
		done
		unset COLLX_SHM
	done
}

@test "alltoallv of a safetensors file: every tensor cut by the same counts, names and metadata kept; timing rows count the bytes sent to others" {
	pyx "
c = np.array([[1, 2, 0], [0, 0, 3], [2, 2, 2]])
save('C.npy', c.astype('i4'))
for r in range(3):
    n = c[r].sum()
    save_st(f's.{r}.safetensors', {'a': np.arange(n * 2, dtype='i2').reshape(n, 2) + 100 * r,
            'b': np.arange(n, dtype='f8') - r}, {'k': 'v'})"
	ok_ranks 3 collx-alltoall --send-counts C.npy --check --timing 't.{rank}.csv' \
	    -i 's.{rank}.safetensors' -o 'o.{rank}.safetensors'
	pyx "
import csv
c = load('C.npy')
s = [load_st(f's.{r}.safetensors')[0] for r in range(3)]
for r in range(3):
    got, meta = load_st(f'o.{r}.safetensors')
    assert meta == {'k': 'v'}, meta
    for k in ['a', 'b']:
        same(got[k], np.concatenate([s[q][k][c[q, :r].sum():c[q, :r + 1].sum()] for q in range(3)]), k)
    row = list(csv.DictReader(open(f't.{r}.csv')))[0]
    sent = sum(c[r, p] * (2 * 2 + 8) for p in range(3) if p != r)
    assert row['op'] == 'alltoallv' and int(row['bytes']) == sent, (r, row)"
}

@test "alltoallv: counts that do not match a rank's rows, negative, non-integer or of the wrong shape: exit 3 on every rank, naming the numbers, nothing written" {
	pyx "
c = np.array([[1, 2], [3, 0]])
save('in.0.npy', np.zeros((3, 2), dtype='f4'))
save('in.1.npy', np.zeros((4, 2), dtype='f4'))
save('short.npy', c.astype('i8'))
save('neg.npy', np.array([[1, 2], [-1, 5]], dtype='i4'))
save('float.npy', c.astype('f4'))
save('shape.npy', np.array([[1, 2, 0], [3, 0, 0]], dtype='i8'))"
	local c file
	# each FILE:WHAT the line every rank says
	for c in 'short.npy:^collx-alltoall: rank [01]: input of rank 1 has 4 rows, but row 1 of --send-counts sends 3 \(3\+0\)$' \
	    'neg.npy:^collx-alltoall: rank [01]: --send-counts neg.npy: count \[1, 0\] is -1, not a number of rows$' \
	    'float.npy:counts are integers, not f32$' \
	    'shape.npy:shape is \[2, 3\], want \[2, 2\] for 2 ranks$'; do
		file=${c%%:*}
		ranks 2 collx-alltoall --send-counts "$file" -i 'in.{rank}.npy' -o 'out.{rank}.npy'
		all_exit 3
		each_err "${c#*:}"
	done
	[ ! -e out.0.npy ] && [ ! -e out.1.npy ]
}

@test "alltoallv: ranks with different counts files are exit 3, before any data moves" {
	pyx "
save('C.0.npy', np.array([[1, 1], [1, 1]], dtype='i8'))
save('C.1.npy', np.array([[2, 0], [1, 1]], dtype='i8'))
for r in range(2): save(f'in.{r}.npy', np.zeros(2, dtype='i4'))"
	ranks 2 collx-alltoall --send-counts 'C.{rank}.npy' -i 'in.{rank}.npy' -o 'out.{rank}.npy'
	all_exit 3
	each_err 'inputs differ between ranks: rank 0 has send counts [0-9a-f]+, rank 1 has send counts [0-9a-f]+$'
	[ ! -e out.0.npy ] && [ ! -e out.1.npy ]
}

@test "alltoallv: --send-counts with --scatter-dim, --stream or an algorithm alltoallv lacks is a usage error" {
	run collx-alltoall --send-counts C.npy --scatter-dim 1 -i x.npy
	[ "$status" = 2 ]
	[[ "${lines[0]}" == *"--send-counts cuts and joins dimension 0 of whole files"* ]]
	run collx-alltoall --send-counts C.npy --stream -i x.npy
	[ "$status" = 2 ]
	run collx-alltoall --algo rd --send-counts C.npy -i x.npy
	[ "$status" = 2 ]
	[[ "${lines[0]}" == "collx-alltoall: --algo: 'rd' is not an algorithm of alltoallv (auto, linear, pairwise, hier)" ]]
}

# zipf_want N W S: the counts a Zipf law of exponent S gives N elements
# over W ranks (largest remainders), sorted, computed here with NumPy.
zipf_want() {
	pyx "
n, w, s = $1, $2, $3
p = np.arange(1, w + 1, dtype='f8') ** -s
x = n * p / p.sum()
c = np.floor(x).astype(int)
for i in np.argsort(-(x - c), kind='stable')[:n - c.sum()]: c[i] += 1
print(' '.join(map(str, sorted(c))))"
}

@test "collx-bench coll --op alltoallv --skew zipf:S --check: Zipf counts (NumPy's), the same every run, no wrong element; bytes: the mean sent to other ranks, busbw = algbw" {
	local s got want
	for s in 0 1.2 3; do
		ok_ranks 4 collx-bench coll --op alltoallv --algo all --skew zipf:$s \
		    -b 4000 -e 4000 --check --csv -n 2 -w 1 -v
		got=$(sed -n 's/.*every rank sends 1000 elements, to each rank: //p' err.0 | head -n 1)
		want=$(zipf_want 1000 4 $s)
		[ "$(tr ' ' '\n' <<<"$got" | sort -n | xargs)" = "$want" ] || { echo "$got / $want"; false; }
		pyx "
import csv
rows = list(csv.DictReader(open('stdout.0')))
assert [r['algo'] for r in rows] == ['auto', 'linear', 'pairwise', 'hier'], rows
for r in rows:
    # 1000 elements a rank, a quarter of them (all ranks' counts alike) kept
    assert r['op'] == 'alltoallv' and r['count'] == '750' and r['bytes'] == '3000', r
    assert r['wrong'] == '0' and r['place'] == 'out', r
    assert abs(float(r['busbw_gbps']) - float(r['algbw_gbps'])) < 1e-9, r
    assert abs(float(r['algbw_gbps']) - 3000 / float(r['seconds']) / 1e9) < 1e-3 * float(r['algbw_gbps']), r"
		ok_ranks 4 collx-bench coll --op alltoallv --skew zipf:$s -b 4000 -e 4000 -n 1 -w 0 -v
		grep -q "to each rank: $got$" err.0
	done
}

@test "collx-bench coll --op alltoallv --check counts wrong elements (exit 4); --skew is zipf:S and for alltoallv alone" {
	COLLX_BENCH_FAULT=3 ranks 3 collx-bench coll --op alltoallv --skew zipf:2 -b 4000 -e 4000 --check --csv -n 1 -w 0
	all_exit 4
	each_err 'rank [0-2]: --check: 3 wrong elements$'
	run collx-bench coll --op alltoall --skew zipf:1
	[ "$status" = 2 ]
	[[ "$output" == *"--skew is for --op alltoallv"* ]]
	run collx-bench coll --op alltoallv --skew pareto:1
	[ "$status" = 2 ]
	[[ "$output" == *"--skew: want zipf:S, not 'pareto:1'"* ]]
}

@test "examples/peers/gloo_alltoall.py: Gloo's all_to_all_single with collx-bench's splits, its result right" {
	need python3-torch "$PY" -c "import torch.distributed"
	local got
	ok_ranks 3 collx-bench coll --op alltoallv --skew zipf:1.2 -b 4000 -e 4000 -n 1 -w 0 -v --csv
	got=$(sed -n 's/.*every rank sends 999 elements, to each rank: //p' err.0)
	[ -n "$got" ]
	run timeout 120 collx-run -n 3 -x GLOO_SOCKET_IFNAME=lo -- \
	    "$PY" "$COLLX_ROOT/examples/peers/gloo_alltoall.py" 1.2 2 999
	[ "$status" = 0 ] || { echo "$output"; false; }
	[[ "$output" == *"gloo world=3 elements=999 skew=1.2 counts=${got// /,} median_s="* ]]
}

@test "examples/bench-alltoallv.sh: every figure the median of its rounds in the raw file, the speed-ups their quotients, nothing left behind" {
	need python3-torch "$PY" -c "import torch.distributed"
	need "root and ip netns" netns_available
	need "the tbf qdisc" netns_can_shape rate
	local ns
	run timeout 300 env ROUNDS=2 ITERS=2 SIZES=4K SKEWS=1.2 CASES=500mbit: \
	    "$COLLX_ROOT/examples/bench-alltoallv.sh" "$T/out"
	[ "$status" -eq 0 ] || { echo "$output"; false; }
	# its own namespaces gone (other suites may hold theirs meanwhile)
	ns=$(sed -n 's/^bench-alltoallv.sh: namespaces \(.*\) removed$/\1/p' <<<"$output")
	[ "$(wc -w <<<"$ns")" = 2 ]
	for n in $ns; do
		if ip netns list | grep -qw "$n"; then false; fi
	done
	"$PY" - "$T/out/alltoallv.md" "$T/out/alltoallv.txt" <<'PYEOF'
import statistics, sys
md, raw = sys.argv[1], sys.argv[2]
times = {}
for l in open(raw):
    f = l.split()
    times.setdefault((" ".join(f[:-4]), f[-2]), []).append(float(f[-1]))
rows = [[c.strip() for c in l.split("|")[1:-1]] for l in open(md) if l.startswith("| 1 host") or l.startswith("| 2 x 2")]
assert [r[0] for r in rows] == ["1 host x 4", "2 x 2, 500mbit"], rows
for link, counts, size, auto, pw, li, hier, gloo, speed, flat in rows:
    assert counts == "zipf:1.2" and size == "4 KiB", (counts, size)
    med = {}
    for who, shown in [("auto", auto), ("pairwise", pw), ("linear", li), ("hier", hier), ("gloo", gloo)]:
        t = times.get((link, who))
        if t is None:
            assert shown == "-" and who == "hier" and link.startswith("1 host"), (link, who, shown)
            continue
        assert len(t) == 2, (link, who, t)
        med[who] = statistics.median(t)
        assert shown == "%.3f ms" % (med[who] * 1e3), (link, who, shown, t)
    assert speed == "%.2f" % (med["gloo"] / med["auto"]), (link, speed)
    if "hier" in med:
        assert flat == "%.2f" % (min(med["pairwise"], med["linear"]) / med["hier"]), (link, flat)
# each launch's algorithms in the raw file's order: round r's list turned
# left by r - 1 places, so that auto is not always the first to run
launches, last = [], None
for l in open(raw):
    f = l.split()
    link, who = " ".join(f[:-4]), f[-2]
    if who == "gloo":
        last = None
        continue
    if last != link:
        launches.append((link, []))
    launches[-1][1].append(who)
    last = link
want = {"1 host x 4": ["auto", "pairwise", "linear"],
        "2 x 2, 500mbit": ["auto", "pairwise", "linear", "hier"]}
assert len(launches) == 4, launches
for i, (link, algos) in enumerate(launches):
    w, r = want[link], i % 2
    assert algos == w[r:] + w[:r], (link, i, algos)
PYEOF
}
