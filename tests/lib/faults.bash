# The fault suite's jobs: every program that runs as ranks, started as W
# local ranks on one long operation, so that a fault can be injected while
# the ranks are in the middle of it. Inputs are made by collx itself.
#
#   faults_inputs                 # once, in the suite's directory
#   job_start PROG W [rank...]    # start ranks (all by default) of PROG
#   job_wait_busy                 # until every started rank talks to peers
#   job_exit R LIMIT              # rank R's exit status (124: still running)
#
# PROG is one of FAULT_PROGS. Rank r's stderr is err.r, its pid PIDS[r].

FAULT_PROGS=(allreduce broadcast allgather reduce-scatter alltoall
	dp dp-ps tp ulysses pipe bench)

# Inputs for every job, in the current directory.
faults_inputs() {
	collx-tensor create --shape 786432 --fill ones -o big.npy &&
	collx-tensor create --shape 96,4 --fill randn --seed 1 -o X.npy &&
	collx-tensor create --shape 96,3 --fill randn --seed 2 -o Y.npy &&
	collx-dp --init mlp --dims 4,64,3,3 --seed 1 -o m.safetensors &&
	collx-dp --init block --dims 48,6,96 --seed 1 -o b.safetensors &&
	collx-tensor create --shape 2,24,48 --fill randn --seed 3 -o bx.npy &&
	collx-tensor create --shape 2,24,48 --fill randn --seed 4 -o bdy.npy
}

# The command line of rank r of PROG, for W ranks, as words in JOB_ARGV.
job_argv() {
	local prog=$1 r=$2
	case $prog in
	allreduce | broadcast | allgather | reduce-scatter | alltoall)
		JOB_ARGV=(collx-"$prog" --iters 1000000 -i big.npy) ;;
	dp)
		JOB_ARGV=(collx-dp -m m.safetensors --data X.npy --targets Y.npy
		    --batch 96 --steps 100000000 --lr 0.0001) ;;
	dp-ps)
		JOB_ARGV=(collx-dp -m m.safetensors --data X.npy --targets Y.npy
		    --batch 96 --steps 100000000 --lr 0.0001 --sync ps) ;;
	tp | ulysses)
		JOB_ARGV=(collx-tp --layer block --mode "$prog" -m b.safetensors
		    -i bx.npy --backward --grad-output bdy.npy --iters 100000000) ;;
	pipe)
		JOB_ARGV=(collx-pipe -m m.safetensors -i X.npy -t Y.npy
		    --microbatches 4 --steps 100000000 --lr 0.0001) ;;
	bench)
		JOB_ARGV=(collx-bench coll -b 1M -e 1M -n 10000000 -w 0 --csv) ;;
	*) return 1 ;;
	esac
}

# job_start PROG W [RANK...]: start the ranks named (all W by default) of
# PROG on a fresh port, each with --timeout FAULT_TIMEOUT (default 3).
job_start() {
	local prog=$1 w=$2 r
	shift 2
	JOB_PROG=$prog JOB_W=$w
	JOB_PORT=$(free_port)
	[ $# -gt 0 ] && JOB_RANKS=("$@") || JOB_RANKS=($(seq 0 $((w - 1))))
	PIDS=()
	rm -f err.* out.*
	for r in "${JOB_RANKS[@]}"; do
		job_argv "$prog" "$r" || return 1
		COLLX_RANK=$r COLLX_WORLD_SIZE=$w COLLX_MASTER=127.0.0.1:$JOB_PORT \
		    COLLX_TIMEOUT=${FAULT_TIMEOUT:-3} "${JOB_ARGV[@]}" -q \
		    >"out.$r" 2>"err.$r" &
		PIDS[r]=$!
	done
}

# Established TCP connections of process PID.
tcp_peers() {
	ss -Htnp state established 2>/dev/null | grep -c "pid=$1,"
}

# Wait (at most 30 s) until every started rank holds a connection to each
# other rank and has used some CPU time in the operation, then a little
# longer: the ranks are then in the middle of the job's operation.
job_wait_busy() {
	local r i ok
	for ((i = 0; i < 300; i++)); do
		ok=1
		for r in "${JOB_RANKS[@]}"; do
			[ "$(tcp_peers "${PIDS[r]}")" -ge $((JOB_W - 1)) ] || ok=0
		done
		[ "$ok" = 1 ] && { sleep 0.5; return 0; }
		sleep 0.1
	done
	echo "# the ranks of $JOB_PROG did not connect:" >&2
	tail -n 3 err.* >&2
	return 1
}

# Kill whatever of the job still runs (teardown), stopped ranks included.
job_reap() {
	local p
	for p in "${PIDS[@]}"; do
		kill -KILL "$p" 2>/dev/null || true
	done
	PIDS=()
	return 0
}
