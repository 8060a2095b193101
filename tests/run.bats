#!/usr/bin/env bats
# collx-run: local ranks, failure handling, signals, tagging, the per-host
# path through stand-ins for ssh (plain, and into network namespaces).
load lib/common
load lib/netns
bats_require_minimum_version 1.5.0

setup() {
	common_setup
	# A marker no other process has: "sleep 100.<unique>" is a valid sleep.
	M="100.$$$RANDOM"
	unset COLLX_TOKEN COLLX_IFNAME COLLX_TIMEOUT COLLX_MASTER COLLX_SHM
	# stand-in for ssh: records "HOST" and runs the command line as sshd
	# would (joined, read by sh) in a bare environment.
	cat >"$T/fake-ssh" <<EOF
#!/bin/sh
host=\$1
shift
echo "\${FAKE_TAG:-}\$host" >>"$T/ssh.log"
exec env -i PATH="\$PATH" sh -c "\$*"
EOF
	chmod +x "$T/fake-ssh"
}

teardown() {
	local pid
	for pid in $(pgrep -f "sleep $M"); do kill -KILL "$pid" 2>/dev/null; done
	netns_teardown
	common_teardown
}

# How many processes still carry this test's marker.
leftovers() {
	pgrep -f "sleep $M" | wc -l
}

@test "4 local ranks get rank, world, local rank and one master" {
	run timeout 30 collx-run -n 4 -- sh -c 'echo $COLLX_RANK $COLLX_WORLD_SIZE $COLLX_LOCAL_RANK $COLLX_MASTER'
	[ "$status" -eq 0 ]
	[ "${#lines[@]}" -eq 4 ]
	master=$(echo "$output" | awk '{print $4}' | sort -u)
	[ "$(echo "$master" | wc -l)" -eq 1 ]
	[[ $master =~ ^127\.0\.0\.1:[0-9]+$ ]]
	[ "$(echo "$output" | awk '{print $1, $2, $3}' | sort)" = "$(printf '0 4 0\n1 4 1\n2 4 2\n3 4 3')" ]
}

@test "token, interface and --timeout reach the ranks; --master and -x are honoured" {
	COLLX_TOKEN=s3cret COLLX_IFNAME=lo run timeout 30 collx-run -n 2 --timeout 7.5 \
	    --master 127.0.0.1:4321 -x FOO=bar -- sh -c 'echo $COLLX_TOKEN $COLLX_IFNAME $COLLX_TIMEOUT $COLLX_MASTER $FOO'
	[ "$status" -eq 0 ]
	[ "${lines[0]}" = "s3cret lo 7.5 127.0.0.1:4321 bar" ]
	[ "${lines[1]}" = "s3cret lo 7.5 127.0.0.1:4321 bar" ]
}

@test "OPENBLAS_NUM_THREADS: 1 for every rank unless set or given with -x" {
	run env -u OPENBLAS_NUM_THREADS timeout 30 collx-run -n 2 -- \
	    sh -c 'echo "[$OPENBLAS_NUM_THREADS]"'
	[ "$status" -eq 0 ]
	[ "${lines[0]}" = "[1]" ]
	[ "${lines[1]}" = "[1]" ]
	run env OPENBLAS_NUM_THREADS=3 timeout 30 collx-run -n 1 -- \
	    sh -c 'echo "[$OPENBLAS_NUM_THREADS]"'
	[ "$output" = "[3]" ]
	run env -u OPENBLAS_NUM_THREADS timeout 30 collx-run -n 1 \
	    -x OPENBLAS_NUM_THREADS=2 -- sh -c 'echo "[$OPENBLAS_NUM_THREADS]"'
	[ "$output" = "[2]" ]
}

@test "without -n one rank runs" {
	run timeout 30 collx-run -- sh -c 'echo $COLLX_RANK/$COLLX_WORLD_SIZE'
	[ "$status" -eq 0 ]
	[ "$output" = "0/1" ]
}

@test "a failing rank stops the others, is named, and its status returned" {
	start=$(date +%s)
	run --separate-stderr timeout 30 collx-run -n 4 -- sh -c \
	    'if [ $COLLX_RANK = 2 ]; then sleep 0.3; exit 5; fi; sleep '"$M"
	end=$(date +%s)
	[ "$status" -eq 5 ]
	[ $((end - start)) -lt 10 ]
	[[ $stderr == *"collx-run: rank 2 "*"exited with status 5"* ]]
	[ "$(echo "$stderr" | grep -c 'exited with status')" -eq 1 ]
	[ "$(leftovers)" -eq 0 ]
}

