#!/usr/bin/env bats
# Under Open MPI's mpirun, with no collx variable or option: rank 0's
# rendezvous address goes through PMIx. Results checked with NumPy and
# PyTorch.
load lib/common
load lib/coll
load lib/launched

setup() {
	common_setup
	unset COLLX_TOKEN COLLX_IFNAME COLLX_TIMEOUT COLLX_MASTER COLLX_RANK \
	    COLLX_WORLD_SIZE COLLX_LOCAL_RANK COLLX_JOB_ID MASTER_ADDR \
	    MASTER_PORT RANK WORLD_SIZE LOCAL_RANK SLURM_PROCID SLURM_NTASKS
	need python3-numpy "$PY" -c "import numpy"
	need openmpi-bin command -v mpirun
	need libpmix-dev pkg-config --exists pmix
}

teardown() {
	[ -z "${serve_pid:-}" ] || kill "$serve_pid" 2>/dev/null
	common_teardown
}

# mpirun -n N PROGRAM ARG... as root, more ranks than cores.
run_mpirun() {
	timeout -k 5 60 mpirun --allow-run-as-root --oversubscribe "$@" \
	    >mpirun.out 2>mpirun.err </dev/null ||
	    { echo "mpirun $* failed ($?):"; cat mpirun.out mpirun.err; return 1; }
}

@test "mpirun -n 4 collx-allreduce: rank 0's address through PMIx, sums as NumPy does" {
	run_mpirun -n 4 env
	[ "$(grep -c '^PMIX_NAMESPACE=' mpirun.out)" -eq 4 ]
	run grep -E '^(COLLX_(RANK|WORLD_SIZE|LOCAL_RANK|MASTER|JOB_ID)|MASTER_ADDR|MASTER_PORT|RANK|WORLD_SIZE)=' mpirun.out
	[ "$status" -eq 1 ]
	allreduce_4 run_mpirun
}

@test "mpirun -n 4 of broadcast, allgather, reduce-scatter and alltoall match NumPy" {
	four_collectives run_mpirun 1
}

@test "mpirun -n 4 collx-dp trains the tiny mlp as the NumPy reference does" {
	dp_mlp run_mpirun
}

# serve_mpirun ARG...: mpirun --tag-output ARG... in the background
# (serve_pid), under a time bound, its output in serve.out and serve.err.
serve_mpirun() {
	timeout -k 5 60 mpirun --allow-run-as-root --oversubscribe --tag-output \
	    "$@" >serve.out 2>serve.err </dev/null &
	serve_pid=$!
}

@test "mpirun -n 4 collx-ps serve, 2 collx-dp workers under mpirun: the NumPy reference's training" {
	ps_served serve_mpirun run_mpirun
}

@test "mpirun -n 4 collx-pipe, collx-train (dp2 x tp2, tp2 x pp2), collx-bench and collx-tp: right, with no collx variable" {
	models_4 run_mpirun mpirun.out
}
