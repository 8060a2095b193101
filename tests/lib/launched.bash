# What the launcher suites (slurm.bats: srun, mpirun.bats: mpirun) run the
# same way: the programs on 4 ranks, each launched by the suite's RUN
# function (RUN -n 4 PROGRAM ARG...), with no collx variable or option,
# checked with NumPy. Needs lib/coll (pyx).

# The sanitizer build's ranks pass over libpmix's own leaks; the tasks
# inherit the environment.
export LSAN_OPTIONS="suppressions=$COLLX_ROOT/tests/lib/pmix.supp${LSAN_OPTIONS:+:$LSAN_OPTIONS}"

# allreduce_4 RUN: the sum of 4 random float matrices.
allreduce_4() {
	pyx "
rng = np.random.default_rng(1)
for r in range(4): save(f'in.{r}.npy', rng.standard_normal((5, 7)).astype('f4'))"
	"$1" -n 4 collx-allreduce -i 'in.{rank}.npy' -o 'sum.{rank}.npy' ||
	    return 1
	pyx "
want = sum(load(f'in.{r}.npy').astype('f8') for r in range(4))
for r in range(4): close(load(f'sum.{r}.npy'), want, 1e-5, 1e-5, f'rank {r}')"
}

# four_collectives RUN ROOT: broadcast from ROOT, allgather,
# reduce-scatter and alltoall of 8x3 integers.
four_collectives() {
	local run=$1 root=$2
	pyx "
for r in range(4): save(f'in.{r}.npy', np.arange(8 * 3, dtype='i4').reshape(8, 3) + 100 * r)"
	"$run" -n 4 collx-broadcast --root "$root" -i 'in.{rank}.npy' -o 'bc.{rank}.npy' &&
	    "$run" -n 4 collx-allgather -i 'in.{rank}.npy' -o 'ag.{rank}.npy' &&
	    "$run" -n 4 collx-reduce-scatter -i 'in.{rank}.npy' -o 'rs.{rank}.npy' &&
	    "$run" -n 4 collx-alltoall -i 'in.{rank}.npy' -o 'a2a.{rank}.npy' ||
	    return 1
	pyx "
ins = [load(f'in.{r}.npy') for r in range(4)]
total = sum(ins)
for r in range(4):
    same(load(f'bc.{r}.npy'), ins[$root], f'broadcast {r}')
    same(load(f'ag.{r}.npy'), np.concatenate(ins), f'allgather {r}')
    same(load(f'rs.{r}.npy'), total[2 * r:2 * r + 2], f'reduce-scatter {r}')
    same(load(f'a2a.{r}.npy'), np.concatenate([np.split(ins[q], 4)[r] for q in range(4)]), f'alltoall {r}')"
}

# dp_mlp RUN: collx-dp on the tiny mlp (two moons, full batch of 200, SGD
# lr 0.05, 10 steps) equals the NumPy reference (tests/lib/dpref.py).
dp_mlp() {
	local run=$1
	timeout 30 "$PY" "$COLLX_ROOT/tests/lib/moons.py" 200 1 X.npy Y.npy
	timeout 30 collx-dp --init mlp --dims 2,16,1 --seed 3 -o m.safetensors
	"$run" -n 4 collx-dp -m m.safetensors --data X.npy --targets Y.npy \
	    --batch 200 --steps 10 --lr 0.05 -o t.safetensors --loss-csv l.csv \
	    -q || return 1
	timeout 60 "$PY" "$COLLX_ROOT/tests/lib/dpref.py" mlp m.safetensors \
	    X.npy Y.npy 200 10 0.05 t.safetensors l.csv sgd
}
