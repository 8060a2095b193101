#!/usr/bin/env bats
# collx-train --ft: a rank killed (SIGKILL) while training takes its
# whole replica out (its TP or PP peer leaves, saying why, exit 1); the
# other replica runs the step again with the whole batch and goes on.
# The trained weights are those of a failure-free collx-train run of the
# same mesh (no --ft) within 1e-5, the loss CSV holds every step once
# with the replicas that ran it, /dev/shm is left as it was. A replica
# started again (COLLX_REJOIN=1, as collx-run --max-restarts does) rejoins
# whole at a step boundary with the state of the others, to the same
# weights. Bad input: one usage line naming the options.
load lib/common
load lib/netns
load lib/ftsuite
bats_require_minimum_version 1.5.0

TARGS=(-m m.safetensors --data X.npy --targets Y.npy --batch 512 --steps 100
    --optimizer adamw --lr 0.001)

# killed_train N PLAN PEERS REPLICAS MESH...: N ranks of collx-train --ft
# on MESH; PLAN " STEP:RANK ...": RANK killed (SIGKILL) after the line of
# step STEP (by the rank 0 of those left); PEERS, the other ranks of the
# killed ranks' replicas, leave with them (exit 1, one line each); the
# replicas left end with the weights of a failure-free run of the same
# mesh within 1e-5, every step once, the replicas column REPLICAS (the
# replicas of each stretch of steps, as "2 1"). TARGS: the options but
# the mesh; STEPS: their steps (100).
killed_train() {
	local n=$1 plan=$2 peers=" $3 " reps=$4 master r line step rc want
	local shm k
	shift 4
	collx-run -n "$n" -- collx-train "${TARGS[@]}" "$@" -q \
	    -o ref.safetensors --loss-csv ref.csv
	shm=$(ls -A /dev/shm | sort)
	master=127.0.0.1:$(free_port)
	mkfifo err.fifo
	for ((r = 0; r < n; r++)); do
		COLLX_RANK=$r COLLX_WORLD_SIZE=$n COLLX_MASTER=$master \
		    COLLX_TIMEOUT=10 collx-train "${TARGS[@]}" "$@" --ft -v \
		    -o ft.safetensors --loss-csv ft.csv 2>err.fifo &
		PIDS+=($!)
	done
	local left=$plan
	while IFS= read -r line; do
		echo "$line" >>err.log
		step=$(sed -n 's/^collx-train: step \([0-9]*\) epoch .*/\1/p' \
		    <<<"$line")
		[ -n "$step" ] || continue
		k=$(sed -n "s/.* $step:\([0-9]*\) .*/\1/p" <<<"$left ")
		[ -n "$k" ] || continue
		left=${left/ $step:$k/}
		kill -KILL "${PIDS[k]}"
	done <err.fifo
	[ -z "$left" ]
	for ((r = 0; r < n; r++)); do
		rc=0
		timeout 60 tail --pid="${PIDS[r]}" -f /dev/null
		wait "${PIDS[r]}" || rc=$?
		echo "rank $r: exit $rc"
		want=0
		if [[ "$plan " == *":$r "* ]]; then
			want=137
		elif [[ "$peers" == *" $r "* ]]; then
			want=1
		fi
		[ "$rc" -eq "$want" ]
	done
	grep -v ': step [0-9]* epoch ' err.log
	# the step run again after a departure says that run's times: no
	# field of a step line negative
	if grep ': step [0-9]* epoch .* -[0-9]' err.log; then false; fi
	# each peer's line, and each departure's by the rank 0 of those left
	for r in $peers; do
		grep -q "^collx-train: rank $r: --ft: rank [0-9]* left, taking replica [0-9] out; this rank leaves with it ([0-9] replicas\{0,1\} go\(es\)\{0,1\} on)$" err.log
	done
	for k in $plan; do
		grep -q "^collx-train: step [0-9]*: rank ${k#*:} left, taking 1 replica out; [0-9] of [0-9] replicas go on (0.[0-9]* s to agree and set up again)$" err.log
	done
	[ "$(grep -c "^collx-train: ${STEPS:-100} steps, final loss " err.log)" -eq 1 ]
	ft_as_ref "${STEPS:-100}"
	[ "$(tail -n +2 ft.csv | cut -d, -f8 | uniq | tr '\n' ' ')" = "$reps " ]
	[ "$(ls -A /dev/shm | sort)" = "$shm" ]
}

