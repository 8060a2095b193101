#!/usr/bin/env bats
# Faults injected into every program that runs as ranks, in the middle of
# its work: a rank killed (rank 0 and the last rank), a rank stopped, a
# rank that never starts, a link cut between hosts, a full disk and a
# read-only directory, strangers at the listening ports; collx-ps with
# external workers; collx-run around a killed rank. Each check is timed
# and goes into a table printed at the end of the suite (fault, programs
# tried, programs that held, worst time to exit).
load lib/common
load lib/dpps
load lib/faults
load lib/netns
bats_require_minimum_version 1.5.0

FAULT_TIMEOUT=3

setup_file() {
	export FAULT_TABLE=$BATS_FILE_TMPDIR/table FAULT_INPUTS=$BATS_FILE_TMPDIR/in
	: >"$FAULT_TABLE"
	mkdir -p "$FAULT_INPUTS"
	(cd "$FAULT_INPUTS" && faults_inputs >/dev/null)
}

setup() {
	common_setup
	unset COLLX_TOKEN COLLX_IFNAME COLLX_TIMEOUT COLLX_MASTER COLLX_RANK \
	    COLLX_WORLD_SIZE COLLX_JOB_ID
	# A rank that dies on a lost peer exits without freeing, and
	# LeakSanitizer's exit-time scan of such a rank can hang in ptrace
	# stop on this host: no leak scan for failure exits.
	export ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0
	cp "$FAULT_INPUTS"/* .
	PIDS=()
	MOUNTS=()
}

teardown() {
	local m
	job_reap
	netns_teardown
	for m in "${MOUNTS[@]}"; do umount "$m" 2>/dev/null || true; done
	common_teardown
}

teardown_file() {
	fault_table >&3
}

# fault_row FAULT PROGRAM HELD SECONDS: one checked case for the table.
fault_row() {
	echo "$1|$2|$3|$4" >>"$FAULT_TABLE"
}

# The table: per fault, programs tried, programs that held, worst time.
fault_table() {
	awk -F'|' '
	!($1 in tried) { order[n++] = $1 }
	{
		key = $1 SUBSEP $2
		if (!(key in seen)) { seen[key] = 1; tried[$1]++; held[$1]++ }
		if ($3 != "yes" && !(key in broke)) { broke[key] = 1; held[$1]-- }
		if ($4 + 0 > worst[$1] + 0) worst[$1] = $4
	}
	END {
		printf "# %-44s %5s %5s %9s\n", "fault", "tried", "held", "worst s"
		for (i = 0; i < n; i++)
			printf "# %-44s %5d %5d %9.1f\n", order[i], tried[order[i]],
			    held[order[i]], worst[order[i]]
	}' "$FAULT_TABLE"
}

now() {
	date +%s.%N
}

# Seconds since START, one decimal.
since() {
	awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'
}

# The program name PROG's ranks print their messages under.
prog_name() {
	job_argv "$1" 0
	basename "${JOB_ARGV[0]}"
}

# survivors_exit START WANT_RE VICTIM...: every started rank but the
# VICTIMs exits 1 within FAULT_TIMEOUT + 5 s with one line on stderr that
# starts with the program's name and its rank and matches WANT_RE. Sets
# ELAPSED (seconds from START until the last one had exited); prints what
# went wrong.
survivors_exit() {
	local start=$1 want=$2 r rc line name ok=0
	shift 2
	name=$(prog_name "$JOB_PROG")
	for r in "${JOB_RANKS[@]}"; do
		[[ " $* " == *" $r "* ]] && continue
		rc=0
		wait_pid "${PIDS[r]}" $((FAULT_TIMEOUT + 5)) || rc=$?
		line=$(cat "err.$r")
		if [ "$rc" != 1 ] || [ "$(wc -l <"err.$r")" != 1 ] ||
		    ! grep -Eq "^$name: rank $r: .*$want" "err.$r"; then
			echo "# $JOB_PROG rank $r: exit $rc, wanted 1 and one line /$want/: $line"
			ok=1
		fi
	done
	ELAPSED=$(since "$start")
	return $ok
}

# fault_case PROG SIGNAL VICTIM WANT LABEL [W]: VICTIM of W (default 3)
# ranks of PROG sent SIGNAL mid-operation; every other rank exits 1 in
# time with one line matching WANT. A row of the table under LABEL.
fault_case() {
	local prog=$1 sig=$2 v=$3 want=$4 label=$5 w=${6:-3} held=yes
	job_start "$prog" "$w" && job_wait_busy || return 1
	kill "-$sig" "${PIDS[v]}"
	survivors_exit "$(now)" "$want" "$v" || held=no
	fault_row "$label" "$prog" "$held" "$ELAPSED"
	job_reap
	[ "$held" = yes ]
}

# never_case PROG: ranks 0 and 1 of 3 start, rank 2 never does.
never_case() {
	local held=yes
	job_start "$1" 3 0 1
	survivors_exit "$(now)" \
	    "timed out after $FAULT_TIMEOUT s waiting for rank\(s\) 2 to join" ||
	    held=no
	fault_row "rank 2 of 3 never starts" "$1" "$held" "$ELAPSED"
	job_reap
	[ "$held" = yes ]
}

# every_prog CMD ARG...: CMD PROG ARG... for every program of FAULT_PROGS,
# FAULT_JOBS of them at a time (the cases mostly wait on timeouts), each
# in a directory of its own with its own port; fails naming the programs
# that did not hold, with what each printed.
FAULT_JOBS=3
every_prog() {
	local prog here=$PWD pids=() progs=() failed=() i
	for prog in "${FAULT_PROGS[@]}"; do
		while [ "$(jobs -pr | wc -l)" -ge "$FAULT_JOBS" ]; do
			wait -n || true
		done
		mkdir "$here/job.$prog"
		(
			cd "$here/job.$prog" && cp "$FAULT_INPUTS"/* . || exit 1
			rc=0
			"$1" "$prog" "${@:2}" || rc=$?
			job_reap
			exit $rc
		) >"$here/job.$prog/log" 2>&1 &
		pids+=($!) progs+=("$prog")
	done
	for i in "${!pids[@]}"; do
		wait "${pids[i]}" && continue
		failed+=("${progs[i]}")
		sed 's/^/#   /' "$here/job.${progs[i]}/log"
	done
	rm -rf "$here"/job.*
	echo "# failed: ${failed[*]}"
	[ ${#failed[@]} -eq 0 ]
}

@test "a rank killed mid-operation (rank 0, then rank 2 of 3; a middle stage; 1 of 2): every other rank exits 1 naming it" {
	local v
	for v in 0 2; do
		every_prog fault_case KILL "$v" \
		    "peer rank $v \(127\.0\.0\.1:[0-9]+\) closed the connection" \
		    "SIGKILL of rank $v of 3, mid-operation"
	done
	# A pipeline's middle stage, with a neighbour on each side; and a
	# world of two, where the survivor has no third rank to hear from.
	fault_case pipe KILL 1 \
	    "peer rank 1 \(127\.0\.0\.1:[0-9]+\) closed the connection" \
	    "SIGKILL of a pipeline's middle stage"
	fault_case tp KILL 1 \
	    "peer rank 1 \(127\.0\.0\.1:[0-9]+\) closed the connection" \
	    "SIGKILL of rank 1 of 2 (collx-tp)" 2
}

# Whether process PID has mapped its host's shared-memory segment.
maps_shm() {
	grep -q 'memfd:collx' "/proc/$1/maps"
}

# What /dev/shm holds, one name a line.
dev_shm() {
	ls -A /dev/shm | sort
}

@test "shared memory: a local rank killed is named as over TCP; /dev/shm is left as it was after a kill, a failed start and a normal exit" {
	local mode r before held
	before=$(dev_shm)
	for mode in shm tcp; do
		held=yes
		[ "$mode" = tcp ] && export COLLX_SHM=0 || unset COLLX_SHM
		job_start allreduce 3
		job_wait_busy
		for r in 0 1 2; do
			if [ "$mode" = shm ]; then maps_shm "${PIDS[r]}"
			elif maps_shm "${PIDS[r]}"; then false; fi
		done
		kill -KILL "${PIDS[1]}"
		survivors_exit "$(now)" \
		    "peer rank 1 \(127\.0\.0\.1:[0-9]+\) closed the connection" 1 ||
		    held=no
		fault_row "SIGKILL of a local rank ($mode)" allreduce "$held" "$ELAPSED"
		job_reap
		[ "$held" = yes ]
	done
	unset COLLX_SHM
	[ "$(dev_shm)" = "$before" ]
	# a failed start: rank 2 never comes, the others time out
	job_start allreduce 3 0 1
	survivors_exit "$(now)" "timed out" 2
	job_reap
	[ "$(dev_shm)" = "$before" ]
	run -0 collx-run -n 3 --timeout 20 -- collx-allreduce -i big.npy -o sum.npy
	[ "$(dev_shm)" = "$before" ]
}

@test "a rank stopped (SIGSTOP) mid-operation: the others time out, exit 1, say so" {
	every_prog fault_case STOP 1 "timed out .*rank [0-9]" \
	    "SIGSTOP of rank 1 of 3, mid-operation"
}

@test "a rank that never starts: the others time out at rendezvous naming it" {
	every_prog never_case
}

# External servers: 2 collx-ps servers and 2 collx-dp workers training
# through them; ROLE (server or worker) VICTIM killed once both workers
# have trained a few steps. Servers' messages in serr.r, workers' werr.r.
ps_case() {
	local role=$1 v=$2 sport wport r p rc servers held=yes start victim verr f want
	sport=$(free_port)
	for r in 0 1; do
		COLLX_RANK=$r COLLX_WORLD_SIZE=2 COLLX_MASTER=127.0.0.1:$sport \
		    COLLX_TIMEOUT=$FAULT_TIMEOUT collx-ps serve -m m.safetensors \
		    --workers 2 --lr 0.0001 >"port.$r" 2>"serr.$r" &
		SPIDS[r]=$!
	done
	for r in 0 1; do
		for _ in $(seq 100); do [ -s "port.$r" ] && break; sleep 0.1; done
	done
	servers=127.0.0.1:$(head -1 port.0),127.0.0.1:$(head -1 port.1)
	wport=$(free_port)
	for r in 0 1; do
		COLLX_RANK=$r COLLX_WORLD_SIZE=2 COLLX_MASTER=127.0.0.1:$wport \
		    COLLX_TIMEOUT=$FAULT_TIMEOUT collx-dp -m m.safetensors --data X.npy \
		    --targets Y.npy --batch 96 --steps 100000000 --lr 0.0001 \
		    --loss-csv "loss.$r" --ps "$servers" -v 2>"werr.$r" &
		WPIDS[r]=$!
	done
	PIDS=("${SPIDS[@]}" "${WPIDS[@]}")
	for _ in $(seq 300); do
		grep -q 'step 3 ' werr.0 && break
		sleep 0.1
	done
	if [ "$role" = server ]; then
		victim=${SPIDS[v]} verr=serr.$v
		# every worker and the other server name the lost server
		want="server 127\.0\.0\.1:$(head -1 "port.$v"): connection closed"
	else
		victim=${WPIDS[v]} verr=werr.$v
		want="worker $v .* lost|peer rank $v \("
	fi
	kill -KILL "$victim"
	start=$(now)
	for p in "${SPIDS[@]}" "${WPIDS[@]}"; do
		[ "$p" = "$victim" ] && continue
		rc=0
		wait_pid "$p" $((FAULT_TIMEOUT + 5)) || rc=$?
		[ "$rc" = 1 ] || { echo "# pid $p exited $rc"; held=no; }
	done
	ELAPSED=$(since "$start")
	for f in serr.0 serr.1 werr.0 werr.1; do
		[ "$f" = "$verr" ] && continue
		# the last line is the failure; a worker's -v step lines before it
		tail -n 1 "$f" | grep -Eq "^collx-(ps|dp): .*($want)" ||
		    { echo "# $f does not name the $role: $(tail -n 1 "$f")"; held=no; }
		[ "$(grep -vc '^collx-dp: step ' "$f")" = 1 ] ||
		    { echo "# $f has more than one message:"; cat "$f"; held=no; }
	done
	fault_row "collx-ps: a $role killed mid-training" collx-ps "$held" "$ELAPSED"
	job_reap
	[ "$held" = yes ]
}

@test "collx-ps with external workers: a server or a worker killed, every other process names it" {
	ps_case server 1
	ps_case worker 0
	ps_case worker 1
}

@test "collx-run: a rank killed: the rest stopped, its status returned, no process left" {
	local run start rc victim
	collx-run -n 3 --timeout "$FAULT_TIMEOUT" -- \
	    collx-allreduce --iters 1000000 -i "$T/big.npy" 2>run.err &
	run=$!
	for _ in $(seq 300); do
		[ "$(pgrep -P "$run" | wc -l)" -eq 3 ] && break
		sleep 0.1
	done
	sleep 1
	victim=$(pgrep -P "$run" | sed -n 2p)
	kill -KILL "$victim"
	start=$(now)
	rc=0
	wait_pid "$run" $((FAULT_TIMEOUT + 10)) || rc=$?
	ELAPSED=$(since "$start")
	cat run.err
	# 128 + SIGKILL, the status of the rank that failed first
	[ "$rc" -eq 137 ]
	grep -q "collx-run: rank [0-9] .*killed by signal 9" run.err
	sleep 0.5
	if pgrep -f "$T/big.npy"; then false; fi
	if ps -eo stat=,comm= | grep -q '^Z.*collx'; then false; fi
	fault_row "collx-run around a killed rank" collx-run yes "$ELAPSED"
}

# A tmpfs of 64 KiB at DIR, filled to the last byte (disk full), or
# mounted read-only (ro).
small_fs() {
	local dir=$1 how=$2
	mkdir -p "$dir"
	if [ "$how" = ro ]; then
		mount -t tmpfs -o ro,size=64k tmpfs "$dir" || return 1
	else
		mount -t tmpfs -o size=64k tmpfs "$dir" || return 1
		MOUNTS+=("$dir")
		# dd stops when the file system is full
		dd if=/dev/zero of="$dir/filler" bs=4k 2>/dev/null || true
		return 0
	fi
	MOUNTS+=("$dir")
}

# write_case HOW PROG ARG...: PROG (world 1) writing into $D, which is
# full or read-only: exit 1, one line naming the file and the cause, and
# nothing left in $D but the filler.
write_case() {
	local how=$1 name=$2 cause held=yes start
	shift 2
	[ "$how" = full ] && cause="No space left on device" || cause="Read-only file system"
	start=$(now)
	run --separate-stderr timeout 60 "$@"
	ELAPSED=$(since "$start")
	if [ "$status" != 1 ] || [ "${#stderr_lines[@]}" != 1 ] ||
	    [[ "$stderr" != *"$D/"*": $cause" ]]; then
		echo "# $name: exit $status: $stderr"
		held=no
	fi
	if [ -n "$(ls -A "$D" | grep -vx filler)" ]; then
		echo "# $name left: $(ls -A "$D")"
		held=no
	fi
	fault_row "output on a $how file system" "$name" "$held" "$ELAPSED"
	[ "$held" = yes ]
}

write_cases() {
	local how=$1 failed=() c
	D=$T/$how
	small_fs "$D" "$how"
	collx-dp --init mlp --dims 4,2048,3 --seed 1 -o wide.safetensors
	for c in allreduce broadcast allgather reduce-scatter alltoall; do
		write_case "$how" "collx-$c -o" collx-$c -i big.npy -o "$D/y.npy" ||
		    failed+=("$c")
	done
	# -q: a training run's summary line aside, the failure is one line
	write_case "$how" "collx-dp -o" collx-dp -m wide.safetensors --data X.npy \
	    --targets Y.npy --batch 8 --steps 1 -q -o "$D/t.safetensors" || failed+=(dp)
	write_case "$how" "collx-dp --checkpoint" collx-dp -m wide.safetensors \
	    --data X.npy --targets Y.npy --batch 8 --steps 1 \
	    --checkpoint "$D/c.safetensors" || failed+=(dp-ckpt)
	write_case "$how" "collx-dp --loss-csv" collx-dp -m m.safetensors \
	    --data X.npy --targets Y.npy --batch 8 --steps 1 -q \
	    --loss-csv "$D/l.csv" || failed+=(dp-loss)
	write_case "$how" "collx-tp -o" collx-tp --layer block -m b.safetensors \
	    -i bx.npy -o "$D/y.npy" || failed+=(tp)
	write_case "$how" "collx-pipe -o" collx-pipe -m wide.safetensors -i X.npy \
	    -t Y.npy --microbatches 2 -q -o "$D/t.safetensors" || failed+=(pipe)
	write_case "$how" "collx-pipe --trace" collx-pipe -m m.safetensors -i X.npy \
	    -t Y.npy --microbatches 2 -q --trace "$D/t.json" || failed+=(pipe-trace)
	write_case "$how" "collx-bench --timing" collx-bench coll -b 1M -e 1M -n 1 \
	    -w 0 --timing "$D/t.csv" || failed+=(bench)
	write_case "$how" "collx-tensor create -o" collx-tensor create \
	    --shape 100000 --fill ones -o "$D/c.npy" || failed+=(tensor)
	echo "# failed: ${failed[*]}"
	[ ${#failed[@]} -eq 0 ]
}

@test "disk full: a clear line, exit 1, no partial or temporary file" {
	need "root (mounts a small tmpfs)" test "$(id -u)" -eq 0
	write_cases full
}

@test "a read-only output directory: a clear line, exit 1, nothing written" {
	need "root (mounts a read-only tmpfs)" test "$(id -u)" -eq 0
	write_cases ro
}

# The listening sockets of process PID, as port numbers.
listen_ports() {
	ss -Hltnp | grep "pid=$1," | awk '{ sub(/.*:/, "", $4); print $4 }'
}

vmrss_kib() {
	awk '/^VmRSS:/ { print $2 }' "/proc/$1/status"
}

@test "strangers at the rendezvous and peer ports: refused and logged, the job right, no memory growth" {
	local ports r n rss0=() grow start
	head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >tok
	export COLLX_TOKEN=$(cat tok)
	# ranks 0 and 1 of 3 listen (rendezvous and peer ports) while they
	# wait for rank 2; the strangers come then
	job_argv() {
		JOB_ARGV=(collx-allreduce --iters 20 -i big.npy -o "res.$2.npy")
	}
	FAULT_TIMEOUT=60 job_start allreduce 3 0 1
	for _ in $(seq 100); do
		ports=$(for r in 0 1; do listen_ports "${PIDS[r]}"; done)
		[ "$(echo "$ports" | wc -w)" -eq 3 ] && break
		sleep 0.1
	done
	[ "$(echo "$ports" | wc -w)" -eq 3 ]
	for r in 0 1; do rss0[r]=$(vmrss_kib "${PIDS[r]}"); done
	start=$(now)
	n=$(timeout 120 "$PY" "$COLLX_ROOT/tests/lib/stranger.py" 1 $ports)
	[ "$n" -eq 15 ]
	for r in 0 1; do
		grow=$(($(vmrss_kib "${PIDS[r]}") - rss0[r]))
		echo "# rank $r: resident memory grew by $grow KiB"
		[ "$grow" -lt 4096 ]
	done
	COLLX_RANK=2 COLLX_WORLD_SIZE=3 COLLX_MASTER=127.0.0.1:$JOB_PORT \
	    timeout 60 collx-allreduce --iters 20 -i big.npy -o res.2.npy
	for r in 0 1; do wait_pid "${PIDS[r]}" 60; done
	ELAPSED=$(since "$start")
	# every stranger's connection dropped and logged, once
	cat err.0 err.1
	[ "$(cat err.0 err.1 | grep -c ': dropped connection from 127\.0\.0\.1:')" -eq 15 ]
	[ "$(cat err.0 err.1 | wc -l)" -eq 15 ]
	grep -q 'not a collx peer' err.0
	grep -q 'wrong token' err.0
	collx-tensor create --shape 786432 --fill 3 -o three.npy
	for r in 0 1 2; do collx-tensor diff --rtol 0 --atol 0 "res.$r.npy" three.npy; done
	fault_row "15 stranger connections while ranks join" allreduce yes "$ELAPSED"
}

@test "a link cut between hosts mid-operation: every rank times out cleanly" {
	need "root and ip netns" netns_available
	netns_setup 3
	local prog r rc start held failed=()
	for prog in allreduce dp tp pipe; do
		held=yes
		rm -f err.*
		job_argv "$prog" 0
		for r in 0 1 2; do
			netns_exec "$r" env COLLX_RANK=$r COLLX_WORLD_SIZE=3 \
			    COLLX_MASTER="$(netns_addr 0):29500" \
			    COLLX_TIMEOUT=$FAULT_TIMEOUT PATH="$PATH" \
			    "${JOB_ARGV[@]}" --iface eth0 -q >/dev/null 2>"err.$r" &
			PIDS[r]=$!
		done
		# mid-operation: every rank's connections up, then a second more
		for _ in $(seq 300); do
			[ "$(netns_exec 1 ss -Htn state established | wc -l)" -ge 2 ] && break
			sleep 0.1
		done
		sleep 1
		netns_exec 1 ip link set eth0 down
		start=$(now)
		for r in 0 1 2; do
			rc=0
			wait_pid "${PIDS[r]}" $((FAULT_TIMEOUT + 5)) || rc=$?
			if [ "$rc" != 1 ] || ! tail -n 1 "err.$r" | grep -q 'timed out'; then
				echo "# $prog rank $r: exit $rc: $(tail -n 1 "err.$r")"
				held=no
			fi
		done
		ELAPSED=$(since "$start")
		netns_exec 1 ip link set eth0 up
		fault_row "link of host 1 of 3 cut (ip link set down)" "$prog" "$held" "$ELAPSED"
		[ "$held" = yes ] || failed+=("$prog")
	done
	echo "# failed: ${failed[*]}"
	[ ${#failed[@]} -eq 0 ]
}