@test "the rank that failed first is named, not a peer that failed because of it" {
	# Rank 1 holds a pipe open and fails; rank 0 reads the pipe, finds its
	# peer gone (as a PyTorch rank finds a closed socket) and fails too,
	# 50 ms later, before collx-run has stopped anyone. Rank 2 is stopped.
	mkfifo "$T/peer"
	for try in 1 2 3 4 5; do
		run --separate-stderr timeout 30 collx-run -n 3 -- sh -c '
		    case $COLLX_RANK in
		    0) read -r x <"$1"; sleep 0.05; exit 1 ;;
		    1) exec 3>"$1"; sleep 0.2; exit 3 ;;
		    *) exec sleep '"$M"' ;;
		    esac' sh "$T/peer"
		echo "try $try: $status: $stderr"
		[ "$status" -eq 3 ]
		[[ $stderr == "collx-run: rank 1 "*"exited with status 3" ]]
	done
	# Killed from outside, rank 1 failed when the signal came; rank 0,
	# woken by its closed pipe, may well end before rank 1 is done dying.
	for try in 1 2 3 4 5; do
		run --separate-stderr timeout 30 collx-run -n 3 -- sh -c '
		    case $COLLX_RANK in
		    0) read -r x <"$1"; exit 1 ;;
		    1) exec 3>"$1"; sleep 0.2; kill -KILL $$ ;;
		    *) exec sleep '"$M"' ;;
		    esac' sh "$T/peer"
		echo "try $try: $status: $stderr"
		[ "$status" -eq 137 ]
		[[ $stderr == "collx-run: rank 1 "*"killed by signal 9 (Killed)" ]]
	done
	[ "$(leftovers)" -eq 0 ]
}

@test "a rank ignoring TERM is killed after the grace period" {
	start=$(date +%s)
	run timeout 30 collx-run -n 2 -- sh -c \
	    'trap "" TERM; if [ $COLLX_RANK = 0 ]; then exit 9; fi; sleep '"$M"
	end=$(date +%s)
	[ "$status" -eq 9 ]
	[ $((end - start)) -lt 15 ]
	[ "$(leftovers)" -eq 0 ]
}

@test "a rank killed by a signal gives 128+N" {
	run timeout 30 collx-run -n 2 -- sh -c 'if [ $COLLX_RANK = 1 ]; then kill -KILL $$; fi; sleep '"$M"
	[ "$status" -eq 137 ]
	[[ $output == *"rank 1 "*"killed by signal 9"* ]]
	[ "$(leftovers)" -eq 0 ]
}

@test "{rank} and {world} are replaced in the arguments" {
	run timeout 30 collx-run -n 3 -- sh -c 'echo "$1 $2"' sh 'in.{rank}.npy' '{world}-{rank}{rank}'
	[ "$status" -eq 0 ]
	[ "$(echo "$output" | sort)" = "$(printf 'in.0.npy 3-00\nin.1.npy 3-11\nin.2.npy 3-22')" ]
}

@test "--tag-output prefixes whole lines, stdout and stderr apart" {
	run --separate-stderr timeout 30 collx-run -n 3 --tag-output -- sh -c \
	    'echo "a $COLLX_RANK"; echo "e $COLLX_RANK" >&2; printf "b"; sleep 0.1; echo " c"; printf tail'
	[ "$status" -eq 0 ]
	for r in 0 1 2; do
		[ "$(echo "$output" | grep "^\[$r\] ")" = "$(printf '[%s] a %s\n[%s] b c\n[%s] tail' $r $r $r $r)" ]
		[ "$(echo "$stderr" | grep "^\[$r\] ")" = "[$r] e $r" ]
	done
	[ "${#lines[@]}" -eq 9 ]
}

@test "INT is forwarded and leaves no process behind" {
	# A background job of a script starts with INT ignored; undo that.
	env --default-signal=INT collx-run -n 3 -- sh -c "sleep $M; echo not-interrupted" \
	    >"$T/out" 2>&1 &
	pid=$!
	for _ in $(seq 50); do [ "$(leftovers)" -ge 3 ] && break; sleep 0.1; done
	[ "$(leftovers)" -ge 3 ]
	kill -INT "$pid"
	rc=0
	timeout 20 tail --pid="$pid" -f /dev/null || rc=$?
	[ "$rc" -eq 0 ]
	wait "$pid" || rc=$?
	[ "$rc" -eq 130 ]
	[ "$(leftovers)" -eq 0 ]
	if grep -q not-interrupted "$T/out"; then false; fi
}

