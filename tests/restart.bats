#!/usr/bin/env bats
# collx-run --max-restarts: a rank of each training program killed with
# SIGKILL at a random step, three times in one run, the job resumed each
# time from its newest checkpoint: the trained weights are those of a run
# never interrupted, byte for byte. Failures that a restart cannot mend
# are not restarted; the exit status is the last attempt's. --min-hosts: a
# namespace host's link cut, the job goes on with the hosts left. --bind
# core: each local rank on a core of its own, read back from /proc.
load lib/common
load lib/dpps
load lib/netns
load lib/cpus
bats_require_minimum_version 1.5.0

setup_file() {
	export RESTART_INPUTS=$BATS_FILE_TMPDIR/in
	mkdir -p "$RESTART_INPUTS"
	cd "$RESTART_INPUTS" &&
	collx-dp --init mlp --dims 4,128,4,4 --seed 1 -o m.safetensors &&
	collx-dp --init mlp --dims 4,64,3 --seed 2 -o tm.safetensors &&
	collx-tensor create --shape 256,4 --fill randn --seed 3 -o X.npy &&
	collx-tensor create --shape 256,4 --fill randn --seed 4 -o Y.npy &&
	collx-tensor create --shape 256,3 --fill randn --seed 5 -o Y3.npy
}

setup() {
	common_setup
	unset COLLX_TOKEN COLLX_IFNAME COLLX_TIMEOUT COLLX_MASTER COLLX_RANK \
	    COLLX_WORLD_SIZE COLLX_JOB_ID
	export COLLX_FR_DIR=$T
	cp "$RESTART_INPUTS"/* .
	RUN=
}

teardown() {
	[ -n "$RUN" ] && reap "$RUN"
	netns_teardown
	common_teardown
}

# killed_run N PROGRAM ARG...: N ranks of PROGRAM (a training program
# with -v: rank 0 prints "PROGRAM: step K ..." after step K) under
# collx-run --max-restarts 3, a rank killed at a random step three times
# by lib/kill_steps.py, which reads its standard error; its lines in
# run.log, each kill in kills.log ("STEP RANK"), its exit status in RC.
killed_run() {
	local n=$1
	shift
	mkfifo log.fifo
	collx-run --time-limit 60 --max-restarts 3 -n "$n" -- "$@" -v \
	    2>log.fifo >/dev/null &
	RUN=$!
	"$PY" "$COLLX_ROOT/tests/lib/kill_steps.py" "$RUN" "$n" "$RANDOM" \
	    <log.fifo || return 1
	RC=0
	wait "$RUN" || RC=$?
	RUN=
}

# restarted_ok EVERY: three restarts, each naming the rank killed and its
# signal, within 2 s of the failure, and resumed from the newest
# checkpoint: with L the last step rank 0 reported before the restart, a
# multiple of EVERY from L + 1 - EVERY (a checkpoint after step L not yet
# written) to L + 2 (written after one more step, not yet reported); or
# from the start while none can have been written. The first step rank 0
# reports after the restart is the one it names (steps count from 0, a
# checkpoint holds the steps done): a restart that began again from step
# 0 would end with the same weights, deterministic as training is.
restarted_ok() {
	local every=$1 k=0 step rank line from secs last first
	grep -v ": step " run.log || true
	[ "$RC" -eq 0 ]
	[ "$(wc -l <kills.log)" -eq 3 ]
	[ "$(grep -c '^collx-run: restart ' run.log)" -eq 3 ]
	while read -r step rank; do
		k=$((k + 1))
		line=$(grep "^collx-run: restart $k of 3: " run.log)
		last=$(awk -v k="$k" '
		    /^collx-[a-z]+: step [0-9]+ / { s = $3 }
		    /^collx-run: restart / && ++seen == k { print s; exit }' \
		    run.log)
		first=$(awk -v k="$k" '
		    /^collx-run: restart / && ++seen == k { on = 1; next }
		    on && /^collx-[a-z]+: step [0-9]+ / { print $3; exit }' \
		    run.log)
		from=$(sed -n 's/.* from step \([0-9]*\) of .*/\1/p' <<<"$line")
		echo "restart $k: kill sent at step $step, last reported $last, from ${from:-the start}, first reported $first"
		[[ $line == *"rank $rank (pid "*") was killed by signal 9 (Killed)"* ]]
		[ "$first" = "${from:-0}" ]
		if [ -n "$from" ]; then
			[ $((from % every)) -eq 0 ]
			[ "$from" -ge $((last + 1 - every)) ]
			[ "$from" -le $((last + 2)) ]
		else
			[[ $line == *"as first started (ck.safetensors not written yet)"* ]]
			[ "$last" -lt $((every + 1)) ]
		fi
		secs=$(sed -n 's/.* in \([0-9.]*\) s (.*/\1/p' <<<"$line")
		awk -v s="$secs" 'BEGIN { exit !(s >= 0 && s < 2) }'
	done <kills.log
}

