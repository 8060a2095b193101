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

# models_4 RUN OUT: the model-parallel programs on 4 ranks of RUN, each equal
# to an independent float64 PyTorch training of a 4-layer mlp stack
# (tests/lib/piperef.py): collx-pipe on 4 stages, collx-train on dp2 x tp2
# and tp2 x pp2; collx-bench coll and collx-tp with their own --check
# (collx-bench's table in OUT, where RUN keeps the standard output).
models_4() {
	local run=$1 out=$2 x=(-m m.safetensors -i X.npy -t Y.npy --steps 3 --lr 0.1 -q)
	timeout 10 collx-tensor create --shape 10,4 --fill randn --seed 1 -o X.npy &&
	    timeout 10 collx-tensor create --shape 10,3 --fill randn --seed 2 -o Y.npy &&
	    timeout 30 collx-dp --init mlp --dims 4,8,3,4 --seed 1 -o m.safetensors &&
	    timeout 120 "$PY" "$COLLX_ROOT/tests/lib/piperef.py" train mlp \
	    m.safetensors X.npy Y.npy 10 3 sgd 0.1 r.safetensors r.csv || return 1
	"$run" -n 4 collx-pipe "${x[@]}" --microbatches 3 -o p.safetensors \
	    --loss-csv p.csv &&
	    "$run" -n 4 collx-train "${x[@]}" --batch 10 --dp 2 --tp 2 \
	    --microbatches 2 -o dt.safetensors --loss-csv dt.csv &&
	    "$run" -n 4 collx-train "${x[@]}" --batch 10 --tp 2 --pp 2 \
	    --microbatches 2 -o tp.safetensors --loss-csv tp.csv &&
	    "$run" -n 4 collx-bench coll -b 1K -e 4K -n 2 -w 1 --check --csv ||
	    return 1
	# rows of 1K, 2K and 4K, out of place and in place, from rank 0
	# alone, none wrong
	awk -F, '$1 == "collx-bench" { n++; bad += $4 != 0 || $18 != 0 }
	    END { exit !(n == 6 && !bad) }' "$out" ||
	    { echo "collx-bench printed:"; cat "$out"; return 1; }
	timeout 120 "$PY" "$COLLX_ROOT/tests/lib/piperef.py" cmp r.safetensors \
	    r.csv 1e-5 p.safetensors p.csv dt.safetensors dt.csv tp.safetensors \
	    tp.csv || return 1
	# collx-tp's forward and backward against its serial computation
	# (tp.bats checks both against PyTorch)
	mkdir tp && (cd tp && timeout 60 "$PY" "$COLLX_ROOT/tests/lib/tpref.py" \
	    make mlp 12 24 6 10) &&
	    "$run" -n 4 collx-tp --layer mlp -m tp/w.safetensors -i tp/X.npy \
	    --check --backward --grad-output tp/DY.npy -q
}

# ps_served SERVE RUN: collx-ps serve on 4 ranks of SERVE (started in the
# background, its output, each line tagged with the task's rank as srun -l
# and mpirun --tag-output tag it, in serve.out), its 4 shards of the tiny
# mlp updated by 2 collx-dp workers on 2 ranks of RUN (--ps, the servers in
# rank order): the NumPy reference's training (as dp_mlp's), the servers'
# final parameters the workers' bits; then 4 ranks of RUN with colocated
# servers (--sync ps --ps-servers 2), the reference's training too (not the
# same bits: 4 workers sum their gradients in another order).
ps_served() {
	local serve=$1 run=$2 list pid rc=0
	timeout 30 "$PY" "$COLLX_ROOT/tests/lib/moons.py" 200 1 X.npy Y.npy
	timeout 30 collx-dp --init mlp --dims 2,16,1 --seed 3 -o m.safetensors
	"$serve" -n 4 collx-ps serve -m m.safetensors --workers 2 --lr 0.05 \
	    -o final.safetensors
	pid=$!
	for _ in $(seq 200); do
		list=$(sed -nE 's/^ *([0-9]+): *([0-9]+)$/\1 \2/p
		    s/^\[[0-9]+,([0-9]+)\]<stdout>: *([0-9]+)$/\1 \2/p' serve.out |
		    sort -n | awk '{ l = l (NR > 1 ? "," : "") "127.0.0.1:" $2 }
		    END { if (NR == 4) print l }')
		[ -n "$list" ] && break
		kill -0 "$pid" 2>/dev/null || break
		sleep 0.1
	done
	[ -n "$list" ] || { echo "the servers printed no 4 ports:";
	    cat serve.out serve.err; return 1; }
	"$run" -n 2 collx-dp -m m.safetensors --data X.npy --targets Y.npy \
	    --batch 200 --steps 10 --ps "$list" -o t.safetensors \
	    --loss-csv l.csv -q || return 1
	# both workers done: the servers end, rank 0 writing the parameters
	wait "$pid" || rc=$?
	[ "$rc" -eq 0 ] || { echo "the servers exited $rc:";
	    cat serve.out serve.err; return 1; }
	timeout 60 "$PY" "$COLLX_ROOT/tests/lib/dpref.py" mlp m.safetensors \
	    X.npy Y.npy 200 10 0.05 t.safetensors l.csv sgd &&
	    cmp final.safetensors t.safetensors || return 1
	"$run" -n 4 collx-dp -m m.safetensors --data X.npy --targets Y.npy \
	    --batch 200 --steps 10 --lr 0.05 --sync ps --ps-servers 2 \
	    -o c.safetensors --loss-csv lc.csv -q || return 1
	timeout 60 "$PY" "$COLLX_ROOT/tests/lib/dpref.py" mlp m.safetensors \
	    X.npy Y.npy 200 10 0.05 c.safetensors lc.csv sgd
}