@test "--ft --dp 2 --tp 2: rank 3 killed at step 10, rank 2 leaves with it; replica 0 ends with the weights of a run without failures" {
	killed_train 4 " 10:3" 2 "2 1" --dp 2 --tp 2
}

@test "--ft --dp 2 --tp 2: rank 0 killed, rank 1 leaves with it; replica 1 takes the outputs over" {
	killed_train 4 " 10:0" 1 "2 1" --dp 2 --tp 2
}

@test "--ft --dp 2 --pp 2: rank 2 (the last stage of replica 0) killed, rank 0 leaves with it; replica 1 takes the outputs over" {
	killed_train 4 " 10:2" 0 "2 1" --dp 2 --pp 2
}

@test "--ft --dp 2 --pp 2: rank 1 killed, rank 3 leaves with it" {
	killed_train 4 " 10:1" 3 "2 1" --dp 2 --pp 2
}

# gpt_inputs BATCH STEPS: a small GPT and its text; TARGS and STEPS for
# them.
gpt_inputs() {
	timeout 30 collx-dp --init gpt --dims 256,16,2,2,8 --seed 1 \
	    -o g.safetensors
	seq 1 20000 | head -c 60000 >text.txt
	STEPS=$2
	TARGS=(-m g.safetensors --data text.txt --batch "$1" --steps "$2"
	    --optimizer adamw --lr 0.001)
}

@test "--ft on a gpt, --dp 2 --pp 2 --microbatches 2 (the tied embedding's stages): rank 0 killed, rank 2 leaves with it; replica 1 ends right" {
	# steps of a few ms: enough of them that the kill comes mid-run
	gpt_inputs 32 300
	killed_train 4 " 10:0" 2 "2 1" --dp 2 --pp 2 --microbatches 2
}

@test "--ft --dp 3 --pp 2: rank 4 killed at step 10, then rank 0 at step 20; their peers 1 and 3 leave; replica 2 ends with the weights of a run without failures" {
	killed_train 6 " 10:4 20:0" "1 3" "3 2 1" --dp 3 --pp 2
}

