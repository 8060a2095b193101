#!/usr/bin/env bats
# The flight recorder (collx(7), FLIGHT RECORDER) and collx-run --diagnose:
# a rank stopped inside a collective of every collective program, whose
# peers time out and leave their dumps, is named by the diagnosis with the
# operation it was in (its own dump, written once it is let go on, says
# which); SIGUSR1 dumps a running rank without stopping it; --diagnose's
# exit statuses. The jobs are tests/lib/faults.bash's.
load lib/common
load lib/dpps
load lib/faults
bats_require_minimum_version 1.5.0

FAULT_TIMEOUT=3
COLL_PROGS=(allreduce broadcast allgather reduce-scatter alltoall)

setup_file() {
	export FR_INPUTS=$BATS_FILE_TMPDIR/in
	mkdir -p "$FR_INPUTS"
	(cd "$FR_INPUTS" && collx-tensor create --shape 786432 --fill ones \
	    -o big.npy >/dev/null)
}

setup() {
	common_setup
	unset COLLX_TOKEN COLLX_IFNAME COLLX_TIMEOUT COLLX_MASTER COLLX_RANK \
	    COLLX_WORLD_SIZE COLLX_FR_SIZE
	export ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0
	export COLLX_JOB_ID=frjob COLLX_FR_DIR=$T/fr
	cp "$FR_INPUTS"/* .
	PIDS=()
}

teardown() {
	job_reap
	common_teardown
}

# The newest operation of group 0 in dump $1: "SEQ STATE".
newest() {
	"$PY" - "$1" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
ops = [o for o in d["ops"] if o["group"] == 0]
o = max(ops, key=lambda o: o["seq"])
print(o["seq"], o["state"])
EOF
}

# stop_case PROG: rank 1 of 3 stopped mid-operation; ranks 0 and 2 time
# out and leave dumps, rank 1 none; --diagnose names rank 1 and operation
# S. Rank 1, continued, finds its peers gone and writes its own dump: its
# newest operation is S, unfinished; or S + 1 when it was stopped in the
# last step of S (a message of S written, not yet published to the peer
# that still waits in S), finished S once continued, and failed in the
# next; or S - 1 when its peers had every byte of S - 1 from it (in
# shared memory, or a socket's buffer) and their own sends to it were
# buffered, so they finished S - 1 and entered S while rank 1, stopped
# before it had read its last bytes, had not. Prints what went wrong.
stop_case() {
	local prog=$1 r rc seq mine
	rm -rf fr && mkdir fr
	job_start "$prog" 3 && job_wait_busy || return 1
	kill -STOP "${PIDS[1]}"
	for r in 0 2; do
		rc=0
		wait_pid "${PIDS[r]}" $((FAULT_TIMEOUT + 10)) || rc=$?
		[ "$rc" = 1 ] || { echo "# $prog rank $r: exit $rc"; return 1; }
		[ -f "fr/collx-fr.frjob.$r.json" ] ||
		    { echo "# $prog rank $r: no dump"; return 1; }
	done
	[ ! -e fr/collx-fr.frjob.1.json ] || { echo "# $prog: rank 1 dumped"; return 1; }
	collx-run --diagnose fr >diag || { echo "# $prog: --diagnose failed"; return 1; }
	sed "s/^/# $prog: /" diag
	seq=$(sed -nE '1s/^job frjob group 0: first unfinished operation #([0-9]+) .*/\1/p' diag)
	grep -qx 'no dump: 1' diag &&
	    grep -qx 'culprit: rank 1 (left no dump: stopped, killed or hung)' diag &&
	    [ -n "$seq" ] || { echo "# $prog: not the diagnosis wanted"; return 1; }
	# rank 1 goes on, fails on its peers' closed connections, and dumps
	kill -CONT "${PIDS[1]}"
	wait_pid "${PIDS[1]}" 20 || true
	mine=$(newest fr/collx-fr.frjob.1.json) ||
	    { echo "# $prog: rank 1 left no dump once continued"; return 1; }
	echo "# $prog: diagnosed #$seq; rank 1's own newest: $mine"
	[ "${mine%% *}" -ge $((seq - 1)) ] && [ "${mine%% *}" -le $((seq + 1)) ] &&
	    [ "${mine#* }" != done ]
}

