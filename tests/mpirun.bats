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

@test "mpirun -n 4 collx-pipe, collx-train (dp2 x tp2, tp2 x pp2), collx-bench and collx-tp: right, with no collx variable" {
	models_4 run_mpirun mpirun.out
}