# every_step_once CSV STEPS: the loss CSV's steps are 0 .. STEPS-1, each
# once, in order.
every_step_once() {
	tail -n +2 "$1" | cut -d, -f1 >steps.got
	seq 0 $(($2 - 1)) >steps.want
	cmp steps.got steps.want
}

# killed_same EVERY STEPS PROGRAM ARG...: two ranks of the training
# program, uninterrupted, and killed_run with --checkpoint-every EVERY:
# restarted as restarted_ok says, with the same trained weights, byte for
# byte, and a loss CSV holding each of the STEPS steps once (not only
# those since the last restart's checkpoint), with the losses of the
# uninterrupted run.
killed_same() {
	local every=$1 steps=$2
	shift 2
	collx-run -n 2 -- "$@" -q -o straight.safetensors \
	    --loss-csv straight.csv
	killed_run 2 "$@" -o out.safetensors --checkpoint ck.safetensors \
	    --checkpoint-every "$every" --loss-csv loss.csv
	restarted_ok "$every"
	cmp out.safetensors straight.safetensors
	every_step_once loss.csv "$steps"
	cmp <(cut -d, -f1-4 loss.csv) <(cut -d, -f1-4 straight.csv)
}

@test "collx-dp (adamw): a rank killed at a random step three times; the resumed weights equal an uninterrupted run's" {
	killed_same 7 600 collx-dp -m m.safetensors --data X.npy --targets Y.npy \
	    --batch 32 --steps 600 --lr 0.001 --optimizer adamw --seed 7
}

@test "collx-pipe: a stage killed at a random step three times; the resumed weights equal an uninterrupted run's" {
	killed_same 5 500 collx-pipe -m m.safetensors -i X.npy -t Y.npy \
	    --microbatches 4 --batch 32 --steps 500 --lr 0.001 \
	    --optimizer adamw
}

@test "collx-tp --train: a rank killed at a random step three times; the resumed weights equal an uninterrupted run's" {
	killed_same 6 600 collx-tp --layer mlp --train -m tm.safetensors -i X.npy \
	    --targets Y3.npy --steps 600 --lr 0.05
	# and the weights moved: the run trained
	if cmp -s out.safetensors tm.safetensors; then false; fi
}

@test "collx-run --max-restarts: a rank stopped (SIGSTOP): the restart names it, not the peer that timed out on it, and costs no grace period; the loss CSV holds every step once" {
	collx-run --timeout 2 --max-restarts 1 -n 2 -- collx-dp \
	    -m m.safetensors --data X.npy --targets Y.npy --batch 32 \
	    --steps 4000 --checkpoint ck.safetensors --checkpoint-every 50 \
	    --loss-csv loss.csv -v 2>run.log >/dev/null &
	RUN=$!
	for _ in $(seq 200); do
		grep -q '^collx-dp: step 200 ' run.log && break
		sleep 0.05
	done
	pid=$(rank_pid "$RUN" 1)
	kill -STOP "$pid"
	rc=0
	wait_pid "$RUN" 60 || rc=$?
	RUN=
	grep -v ': step ' run.log
	[ "$rc" -eq 0 ]
	line=$(grep '^collx-run: restart 1 of 1: ' run.log)
	[[ $line == "collx-run: restart 1 of 1: rank 1 (pid $pid) was stopped (SIGSTOP, SIGTSTP or a debugger) and did not answer; rank 0 (pid "*"), waiting on it, exited with status 1; started again from step "* ]]
	# the stopped rank, continued, took SIGTERM at once
	secs=$(sed -n 's/.* (\([0-9.]*\) s of it stopping the ranks, .*/\1/p' <<<"$line")
	awk -v s="$secs" 'BEGIN { exit !(s >= 0 && s < 1) }'
	every_step_once loss.csv 4000
}

