#!/usr/bin/env bats
# The collective programs end to end: local ranks over TCP loopback, inputs
# made and results checked with NumPy (closed forms or a NumPy computation
# of the collective), never with collx itself.

load lib/common
load lib/coll

setup() {
	common_setup
	need python3-numpy "$PY" -c "import numpy"
}

teardown() {
	common_teardown
}

# --- the classic worked examples ---

@test "broadcast from root 1 of 10*(r+1): every rank gets 20" {
	pyx "
for r in range(3): save(f'in.{r}.npy', np.full(5, 10 * (r + 1), dtype='i4'))"
	ok_ranks 3 collx-broadcast --root 1 -i 'in.{rank}.npy' -o 'out.{rank}of{world}.npy'
	pyx "
for r in range(3): same(load(f'out.{r}of3.npy'), np.full(5, 20, dtype='i4'))"
}

@test "allreduce of r+1 gives W(W+1)/2 for W = 1..4" {
	pyx "
for r in range(4): save(f'in.{r}.npy', np.full((2, 3), r + 1, dtype='f4'))"
	for w in 1 2 3 4; do
		ok_ranks $w collx-allreduce -i 'in.{rank}.npy' -o "out.{rank}.$w.npy"
	done
	pyx "
for w in range(1, 5):
    for r in range(w): same(load(f'out.{r}.{w}.npy'), np.full((2, 3), w * (w + 1) / 2, dtype='f4'), f'w={w}')"
}

@test "allgather of [r, r+10] on 3 ranks gives [0,10,1,11,2,12]" {
	pyx "
for r in range(3): save(f'in.{r}.npy', np.array([r, r + 10], dtype='i8'))"
	ok_ranks 3 collx-allgather -i 'in.{rank}.npy' -o 'out.{rank}.npy'
	pyx "
for r in range(3): same(load(f'out.{r}.npy'), np.array([0, 10, 1, 11, 2, 12], dtype='i8'))"
}

# --- every program, every algorithm, a few world sizes ---

@test "allreduce: every algorithm (hier on one host) on 2, 3 and 4 ranks matches numpy, --check passes" {
	pyx "
rng = np.random.default_rng(4)
for r in range(4): save(f'in.{r}.npy', rng.standard_normal((7, 5)).astype('f4'))"
	for w in 2 3 4; do
		for a in auto ring tree rd rabenseifner naive hier; do
			ok_ranks $w collx-allreduce --algo $a --check -i 'in.{rank}.npy' -o "out.{rank}.$w.$a.npy"
		done
	done
	pyx "
for w in [2, 3, 4]:
    want = sum(load(f'in.{r}.npy').astype('f8') for r in range(w))
    for a in ['auto', 'ring', 'tree', 'rd', 'rabenseifner', 'naive', 'hier']:
        for r in range(w): close(load(f'out.{r}.{w}.{a}.npy'), want, 1e-5, 1e-5, f'{a} w={w}')"
}

