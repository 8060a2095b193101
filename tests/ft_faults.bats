#!/usr/bin/env bats
# collx-dp --ft under collx-run --max-restarts, the faults of a rejoin: a
# rank killed twice in a row (its restarted self as soon as it rejoined)
# and two ranks killed at once; the rank started again killed during its
# copy of the state; the rank sending that state killed; a namespace cut
# off from the other. Each run ends within its bound, the survivors
# training on with the weights of a run without failures (within 1e-5),
# or stopping with exit 1 and a line naming the cause.
load lib/common
load lib/netns
load lib/ftsuite
bats_require_minimum_version 1.5.0

setup_file() {
	ft_setup_file && ft_big_inputs
}

BIG=(-m big.safetensors --data BX.npy --targets BY.npy --batch 64 --steps 30
    --optimizer adamw --lr 0.001)

# linked PID N: until process PID has N established TCP connections
# (a rank started again: its links to the others, after the table came)
linked() {
	local _
	for _ in $(seq 3000); do
		[ "$(ss -tnpH state established 2>/dev/null |
		    grep -c "pid=$1,")" -ge "$2" ] && return 0
		sleep 0.01
	done
	echo "pid $1 never had $2 links" >&2
	return 1
}

# the weights of the run without failures, every step in the loss CSV
# once, the last steps run by 4 replicas
same_as_ref() {
	collx-tensor diff ref.safetensors ft.safetensors --atol 1e-5 --rtol 0
	[ "$(tail -n +2 ft.csv | cut -d, -f1 | tr '\n' ' ')" = "$(seq -s ' ' 0 $(($1 - 1))) " ]
	[ "$(tail -n 1 ft.csv | cut -d, -f8)" = 4 ]
}

@test "--ft faults: a rank killed twice in a row (its restarted self once it rejoined), then two ranks at once: each started again rejoins, the weights are those of a run without failures" {
	local run pid rc start
	collx-dp "${ARGS[@]}" -q -o ref.safetensors
	start=$SECONDS
	ft_run 4 "${ARGS[@]}"
	run=$RUN
	wait_line '^collx-dp: step 20 '
	kill -KILL "$(rank_pid "$run" 2)"
	wait_line '^collx-dp: step [0-9]*: rank 2 rejoined'
	kill -KILL "$(rank_pid "$run" 2)"
	wait_line '^collx-dp: step 60 '
	pid=$(rank_pid "$run" 1)
	kill -KILL "$(rank_pid "$run" 3)" "$pid"
	ft_ends 0
	[ "$(grep -c '^collx-run: restart [1-4] of 4: rank [123] .*(--ft)$' run.err)" -eq 4 ]
	[ "$(grep -c '^collx-dp: step [0-9]*: rank 2 rejoined' run.err)" -eq 2 ]
	# 1 and 3 at once, or one after the other
	[ "$(sed -n 's/^collx-dp: step [0-9]*: ranks\{0,1\} \([0-9, ]*\) rejoined.*/\1/p' run.err |
	    tr -d ' ' | tr ',' '\n' | sort -u | tr '\n' ' ')" = "1 2 3 " ]
	# both at once, or one after the other
	grep -q '^collx-dp: step [0-9]*: ranks 1, 3 left; 2 of 4 replicas go on' run.err ||
	    grep -q '^collx-dp: step [0-9]*: rank [13] left; 2 of 3 replicas go on' run.err
	same_as_ref 100
	[ $((SECONDS - start)) -le 60 ]
}