@test "collx-run --max-restarts: ranks that ignore SIGTERM: the restart line says they held it for the 3 s grace period" {
	cat >deaf.sh <<'SH'
n=$(cat "count.$COLLX_RANK" 2>/dev/null || echo 0)
echo $((n + 1)) >"count.$COLLX_RANK"
[ "$n" -ge 1 ] && exit 0
[ "$COLLX_RANK" = 1 ] && exit 5
trap '' TERM
while :; do sleep 0.1; done
SH
	run -0 --separate-stderr collx-run -n 2 --max-restarts 1 -- sh deaf.sh
	echo "$stderr"
	line=$(grep '^collx-run: restart 1 of 1: ' <<<"$stderr")
	[[ $line == *"rank 1 (pid "*") exited with status 5; started again as first started (no --checkpoint) in "*" s of it stopping the ranks, some of which ignored SIGTERM for the 3 s grace period and were killed, "* ]]
	secs=$(sed -n 's/.* (\([0-9.]*\) s of it stopping the ranks, .*/\1/p' <<<"$line")
	awk -v s="$secs" 'BEGIN { exit !(s >= 3 && s < 4) }'
}

@test "collx-run --max-restarts of a program with --ft: a rank started again alone (COLLX_REJOIN=1), then the whole job started again: every rank of the fresh job starts without COLLX_REJOIN" {
	# rank 1 killed is started again alone to rejoin; rank 0 then fails
	# (status 5), which no rejoin mends: the job starts again as a whole
	cat >marks.sh <<'SH'
echo "$COLLX_RANK ${COLLX_REJOIN:-0}" >>starts
n=$(grep -c "^$COLLX_RANK " starts)
case $COLLX_RANK:$n in
1:1)	kill -9 $$ ;;
1:2)	exec sleep 30 ;;
0:1)	until [ "$(grep -c '^1 ' starts)" -ge 2 ]; do sleep 0.1; done
	exit 5 ;;
esac
SH
	run -0 --separate-stderr collx-run -n 2 --max-restarts 3 \
	    -- sh marks.sh --ft
	echo "$stderr"
	cat starts
	grep -q '^collx-run: restart 1 of 3: rank 1 (pid [0-9]*) was killed by signal 9 (Killed); started again alone in [0-9.]* s, to rejoin the others at their next step (--ft)$' <<<"$stderr"
	grep -q '^collx-run: restart 2 of 3: rank 0 (pid [0-9]*) exited with status 5; started again as first started (no --checkpoint) in ' <<<"$stderr"
	[ "$(sed -n 1,3p starts | sort | tr '\n' ' ')" = "0 0 1 0 1 1 " ]
	[ "$(sed -n '4,$p' starts | sort | tr '\n' ' ')" = "0 0 1 0 " ]
}

# A program that fails with status 5 on its first FAILS runs in this
# directory, then succeeds; each run says which it is on standard output.
flaky() {
	cat >flaky.sh <<SH
n=\$(cat count 2>/dev/null || echo 0)
echo \$((n + 1)) >count
echo "run \$n"
[ "\$n" -ge $1 ] || exit 5
SH
}

@test "collx-run --max-restarts without a checkpoint: started again as first started; the status is the last attempt's" {
	flaky 2
	run -0 --separate-stderr collx-run --tag-output -n 1 --max-restarts 3 \
	    -- sh flaky.sh
	echo "$output"
	echo "$stderr"
	[ "$(cat count)" -eq 3 ]
	[ "$output" = "$(printf '[0] run 0\n[0] run 1\n[0] run 2')" ]
	[ "$(grep -c '^collx-run: restart [12] of 3: rank 0 (pid [0-9]*) exited with status 5; started again as first started (no --checkpoint) in [0-9.]* s' <<<"$stderr")" -eq 2 ]
	# restarts used up: the last attempt's failure, and its status
	rm count
	run -5 --separate-stderr collx-run -n 1 --max-restarts 1 -- sh flaky.sh
	echo "$stderr"
	[ "$(cat count)" -eq 2 ]
	[ "${#stderr_lines[@]}" -eq 2 ]
	[[ ${stderr_lines[0]} == "collx-run: restart 1 of 1: rank 0 "*"exited with status 5; started again"* ]]
	[[ ${stderr_lines[1]} == "collx-run: rank 0 (pid "*") exited with status 5" ]]
}