@test "a rank stopped inside a collective (every collective program): the others' dumps, and --diagnose names it and the operation" {
	local prog failed=()
	for prog in "${COLL_PROGS[@]}"; do
		stop_case "$prog" || failed+=("$prog")
		job_reap
	done
	echo "# failed: ${failed[*]}"
	[ ${#failed[@]} -eq 0 ]
}

@test "SIGUSR1: a running rank writes its dump and goes on" {
	local i first second
	mkdir fr
	job_start allreduce 2
	job_wait_busy
	kill -USR1 "${PIDS[0]}"
	for ((i = 0; i < 100; i++)); do
		[ -f fr/collx-fr.frjob.0.json ] && break
		sleep 0.1
	done
	[ -f fr/collx-fr.frjob.0.json ]
	[ ! -e fr/collx-fr.frjob.1.json ]
	"$PY" - fr/collx-fr.frjob.0.json <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
assert d["reason"] == "signal" and d["error"] is None, d
assert d["rank"] == 0 and d["world"] == 2 and d["job"] == "frjob", d
ops = d["ops"]
assert len(ops) == min(d["recorded"], 256) and len(ops) > 1, len(ops)
assert [o["seq"] for o in ops] == list(range(ops[0]["seq"], ops[-1]["seq"] + 1))
assert all(o["state"] == "done" for o in ops[:-1]), ops
assert all(o["peers"] == [0, 1] for o in ops), ops
EOF
	first=$(newest fr/collx-fr.frjob.0.json)
	sleep 1
	kill -0 "${PIDS[0]}"
	kill -USR1 "${PIDS[0]}"
	for ((i = 0; i < 100; i++)); do
		second=$(newest fr/collx-fr.frjob.0.json)
		[ "${second%% *}" -gt "${first%% *}" ] && break
		sleep 0.1
	done
	echo "# newest operation: $first, then $second"
	[ "${second%% *}" -gt "${first%% *}" ]
	kill -0 "${PIDS[0]}"
	kill -0 "${PIDS[1]}"
	[ "$(cat err.0 err.1)" = "" ]
}

@test "--diagnose: no dump is exit 1, a file that is not a dump exit 3 (a world above 2^20 too), each with one line" {
	mkdir fr
	run -1 collx-run --diagnose fr
	[ "${#lines[@]}" -eq 1 ]
	[[ "${lines[0]}" == "collx-run: --diagnose: fr: no flight recorder dump"* ]]
	run -1 collx-run --diagnose nowhere
	[[ "$output" == "collx-run: --diagnose: nowhere: No such file or directory" ]]
	echo '{"ops": []}' >fr/collx-fr.x.0.json
	run -3 collx-run --diagnose fr
	[ "${#lines[@]}" -eq 1 ]
	[[ "${lines[0]}" == *"not a collx flight recorder dump"* ]]
	echo '{"collx_flight_recorder":1,"job":"x","rank":0,"world":1,"ops":[{"seq":1,' >fr/collx-fr.x.0.json
	run -3 collx-run --diagnose fr
	[ "${#lines[@]}" -eq 1 ]
	[[ "${lines[0]}" == "collx-run: --diagnose: fr/collx-fr.x.0.json:"* ]]
	# found by fuzz_diagnose: a dump claiming a world of 2^31 - 1 ranks
	# made --diagnose allocate its table of ranks (16 GiB) before
	# anything else was checked; no collx job is above 2^20 ranks
	echo '{"collx_flight_recorder":1,"job":"x","rank":0,"world":2147483647,"ops":[]}' >fr/collx-fr.x.0.json
	run -3 timeout 10 collx-run --diagnose fr
	[ "${#lines[@]}" -eq 1 ]
	[[ "${lines[0]}" == "collx-run: --diagnose: fr/collx-fr.x.0.json:"*"2147483647 is out of range"* ]]
	echo '{"collx_flight_recorder":1,"job":"x","rank":1048576,"world":1048577,"ops":[]}' >fr/collx-fr.x.0.json
	run -3 timeout 10 collx-run --diagnose fr
	[[ "${lines[0]}" == *"out of range"* ]]
	run -2 collx-run --diagnose fr -- true
}

# timeout_line: rank 1 of 2 stopped inside an allreduce; rank 0 times out
# and exits 1; LINE is its one line of standard error.
timeout_line() {
	local rc
	job_start allreduce 2 && job_wait_busy || return 1
	kill -STOP "${PIDS[1]}"
	rc=0
	wait_pid "${PIDS[0]}" $((FAULT_TIMEOUT + 10)) || rc=$?
	[ "$rc" = 1 ] || { echo "# rank 0: exit $rc"; return 1; }
	job_reap
	[ "$(wc -l <err.0)" = 1 ] || { cat err.0; return 1; }
	LINE=$(cat err.0)
	echo "# $LINE"
}

@test "without COLLX_FR_DIR the dump goes to TMPDIR/collx-fr-UID, not the working directory; the timeout's line names it and --diagnose" {
	local dir=$T/tmpdir/collx-fr-$(id -u) diag
	unset COLLX_FR_DIR
	export TMPDIR=$T/tmpdir
	timeout_line
	[[ "$LINE" == "collx-allreduce: rank 0: timed out after $FAULT_TIMEOUT s waiting for peer rank 1 "*"; flight recorder dump $dir/collx-fr.frjob.0.json, read by collx-run --diagnose $dir" ]]
	[ -f "$dir/collx-fr.frjob.0.json" ]
	[ "$(stat -c %a "$dir")" = 700 ]
	[ "$(find . -path ./tmpdir -prune -o -name 'collx-fr.*' -print)" = "" ]
	# the command the line names diagnoses the job
	diag=$(eval "${LINE##*read by }")
	echo "$diag"
	grep -qx 'culprit: rank 1 (left no dump: stopped, killed or hung)' <<<"$diag"
}

@test "a COLLX_FR_DIR that does not exist is made with its parents; one that cannot be made: the failure's line says why there is no dump" {
	export COLLX_FR_DIR=$T/new/fr
	timeout_line
	[[ "$LINE" == *"; flight recorder dump $COLLX_FR_DIR/collx-fr.frjob.0.json, read by collx-run --diagnose $COLLX_FR_DIR" ]]
	"$PY" -c 'import json, sys; d = json.load(open(sys.argv[1])); assert d["reason"] == "timeout", d' \
	    "$COLLX_FR_DIR/collx-fr.frjob.0.json"
	: >file
	export COLLX_FR_DIR=$T/file/fr
	timeout_line
	[[ "$LINE" == "collx-allreduce: rank 0: timed out after $FAULT_TIMEOUT s waiting for peer rank 1 "*"; no flight recorder dump: $COLLX_FR_DIR: Not a directory" ]]
}

@test "the default dump directory must be the user's own: a link or an open directory planted under its name in TMPDIR gets no dump, and the line says why" {
	local dir=$T/tmpdir/collx-fr-$(id -u)
	unset COLLX_FR_DIR
	export TMPDIR=$T/tmpdir
	mkdir -p "$T/tmpdir" "$T/elsewhere"
	ln -s "$T/elsewhere" "$dir"
	timeout_line
	[[ "$LINE" == *"; no flight recorder dump: $dir: not a directory of this user's alone (set COLLX_FR_DIR)" ]]
	[ -z "$(ls "$T/elsewhere")" ]
	rm "$dir"
	mkdir -m 777 "$dir"
	chmod 777 "$dir"
	timeout_line
	[[ "$LINE" == *"; no flight recorder dump: $dir: not a directory of this user's alone (set COLLX_FR_DIR)" ]]
}