# copy_fault VICTIM [OPTION...]: 4 ranks of the larger model under collx-run
# --max-restarts 2; rank 2 killed at step 5 and started again; once its
# links to the others are up (the table came, the copy of the state
# begins), rank 0, the replica it copies from, is stopped, so the copy
# cannot end; then VICTIM (joiner: rank 2 again; sender: rank 0) is
# killed and rank 0 continued. The others go on, the victim is started
# again and rejoins, the weights are those of a run without failures.
# The options go to the --ft run (--zero: the state copied is the
# slices, cut again over the replicas).
copy_fault() {
	local run joiner sender rc start
	collx-dp "${BIG[@]}" -q -o ref.safetensors
	ft_run 2 "${BIG[@]}" "${@:2}"
	run=$RUN
	wait_line '^collx-dp: step 5 '
	kill -KILL "$(rank_pid "$run" 2)"
	wait_line '^collx-run: restart 1 of 2: rank 2 '
	joiner=$(rank_pid "$run" 2)
	sender=$(rank_pid "$run" 0)
	linked "$joiner" 3
	kill -STOP "$sender"
	start=$SECONDS
	if [ "$1" = joiner ]; then
		kill -KILL "$joiner"
	else
		kill -KILL "$sender"
	fi
	kill -CONT "$sender" 2>/dev/null || true
	ft_ends 0
	# the copy did not end: no rejoin before the second restart
	[ "$(sed -n '/^collx-run: restart 2 of 2/q;p' run.err |
	    grep -c 'rejoined')" -eq 0 ]
	grep -q "^collx-run: restart 2 of 2: rank $([ "$1" = joiner ] && echo 2 || echo 0) " run.err
	# the rank started again rejoins: after the sender left, in the
	# recovery (its copy from another replica), said after the departure
	grep -q '^collx-dp: step [0-9]*: rank 2 rejoined' run.err
	[ "$1" = joiner ] || grep -q '^collx-dp: step [0-9]*: rank 0 rejoined' run.err
	same_as_ref 30
	[ $((SECONDS - start)) -le 60 ]
}

@test "--ft faults: the rank started again killed during its copy of the state: the others go on, it is started again and rejoins" {
	copy_fault joiner
}

@test "--ft faults: the rank sending the state killed during the copy: the rank started again copies from another, the sender is started again and rejoins" {
	copy_fault sender
}

@test "--ft --zero 1 faults: the rank started again killed while the slices are cut again: the others go on, it is started again and rejoins" {
	copy_fault joiner --zero 1
}

@test "--ft --zero 2 faults: the rank sending slice 0 killed while the slices are cut again: its mirror at rank 3 stands in, it is started again and rejoins" {
	copy_fault sender --zero 2
}

@test "--ft faults: a namespace cut off (its link down) at step 20: the half with rank 0 goes on to the weights of a run without failures; the other half stops with exit 1, naming the ranks it lost, within 3 timeouts and 5 s" {
	need "root and ip netns" netns_available
	local master r line step cut= gone= rc
	collx-dp "${ARGS[@]}" -q -o ref.safetensors
	netns_setup 2
	master=$(netns_addr 0):29500
	mkfifo err.fifo
	for r in 0 1 2 3; do
		COLLX_RANK=$r COLLX_WORLD_SIZE=4 COLLX_MASTER=$master \
		    COLLX_TIMEOUT=2 ip netns exec "$(netns_name $((r / 2)))" \
		    collx-dp "${ARGS[@]}" --ft -v -o ft.safetensors \
		    --loss-csv ft.csv 2>"$([ "$r" -lt 2 ] && echo err.fifo ||
		    echo "err.$r")" &
		PIDS+=($!)
	done
	while IFS= read -r line; do
		echo "$line" >>err.log
		step=$(sed -n 's/^collx-dp: step \([0-9]*\) .*/\1/p' <<<"$line")
		if [ "$step" = 20 ] && [ -z "$cut" ]; then
			ip link set "cx${NETNS_TAG}v1" down
			cut=$SECONDS
		fi
		# when the cut-off half has gone (the others still training)
		if [ -n "$cut" ] && [ -z "$gone" ] &&
		    ! kill -0 "${PIDS[2]}" "${PIDS[3]}" 2>/dev/null; then
			gone=$SECONDS
		fi
	done <err.fifo
	for r in 0 1; do
		wait "${PIDS[r]}"
	done
	for r in 2 3; do
		rc=0
		wait "${PIDS[r]}" || rc=$?
		[ "$rc" -eq 1 ]
		cat "err.$r"
		grep -q "^collx-dp: rank $r: --ft: 2 of 4 replicas left (ranks 0, 1 gone or cut off), not a majority: stopping, the others may go on$" "err.$r"
	done
	# the timeout finds the cut, twice it and a second for the frames
	# that never come, the agreement
	# (the others finished first: the half's end was just waited for)
	[ -n "$gone" ] || gone=$SECONDS
	[ $((gone - cut)) -le $((3 * 2 + 5)) ]
	grep -v ': step [0-9]* epoch ' err.log
	grep -q '^collx-dp: step [0-9]*: ranks 2, 3 left; 2 of 4 replicas go on' err.log
	collx-tensor diff ref.safetensors ft.safetensors --atol 1e-5 --rtol 0
	[ "$(tail -n +2 ft.csv | cut -d, -f1 | tr '\n' ' ')" = "$(seq -s ' ' 0 99) " ]
}