@test "collx-run --max-restarts: bad input, a usage error or an interrupt is not restarted" {
	run -3 --separate-stderr collx-run -n 2 --max-restarts 3 -- \
	    collx-dp -m missing.safetensors --data X.npy --targets Y.npy \
	    --batch 32 --steps 3
	echo "$stderr"
	if grep -q restart <<<"$stderr"; then false; fi
	grep -q '^collx-run: rank [01] .*exited with status 3$' <<<"$stderr"
	run -2 --separate-stderr collx-run -n 2 --max-restarts 3 -- \
	    collx-dp --no-such-option
	if grep -q restart <<<"$stderr"; then false; fi
	# SIGTERM to collx-run while a rank's failure awaits its restart:
	# the job ends, naming the failure, with the signal's status
	cat >slow.sh <<'SH'
[ "$COLLX_RANK" = 1 ] && exit 1
trap 'sleep 1; exit 0' TERM
sleep 10 & wait
SH
	collx-run -n 2 --max-restarts 3 -- sh slow.sh 2>run.err &
	RUN=$!
	sleep 0.5
	kill -TERM "$RUN"
	rc=0
	wait_pid "$RUN" 10 || rc=$?
	RUN=
	cat run.err
	[ "$rc" -eq 143 ]
	if grep -q 'restart' run.err; then false; fi
	grep -q '^collx-run: rank 1 (pid [0-9]*) exited with status 1$' run.err
}

@test "collx-run usage errors: --max-restarts, --min-hosts and --bind" {
	for bad in "--max-restarts -1" "--max-restarts x" "--max-restarts" \
	    "--bind socket" "--bind" "--min-hosts 0"; do
		run -2 --separate-stderr collx-run -n 1 $bad -- true
		[[ ${stderr_lines[0]} == "collx-run: "*"-"* ]]
	done
	run -2 --separate-stderr collx-run -n 1 --max-restarts 1 \
	    --min-hosts 1 -- true
	[ "${stderr_lines[0]}" = "collx-run: --min-hosts needs hosts (-H or --hostfile)" ]
	run -2 --separate-stderr collx-run -H localhost,localhost \
	    --max-restarts 1 --min-hosts 3 -- true
	[ "${stderr_lines[0]}" = "collx-run: --min-hosts 3: only 2 hosts" ]
	run -2 --separate-stderr collx-run -H localhost --min-hosts 1 -- true
	[ "${stderr_lines[0]}" = "collx-run: --min-hosts goes with --max-restarts" ]
}

# The CPUs rank R of collx-run's --tag-output lines may run on, expanded.
cpus_of() {
	grep "^\[$1\] Cpus_allowed_list:" | awk '{ print $3 }' | cpu_list
}