@test "INT ignored from the start stays ignored, in the ranks too" {
	collx-run -n 2 -- sh -c 'sleep 1; echo done $COLLX_RANK' >"$T/out" 2>&1 &
	pid=$!
	sleep 0.3
	kill -INT "$pid"
	rc=0
	timeout 20 tail --pid="$pid" -f /dev/null
	wait "$pid" || rc=$?
	[ "$rc" -eq 0 ]
	[ "$(sort "$T/out")" = "$(printf 'done 0\ndone 1')" ]
}

@test "TERM reaches every rank" {
	collx-run -n 2 -- sh -c "trap 'echo got-TERM-\$COLLX_RANK; exit 0' TERM; sleep $M & wait" \
	    >"$T/out" 2>&1 &
	pid=$!
	for _ in $(seq 50); do [ "$(leftovers)" -ge 2 ] && break; sleep 0.1; done
	kill -TERM "$pid"
	rc=0
	timeout 20 tail --pid="$pid" -f /dev/null
	wait "$pid" || rc=$?
	[ "$rc" -eq 143 ]
	[ "$(sort "$T/out")" = "$(printf 'got-TERM-0\ngot-TERM-1')" ]
	[ "$(leftovers)" -eq 0 ]
}

@test "--time-limit stops the job with 124" {
	run timeout 30 collx-run -n 2 --time-limit 0.5 -- sleep "$M"
	[ "$status" -eq 124 ]
	[[ $output == *"time limit"* ]]
	[ "$(leftovers)" -eq 0 ]
}

@test "standard input goes to rank 0 only" {
	run timeout 30 sh -c 'echo hello | collx-run -n 2 -- sh -c "echo \$COLLX_RANK:\$(cat)"'
	[ "$status" -eq 0 ]
	[ "$(echo "$output" | sort)" = "$(printf '0:hello\n1:')" ]
}

@test "a program that cannot be run gives 127 or 126" {
	run -127 timeout 30 collx-run -n 2 -- "$T/no-such-program"
	[ "$status" -eq 127 ]
	[[ $output == *"cannot execute"*"no-such-program"* ]]
	touch "$T/not-executable"
	run -126 timeout 30 collx-run -n 2 -- "$T/not-executable"
	[ "$status" -eq 126 ]
}

@test "a program named without a slash is looked up on PATH; ./ suggested for a file here" {
	printf '#!/bin/sh\necho "ran $COLLX_RANK"\n' >job.sh
	chmod +x job.sh
	run -127 --separate-stderr timeout 30 collx-run -n 2 job.sh
	[ "$stderr" = "collx-run: cannot execute job.sh: not found on PATH (for the file in this directory, say ./job.sh)" ]
	run timeout 30 collx-run -n 2 ./job.sh
	[ "$status" -eq 0 ]
	[ "$(echo "$output" | sort | tr '\n' ' ')" = "ran 0 ran 1 " ]
	# not executable: ./ alone would not do
	printf 'print(1)\n' >plain.py
	run -127 --separate-stderr timeout 30 collx-run -n 2 plain.py
	[ "$stderr" = "collx-run: cannot execute plain.py: not found on PATH (for the file in this directory, say ./plain.py; it is not executable: chmod +x it, or name its interpreter)" ]
	# nothing of that name here either: the plain message, naming PATH
	run -127 --separate-stderr timeout 30 collx-run -n 2 no-such-program-$$
	[ "$stderr" = "collx-run: cannot execute no-such-program-$$: not found on PATH" ]
	# with --wdir the file is looked for where the ranks start
	mkdir sub
	mv job.sh sub/
	run -127 --separate-stderr timeout 30 collx-run --wdir sub -n 1 job.sh
	[[ $stderr == *"(for the file in this directory, say ./job.sh)" ]]
}

@test "usage errors exit 2 with a hint" {
	for args in "" "-n 0 -- true" "-n x -- true" "--bogus -- true" \
	    "-H a --hostfile /dev/null -- true" "--per-host 2 -- true" "--ssh ssh -- true" \
	    "--master nohost -- true" "-H a --ssh '\"unbalanced' -- true" "-H a,,b -- true" \
	    "--timeout -1 -- true" "-x 1BAD=2 -- true" "-x COLLX_RANK=3 -- true" "--hostfile $T/none -- true" \
	    "-x RANK=1 -- true" "-x LOCAL_WORLD_SIZE=2 -- true" "-np" "-H a:0 -- true" \
	    "--port-range 9-8 -- true" "--port-range 70000-70001 -- true" "--wdir '' -- true"; do
		eval "run timeout 30 collx-run $args"
		echo "args: $args -> $status: $output"
		[ "$status" -eq 2 ]
		[[ $output == *"Try 'collx-run --help'."* ]]
	done
}