# rejoin_train PLAN PEERS REPLICAS MESH...: 4 ranks of collx-train --ft
# on MESH; PLAN "STEP:RANK ...": RANK killed (SIGKILL) after the line of
# step STEP (or the first after the replica killed before rejoined: a
# kill then would take the last replica) and started again at once with
# COLLX_REJOIN=1; PEERS "R:P ...": P, the other rank of R's replica,
# leaves with it (exit 1) and is started again so too. The replica
# rejoins whole (the line of each rejoin by the rank 0 of the mesh);
# every rank's last self exits 0; the weights, every step once, the
# losses as a run without failures of the same mesh; the replicas column
# follows the lines (2, 1 from each departure's step, 2 again from its
# rejoin's) and shows each dip (REPLICAS: its distinct stretches, as
# "2 1 2"). TARGS, STEPS as killed_train's; with NS=netns, ranks 0 and
# 1 in the first namespace host (netns_setup), 2 and 3 in the second.
rejoin_train() {
	local plan=$1 reps=$3 master r p v line rc want i=0 away=0 hold=0
	local -a rp at victim peer
	for v in $plan; do
		at+=("${v%:*}")
		victim+=("${v#*:}")
	done
	for v in $2; do
		peer[${v%:*}]=${v#*:}
	done
	shift 3
	collx-run -n 4 -- collx-train "${TARGS[@]}" "$@" -q \
	    -o ref.safetensors --loss-csv ref.csv
	master=127.0.0.1:$(free_port)
	[ "${NS:-}" != netns ] || master=$(netns_addr 0):29500
	mkfifo err.fifo
	# start_rank R [VAR=VALUE]: rank R (again), in its namespace
	start_rank() {
		local pre=()
		[ "${NS:-}" != netns ] ||
		    pre=(ip netns exec "$(netns_name $(($1 / 2)))")
		env "${@:2}" COLLX_RANK="$1" COLLX_WORLD_SIZE=4 \
		    COLLX_MASTER="$master" COLLX_TIMEOUT=10 "${pre[@]}" collx-train \
		    "${TARGS[@]}" "${MESH[@]}" --ft -v -o ft.safetensors \
		    --loss-csv ft.csv 2>err.fifo &
		rp[$1]=$!
		PIDS+=($!)
	}
	MESH=("$@")
	for r in 0 1 2 3; do
		start_rank "$r"
	done
	# no forks per line: the reader keeps up with the steps
	while IFS= read -r line; do
		echo "$line" >>err.log
		[[ "$line" != *" rejoined; "* ]] || away=0
		[[ "$line" =~ ^collx-train:\ step\ ([0-9]+)\ epoch ]] || continue
		# after a step of the replica left alone, it stops for 1 s
		# (well within the timeout) so that the ranks started again
		# are at its door before a fast machine ends the run
		if [ "$hold" = 1 ]; then
			kill -STOP "${stop[@]}"
			sleep 1
			kill -CONT "${stop[@]}"
			hold=0
		fi
		if [ "$i" -ge "${#at[@]}" ] || [ "$away" = 1 ] ||
		    [ "${BASH_REMATCH[1]}" -lt "${at[i]}" ]; then
			continue
		fi
		r=${victim[i]}
		p=${peer[r]}
		i=$((i + 1))
		away=1
		kill -KILL "${rp[r]}"
		rc=0
		wait "${rp[r]}" || rc=$?
		[ "$rc" -eq 137 ]
		start_rank "$r" COLLX_REJOIN=1
		rc=0
		timeout 60 tail -s 0.01 --pid="${rp[p]}" -f /dev/null
		wait "${rp[p]}" || rc=$?
		[ "$rc" -eq 1 ]
		start_rank "$p" COLLX_REJOIN=1
		stop=()
		for q in 0 1 2 3; do
			[ "$q" = "$r" ] || [ "$q" = "$p" ] || stop+=("${rp[q]}")
		done
		hold=1
	done <err.fifo
	grep -v ': step [0-9]* epoch ' err.log
	[ "$i" -eq "${#at[@]}" ]
	for r in 0 1 2 3; do
		wait "${rp[r]}"
	done
	for r in "${victim[@]}"; do
		p=${peer[r]}
		grep -q "^collx-train: step [0-9]*: rank $r left, taking 1 replica out; 1 of 2 replicas go on (0.[0-9]* s to agree and set up again)$" err.log
		grep -q "^collx-train: step [0-9]*: ranks $((r < p ? r : p)), $((r < p ? p : r)) rejoined; 2 replicas go on ([0-9.]* s to admit and copy the state)$" err.log
	done
	[ "$(grep -c "^collx-train: ${STEPS:-100} steps, final loss " err.log)" -eq 1 ]
	collx-tensor diff ref.safetensors ft.safetensors --atol 1e-5 --rtol 0
	[ "$(tail -n +2 ft.csv | cut -d, -f1 | tr '\n' ' ')" = "$(seq -s ' ' 0 $((${STEPS:-100} - 1))) " ]
	want=$(awk -v n=2 -v steps="${STEPS:-100}" '
	    /^collx-train: step [0-9]*: rank [0-9]* left,/ { left[$3 + 0]++ }
	    /^collx-train: step [0-9]*: ranks [0-9, ]* rejoined;/ { back[$3 + 0]++ }
	    END { for (k = 0; k < steps; k++) {
		n += back[k] - left[k]; printf "%d ", n } }' err.log)
	[ "$(tail -n +2 ft.csv | cut -d, -f8 | tr '\n' ' ')" = "$want" ]
	[ "$(tail -n +2 ft.csv | cut -d, -f8 | uniq | tr '\n' ' ')" = "$reps " ]
	ft_losses_close ref.csv ft.csv
}

@test "--ft rejoin, --dp 2 --tp 2: rank 3 killed at step 10 and rank 2, its peer, started again: replica 1 rejoins whole; the weights of a run without failures" {
	rejoin_train "10:3" "3:2" "2 1 2" --dp 2 --tp 2
}

@test "--ft rejoin, --dp 2 --pp 2: rank 2 killed, rank 0 leaves with it; both started again rejoin, rank 0 writes the outputs again" {
	rejoin_train "10:2" "2:0" "2 1 2" --dp 2 --pp 2
}

@test "--ft rejoin over namespaces, 2 hosts x 2 ranks at 1 Gbit/s, --dp 2 --pp 2 (each replica on both hosts): rank 2 killed, rank 0 leaves with it; both started again rejoin; the weights of a run without failures" {
	rejoin_netns() { NS=$1 rejoin_train "10:2" "2:0" "2 1 2" --dp 2 --pp 2; }
	ft_netns rejoin_netns
}

@test "--ft rejoin on a gpt, --dp 2 --pp 2 --microbatches 2: rank 0 killed, rank 2 leaves with it; both rejoin; the weights of a run without failures" {
	# steps long enough that the replica started again finds the others
	# still training
	gpt_inputs 256 400
	rejoin_train "10:0" "0:2" "2 1 2" --dp 2 --pp 2 --microbatches 2
}

@test "--ft rejoin, --dp 2 --tp 2: ranks 3, 0, 2 and 1 killed at steps 20, 40, 60 and 80 of 100, each replica started again rejoins; the weights of a run without failures, every step once" {
	# steps long beside a restart (the whole data set a step), so that
	# each replica is back well before the next kill and the end
	TARGS=(-m m.safetensors --data X.npy --targets Y.npy --batch 2048
	    --steps 100 --optimizer adamw --lr 0.001)
	rejoin_train "20:3 40:0 60:2 80:1" "3:2 0:1 2:3 1:0" "2 1 2 1 2 1 2 1 2" \
	    --dp 2 --tp 2
}

# four_ranks TIMEOUT: the run without failures (ref.safetensors), then 4
# ranks of collx-train --ft --dp 2 --tp 2 started here (PIDS; MASTER
# their rendezvous, COLLX_TIMEOUT TIMEOUT, rank R's standard error in
# errR.log), until rank 0 has done step 10. TARGS: the options but the
# mesh.
four_ranks() {
	local r
	collx-run -n 4 -- collx-train "${TARGS[@]}" --dp 2 --tp 2 -q \
	    -o ref.safetensors
	MASTER=127.0.0.1:$(free_port)
	for r in 0 1 2 3; do
		COLLX_RANK=$r COLLX_WORLD_SIZE=4 COLLX_MASTER=$MASTER \
		    COLLX_TIMEOUT=$1 collx-train "${TARGS[@]}" --dp 2 --tp 2 \
		    --ft -v -o ft.safetensors --loss-csv ft.csv 2>"err$r.log" &
		PIDS+=($!)
	done
	timeout 60 sh -c 'until grep -q "^collx-train: step 10 epoch" err0.log
	    do sleep 0.05; done'
}

@test "--ft rejoin: a replica started again in part (rank 3 alone, rank 2 not) is held, then refused after twice the timeout (exit 1, one line); the others train on to the weights of a run without failures" {
	local r rc start
	# long enough that the others still train when it gives up
	STEPS=400
	TARGS=(-m m.safetensors --data X.npy --targets Y.npy --batch 512
	    --steps $STEPS --optimizer adamw --lr 0.001)
	four_ranks 2
	kill -KILL "${PIDS[3]}"
	COLLX_REJOIN=1 COLLX_RANK=3 COLLX_WORLD_SIZE=4 COLLX_MASTER=$MASTER \
	    COLLX_TIMEOUT=2 collx-train "${TARGS[@]}" --dp 2 --tp 2 --ft -v \
	    -o ft.safetensors --loss-csv ft.csv 2>err.again &
	PIDS+=($!)
	start=$SECONDS
	rc=0
	timeout 60 tail --pid="${PIDS[4]}" -f /dev/null
	wait "${PIDS[4]}" || rc=$?
	cat err.again
	[ "$rc" -eq 1 ]
	# twice the timeout, and 5 s
	[ $((SECONDS - start)) -le 9 ]
	[ "$(wc -l <err.again)" -eq 1 ]
	# held while the others train (or, on a fast machine, refused by
	# their end)
	grep -Eq "^collx-train: rank 3: rejoining: no member of the group admitted rank 3 at 127.0.0.1:[0-9]+ within 4 s: (timed out|cannot connect to 127.0.0.1:[0-9]+: Connection refused)$" err.again
	for r in 0 1 2; do
		rc=0
		timeout 120 tail --pid="${PIDS[r]}" -f /dev/null
		wait "${PIDS[r]}" || rc=$?
		[ "$rc" -eq "$([ "$r" = 2 ] && echo 1 || echo 0)" ]
	done
	cat err[0-2].log | grep -v ': step [0-9]* epoch '
	if grep -q rejoined err0.log; then false; fi
	collx-tensor diff ref.safetensors ft.safetensors --atol 1e-5 --rtol 0
	[ "$(tail -n +2 ft.csv | cut -d, -f1 | tr '\n' ' ')" = "$(seq -s ' ' 0 $((STEPS - 1))) " ]
	[ "$(tail -n +2 ft.csv | cut -d, -f8 | uniq | tr '\n' ' ')" = "2 1 " ]
}

@test "--ft rejoin, --dp 4 under collx-run --max-restarts 2: rank 0, sending the state to rank 2 started again, killed during the copy: the others and rank 2 agree within the timeout and 5 s (rank 2 admitted, 3 of 4 replicas go on), rank 2 copies from rank 1, rank 0 is started again and rejoins; the weights of a run without failures" {
	local run joiner sender start _
	ft_big_inputs
	TARGS=(-m big.safetensors --data BX.npy --targets BY.npy --batch 64
	    --steps 30 --optimizer adamw --lr 0.001)
	collx-run -n 4 -- collx-train "${TARGS[@]}" --dp 4 -q \
	    -o ref.safetensors
	COLLX_TIMEOUT=5 collx-run -n 4 --max-restarts 2 -- collx-train \
	    "${TARGS[@]}" --dp 4 --ft -v -o ft.safetensors \
	    --loss-csv ft.csv 2>run.err &
	RUN=$!
	run=$RUN
	PIDS+=("$RUN")
	wait_line '^collx-train: step 5 '
	kill -KILL "$(rank_pid "$run" 2)"
	wait_line '^collx-run: restart 1 of 2: rank 2 '
	joiner=$(rank_pid "$run" 2)
	sender=$(rank_pid "$run" 0)
	# its links to the others up (the table came): the copy is near
	for _ in $(seq 3000); do
		[ "$(ss -tnpH state established 2>/dev/null |
		    grep -c "pid=$joiner,")" -ge 3 ] && break
		sleep 0.01
	done
	# the copy under way: over 4 MB in at the rank started again (the
	# set-up before it sends little; the state is some 100 MB), so that
	# the kill lands in the copy, not in the set-up before it
	copying "$joiner" 4000000
	kill -STOP "$sender"
	start=$SECONDS
	kill -KILL "$sender"
	kill -CONT "$sender" 2>/dev/null || true
	wait_line '^collx-train: step [0-9]*: rank 0 left, taking 1 replica out; 3 of 4 replicas go on'
	[ $((SECONDS - start)) -le 10 ]
	ft_ends 0
	# the copy did not end: rank 2 rejoined in the recovery, copying
	# from rank 1, after rank 0 left
	[ "$(sed -n '/^collx-train: step [0-9]*: rank 0 left/q;p' run.err |
	    grep -c 'rejoined')" -eq 0 ]
	grep -q '^collx-train: step [0-9]*: rank 2 rejoined; 3 replicas go on' run.err
	grep -q '^collx-run: restart 2 of 2: rank 0 ' run.err
	grep -q '^collx-train: step [0-9]*: rank 0 rejoined; 4 replicas go on' run.err
	collx-tensor diff ref.safetensors ft.safetensors --atol 1e-5 --rtol 0
	[ "$(tail -n +2 ft.csv | cut -d, -f1 | tr '\n' ' ')" = "$(seq -s ' ' 0 29) " ]
	[ "$(tail -n 1 ft.csv | cut -d, -f8)" = 4 ]
}

@test "--ft --dp 2 --tp 2: rank 3 stopped (SIGSTOP) at step 10: the others time out on it, rank 2 leaves, replica 0 finishes right; continued, rank 3, alone, stops (exit 1, one line)" {
	local r rc
	four_ranks 3
	kill -STOP "${PIDS[3]}"
	# within the timeouts (3 s, twice and a second for the agreement)
	for r in 0 1 2; do
		rc=0
		timeout 60 tail --pid="${PIDS[r]}" -f /dev/null
		wait "${PIDS[r]}" || rc=$?
		[ "$rc" -eq "$([ "$r" = 2 ] && echo 1 || echo 0)" ]
	done
	kill -CONT "${PIDS[3]}"
	rc=0
	timeout 60 tail --pid="${PIDS[3]}" -f /dev/null
	wait "${PIDS[3]}" || rc=$?
	cat err[0-3].log | grep -v ': step [0-9]* epoch '
	[ "$rc" -eq 1 ]
	grep -q "^collx-train: rank 2: --ft: rank 3 left, taking replica 1 out; this rank leaves with it (1 replica goes on)$" err2.log
	grep -q "^collx-train: step [0-9]*: rank 3 left, taking 1 replica out; 1 of 2 replicas go on ([0-9.]* s to agree and set up again)$" err0.log
	[ "$(grep -vc ': step [0-9]* epoch ' err3.log)" -eq 1 ]
	grep -q "^collx-train: rank 3: --ft: 1 of 4 ranks left (ranks 0, 1, 2 gone or cut off), not a majority, the others may go on: stopping$" err3.log
	collx-tensor diff ref.safetensors ft.safetensors --atol 1e-5 --rtol 0
	[ "$(tail -n +2 ft.csv | cut -d, -f1 | tr '\n' ' ')" = "$(seq -s ' ' 0 99) " ]
}

# under_run [N]: collx-run -n 4 [--max-restarts N] of collx-train --ft
# --dp 2 --pp 2, rank 3 killed after step 10: rank 1 leaves with it
# (exit 1); collx-run says each in a line and lets replica 0 finish, or
# with restarts starts both again (rank 1 left with its replica on
# purpose), and they rejoin: exit 0, the weights of a run without
# failures, every step once.
under_run() {
	local restarts=()
	[ -z "${1:-}" ] || restarts=(--max-restarts "$1")
	collx-run -n 4 -- collx-train "${TARGS[@]}" --dp 2 --pp 2 -q \
	    -o ref.safetensors
	COLLX_TIMEOUT=10 collx-run -n 4 "${restarts[@]}" -- collx-train \
	    "${TARGS[@]}" --dp 2 --pp 2 --ft -v -o ft.safetensors \
	    --loss-csv ft.csv 2>run.err &
	RUN=$!
	PIDS+=("$RUN")
	wait_line '^collx-train: step 10 '
	kill -KILL "$(rank_pid "$RUN" 3)"
	ft_ends 0
	grep -q '^collx-train: rank 1: --ft: rank 3 left, taking replica 1 out; this rank leaves with it (1 replica goes on)$' run.err
	collx-tensor diff ref.safetensors ft.safetensors --atol 1e-5 --rtol 0
	[ "$(tail -n +2 ft.csv | cut -d, -f1 | tr '\n' ' ')" = "$(seq -s ' ' 0 99) " ]
}

@test "collx-run with collx-train --ft: rank 3 killed, rank 1 leaves with it; collx-run lets replica 0 finish (exit 0) with the weights of a run without failures" {
	under_run
	grep -q '^collx-run: rank 3 (pid [0-9]*) was killed by signal 9 (Killed); the others go on (--ft)$' run.err
	grep -q '^collx-run: rank 1 (pid [0-9]*) exited with status 1 after a death; the others go on (--ft)$' run.err
	[ "$(tail -n +2 ft.csv | cut -d, -f8 | uniq | tr '\n' ' ')" = "2 1 " ]
}

@test "collx-run --max-restarts 3 with collx-train --ft: rank 3 killed and rank 1, its replica's peer, are started again and rejoin as replica 1; training goes on with 2 replicas to the weights of a run without failures" {
	under_run 3
	grep -q '^collx-run: restart 1 of 3: rank 3 (pid [0-9]*) was killed by signal 9 (Killed); started again alone in [0-9.]* s, to rejoin the others at their next step (--ft)$' run.err
	grep -q '^collx-run: restart 2 of 3: rank 1 (pid [0-9]*) exited with status 1 after a death; started again alone in [0-9.]* s, to rejoin the others at their next step (--ft)$' run.err
	[ "$(grep -c '^collx-run: restart ' run.err)" -eq 2 ]
	grep -q '^collx-train: step [0-9]*: ranks 1, 3 rejoined; 2 replicas go on ([0-9.]* s to admit and copy the state)$' run.err
	[ "$(tail -n +2 ft.csv | cut -d, -f8 | uniq | tr '\n' ' ')" = "2 1 2 " ]
}

@test "--ft refusals: one usage line naming the options" {
	local o
	export COLLX_WORLD_SIZE=2 COLLX_RANK=0 COLLX_MASTER=127.0.0.1:1
	for o in "--wire int8" "--sync-every 4" "--checkpoint c.safetensors" \
	    "--trace t.json"; do
		# shellcheck disable=SC2086
		usage_refused collx-train "${TARGS[@]}" --dp 2 --ft $o
		[[ "${lines[0]}" == "collx-train: --ft goes with plain allreduce on --dp, --tp and --pp, not ${o%% *}" ]]
	done
	usage_refused collx-train "${TARGS[@]}" --dp 1 --tp 2 --ft
	[ "${lines[0]}" = "collx-train: --ft needs two replicas or more (--dp 1)" ]
}
