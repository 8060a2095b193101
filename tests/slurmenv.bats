#!/usr/bin/env bats
# srun's variables without a Slurm: ranks given only what srun gives its
# tasks (SLURM_PROCID, SLURM_NTASKS, SLURM_JOB_ID, SLURM_STEP_ID,
# SLURM_STEP_NODELIST) meet on the step's first host, on the port collx(7)
# derives from the ids; two steps whose ports agree are told so and never
# form one group. slurm.bats runs the programs under a real srun.
load lib/common
load lib/coll

setup() {
	common_setup
	unset COLLX_TOKEN COLLX_IFNAME COLLX_MASTER COLLX_RANK COLLX_WORLD_SIZE \
	    COLLX_JOB_ID MASTER_ADDR MASTER_PORT RANK WORLD_SIZE \
	    OMPI_COMM_WORLD_RANK PMI_RANK SLURMD_NODENAME
	need python3-numpy "$PY" -c "import numpy"
	pids=()
}

teardown() {
	local p
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
	for p in "${pids[@]}"; do wait "$p" 2>/dev/null; done
	common_teardown
}

# A job id whose step STEP's port is free now, and that port, computed here
# as collx(7) states it: 10240 + 64 * (job mod 352) + step mod 64.
# usage: pick_job STEP (sets JOB and PORT)
pick_job() {
	read -r JOB PORT < <("$PY" -c '
import random, socket, sys
step = int(sys.argv[1])
for _ in range(1000):
    job = random.randrange(1, 10**6)
    port = 10240 + 64 * (job % 352) + step % 64
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            continue
    print(job, port)
    break
' "$1")
	[ -n "$PORT" ]
}

# held PORT: a listener holds 127.0.0.1:PORT now (a bind fails as the
# rendezvous's would).
held() {
	"$PY" -c '
import socket, sys
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
try:
    s.bind(("127.0.0.1", int(sys.argv[1])))
except OSError:
    sys.exit(0)
sys.exit(1)' "$1"
}

# srun_rank R W STEP OUT PROGRAM ARG...: task R of W of job $JOB's step STEP
# on localhost, the first of the step's nodes (NODES to choose others), in
# the background (its pid added to pids), stdout and stderr in OUT.out and
# OUT.err.
srun_rank() {
	local r=$1 w=$2 step=$3 out=$4
	shift 4
	SLURM_PROCID=$r SLURM_NTASKS=$w SLURM_LOCALID=$r SLURM_JOB_ID=$JOB \
	    SLURM_STEP_ID=$step SLURM_STEP_NODELIST=${NODES:-localhost,node[2-3]} \
	    SLURM_JOB_NODELIST='localhost,node[2-9]' COLLX_TIMEOUT=10 \
	    timeout -k 5 30 "$@" >"$out.out" 2>"$out.err" 3>&- &
	pids+=($!)
}

@test "3 ranks with srun's variables alone meet and sum as NumPy does" {
	pick_job 3
	pyx "
rng = np.random.default_rng(5)
for r in range(3): save(f'in.{r}.npy', rng.standard_normal((4, 6)).astype('f4'))"
	for r in 0 1 2; do
		srun_rank $r 3 3 "r$r" collx-allreduce -i 'in.{rank}.npy' -o 'out.{rank}.npy'
	done
	for r in 0 1 2; do
		wait "${pids[r]}" || { cat r*.err; return 1; }
	done
	pyx "
want = sum(load(f'in.{r}.npy').astype('f8') for r in range(3))
for r in range(3): close(load(f'out.{r}.npy'), want, 1e-6, 1e-6)"
}

@test "rank 0 finding its step's port held says which port, job and step" {
	pick_job 70
	"$PY" -c '
import socket, sys, time
s = socket.socket()
# a connection of an earlier test may leave the port in TIME_WAIT
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", int(sys.argv[1])))
s.listen()
time.sleep(30)' "$PORT" 3>&- &
	pids+=($!)
	for _ in $(seq 50); do
		held "$PORT" && break
		sleep 0.1
	done
	held "$PORT"
	"$PY" -c "import numpy; numpy.save('in.npy', numpy.ones(3))"
	srun_rank 0 2 70 r0 collx-allreduce -i in.npy -o out.npy
	rc=0
	wait "${pids[1]}" || rc=$?
	cat r0.err
	[ "$rc" -eq 1 ]
	grep -qF "rank 0: rendezvous port $PORT on localhost (Slurm job $JOB step 70) is taken: a step of this job whose id is equal modulo 64" r0.err
}

@test "steps 6 and 70 of one job at once: the later is refused, the earlier sums right" {
	pick_job 6
	pyx "
for r in range(2): save(f'in.{r}.npy', np.full(5, r + 1, dtype='i4'))"
	# Step 6's rank 0 holds the port, its rank 1 comes last.
	srun_rank 0 2 6 a0 collx-allreduce -i 'in.{rank}.npy' -o 'a.{rank}.npy'
	for _ in $(seq 50); do
		held "$PORT" && break
		sleep 0.1
	done
	srun_rank 0 2 70 b0 collx-allreduce -i 'in.{rank}.npy' -o 'b.{rank}.npy'
	srun_rank 1 2 70 b1 collx-allreduce -i 'in.{rank}.npy' -o 'b.{rank}.npy'
	rc0=0 rc1=0
	wait "${pids[1]}" || rc0=$?
	wait "${pids[2]}" || rc1=$?
	cat b0.err b1.err
	[ "$rc0" -eq 1 ]
	grep -qF "port $PORT on localhost (Slurm job $JOB step 70) is taken" b0.err
	# refused by step 6's rank 0: another job, never a member
	[ "$rc1" -eq 3 ]
	grep -qF "refused by rank 0" b1.err
	srun_rank 1 2 6 a1 collx-allreduce -i 'in.{rank}.npy' -o 'a.{rank}.npy'
	wait "${pids[0]}"
	wait "${pids[3]}"
	[ ! -e b.0.npy ]
	[ ! -e b.1.npy ]
	pyx "
for r in range(2): same(load(f'a.{r}.npy'), np.full(5, 3, dtype='i4'))"
}

@test "an address given beats srun's: COLLX_MASTER, with a node list no host resolves" {
	pick_job 0
	port=$(free_port)
	pyx "
for r in range(2): save(f'in.{r}.npy', np.full(3, 10 * (r + 1), dtype='i8'))"
	for r in 0 1; do
		NODES='nosuchhost[1-2]' COLLX_MASTER=127.0.0.1:$port srun_rank $r 2 0 "r$r" \
		    collx-allreduce -i 'in.{rank}.npy' -o 'out.{rank}.npy'
	done
	for r in 0 1; do
		wait "${pids[r]}" || { cat r*.err; return 1; }
	done
	pyx "
for r in range(2): same(load(f'out.{r}.npy'), np.full(3, 30, dtype='i8'))"
}
