#!/usr/bin/env bats
# Where ranks run: collx-run's default --bind auto puts local rank i on a
# core (or a CPU) of its own, always inside the CPUs collx-run may use (an
# affinity taskset or a launcher set, a cgroup's cpuset); with more ranks
# than CPUs it binds none and the job completes. A rank program started by
# another launcher (torchrun's variables, mpirun --bind-to none) places
# itself the same way, and keeps a binding its launcher made. Each rank's
# CPUs are read back from /proc; the cores from sysfs, here, in awk.
load lib/common
load lib/coll
load lib/cpus
bats_require_minimum_version 1.5.0

setup() {
	common_setup
	unset COLLX_TOKEN COLLX_IFNAME COLLX_TIMEOUT COLLX_MASTER COLLX_RANK \
	    COLLX_WORLD_SIZE COLLX_LOCAL_RANK COLLX_JOB_ID MASTER_ADDR \
	    MASTER_PORT RANK WORLD_SIZE LOCAL_RANK LOCAL_WORLD_SIZE \
	    SLURM_PROCID SLURM_NTASKS SLURM_NODEID SLURM_STEP_TASKS_PER_NODE
	need python3-numpy "$PY" -c "import numpy"
	pyx "save('x.npy', np.arange(1024, dtype=np.float32))"
}

teardown() {
	if [ -n "${cgroup_base:-}" ]; then
		echo "$BASHPID" >"$cgroup_base/cgroup.procs"
		rmdir "$cgroup_dir"
	fi
	common_teardown
}

# The CPUs this shell may run on, one a line.
my_cpus() {
	awk '/^Cpus_allowed_list:/ { print $2 }' /proc/self/status | cpu_list
}

# collx-run ARG... --tag-output -- grep Cpus_allowed_list: rank r's CPUs
# as "r LIST" lines, LIST expanded and joined by commas.
run_cpus() {
	local r
	timeout -k 5 60 collx-run --tag-output "$@" -- \
	    grep Cpus_allowed_list /proc/self/status >cpus.out 2>cpus.err ||
	    { echo "collx-run $* failed"; cat cpus.out cpus.err; return 1; }
	[ ! -s cpus.err ] || { cat cpus.err; return 1; }
	for ((r = 0; ; r++)); do
		grep -q "^\[$r\] " cpus.out || break
		echo "$r $(grep "^\[$r\] " cpus.out | awk '{ print $3 }' |
		    cpu_list | paste -sd,)"
	done
}