@test "--ft faults under collx-run: a rank stopped (SIGSTOP): the others time out on it, leave it out and finish; 3 s after, collx-run ends it (SIGTERM), one line naming it, exit 0" {
	local run pid rc start
	collx-dp "${ARGS[@]}" --steps 40 -q -o ref.safetensors
	COLLX_TIMEOUT=2 collx-run -n 3 --max-restarts 1 -- collx-dp \
	    "${ARGS[@]}" --steps 40 --ft -v -o ft.safetensors \
	    --loss-csv ft.csv 2>run.err &
	RUN=$!
	run=$RUN
	PIDS+=("$run")
	wait_line '^collx-dp: step 10 '
	pid=$(rank_pid "$run" 2)
	kill -STOP "$pid"
	start=$SECONDS
	ft_ends 0
	grep -q '^collx-dp: step [0-9]*: rank 2 left; 2 of 3 replicas go on' run.err
	grep -q "^collx-run: rank 2 (pid $pid) is stopped (SIGSTOP, SIGTSTP or a debugger) 3 s after the others finished, out of their group (--ft): ended with SIGTERM$" run.err
	collx-tensor diff ref.safetensors ft.safetensors --atol 1e-5 --rtol 0
	# the timeout (2 s) finds it, twice it and a second for its frame,
	# the run, collx-run's 3 s
	[ $((SECONDS - start)) -le 20 ]
}

@test "--ft faults under collx-run: the last replica killed: rank 1 of 2 leaves, rank 0 goes on; rank 0 killed too: the job ends with its status (137), the line naming it, no restart" {
	local run rc
	collx-run -n 2 --max-restarts 0 -- collx-dp "${ARGS[@]}" --steps 100000 \
	    --ft -v -o ft.safetensors 2>run.err &
	RUN=$!
	run=$RUN
	PIDS+=("$run")
	wait_line '^collx-dp: step 10 '
	kill -KILL "$(rank_pid "$run" 1)"
	wait_line '^collx-dp: step [0-9]*: rank 1 left; 1 of 2 replicas go on'
	pid=$(rank_pid "$run" 0)
	kill -KILL "$pid"
	ft_ends 137
	grep -q '^collx-run: rank 1 (pid [0-9]*) was killed by signal 9 (Killed); the others go on (--ft)$' run.err
	grep -q "^collx-run: rank 0 (pid $pid) was killed by signal 9 (Killed)$" run.err
	[ ! -e ft.safetensors ]
}

@test "--ft faults: a rank started again with other options is refused at once (exit 3, one line naming why); the others go on to the weights of a run without failures" {
	local master r rc
	collx-dp "${ARGS[@]}" --steps 200 -q -o ref.safetensors
	master=127.0.0.1:$(free_port)
	for r in 0 1 2; do
		COLLX_RANK=$r COLLX_WORLD_SIZE=3 COLLX_MASTER=$master \
		    COLLX_TIMEOUT=5 collx-dp "${ARGS[@]}" --steps 200 --ft -v \
		    -o ft.safetensors 2>"err.$r" &
		PIDS+=($!)
	done
	for _ in $(seq 1200); do
		grep -q '^collx-dp: step 20 ' err.0 && break
		sleep 0.05
	done
	kill -KILL "${PIDS[2]}"
	rc=0
	COLLX_REJOIN=1 COLLX_RANK=2 COLLX_WORLD_SIZE=3 COLLX_MASTER=$master \
	    COLLX_TIMEOUT=5 collx-dp "${ARGS[@]}" --steps 200 --lr 0.5 --ft \
	    -o ft.safetensors 2>err.again || rc=$?
	cat err.again
	[ "$rc" -eq 3 ]
	grep -q '^collx-dp: rank 2: rejoining: refused: job identity differs from the group.s (another job, or other options)$' err.again
	wait "${PIDS[0]}"
	wait "${PIDS[1]}"
	grep -q '^collx-dp: rank 0: refused a rank rejoining from 127.0.0.1:[0-9]*: not of this job$' err.0
	collx-tensor diff ref.safetensors ft.safetensors --atol 1e-5 --rtol 0
}
