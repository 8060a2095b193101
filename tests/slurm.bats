#!/usr/bin/env bats
# Under a real Slurm, with no collx variable or option: setup_file starts a
# private single-host cluster (munged, slurmctld and slurmd as root, from a
# slurm.conf of its own with every file in one temporary directory) and
# teardown_file stops it and removes it all. `srun -n 4` of the collective
# programs, collx-dp, collx-ps serve, collx-pipe, collx-train and
# collx-bench, results checked with NumPy and PyTorch.
load lib/common
load lib/coll
load lib/launched
load lib/slurm

# The daemon started last, by its pid file's name, when it is ours and
# alive: SIGTERM, then SIGKILL after 5 s.
stop_daemon() {
	local pidfile=$SLURM_TEST_DIR/$1.pid pid
	[ -s "$pidfile" ] || return 0
	pid=$(cat "$pidfile")
	kill "$pid" 2>/dev/null || return 0
	for _ in $(seq 50); do
		kill -0 "$pid" 2>/dev/null || return 0
		sleep 0.1
	done
	kill -9 "$pid" 2>/dev/null
}

setup_file() {
	local node port_ctld port_d
	need "slurm-wlm (slurmctld, slurmd, srun)" command -v slurmctld slurmd srun sinfo
	need munge command -v munged mungekey
	need python3-numpy "$PY" -c "import numpy"
	[ "$(id -u)" -eq 0 ] || need "root, for slurmd" false
	node=$(hostname)
	# The step's node list names this host: collx must reach it by name.
	need "a host name that resolves" getent hosts "$node"
	SLURM_TEST_DIR=$(mktemp -d "${BATS_TMPDIR:-/tmp}/collx-slurm.XXXXXX")
	export SLURM_TEST_DIR
	port_ctld=$(free_port)
	port_d=$(free_port)
	while [ "$port_d" = "$port_ctld" ]; do port_d=$(free_port); done
	slurm_private_start "$SLURM_TEST_DIR" "$port_ctld" "$port_d"
}

teardown_file() {
	[ -n "${SLURM_TEST_DIR:-}" ] || return 0
	# Jobs first, so that no task outlives its slurmd.
	if [ -s "$SLURM_TEST_DIR/slurmctld.pid" ]; then
		scancel --quiet --user=root 2>/dev/null
		for _ in $(seq 50); do
			[ -z "$(squeue -h 2>/dev/null)" ] && break
			sleep 0.1
		done
	fi
	stop_daemon slurmd
	stop_daemon slurmctld
	stop_daemon munged
	rm -rf "$SLURM_TEST_DIR"
}

setup() {
	common_setup
	# Nothing of collx's own, nor of another launcher, reaches the tasks.
	unset COLLX_TOKEN COLLX_IFNAME COLLX_TIMEOUT COLLX_MASTER COLLX_RANK \
	    COLLX_WORLD_SIZE COLLX_LOCAL_RANK COLLX_JOB_ID COLLX_PORT_RANGE \
	    MASTER_ADDR MASTER_PORT RANK WORLD_SIZE LOCAL_RANK \
	    OMPI_COMM_WORLD_RANK OMPI_COMM_WORLD_SIZE PMI_RANK PMI_SIZE
}

teardown() {
	# the servers of a test that failed before they ended (TERM: srun
	# cancels the step)
	[ -z "${serve_pid:-}" ] || kill "$serve_pid" 2>/dev/null
	common_teardown
}

# run_srun ARG...: srun ARG... under a time bound; its output shown when
# it fails.
run_srun() {
	timeout -k 5 60 srun --time=1 "$@" >srun.out 2>srun.err ||
	    { echo "srun $* failed ($?):"; cat srun.out srun.err; return 1; }
}

@test "srun -n 4 collx-allreduce: every task sums as NumPy does, with no collx variable" {
	run_srun -n 4 env
	run grep -E '^(COLLX_(RANK|WORLD_SIZE|LOCAL_RANK|MASTER|JOB_ID)|MASTER_ADDR|MASTER_PORT|RANK|WORLD_SIZE)=' srun.out
	[ "$status" -eq 1 ]
	[ "$(grep -c '^SLURM_PROCID=' srun.out)" -eq 4 ]
	allreduce_4 run_srun
}

@test "srun -n 4 of broadcast, allgather, reduce-scatter and alltoall match NumPy" {
	four_collectives run_srun 2
}

@test "srun -n 4 collx-dp trains the tiny mlp as the NumPy reference does" {
	dp_mlp run_srun
}