# Every rank's CPUs (run_cpus's lines on stdin) inside the list $1.
all_inside() {
	local r list c
	while read -r r list; do
		for c in ${list//,/ }; do
			if ! grep -qx "$c" <<<"$(cpu_list <<<"$1")"; then
				echo "rank $r on CPU $c, outside $1"
				return 1
			fi
		done
	done
}

@test "collx-run's default (auto): local rank i on core i of those it may use, the same as --bind core; one rank alone not bound" {
	local cores n r
	cores=$(my_cpus | cores_of)
	n=$(wc -l <<<"$cores")
	[ "$n" -ge 2 ] || skip "one core"
	[ "$n" -le 4 ] || n=4
	run -0 run_cpus -n "$n"
	echo "$output"
	for ((r = 0; r < n; r++)); do
		[ "${lines[r]}" = "$r $(sed -n "$((r + 1))p" <<<"$cores")" ]
	done
	run -0 run_cpus -n "$n" --bind auto
	for ((r = 0; r < n; r++)); do
		[ "${lines[r]}" = "$r $(sed -n "$((r + 1))p" <<<"$cores")" ]
	done
	run -0 run_cpus -n "$n" --bind none
	for ((r = 0; r < n; r++)); do
		[ "${lines[r]}" = "$r $(my_cpus | paste -sd,)" ]
	done
	# a rank alone is left free: two such jobs would share core 0
	run -0 run_cpus -n 1
	[ "$output" = "0 $(my_cpus | paste -sd,)" ]
}

@test "collx-run under taskset -c CPU: every rank stays on that CPU (1 rank bound to it, 2 not bound), and an allreduce completes there" {
	local cpu
	cpu=$(my_cpus | tail -1)
	run -0 taskset -c "$cpu" bash -c "$(declare -f run_cpus cpu_list); run_cpus -n 1"
	[ "$output" = "0 $cpu" ]
	run -0 taskset -c "$cpu" bash -c "$(declare -f run_cpus cpu_list); run_cpus -n 2"
	echo "$output"
	[ "${#lines[@]}" -eq 2 ]
	all_inside "$cpu" <<<"$output"
	# a real rank program, its affinity read from /proc while it runs
	run -0 placed "taskset -c $cpu collx-run -n 2 --" 2
	echo "$output"
	all_inside "$cpu" <<<"$output"
}

# Once W ranks of collx-allreduce started in the background with
# COLLX_DEBUG_FILE=$T/dbg.%r.%p have opened their group (their debug logs
# exist), their CPUs as run_cpus prints them, read from /proc; then the
# ranks are stopped.
cpus_of_ranks() {
	local w=$1 r f
	for ((r = 0; r < 300; r++)); do
		[ "$(ls dbg.* 2>/dev/null | wc -l)" -lt "$w" ] || break
		sleep 0.1
	done
	for ((r = 0; r < w; r++)); do
		f=$(ls dbg."$r".*) || return 1
		echo "$r $(awk '/^Cpus_allowed_list:/ { print $2 }' \
		    "/proc/${f##*.}/status" | cpu_list | paste -sd,)"
	done
	for f in dbg.*; do
		kill "${f##*.}"
	done
	wait
}

# placed LAUNCH W [ENV...]: collx-allreduce launched by LAUNCH (words),
# with ENV, its W ranks' CPUs (cpus_of_ranks).
placed() {
	local launch=$1 w=$2
	shift 2
	rm -f dbg.*
	env "$@" COLLX_DEBUG=info COLLX_DEBUG_FILE="$T/dbg.%r.%p" timeout -k 5 60 \
	    $launch collx-allreduce -i x.npy --iters 100000000 -o /dev/null \
	    >placed.out 2>placed.err &
	cpus_of_ranks "$w" || { cat placed.err; return 1; }
}

# by_hand PREFIX1: two ranks of collx-allreduce started by hand with
# torchrun's LOCAL_RANK and LOCAL_WORLD_SIZE, rank 1 under PREFIX1 (words);
# once both opened the group, their CPUs as run_cpus prints them.
by_hand() {
	local port r pre
	port=$(free_port)
	rm -f dbg.*
	for r in 0 1; do
		pre=
		[ "$r" -eq 0 ] || pre=$1
		COLLX_RANK=$r COLLX_WORLD_SIZE=2 COLLX_MASTER=127.0.0.1:$port \
		    LOCAL_RANK=$r LOCAL_WORLD_SIZE=2 COLLX_DEBUG=info \
		    COLLX_DEBUG_FILE="$T/dbg.%r.%p" timeout -k 5 60 $pre \
		    collx-allreduce -i x.npy --iters 100000000 -o /dev/null &
	done
	cpus_of_ranks 2
}

@test "ranks started by hand with torchrun's LOCAL_RANK and LOCAL_WORLD_SIZE place themselves on a core each; one bound already keeps its CPU" {
	local cores first
	cores=$(my_cpus | cores_of)
	[ "$(wc -l <<<"$cores")" -ge 2 ] || skip "one core"
	run -0 by_hand ""
	echo "$output"
	[ "${lines[0]}" = "0 $(sed -n 1p <<<"$cores")" ]
	[ "${lines[1]}" = "1 $(sed -n 2p <<<"$cores")" ]
	first=$(my_cpus | head -1)
	run -0 by_hand "taskset -c $first"
	echo "$output"
	[ "${lines[0]}" = "0 $(sed -n 1p <<<"$cores")" ]
	[ "${lines[1]}" = "1 $first" ]
}

@test "mpirun --bind-to none -n 2: each rank places itself on a core; one bound before it starts keeps that" {
	local cores r
	need openmpi-bin command -v mpirun
	need libpmix-dev pkg-config --exists pmix
	cores=$(my_cpus | cores_of)
	[ "$(wc -l <<<"$cores")" -ge 2 ] || skip "one core"
	run -0 placed "mpirun --allow-run-as-root --bind-to none -n 2" 2
	echo "$output"
	for r in 0 1; do
		[ "${lines[r]}" = "$r $(sed -n "$((r + 1))p" <<<"$cores")" ]
	done
	# a binding made before the rank starts (taskset, here under mpirun)
	# is kept: both ranks on the last CPU
	run -0 placed "mpirun --allow-run-as-root --bind-to none -n 2 taskset -c $(my_cpus | tail -1)" 2
	echo "$output"
	[ "${lines[0]}" = "0 $(my_cpus | tail -1)" ]
	[ "${lines[1]}" = "1 $(my_cpus | tail -1)" ]
}

@test "inside a cgroup cpuset of one CPU: every rank placed inside it (collx-run auto, and a self-placing rank)" {
	local base cpu
	[ "$(id -u)" -eq 0 ] || skip "not root: no cgroup of our own"
	cpu=$(my_cpus | tail -1)
	if [ -w /sys/fs/cgroup/cgroup.subtree_control ] &&
	    grep -qw cpuset /sys/fs/cgroup/cgroup.controllers; then
		base=/sys/fs/cgroup			# cgroup v2
	elif [ -d /sys/fs/cgroup/cpuset ]; then
		base=/sys/fs/cgroup/cpuset		# v1
	else
		skip "no cpuset controller"
	fi
	cgroup_dir=$base/collx-placement-$$
	mkdir "$cgroup_dir" || skip "cannot create a cgroup"
	cgroup_base=$base
	[ "$base" = /sys/fs/cgroup/cpuset ] ||
	    echo +cpuset >/sys/fs/cgroup/cgroup.subtree_control
	echo "$cpu" >"$cgroup_dir/cpuset.cpus"
	cat "$base/cpuset.mems" "$base/cpuset.mems.effective" 2>/dev/null |
	    head -1 >"$cgroup_dir/cpuset.mems"
	# this test's shell in the cgroup, and so all it starts; back out in
	# teardown
	echo "$BASHPID" >"$cgroup_dir/cgroup.procs"
	[ "$(my_cpus | paste -sd,)" = "$cpu" ]
	run -0 run_cpus -n 1
	[ "$output" = "0 $cpu" ]
	run -0 run_cpus -n 2
	echo "$output"
	[ "${#lines[@]}" -eq 2 ]
	all_inside "$cpu" <<<"$output"
	# a rank placing itself (1 of 1: on the one CPU the cpuset has)
	run -0 placed "" 1 COLLX_RANK=0 COLLX_WORLD_SIZE=1 LOCAL_RANK=0 \
	    LOCAL_WORLD_SIZE=1 COLLX_MASTER=127.0.0.1:$(free_port)
	echo "$output"
	[ "$output" = "0 $cpu" ]
}

@test "more ranks than CPUs: none bound, silently, and a 3-rank allreduce over shared memory completes with NumPy's sum" {
	local ncpu mine
	mine=$(my_cpus | paste -sd,)
	ncpu=$(my_cpus | wc -l)
	[ "$ncpu" -le 8 ] || skip "$ncpu CPUs: too many ranks to start"
	run -0 run_cpus -n $((ncpu + 1))
	echo "$output"
	[ "${#lines[@]}" -eq $((ncpu + 1)) ]
	while read -r r list; do
		[ "$list" = "$mine" ]
	done <<<"$output"
	run -0 timeout -k 5 120 collx-run -n $((ncpu + 1)) -- \
	    collx-allreduce -i x.npy -o y.npy --iters 20
	pyx "same(load('y.npy'), $((ncpu + 1)) * np.arange(1024, dtype=np.float32))"
}

@test "a rank started by hand alone on its machine (LOCAL_WORLD_SIZE=1) is left unbound without a word, and runs" {
	local port
	port=$(free_port)
	run --separate-stderr timeout 60 env COLLX_RANK=0 COLLX_WORLD_SIZE=1 \
	    COLLX_MASTER=127.0.0.1:$port LOCAL_RANK=0 LOCAL_WORLD_SIZE=1 \
	    collx-allreduce -q -i x.npy --iters 3 -o y.npy
	echo "$stderr"
	[ "$status" -eq 0 ]
	[ -z "$stderr" ]
	[ -f y.npy ]
}

@test "COLLX_DEBUG=info: each rank over shared memory says at its end the CPUs it was bound to and what the scheduler did to it" {
	local cores
	cores=$(my_cpus | cores_of)
	[ "$(wc -l <<<"$cores")" -ge 2 ] || skip "one core"
	run -0 env COLLX_DEBUG=info timeout -k 5 60 collx-run -n 2 -- \
	    collx-allreduce -q -i x.npy --iters 20 -o y.npy
	echo "$output"
	for r in 0 1; do
		grep -E "rank $r: info: shm: cpus $(sed -n "$((r + 1))p" <<<"$cores"), on cpu [0-9]+ then [0-9]+; while mapped: [0-9]+ migrations, [0-9]+ voluntary and [0-9]+ involuntary switches, [0-9]+ page faults, [0-9.]+ ms CPU$" <<<"$output"
	done
}