@test "collx-run --bind core: each local rank on a core of its own; none: as collx-run; too few cores: a warning, none bound" {
	local mine cores n r
	mine=$(grep Cpus_allowed_list /proc/self/status | awk '{ print $2 }')
	cores=$(cpu_list <<<"$mine" | cores_of)
	n=$(wc -l <<<"$cores")
	[ "$n" -ge 2 ] || skip "one core"
	[ "$n" -le 4 ] || n=4
	run -0 --separate-stderr collx-run --bind core --tag-output -n "$n" -- \
	    grep Cpus_allowed_list /proc/self/status
	echo "$output"
	[ -z "$stderr" ]
	for ((r = 0; r < n; r++)); do
		[ "$(cpus_of "$r" <<<"$output" | paste -sd,)" = \
		    "$(sed -n "$((r + 1))p" <<<"$cores")" ]
	done
	# none: every rank may run where collx-run may
	run -0 --separate-stderr collx-run --bind none --tag-output -n "$n" -- \
	    grep Cpus_allowed_list /proc/self/status
	for ((r = 0; r < n; r++)); do
		[ "$(cpus_of "$r" <<<"$output" | paste -sd,)" = \
		    "$(cpu_list <<<"$mine" | paste -sd,)" ]
	done
	# one CPU for two ranks: a warning, and no rank bound
	run -0 --separate-stderr taskset -c "$(cpu_list <<<"$mine" | head -1)" \
	    collx-run --bind core --tag-output -n 2 -- \
	    grep Cpus_allowed_list /proc/self/status
	echo "$stderr"
	[ "$stderr" = "collx-run: --bind core: 2 ranks on this machine need 2 cores, it has 1: no rank bound" ]
	[ "$(grep -c "Cpus_allowed_list:.$(cpu_list <<<"$mine" | head -1)\$" <<<"$output")" -eq 2 ]
}

# ssh's stand-in for the namespace hosts, as lib/netns's, but like ssh it
# gets no answer (status 255) from a host whose link is down.
cut_aware_ssh() {
	cat >"$1" <<EOF
#!/bin/sh
host=\$1
shift
ns=cxt$NETNS_TAG-\$((\${host##*.} - 1))
if ! ip netns exec "\$ns" ip -o link show eth0 | grep -q '[<,]UP[,>]'; then
	echo "ssh: connect to host \$host port 22: No route to host" >&2
	exit 255
fi
exec ip netns exec "\$ns" env -i PATH="\$PATH" HOME="\${HOME:-/}" sh -c "\$*"
EOF
	chmod +x "$1"
}

@test "collx-run --min-hosts: a namespace host's link cut mid-training: the job goes on with the hosts left, from the newest checkpoint, its loss curve continuing" {
	local hosts args from rc i
	need "root and ip netns" netns_available
	netns_setup 3
	cut_aware_ssh "$T/ssh"
	hosts=$(netns_hosts)
	args=(collx-dp -m m.safetensors --data X.npy --targets Y.npy --batch 48
	    --steps 300 --lr 0.001 --optimizer adamw --seed 7 -q)
	# the curve uninterrupted, on the three hosts
	collx-run --ssh "$T/ssh" -H "$hosts" -- "${args[@]}" \
	    --loss-csv straight.csv
	collx-run --ssh "$T/ssh" -H "$hosts" --timeout 2 --max-restarts 1 \
	    --min-hosts 2 -- "${args[@]}" --loss-csv cut.csv \
	    --checkpoint ck.safetensors --checkpoint-every 10 2>run.err &
	RUN=$!
	for ((i = 0; i < 300; i++)); do
		[ -e ck.safetensors ] && break
		sleep 0.02
	done
	netns_exec 2 ip link set eth0 down
	rc=0
	wait_pid "$RUN" 60 || rc=$?
	RUN=
	cat run.err
	[ "$rc" -eq 0 ]
	grep -q "^collx-run: restart 1 of 1: rank [0-2] .*; started again from step [0-9]* of ck.safetensors on 2 hosts, 2 ranks ($(netns_addr 2) lost) in [0-9.]* s" run.err
	from=$(sed -n 's/.* from step \([0-9]*\) of .*/\1/p' run.err)
	# the curve: every step once, those before the checkpoint's from
	# the attempt cut, the rest from the resumed run; each loss that of
	# the run never cut (two ranks sum the batch in another order than
	# three)
	"$PY" - "$from" <<'PYEOF'
import sys
import numpy as np
start = int(sys.argv[1])
cut = np.genfromtxt("cut.csv", delimiter=",", names=True)
ref = np.genfromtxt("straight.csv", delimiter=",", names=True)
assert start > 0 and start % 10 == 0, start
assert list(cut["step"]) == list(range(300)), cut["step"][:3]
assert np.array_equal(cut["loss"][:start], ref["loss"][:start])
assert np.allclose(cut["loss"], ref["loss"], rtol=1e-3, atol=0), \
    np.max(np.abs(cut["loss"] / ref["loss"] - 1))
PYEOF
}