# serve_srun ARG...: srun -l ARG... in the background (serve_pid), under a
# time bound, its output in serve.out and serve.err.
serve_srun() {
	timeout -k 5 60 srun --time=1 -l "$@" >serve.out 2>serve.err &
	serve_pid=$!
}

@test "srun -n 4 collx-ps serve, 2 collx-dp workers under srun: the NumPy reference's training" {
	ps_served serve_srun run_srun
}

@test "srun -n 4 collx-pipe, collx-train (dp2 x tp2, tp2 x pp2), collx-bench and collx-tp: right, with no collx variable" {
	models_4 run_srun srun.out
}

@test "two steps of one allocation started together: each on its own port, both right" {
	pyx "
for r in range(2): save(f'in.{r}.npy', np.full(6, r + 1, dtype='i8'))"
	# steps 0 and 1 of one job, sharing its CPUs (--overlap) so that
	# neither waits for the other
	timeout -k 5 60 salloc -n 4 --time=1 bash -c '
	    srun --overlap -n 2 collx-allreduce -i "in.{rank}.npy" -o "a.{rank}.npy" &
	    a=$!
	    srun --overlap -n 2 collx-allreduce --op max -i "in.{rank}.npy" -o "b.{rank}.npy" &
	    wait $a && wait $!' >salloc.out 2>&1 || { cat salloc.out; return 1; }
	pyx "
for r in range(2):
    same(load(f'a.{r}.npy'), np.full(6, 3, dtype='i8'))
    same(load(f'b.{r}.npy'), np.full(6, 2, dtype='i8'))"
}

@test "srun --mpi=pmix -n 4 collx-allreduce: rank 0's address through PMIx" {
	need libpmix-dev pkg-config --exists pmix
	# a PMIx server serves every task (test_cli: PMIx then goes first)
	run_srun --mpi=pmix -n 4 env
	[ "$(grep -c '^PMIX_NAMESPACE=' srun.out)" -eq 4 ]
	pyx "
for r in range(4): save(f'in.{r}.npy', np.full((2, 2), 2 ** r, dtype='i4'))"
	run_srun --mpi=pmix -n 4 collx-allreduce -i 'in.{rank}.npy' -o 'sum.{rank}.npy'
	pyx "
for r in range(4): same(load(f'sum.{r}.npy'), np.full((2, 2), 15, dtype='i4'))"
}

# The port a step without PMIx meets at, as collx(7) states it: 10240 +
# 64 * (job mod 352) + step mod 64. Held for every step of the job here
# (hold.py), srun without PMIx is refused at it, and srun --mpi=pmix, whose
# rank 0 publishes a port of its own through PMIx, joins all the same.
@test "srun --mpi=pmix joins through PMIx with every derived port of its job held; srun without PMIx is refused at it" {
	need libpmix-dev pkg-config --exists pmix
	pyx "
for r in range(4): save(f'in.{r}.npy', np.full(3, 3 ** r, dtype='i4'))"
	cat >hold.py <<'EOF'
import os, socket, time
job = int(os.environ["SLURM_JOB_ID"])
held = []
for step in range(64):
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        s.bind(("0.0.0.0", 10240 + 64 * (job % 352) + step))
    except OSError:	# held already, by another
        continue
    s.listen()
    held.append(s)
open("held", "w").write(f"{job} {len(held)}\n")
time.sleep(60)
EOF
	timeout -k 5 90 salloc -n 4 --time=2 bash -c '
	    "$0" hold.py & h=$!
	    while [ ! -s held ]; do sleep 0.1; done
	    COLLX_TIMEOUT=5 srun --mpi=none -n 4 collx-allreduce \
	        -i "in.{rank}.npy" -o "none.{rank}.npy" 2>none.err
	    echo $? >none.rc
	    srun --mpi=pmix -n 4 collx-allreduce -i "in.{rank}.npy" \
	        -o "sum.{rank}.npy" 2>pmix.err
	    echo $? >pmix.rc
	    kill $h' "$PY" >salloc.out 2>&1 || { cat salloc.out; return 1; }
	cat held salloc.out none.err pmix.err
	[ "$(cut -d' ' -f2 held)" -ge 60 ]
	[ "$(cat none.rc)" -ne 0 ]
	grep -q "rank 0: rendezvous port [0-9]* on .* (Slurm job $(cut -d' ' -f1 held) step [0-9]*) is taken" none.err
	[ "$(cat pmix.rc)" -eq 0 ]
	pyx "
for r in range(4): same(load(f'sum.{r}.npy'), np.full(3, 40, dtype='i4'))"
}