@test "allreduce: ops and dtypes (integer wrap, avg truncation, bool, f64, f16)" {
	pyx "
rng = np.random.default_rng(7)
ins = {'i8': rng.integers(-128, 128, (3, 4, 9), dtype='i1'),
       'u8': rng.integers(0, 256, (3, 4, 9), dtype='u1'),
       'i64': rng.integers(-2**62, 2**62, (3, 4, 9), dtype='i8'),
       'i32': rng.integers(-1000, 1000, (3, 4, 9), dtype='i4'),
       'bool': rng.integers(0, 2, (3, 4, 9)).astype('?'),
       'f64': rng.standard_normal((3, 4, 9)),
       'f16': rng.standard_normal((3, 4, 9)).astype('f2')}
for k, v in ins.items():
    for r in range(3): save(f'{k}.{r}.npy', v[r])"
	for dt in i8 u8 i64 i32 bool f64 f16; do
		for op in sum prod min max avg; do
			ok_ranks 3 collx-allreduce --op $op --check -i "$dt.{rank}.npy" -o "o.$dt.$op.{rank}.npy"
		done
	done
	pyx "
def want(x, op):
    if x.dtype == np.bool_:
        return {'sum': x.any(0), 'max': x.any(0), 'avg': x.any(0), 'prod': x.all(0), 'min': x.all(0)}[op]
    if x.dtype.kind in 'iu':
        with np.errstate(over='ignore'):
            s = x.sum(0, dtype=x.dtype)
            p = x.prod(0, dtype=x.dtype)
        avg = (np.sign(s) * (np.abs(s.astype(object)) // 3)).astype(x.dtype)
        return {'sum': s, 'prod': p, 'min': x.min(0), 'max': x.max(0), 'avg': avg}[op]
    d = x.astype('f8')
    return {'sum': d.sum(0), 'prod': d.prod(0), 'min': d.min(0), 'max': d.max(0), 'avg': d.mean(0)}[op]
for dt in ['i8', 'u8', 'i64', 'i32', 'bool', 'f64', 'f16']:
    x = np.stack([load(f'{dt}.{r}.npy') for r in range(3)])
    for op in ['sum', 'prod', 'min', 'max', 'avg']:
        for r in range(3):
            got = load(f'o.{dt}.{op}.{r}.npy')
            assert got.dtype == x.dtype, (dt, op, got.dtype)
            if dt == 'f16':
                close(got, want(x, op), 5e-3, 1e-2, f'{dt} {op}')
            elif dt == 'f64':
                close(got, want(x, op), 1e-12, 1e-12, f'{dt} {op}')
            else:
                same(got, want(x, op), f'{dt} {op}')"
}

@test "broadcast: every algorithm on 2..4 ranks, non-roots pass no input" {
	pyx "save('root.npy', np.arange(1000, dtype='f8').reshape(10, 100) / 7)"
	for w in 2 3 4; do
		for a in auto binomial scatter-allgather linear ring hier; do
			root=$((w - 1))
			ranks $w sh -c 'if [ "$COLLX_RANK" = '$root' ]; then set -- -i root.npy; fi
			    exec collx-broadcast --root '$root' --algo '$a' --check "$@" -o out.$COLLX_RANK.'$w.$a'.npy'
			all_exit 0
		done
	done
	pyx "
for w in [2, 3, 4]:
    for a in ['auto', 'binomial', 'scatter-allgather', 'linear', 'ring', 'hier']:
        for r in range(w): same(load(f'out.{r}.{w}.{a}.npy'), load('root.npy'), f'{a} w={w}')"
}

@test "allgather: uneven rows (one rank with none), every algorithm, 2..4 ranks" {
	pyx "
for r in range(4): save(f'in.{r}.npy', (np.arange(((r * 2) % 5) * 3, dtype='i2') + 100 * r).reshape(-1, 3))"
	for w in 2 3 4; do
		for a in auto ring rd bruck hier; do
			ok_ranks $w collx-allgather --algo $a --check -i 'in.{rank}.npy' -o "out.{rank}.$w.$a.npy"
		done
	done
	pyx "
for w in [2, 3, 4]:
    want = np.concatenate([load(f'in.{r}.npy') for r in range(w)])
    for a in ['auto', 'ring', 'rd', 'bruck', 'hier']:
        for r in range(w): same(load(f'out.{r}.{w}.{a}.npy'), want, f'{a} w={w}')"
}

@test "reduce-scatter: every algorithm, 2..4 ranks, rank r gets block r" {
	pyx "
for w in [2, 3, 4]:
    for r in range(w): save(f'in.{r}.{w}.npy', (np.arange(w * 3 * 4, dtype='i4') * (r + 1)).reshape(w * 3, 4))"
	for w in 2 3 4; do
		for a in auto ring pairwise halving hier; do
			ok_ranks $w collx-reduce-scatter --algo $a --check -i "in.{rank}.$w.npy" -o "out.{rank}.$w.$a.npy"
		done
	done
	pyx "
for w in [2, 3, 4]:
    total = sum(load(f'in.{r}.{w}.npy') for r in range(w))
    for a in ['auto', 'ring', 'pairwise', 'halving', 'hier']:
        for r in range(w): same(load(f'out.{r}.{w}.{a}.npy'), total[r * 3:(r + 1) * 3], f'{a} w={w}')"
}

@test "reduce-scatter: max and avg of f32" {
	pyx "
rng = np.random.default_rng(3)
for r in range(3): save(f'in.{r}.npy', rng.standard_normal((6, 5)).astype('f4'))"
	ok_ranks 3 collx-reduce-scatter --op max -i 'in.{rank}.npy' -o 'max.{rank}.npy'
	ok_ranks 3 collx-reduce-scatter --op avg --check -i 'in.{rank}.npy' -o 'avg.{rank}.npy'
	pyx "
x = np.stack([load(f'in.{r}.npy') for r in range(3)])
for r in range(3):
    same(load(f'max.{r}.npy'), x.max(0)[2 * r:2 * r + 2])
    close(load(f'avg.{r}.npy'), x.astype('f8').mean(0)[2 * r:2 * r + 2], 1e-6, 1e-6)"
}

@test "alltoall: scatter and gather along different dimensions, every algorithm" {
	pyx "
for w in [2, 3]:
    for r in range(w): save(f'in.{r}.{w}.npy', np.arange(6 * 6 * 3 * w, dtype='f4').reshape(6, 6, 3 * w) + 1000 * r)"
	for w in 2 3; do
		for dims in "0 0" "1 2" "2 0" "-1 -2"; do
			set -- $dims
			for a in auto pairwise linear; do
				ok_ranks $w collx-alltoall --scatter-dim $1 --gather-dim $2 --algo $a --check -i "in.{rank}.$w.npy" -o "out.{rank}.$w.$1.$2.$a.npy"
			done
		done
	done
	pyx "
for w in [2, 3]:
    ins = [load(f'in.{q}.{w}.npy') for q in range(w)]
    for s, g in [(0, 0), (1, 2), (2, 0), (-1, -2)]:
        for a in ['auto', 'pairwise', 'linear']:
            for r in range(w):
                want = np.concatenate([np.split(ins[q], w, axis=s)[r] for q in range(w)], axis=g)
                same(load(f'out.{r}.{w}.{s}.{g}.{a}.npy'), want, f'S={s} G={g} {a} w={w}')"
}

# --- safetensors: many tensors, fused buckets, metadata ---

@test "allreduce of a safetensors file: every tensor, names and metadata kept, buckets" {
	pyx "
rng = np.random.default_rng(11)
shapes = {'a.w': (3, 4), 'a.b': (4,), 'big': (300, 100), 'c': (), 'ints': (5, 2), 'z.empty': (0, 3)}
for r in range(3):
    t = {k: rng.standard_normal(s).astype('f4') for k, s in shapes.items()}
    t['ints'] = rng.integers(-50, 50, (5, 2)).astype('i8')
    t['half'] = rng.standard_normal((7,)).astype('f2')
    save_st(f'in.{r}.safetensors', t, {'collx.arch': 'mlp', 'note': 'rank-independent'})"
	for bucket in 4M 1K 0; do
		ok_ranks 3 collx-allreduce --bucket $bucket --check -i 'in.{rank}.safetensors' -o "out.{rank}.safetensors"
		pyx "
ins = [load_st(f'in.{r}.safetensors')[0] for r in range(3)]
for r in range(3):
    got, meta = load_st(f'out.{r}.safetensors')
    assert meta == {'collx.arch': 'mlp', 'note': 'rank-independent'}, meta
    assert sorted(got) == sorted(ins[0]), sorted(got)
    for k in got:
        want = sum(i[k].astype('f8') for i in ins)
        if got[k].dtype.kind == 'i':
            same(got[k], want.astype('i8'), k)
        else:
            assert got[k].dtype == ins[0][k].dtype, k
            close(got[k], want, 2e-3 if k == 'half' else 1e-5, 2e-3 if k == 'half' else 1e-5, k)"
	done
}

@test "bf16 tensors: allreduce (every algorithm) and allgather keep bf16, exact on small integers" {
	pyx "
for r in range(3):
    save_st(f'in.{r}.safetensors', {'b': BF16(np.arange(-8, 8, dtype='f4').reshape(4, 4) * (r + 1)), 'f': np.ones(3, dtype='f4')})"
	for a in ring tree rd rabenseifner naive; do
		ok_ranks 3 collx-allreduce --algo $a --check -i 'in.{rank}.safetensors' -o "out.{rank}.$a.safetensors"
	done
	ok_ranks 3 collx-allgather --check -i 'in.{rank}.safetensors' -o 'g.{rank}.safetensors'
	pyx "
base = np.arange(-8, 8, dtype='f4').reshape(4, 4)
for r in range(3):
    for a in ['ring', 'tree', 'rd', 'rabenseifner', 'naive']:
        got = load_st(f'out.{r}.{a}.safetensors')[0]
        assert got['__bf16__'] == ['b'], got.get('__bf16__')
        same(got['b'], base * 6, a)
        same(got['f'], np.full(3, 3, dtype='f4'), a)
    got = load_st(f'g.{r}.safetensors')[0]
    assert got['__bf16__'] == ['b']
    same(got['b'], np.concatenate([base * (q + 1) for q in range(3)]))"
}

@test "allgather and reduce-scatter and alltoall of safetensors files with several tensors" {
	pyx "
for r in range(2):
    save_st(f'g.{r}.safetensors', {'x': np.full((r + 1, 2), r, dtype='f4'), 'y': np.arange(3 * (2 - r), dtype='f4').reshape(-1, 3) + 10 * r, 'z': np.arange(4 - r, dtype='i4') * (r + 1)}, {'k': 'v'})
    save_st(f's.{r}.safetensors', {'x': np.arange(8, dtype='f8').reshape(4, 2) * (r + 1), 'y': np.arange(6, dtype='i2') + r})"
	ok_ranks 2 collx-allgather --check -i 'g.{rank}.safetensors' -o 'go.{rank}.safetensors'
	ok_ranks 2 collx-allgather --bucket 16 --check -i 'g.{rank}.safetensors' -o 'go16.{rank}.safetensors'
	ok_ranks 2 collx-reduce-scatter --check -i 's.{rank}.safetensors' -o 'so.{rank}.safetensors'
	ok_ranks 2 collx-alltoall --check -i 's.{rank}.safetensors' -o 'ao.{rank}.safetensors'
	pyx "
g = [load_st(f'g.{r}.safetensors')[0] for r in range(2)]
s = [load_st(f's.{r}.safetensors')[0] for r in range(2)]
for r in range(2):
    for f in ['go', 'go16']:
        got, meta = load_st(f'{f}.{r}.safetensors')
        assert meta == {'k': 'v'}, meta
        for k in 'xyz': same(got[k], np.concatenate([g[0][k], g[1][k]]), f + ' ' + k)
    got = load_st(f'so.{r}.safetensors')[0]
    for k in 'xy':
        n = len(s[0][k]) // 2
        same(got[k], (s[0][k] + s[1][k])[r * n:(r + 1) * n], 'reduce-scatter ' + k)
    got = load_st(f'ao.{r}.safetensors')[0]
    for k in 'xy':
        n = len(s[0][k]) // 2
        same(got[k], np.concatenate([s[0][k][r * n:(r + 1) * n], s[1][k][r * n:(r + 1) * n]]), 'alltoall ' + k)"
}

@test "broadcast of a safetensors file: non-roots learn names, dtypes, shapes, metadata" {
	pyx "save_st('root.safetensors', {'w': np.arange(6, dtype='f2').reshape(2, 3), 'b': np.array([True, False]), 'n': np.arange(5, dtype='u1')}, {'heads': '4'})"
	ranks 3 sh -c 'if [ "$COLLX_RANK" = 2 ]; then exec collx-broadcast --root 2 -i root.safetensors -o out.$COLLX_RANK.safetensors; else exec collx-broadcast --root 2 -o out.$COLLX_RANK.safetensors; fi'
	all_exit 0
	pyx "
want, wmeta = load_st('root.safetensors')
for r in range(3):
    got, meta = load_st(f'out.{r}.safetensors')
    assert meta == wmeta, meta
    assert sorted(got) == sorted(want)
    for k in want: same(got[k], want[k], k)"
}

# --- --check ---

@test "--check fails (exit 4) with the error and where: f16 sum overflows" {
	pyx "
for r in range(2): save(f'in.{r}.npy', np.array([1, 2, 60000, 3], dtype='f2'))"
	ranks 2 collx-allreduce --check -i 'in.{rank}.npy' -o 'out.{rank}.npy'
	all_exit 4
	each_err 'rank [01]: check failed: the result element \[2\] is inf, expected 120000 \(max error'
	[ ! -e out.0.npy ]
	ranks 2 collx-allreduce --op max --check -v -i 'in.{rank}.npy'
	all_exit 0
	each_err 'check ok'
}

@test "--check passes: rank 0 says so in one line, the others nothing; -q: none" {
	pyx "
for r in range(3): save(f'in.{r}.npy', np.arange(4, dtype='f4') * (r + 1))"
	ok_ranks 3 collx-allreduce --check -i 'in.{rank}.npy' -o 'out.{rank}.npy'
	cat err.*
	[ "$(cat err.0)" = "collx-allreduce: check passed: 1 tensor on 3 ranks, max error 0 on rank 0" ]
	[ ! -s err.1 ]
	[ ! -s err.2 ]
	ok_ranks 2 collx-allreduce --check -q -i 'in.{rank}.npy' -o 'out.{rank}.npy'
	[ ! -s err.0 ] && [ ! -s err.1 ]
}

# --- --timing ---

@test "--timing: header, one row per timed iteration per rank, nccl-tests bytes" {
	pyx "
for r in range(3): save(f'in.{r}.npy', np.zeros((r + 1, 4), dtype='f4'))"
	ok_ranks 3 collx-allgather --iters 3 --warmup 2 --algo ring --timing t.csv -i 'in.{rank}.npy'
	ok_ranks 3 collx-allreduce --iters 2 --timing 't.{rank}.csv' -i 'in.0.npy' -o 'x.{rank}.npy'
	pyx "
import csv
rows = list(csv.DictReader(open('t.csv')))
assert open('t.csv').readline().strip() == 'program,op,algo,rank,world_size,dtype,count,bytes,iter,seconds,algbw_gbps,busbw_gbps'
assert len(rows) == 9, len(rows)
assert sorted((int(x['rank']), int(x['iter'])) for x in rows) == [(r, i) for r in range(3) for i in range(3)]
for x in rows:
    assert (x['program'], x['op'], x['algo'], x['world_size'], x['dtype']) == ('collx-allgather', 'allgather', 'ring', '3', 'f32'), x
    assert (x['count'], x['bytes']) == ('24', '96'), x
    s, alg, bus = float(x['seconds']), float(x['algbw_gbps']), float(x['busbw_gbps'])
    assert s > 0 and abs(alg - 96 / s / 1e9) <= 1e-3 * alg and abs(bus - alg * 2 / 3) <= 1e-3 * alg, x
for r in range(3):
    rows = list(csv.DictReader(open(f't.{r}.csv')))
    assert len(rows) == 2 and all(x['op'] == 'allreduce' and x['bytes'] == '16' and x['rank'] == str(r) for x in rows), rows
    assert rows[0]['algo'] != 'auto'"
}

@test "--iters and --warmup: the result is that of one collective" {
	pyx "
for r in range(3): save(f'in.{r}.npy', np.full(10, r + 1, dtype='i4'))
save_st('s.safetensors', {'a': np.ones(3, dtype='f4'), 'b': np.ones(2, dtype='f4')})"
	ok_ranks 3 collx-allreduce --iters 5 --warmup 3 -i 'in.{rank}.npy' -o 'out.{rank}.npy'
	ok_ranks 3 collx-broadcast --iters 4 -i 'in.{rank}.npy' -o 'b.{rank}.npy'
	ok_ranks 3 collx-allreduce --iters 3 -i s.safetensors -o 's.{rank}.safetensors'
	pyx "
for r in range(3):
    same(load(f'out.{r}.npy'), np.full(10, 6, dtype='i4'))
    same(load(f'b.{r}.npy'), np.full(10, 1, dtype='i4'))
    same(load_st(f's.{r}.safetensors')[0]['a'], np.full(3, 3, dtype='f4'))"
}

# --- --stream ---

@test "--stream through FIFOs: three arrays in, three results out as they come" {
	for r in 0 1; do mkfifo in.$r out.$r; done
	pyx "
for r in range(2):
    write_stream(f'items.{r}', [np.full((2, 2), r + 1, dtype='f4'), np.arange(5, dtype='i8') * (r + 1), np.ones(3, dtype='f8') * r])"
	for r in 0 1; do
		timeout 60 cat out.$r >res.$r &
		timeout 60 sh -c "cat items.$r >in.$r" &
	done
	ok_ranks 2 collx-allreduce --stream --check -i 'in.{rank}' -o 'out.{rank}'
	wait
	pyx "
for r in range(2):
    got = load_stream(f'res.{r}')
    assert len(got) == 3, len(got)
    same(got[0], np.full((2, 2), 3, dtype='f4'))
    same(got[1], np.arange(5, dtype='i8') * 3)
    same(got[2], np.ones(3, dtype='f8'))"
}

@test "--stream: an array (and a writer) late by more than --timeout is waited for" {
	mkfifo in.0 in.1
	pyx "write_stream('items.0', [np.ones(4, dtype='f4'), np.full(4, 2, dtype='f4')])"
	timeout 60 sh -c 'cat items.0 >in.0' &
	timeout 60 "$PY" -c "
import sys, time
sys.path.insert(0, '$COLLX_ROOT/tests/lib')
from collpy import *
time.sleep(3)
with open('in.1', 'wb') as f:
    f.write(npy_bytes(np.full(4, 10, dtype='f4')))
    f.flush()
    time.sleep(3)
    f.write(npy_bytes(np.full(4, 20, dtype='f4')))" &
	ok_ranks 2 collx-allreduce --stream --timeout 1 -i 'in.{rank}' -o 'res.{rank}'
	wait
	# The root of a broadcast late: the others follow it.
	timeout 60 "$PY" -c "
import sys, time
sys.path.insert(0, '$COLLX_ROOT/tests/lib')
from collpy import *
time.sleep(2)
with open('in.1', 'wb') as f:
    f.write(npy_bytes(np.arange(3, dtype='i2')))" &
	ok_ranks 3 collx-broadcast --stream --timeout 1 --root 1 -i in.1 -o 'bres.{rank}'
	wait
	pyx "
for r in range(2):
    got = load_stream(f'res.{r}')
    assert len(got) == 2, len(got)
    same(got[0], np.full(4, 11, dtype='f4'))
    same(got[1], np.full(4, 22, dtype='f4'))
for r in range(3):
    got = load_stream(f'bres.{r}')
    assert len(got) == 1, len(got)
    same(got[0], np.arange(3, dtype='i2'))"
}

@test "--stream: broadcast from a pipe on the root, results on standard output" {
	pyx "write_stream('items', [np.arange(4, dtype='i4') + k for k in range(3)])"
	ranks 2 sh -c 'if [ "$COLLX_RANK" = 0 ]; then exec collx-broadcast --stream -i - -o - <items; else exec collx-broadcast --stream -o -; fi'
	all_exit 0
	pyx "
for r in range(2):
    got = load_stream(f'stdout.{r}')
    assert len(got) == 3, len(got)
    for k in range(3): same(got[k], np.arange(4, dtype='i4') + k)"
}

@test "--stream: inputs of different lengths are exit 3 on every rank" {
	pyx "
write_stream('a', [np.ones(2, dtype='f4')] * 3)
write_stream('b', [np.ones(2, dtype='f4')] * 2)"
	ranks 2 sh -c 'exec collx-allreduce --stream -i $( [ "$COLLX_RANK" = 0 ] && echo a || echo b )'
	all_exit 3
	each_err 'input of rank 1 ended after 2 items'
}

# --- errors ---

@test "shapes differing between ranks are exit 3 on every rank, naming both" {
	pyx "
save('in.0.npy', np.zeros((2, 3), dtype='f4'))
save('in.1.npy', np.zeros((2, 4), dtype='f4'))
save('in.2.npy', np.zeros((2, 3), dtype='f4'))"
	ranks 3 collx-allreduce -i 'in.{rank}.npy' -o 'out.{rank}.npy'
	all_exit 3
	each_err 'rank [0-2]: inputs differ between ranks: rank 0 has \(unnamed\) f32 \[2, 3\], rank 1 has \(unnamed\) f32 \[2, 4\]'
	[ ! -e out.0.npy ]
	[ ! -e out.2.npy ]
	pyx "
save('in.1.npy', np.zeros((2, 3), dtype='f8'))
save('g.0.npy', np.zeros((2, 3), dtype='f4'))
save('g.1.npy', np.zeros((5, 2), dtype='f4'))"
	ranks 3 collx-reduce-scatter -i 'in.{rank}.npy'
	all_exit 3
	each_err 'rank 1 has \(unnamed\) f64'
	ranks 2 collx-allgather -i 'g.{rank}.npy'
	all_exit 3
	each_err 'f32 \[\*, 3\], rank 1 has \(unnamed\) f32 \[\*, 2\]'
}

@test "safetensors with different tensor names between ranks: exit 3" {
	pyx "
save_st('s.0.safetensors', {'a': np.zeros(2, dtype='f4'), 'b': np.zeros(2, dtype='f4')})
save_st('s.1.safetensors', {'a': np.zeros(2, dtype='f4'), 'c': np.zeros(2, dtype='f4')})"
	ranks 2 collx-allreduce -i 's.{rank}.safetensors'
	all_exit 3
	each_err 'rank 0 has b f32 \[2\], rank 1 has c f32 \[2\]'
}

@test "non-divisible sizes are exit 3 on every rank" {
	pyx "save('x.npy', np.zeros((5, 4), dtype='f4'))"
	ranks 2 collx-reduce-scatter -i x.npy
	all_exit 3
	each_err '5 rows are not divisible by the world size 2'
	ranks 3 collx-alltoall --scatter-dim 1 --gather-dim 0 -i x.npy
	all_exit 3
	each_err 'size 4 of dimension 1 is not divisible by the world size 3'
	ranks 2 collx-alltoall --scatter-dim 2 -i x.npy
	all_exit 3
	each_err 'out of range'
}

@test "an unreadable input on one rank is exit 3 on every rank" {
	pyx "save('good.npy', np.zeros(3, dtype='f4'))"
	printf 'not a tensor' >bad.npy
	ranks 3 sh -c 'exec collx-allreduce -i $( [ "$COLLX_RANK" = 1 ] && echo bad.npy || echo good.npy )'
	all_exit 3
	grep -q 'rank 1: .*bad.npy' err.1
	grep -q 'rank 0: rank 1 could not read its input' err.0
	ranks 2 collx-broadcast --root 1 -i missing.npy
	all_exit 3
	grep -q 'rank 0: the root could not read its input' err.0
}

@test "a rank that never arrives: timeout, exit 1" {
	pyx "save('x.npy', np.zeros(3, dtype='f4'))"
	port=$(free_port)
	start=$SECONDS
	run timeout 60 env COLLX_RANK=0 COLLX_WORLD_SIZE=2 COLLX_MASTER=127.0.0.1:$port collx-allreduce --timeout 2 -i x.npy
	[ "$status" = 1 ]
	[[ "$output" == "collx-allreduce: rank 0: "* ]]
	[ $((SECONDS - start)) -lt 20 ]
	run timeout 60 env COLLX_RANK=1 COLLX_WORLD_SIZE=2 COLLX_MASTER=127.0.0.1:$port collx-allreduce --timeout 2 -i x.npy
	[ "$status" = 1 ]
	[[ "$output" == "collx-allreduce: rank 1: "* ]]
}

# Joining says after 5 s what it waits for: rank 0 who has joined and who
# is missing, a rank that cannot reach rank 0 the address it tries; -q
# keeps it quiet. All four at once, so the test takes one --timeout.
@test "a wait at the rendezvous says after 5 s who is missing or what is tried" {
	pyx "save('x.npy', np.zeros(3, dtype='f4'))"
	p=$(free_port) q=$(free_port) start=$SECONDS
	run_rank() {	# FILE RANK WORLD PORT [OPTIONS...]
		local f=$1 r=$2 w=$3 port=$4 rc=0
		shift 4
		COLLX_RANK=$r COLLX_WORLD_SIZE=$w COLLX_MASTER=127.0.0.1:$port \
		    timeout 30 collx-allreduce --timeout 7 -i x.npy "$@" 2>"$f" || rc=$?
		echo $rc >"$f.rc"
	}
	run_rank gather 0 3 "$p" &
	run_rank joined 1 3 "$p" &
	run_rank reach 1 2 "$q" &
	run_rank quiet 1 2 "$q" -q &
	wait
	cat gather joined reach quiet
	[ $((SECONDS - start)) -lt 15 ]
	for f in gather joined reach quiet; do [ "$(cat $f.rc)" = 1 ]; done
	[ "$(wc -l <gather)" -eq 2 ]
	[ "$(head -n 1 gather)" = "collx-allreduce: rank 0: waiting for rank 2 (2 of 3 joined) at 127.0.0.1:$p" ]
	# the rank that joined waits quietly: its one line is rank 0's failure
	[ "$(wc -l <joined)" -eq 1 ]
	grep -q "rank 1: rendezvous failed at rank 0: timed out" joined
	[ "$(wc -l <reach)" -eq 2 ]
	[ "$(head -n 1 reach)" = "collx-allreduce: rank 1: still trying to reach rank 0 at 127.0.0.1:$q" ]
	[ "$(wc -l <quiet)" -eq 1 ]
	grep -q "rank 1: rendezvous with rank 0 at 127.0.0.1:$q" quiet
}

@test "ranks started with different options refuse each other (exit 3)" {
	pyx "save('x.npy', np.zeros(3, dtype='f4'))"
	ranks 2 sh -c 'exec collx-allreduce --timeout 3 --op $( [ "$COLLX_RANK" = 1 ] && echo max || echo sum ) -i x.npy'
	[ "${RCS[0]}" != 0 ]
	[ "${RCS[1]}" != 0 ]
	[ "${RCS[1]}" = 3 ] || [ "${RCS[0]}" = 3 ]
	grep -q "rank 1 was started with --op max, rank 0 with --op sum" err.1
}

@test "a refused rank is told which option differs, or which program" {
	pyx "save('x.npy', np.zeros(3, dtype='f4'))"
	ranks 3 sh -c 'exec collx-allreduce --timeout 3 --algo $( [ "$COLLX_RANK" = 2 ] && echo ring || echo tree ) -i x.npy'
	[ "${RCS[2]}" = 3 ]
	grep -qx "collx-allreduce: rank 2: refused by rank 0 at 127.0.0.1:[0-9]*: rank 2 was started with --algo ring, rank 0 with --algo tree" err.2
	grep -q "refused rank 2 from .*: rank 2 was started with --algo ring, rank 0 with --algo tree" err.0
	ranks 2 sh -c 'exec collx-allreduce --timeout 3 $( [ "$COLLX_RANK" = 1 ] && echo --check ) -i x.npy'
	[ "${RCS[1]}" = 3 ]
	grep -q "rank 1 was started with --check on, rank 0 with --check off" err.1
	ranks 2 sh -c 'exec collx-$( [ "$COLLX_RANK" = 1 ] && echo allgather || echo allreduce ) --timeout 3 -i x.npy'
	[ "${RCS[1]}" = 3 ]
	grep -q "rank 1 runs collx-allgather, rank 0 collx-allreduce" err.1
}

@test "without -o rank 0 prints one summary line (shape, dtype, sum, time); -q silences it" {
	pyx "
for r in range(3): save(f'in.{r}.npy', (np.arange(6, dtype='f4') * (r + 1)).reshape(2, 3))
open('want', 'w').write('%.9g' % (np.arange(6) * 6).sum())"
	ok_ranks 3 collx-allreduce -i 'in.{rank}.npy'
	[ "$(wc -l <stdout.0)" -eq 1 ]
	grep -Eqx "collx-allreduce: f32 \[2, 3\], sum $(cat want), [0-9.e+-]+ s per run \(rank 0; no -o, nothing written\)" stdout.0
	[ ! -s stdout.1 ]
	[ ! -s stdout.2 ]
	pyx "save_st('s.safetensors', {'a': np.ones(2, dtype='f4'), 'b': np.full(3, 2, dtype='f8')})"
	ok_ranks 2 collx-allgather -i s.safetensors
	grep -Eq "^collx-allgather: 2 tensors, 10 elements, sum 16, " stdout.0
	ok_ranks 2 collx-allreduce -q -i 'in.{rank}.npy'
	[ ! -s stdout.0 ]
	ok_ranks 2 collx-allreduce -i 'in.{rank}.npy' -o 'o{rank}.npy'
	[ ! -s stdout.0 ]
}

@test "usage errors are exit 2" {
	pyx "save('x.npy', np.zeros(4, dtype='f4'))"
	run timeout 10 collx-allreduce -i x.npy --algo bruck
	[ "$status" = 2 ]
	[[ "$output" == *"'bruck' is not an algorithm of allreduce (auto, naive, ring, tree, rd, rabenseifner, hier)"* ]]
	run timeout 10 collx-allreduce
	[ "$status" = 2 ]
	run timeout 10 collx-allreduce -i x.npy --op median
	[ "$status" = 2 ]
	run timeout 10 collx-allreduce -i x.npy --iters 0
	[ "$status" = 2 ]
	run timeout 10 collx-allreduce -i x.npy --frobnicate
	[ "$status" = 2 ]
	# once, by the program's name, not twice (getopt's line and ours)
	[ "$output" = "collx-allreduce: unknown option '--frobnicate'
Try 'collx-allreduce --help'." ]
	run timeout 10 collx-allreduce -i x.npy -Z
	[ "$output" = "collx-allreduce: unknown option '-Z'
Try 'collx-allreduce --help'." ]
	run timeout 10 collx-allreduce -i
	[ "$status" = 2 ]
	[ "$output" = "collx-allreduce: option '-i' needs a value
Try 'collx-allreduce --help'." ]
	run timeout 10 collx-allreduce -i x.npy extra
	[ "$status" = 2 ]
	run timeout 10 collx-broadcast --root 3 -i x.npy --world-size 2 --rank 0 --master 127.0.0.1:1
	[ "$status" = 2 ]
	run timeout 10 collx-alltoall -i x.npy --scatter-dim 9
	[ "$status" = 2 ]
	run timeout 10 collx-allgather -i x.npy --algo pairwise
	[ "$status" = 2 ]
}

@test "world of one: no rendezvous; -o - writes the input's format to stdout" {
	pyx "save('x.npy', np.arange(6, dtype='i2').reshape(3, 2))
save_st('s.safetensors', {'a': np.ones(2, dtype='f4')}, {'m': '1'})"
	timeout 10 collx-allreduce -i "file://$T/x.npy" -o - >y.npy
	timeout 10 collx-allgather -i s.safetensors -o - >y.st
	timeout 10 collx-reduce-scatter -i x.npy -o r.npy --check
	timeout 10 collx-alltoall -i x.npy -o a.npy --scatter-dim 1 --gather-dim 0 --check
	pyx "
same(load('y.npy'), np.arange(6, dtype='i2').reshape(3, 2))
t, m = load_st('y.st'); same(t['a'], np.ones(2, dtype='f4')); assert m == {'m': '1'}
same(load('r.npy'), load('x.npy')); same(load('a.npy'), load('x.npy'))"
	run timeout 10 collx-allreduce -i s.safetensors -o two.npy
	[ "$status" = 0 ]
	pyx "save_st('s2.safetensors', {'a': np.ones(2, dtype='f4'), 'b': np.ones(1, dtype='f4')})"
	run timeout 10 collx-allreduce -i s2.safetensors -o three.npy
	[ "$status" = 3 ]
	[ ! -e three.npy ]
}

@test "collx-run launches the ranks: allreduce of r+1 on 4" {
	pyx "
for r in range(4): save(f'in.{r}.npy', np.full(3, r + 1, dtype='i8'))"
	timeout 60 collx-run -n 4 -- collx-allreduce -i 'in.{rank}.npy' -o 'out.{rank}.npy' --check
	pyx "
for r in range(4): same(load(f'out.{r}.npy'), np.full(3, 10, dtype='i8'))"
}

@test "shared memory: a rank that leaves right after taking a peer's large payload in place is not taken for lost" {
	# The last of 20 1 MiB allreduces, then exit (no output to write): a
	# receiver that copies the sender's payload from its memory may leave
	# before the sender has seen it taken.
	local a i
	export COLLX_SHM_CMA=1
	collx-tensor create --shape 262144 --fill ones -o x.npy
	for a in tree ring rabenseifner; do
		for i in 1 2 3; do
			collx-run -n 4 --timeout 20 -- collx-allreduce --algo "$a" \
			    --iters 20 -i x.npy -q
		done
	done
}