@test "an unknown option is reported once, by the program's name" {
	run timeout 30 collx-run --bogus -- true
	[ "$status" -eq 2 ]
	[ "$output" = "collx-run: unknown option '--bogus'
Try 'collx-run --help'." ]
	run timeout 30 collx-run -n
	[ "$output" = "collx-run: option '-n' needs a value
Try 'collx-run --help'." ]
}

@test "mpirun's -np N is -n N; -np stays a program argument after PROGRAM" {
	run timeout 30 collx-run -np 3 -- sh -c 'echo $COLLX_RANK'
	[ "$status" -eq 0 ]
	[ "$(echo "$output" | sort | tr '\n' ' ')" = "0 1 2 " ]
	run timeout 30 collx-run -np 2 echo -np 5
	[ "$status" -eq 0 ]
	[ "$output" = "$(printf -- '-np 5\n-np 5')" ]
}

@test "torchrun's variables: RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR/PORT" {
	run timeout 30 collx-run -n 3 -- sh -c 'echo $RANK $WORLD_SIZE $LOCAL_RANK $LOCAL_WORLD_SIZE $MASTER_ADDR $MASTER_PORT $COLLX_MASTER'
	[ "$status" -eq 0 ]
	[ "$(echo "$output" | awk '{print $1, $2, $3, $4, $5}' | sort)" = "$(printf '0 3 0 3 127.0.0.1\n1 3 1 3 127.0.0.1\n2 3 2 3 127.0.0.1')" ]
	# one MASTER_PORT for all, and not collx's own rendezvous port
	[ "$(echo "$output" | awk '{print $6}' | sort -u | wc -l)" -eq 1 ]
	echo "$output" | awk '{split($7, m, ":"); if (m[2] == $6) exit 1}'
	run timeout 30 collx-run -n 4 -H h1,h2:3 --ssh "$T/fake-ssh" -- \
	    sh -c 'echo $RANK $LOCAL_RANK $LOCAL_WORLD_SIZE $MASTER_ADDR:$MASTER_PORT $COLLX_MASTER'
	[ "$status" -eq 0 ]
	[ "$(sort "$T/ssh.log" | tr '\n' ' ')" = "h1 h2 h2 h2 " ]
	[ "$(echo "$output" | sort)" = "$(printf '0 0 1 h1:29501 h1:29500\n1 0 3 h1:29501 h1:29500\n2 1 3 h1:29501 h1:29500\n3 2 3 h1:29501 h1:29500')" ]
	run timeout 30 collx-run -n 2 --master 127.0.0.1:4321 -x MASTER_PORT=5555 -- sh -c 'echo $MASTER_ADDR $MASTER_PORT'
	[ "$output" = "$(printf '127.0.0.1 5555\n127.0.0.1 5555')" ]
}

@test "a PyTorch script runs unchanged: gloo all_reduce over 2 ranks, and collx beside it" {
	need python3-torch "$PY" -c "import torch.distributed"
	cat >"$T/t.py" <<'EOF'
import os, torch, torch.distributed as dist
dist.init_process_group("gloo")
r = dist.get_rank()
x = torch.tensor([float(r + 1), 10.0 * (r + 1)])
dist.all_reduce(x)
os.write(1, f"{r} {dist.get_world_size()} {os.environ['LOCAL_RANK']} {int(x[0])} {int(x[1])}\n".encode())
dist.barrier()
dist.destroy_process_group()
EOF
	run timeout 120 collx-run -n 2 -- "$PY" "$T/t.py"
	echo "$output"
	[ "$status" -eq 0 ]
	[ "$(echo "$output" | sort)" = "$(printf '0 2 0 3 30\n1 2 1 3 30')" ]
	# The store holds MASTER_PORT while a collx program meets on COLLX_MASTER.
	"$PY" -c "import numpy as np; np.save('x.npy', np.ones(4, dtype='f4'))"
	cat >"$T/both.py" <<'EOF'
import subprocess, torch.distributed as dist
dist.init_process_group("gloo")
subprocess.run(["collx-allreduce", "-q", "-i", "x.npy", "-o", "y{rank}.npy"], check=True)
dist.barrier()
dist.destroy_process_group()
EOF
	run timeout 120 collx-run -n 2 -- "$PY" "$T/both.py"
	echo "$output"
	[ "$status" -eq 0 ]
	"$PY" -c "import numpy as np; assert (np.load('y0.npy') == 2).all() and (np.load('y1.npy') == 2).all()"
}

@test "per-host: remote ranks start in the caller's directory; --wdir DIR chooses" {
	# like sshd, this stand-in starts the remote command elsewhere (/)
	printf '#!/bin/sh\ncd / && exec "%s" "$@"\n' "$T/fake-ssh" >"$T/home-ssh"
	chmod +x "$T/home-ssh"
	mkdir -p "$T/sub dir"
	cd "$T/sub dir"
	run timeout 30 collx-run -H h1,h2 --ssh "$T/home-ssh" -- pwd
	[ "$status" -eq 0 ]
	[ "$output" = "$(printf '%s\n%s' "$T/sub dir" "$T/sub dir")" ]
	run timeout 30 collx-run -H h1 --ssh "$T/home-ssh" --wdir /tmp -- pwd
	[ "$status" -eq 0 ]
	[ "$output" = /tmp ]
	# a host without this directory: its remote shell's own, as mpirun
	mkdir "$T/gone"
	cd "$T/gone"
	printf '#!/bin/sh\nrmdir "%s"; cd / && exec "%s" "$@"\n' "$T/gone" "$T/fake-ssh" >"$T/gone-ssh"
	chmod +x "$T/gone-ssh"
	run timeout 30 collx-run -H h1 --ssh "$T/gone-ssh" -- pwd
	cd "$T"
	[ "$status" -eq 0 ]
	[ "$output" = / ]
	# the caller's directory itself removed: no cd at all
	mkdir "$T/gone"
	cd "$T/gone"
	rmdir "$T/gone"
	run --separate-stderr timeout 30 collx-run -H h1 --ssh "$T/home-ssh" -- pwd
	cd "$T"
	[ "$status" -eq 0 ]
	[ "$output" = / ]
	# an explicit --wdir that is not there fails the rank
	run timeout 30 collx-run -H h1 --ssh "$T/home-ssh" --wdir "$T/none" -- pwd
	[ "$status" -ne 0 ]
	# locally too
	run timeout 30 collx-run -n 2 --wdir /tmp -- pwd
	[ "$output" = "$(printf '/tmp\n/tmp')" ]
	run timeout 30 collx-run --wdir "$T/none" -- pwd
	[ "$status" -ne 0 ]
	[[ $output == *"--wdir: $T/none: "* ]]
}

@test "--port-range: the ranks' data listeners take ports in the range" {
	lo=$((20000 + RANDOM % 20000))
	"$PY" -c "import numpy as np; np.save('x.npy', np.arange(4, dtype='f4'))"
	run timeout 60 collx-run -n 3 --port-range $lo-$((lo + 9)) -- sh -c \
	    'echo $COLLX_PORT_RANGE; exec collx-allreduce -q -i x.npy -o y{rank}.npy'
	echo "$output"
	[ "$status" -eq 0 ]
	[ "$(echo "$output" | grep -c "^$lo-$((lo + 9))\$")" -eq 3 ]
	"$PY" -c "import numpy as np; assert (np.load('y2.npy') == 3 * np.arange(4)).all()"
	# three ranks cannot share one port: the range is really used
	run timeout 60 collx-run -n 3 --port-range $lo-$((lo + 1)) -- collx-allreduce -q -i x.npy
	[ "$status" -ne 0 ]
	[[ $output == *"no free port in $lo-$((lo + 1))"* ]]
}

@test "--help and --version" {
	run timeout 30 collx-run --help
	[ "$status" -eq 0 ]
	for o in -n -np -H --hostfile --per-host --ssh --master --tag-output --timeout --time-limit \
	    --wdir --port-range -x; do
		[[ $output == *" $o"* ]]
	done
	run timeout 30 collx-run -V
	[ "$status" -eq 0 ]
	[[ $output == "collx-run (collx) "* ]]
}

@test "-v names each rank's pid and host: the pid the rank has, on this host" {
	local r pid host
	run --separate-stderr timeout 30 collx-run -v -n 3 -- sh -c 'echo $$ >"$0/pid.$COLLX_RANK"' "$T"
	[ "$status" -eq 0 ]
	host=$(hostname)
	for r in 0 1 2; do
		pid=$(cat "$T/pid.$r")
		echo "rank $r: its pid $pid; collx-run said: $(grep "^collx-run: rank $r: pid " <<<"$stderr")"
		grep -qx "collx-run: rank $r: pid $pid on $host" <<<"$stderr"
	done
	# and without -v, none of it
	run --separate-stderr timeout 30 collx-run -n 2 -- true
	[ "$status" -eq 0 ]
	[ -z "$stderr" ]
}

@test "-v names a remote rank's host and the pid of its remote shell here" {
	local r pid host
	# a stand-in for ssh that records its own pid and host, then runs the
	# command as fake-ssh does
	cat >"$T/pid-ssh" <<EOF
#!/bin/sh
echo "\$\$ \$1" >>"$T/pids.log"
exec "$T/fake-ssh" "\$@"
EOF
	chmod +x "$T/pid-ssh"
	run --separate-stderr timeout 30 collx-run -v -n 2 -H h1,h2 --ssh "$T/pid-ssh" -- true
	[ "$status" -eq 0 ]
	cat "$T/pids.log"
	[ "$(wc -l <"$T/pids.log")" -eq 2 ]
	while read -r pid host; do
		r=${host#h}
		r=$((r - 1))
		grep -qx "collx-run: rank $r: pid $pid (its remote shell) on $host" <<<"$stderr"
	done <"$T/pids.log"
}

@test "per-host: rank i on host i mod H through the --ssh command" {
	run timeout 30 collx-run -n 5 -H h1,h2 --ssh "$T/fake-ssh" -- \
	    sh -c 'echo $COLLX_RANK $COLLX_WORLD_SIZE $COLLX_LOCAL_RANK $COLLX_MASTER'
	[ "$status" -eq 0 ]
	[ "$(echo "$output" | sort)" = "$(printf '0 5 0 h1:29500\n1 5 0 h1:29500\n2 5 1 h1:29500\n3 5 1 h1:29500\n4 5 2 h1:29500')" ]
	[ "$(sort "$T/ssh.log" | uniq -c | awk '{print $1 $2}' | tr '\n' ' ')" = "3h1 2h2 " ]
}

@test "per-host: arguments with spaces and quotes survive the remote shell" {
	run timeout 30 collx-run -H h1 --ssh "$T/fake-ssh" -- \
	    sh -c 'for a; do echo "<$a>"; done' sh "a b" "it's" '$HOME' '*' "" 'x"y' 'r{rank}'
	[ "$status" -eq 0 ]
	[ "$output" = "$(printf '<a b>\n<it'"'"'s>\n<$HOME>\n<*>\n<>\n<x"y>\n<r0>')" ]
}

@test "per-host: timeout, interfaces and COLLX_SHM on the command line, the token through standard input only" {
	# This stand-in also logs the whole remote command line, which ps shows.
	sed 's|echo "\${FAKE_TAG:-}\$host"|echo "\$host \$*"|' "$T/fake-ssh" >"$T/argv-ssh"
	chmod +x "$T/argv-ssh"
	COLLX_TOKEN='a b$c' COLLX_IFNAME=eth1 COLLX_SHM=0 run timeout 30 collx-run -H h1,h2 \
	    --timeout 3 -x ZED="z z" --ssh "$T/argv-ssh" -- \
	    sh -c 'echo "$COLLX_TOKEN|$COLLX_IFNAME|$COLLX_TIMEOUT|$COLLX_SHM|$ZED"; cat'
	[ "$status" -eq 0 ]
	[ "${lines[0]}" = 'a b$c|eth1|3|0|z z' ]
	[ "${lines[1]}" = 'a b$c|eth1|3|0|z z' ]
	[ "${#lines[@]}" = 2 ]
	[ "$(wc -l <"$T/ssh.log")" = 2 ]
	grep -q 'COLLX_IFNAME=eth1' "$T/ssh.log"
	grep -q 'COLLX_SHM=0' "$T/ssh.log"
	if grep -q 'a b' "$T/ssh.log"; then false; fi
	if grep -q 'COLLX_TOKEN=' "$T/ssh.log"; then false; fi
	# Rank 0's standard input still follows the token's line.
	rm "$T/ssh.log"
	COLLX_TOKEN=s3cret run timeout 30 sh -c 'printf "one\ntwo\n" | collx-run -H h1,h2 --ssh "$1" -- sh -c '\''cat; echo "r$COLLX_RANK $COLLX_TOKEN"'\' sh "$T/argv-ssh"
	[ "$status" -eq 0 ]
	[ "$(printf '%s\n' "${lines[@]}" | sort | tr '\n' ' ')" = "one r0 s3cret r1 s3cret two " ]
	[ "${lines[0]}" = one ] || [ "${lines[0]}" = "r1 s3cret" ]
	if grep -q s3cret "$T/ssh.log"; then false; fi
	# A token of two lines cannot be read as one.
	COLLX_TOKEN=$'a\nb' run timeout 30 collx-run -H h1 --ssh "$T/argv-ssh" -- true
	[ "$status" -eq 2 ]
	[[ "$output" == "collx-run: COLLX_TOKEN has a newline"* ]]
}

@test "per-host: --per-host K puts blocks of K ranks on each host" {
	run timeout 30 collx-run -H a,b --per-host 2 --ssh "$T/fake-ssh" -- \
	    sh -c 'echo $COLLX_RANK $COLLX_LOCAL_RANK $COLLX_WORLD_SIZE'
	[ "$status" -eq 0 ]
	[ "$(echo "$output" | sort)" = "$(printf '0 0 4\n1 1 4\n2 0 4\n3 1 4')" ]
	[ "$(sort "$T/ssh.log" | tr '\n' ' ')" = "a a b b " ]
}

@test "per-host: a multi-word --ssh command is split into words" {
	run timeout 30 collx-run -H h1 --ssh "env FAKE_TAG='via env:' $T/fake-ssh" -- true
	[ "$status" -eq 0 ]
	[ "$(cat "$T/ssh.log")" = "via env:h1" ]
}

@test "per-host: a failing remote rank is named with its host" {
	run timeout 30 collx-run -H h1,h2,h3 --ssh "$T/fake-ssh" -- \
	    sh -c 'if [ $COLLX_RANK = 1 ]; then exit 4; fi; sleep '"$M"
	[ "$status" -eq 4 ]
	[[ $output == *"rank 1 (host h2) exited with status 4"* ]]
	[ "$(leftovers)" -eq 0 ]
}

@test "hostfile: comments, blank lines and slots" {
	printf '# our hosts\n\nnodeA slots=2   # two GPUs\nnodeB\n  nodeC slots=1\n' >"$T/hosts"
	run timeout 30 collx-run --hostfile "$T/hosts" --ssh "$T/fake-ssh" -- \
	    sh -c 'echo $COLLX_RANK $COLLX_WORLD_SIZE $COLLX_LOCAL_RANK $COLLX_MASTER'
	[ "$status" -eq 0 ]
	[ "$(echo "$output" | sort)" = "$(printf '0 4 0 nodeA:29500\n1 4 1 nodeA:29500\n2 4 0 nodeA:29500\n3 4 0 nodeA:29500')" ]
	[ "$(sort "$T/ssh.log" | tr '\n' ' ')" = "nodeA nodeA nodeB nodeC " ]
	run timeout 30 sh -c "printf 'x1\nx2 # second\n' | collx-run --hostfile - --ssh '$T/fake-ssh' -- true"
	[ "$status" -eq 0 ]
	[ "$(tail -n 2 "$T/ssh.log" | sort | tr '\n' ' ')" = "x1 x2 " ]
	printf 'nodeA\nnodeB slots=two\n' >"$T/bad"
	run timeout 30 collx-run --hostfile "$T/bad" -- true
	[ "$status" -eq 2 ]
	[[ $output == *"$T/bad:2:"* ]]
}

@test "localhost, loopback addresses and this host's name start ranks locally, without ssh" {
	# A remote shell that must not be called.
	printf '#!/bin/sh\necho "ssh called: $*" >&2\nexit 255\n' >"$T/no-ssh"
	chmod +x "$T/no-ssh"
	for r in 0 1 2 3; do
		timeout 30 collx-tensor create --shape 5,2 --dtype f32 --fill $((r + 1)) -o "$T/x.$r.npy"
	done
	timeout 30 collx-tensor create --shape 5,2 --dtype f32 --fill 10 -o "$T/want.npy"
	run timeout 60 collx-run -H localhost,127.0.0.1 -n 4 --ssh "$T/no-ssh" -- \
	    collx-allreduce -i "$T/x.{rank}.npy" -o "$T/y.{rank}.npy" --check
	echo "$output"
	[ "$status" -eq 0 ]
	for r in 0 1 2 3; do
		timeout 30 collx-tensor diff "$T/y.$r.npy" "$T/want.npy"
	done
	# A hostfile of this host's names: one host, so local ranks 0 to 3 of
	# 4, meeting on 127.0.0.1 (a free port, as without hosts).
	printf 'localhost slots=2\n::1\n%s\n127.0.1.1\n' "$(hostname)" >"$T/hosts"
	run --separate-stderr timeout 30 collx-run --hostfile "$T/hosts" --ssh "$T/no-ssh" -- \
	    sh -c 'echo $COLLX_RANK $COLLX_LOCAL_RANK $LOCAL_WORLD_SIZE $COLLX_MASTER $MASTER_ADDR'
	echo "$output $stderr"
	[ "$status" -eq 0 ]
	[ "$(echo "$output" | awk '{print $1, $2, $3, $5}' | sort)" = "$(printf '0 0 5 127.0.0.1\n1 1 5 127.0.0.1\n2 2 5 127.0.0.1\n3 3 5 127.0.0.1\n4 4 5 127.0.0.1')" ]
	[[ $(echo "$output" | awk '{print $4}' | sort -u) =~ ^127\.0\.0\.1:[0-9]+$ ]]
	[ "$(echo "$output" | awk '{print $4}' | sort -u | grep -c .)" -eq 1 ]
	# Beside a remote host: only that one goes through ssh, and the remote
	# ranks meet at this host's name rather than at its loopback.
	run timeout 30 collx-run -H localhost,h1 -n 3 --ssh "$T/fake-ssh" -- \
	    sh -c 'echo $COLLX_RANK $COLLX_LOCAL_RANK $COLLX_MASTER'
	[ "$status" -eq 0 ]
	[ "$(cat "$T/ssh.log")" = h1 ]
	[ "$(echo "$output" | sort)" = "$(printf '0 0 %s:29500\n1 0 %s:29500\n2 1 %s:29500' "$(hostname)" "$(hostname)" "$(hostname)")" ]
	# A user named: through ssh, as that user.
	run timeout 30 collx-run -H me@localhost --ssh "$T/fake-ssh" -- true
	[ "$status" -eq 0 ]
	[ "$(tail -n 1 "$T/ssh.log")" = me@localhost ]
}

@test "per-host in network namespaces: COLLX_MASTER is a real address" {
	need "root and ip netns" netns_available
	netns_setup 3
	netns_fake_ssh "$T/ns-ssh" "$T/ssh.log"
	# Rank 0 listens on COLLX_MASTER (an address only its namespace has);
	# the others connect to it and send their rank.
	cat >"$T/meet.py" <<'EOF'
import os, socket, sys, time
rank, world = int(os.environ["COLLX_RANK"]), int(os.environ["COLLX_WORLD_SIZE"])
host, port = os.environ["COLLX_MASTER"].rsplit(":", 1)
if rank == 0:
    s = socket.socket()
    s.bind((host, int(port)))
    s.listen(world)
    s.settimeout(20)
    seen = []
    for _ in range(world - 1):
        c, addr = s.accept()
        seen.append("%s from %s" % (c.recv(16).decode(), addr[0]))
    print("rank 0 met: " + ", ".join(sorted(seen)))
else:
    for _ in range(200):
        try:
            c = socket.create_connection((host, int(port)), timeout=5)
            break
        except OSError:
            time.sleep(0.1)
    c.sendall(str(rank).encode())
EOF
	run timeout 60 collx-run -H "$(netns_hosts)" --ssh "$T/ns-ssh" -- "$PY" "$T/meet.py"
	echo "$output"
	[ "$status" -eq 0 ]
	[ "$output" = "rank 0 met: 1 from 10.78.0.2, 2 from 10.78.0.3" ]
	[ "$(sort "$T/ssh.log" | tr '\n' ' ')" = "10.78.0.1 10.78.0.2 10.78.0.3 " ]
}

@test "per-host in network namespaces: a real allreduce between three hosts" {
	need "root and ip netns" netns_available
	netns_setup 3
	netns_fake_ssh "$T/ns-ssh"
	for r in 0 1 2; do
		timeout 30 collx-tensor create --shape 4,3 --dtype f32 --fill $((r + 1)) -o "$T/x.$r.npy"
	done
	timeout 30 collx-tensor create --shape 4,3 --dtype f32 --fill 6 -o "$T/want.npy"
	run timeout 60 collx-run -H "$(netns_hosts)" --ssh "$T/ns-ssh" --timeout 20 -- \
	    collx-allreduce -i "$T/x.{rank}.npy" -o "$T/y.{rank}.npy"
	echo "$output"
	[ "$status" -eq 0 ]
	for r in 0 1 2; do
		timeout 30 collx-tensor diff "$T/y.$r.npy" "$T/want.npy"
	done
}

@test "netns harness: addresses, shaping, and a teardown that leaves nothing" {
	need "root and ip netns" netns_available
	need "the tbf qdisc" netns_can_shape rate
	shape=(--rate 200mbit)
	netns_can_shape delay && shape+=(--delay 1ms)
	netns_setup 2 "${shape[@]}"
	tag=$NETNS_TAG
	[ "$(netns_exec 1 ip -4 -o addr show dev eth0 | awk '{print $4}')" = "10.78.0.2/24" ]
	netns_exec 0 tc qdisc show dev eth0 | grep -q tbf
	tc qdisc show dev "cx${tag}v1" | grep -q tbf
	if netns_can_shape delay; then netns_exec 0 tc qdisc show dev eth0 | grep -q netem; fi
	netns_exec 0 sleep "$M" &
	netns_teardown
	[ -z "$(ip netns list | grep "cxt$tag-")" ]
	if ip link show "cxb$tag" 2>/dev/null; then false; fi
	if ip link show "cx${tag}v0" 2>/dev/null; then false; fi
	wait
	pgrep -af "sleep $M" || true
	[ "$(leftovers)" -eq 0 ]
}
