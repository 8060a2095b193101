#!/usr/bin/env bats
# Security: strangers at the rendezvous port, two jobs on one port, token
# files others can read. (The handshake's own cases: test_auth; the token
# on remote command lines: run.bats.)
load lib/common
load lib/coll
bats_require_minimum_version 1.5.0

setup() {
	common_setup
	unset COLLX_TOKEN COLLX_JOB_ID COLLX_IFNAME COLLX_TIMEOUT
}

teardown() {
	common_teardown
}

# Wait until something listens on TCP port $1 (at most 30 s).
wait_listen() {
	local i
	for ((i = 0; i < 300; i++)); do
		ss -Hltn "sport = :$1" | grep -q . && return 0
		sleep 0.1
	done
	return 1
}

# Inputs in.R.npy = arange(6) * (R + 1), R = 0, 1.
two_inputs() {
	pyx "
for r in range(2):
    save('in.%d.npy' % r, np.arange(6, dtype='f4') * (r + 1))"
}

@test "strangers at the rendezvous port are refused and logged; the job finishes right" {
	two_inputs
	head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >tok
	echo guess >wrong
	chmod 600 tok wrong
	port=$(free_port)
	export COLLX_WORLD_SIZE=2 COLLX_MASTER=127.0.0.1:$port
	COLLX_RANK=0 timeout 60 collx-allreduce --token-file tok --timeout 30 \
	    -i in.0.npy -o out.0.npy 2>err.0 &
	pid0=$!
	wait_listen "$port"
	# Nothing; random bytes; made-up proofs (one followed by a message
	# header claiming 2^62 bytes); a silent connection held 2 s.
	[ "$(timeout 60 "$PY" "$COLLX_ROOT/tests/lib/stranger.py" 2 "$port")" -eq 5 ]
	# A rank of this job's program with the wrong token.
	run timeout 60 env COLLX_RANK=1 collx-allreduce --token-file wrong --timeout 10 -i in.1.npy
	[ "$status" -ne 0 ]
	[[ "$output" == *"wrong token"* ]]
	run timeout 60 env COLLX_RANK=1 collx-allreduce --token-file tok --timeout 30 \
	    -i in.1.npy -o out.1.npy
	[ "$status" -eq 0 ]
	wait "$pid0"
	pyx "
for r in range(2):
    assert (load('out.%d.npy' % r) == np.arange(6, dtype='f4') * 3).all()"
	cat err.0
	[ "$(grep -c '^collx-allreduce: rank 0: dropped connection from 127\.0\.0\.1:' err.0)" -eq 6 ]
	[ "$(wc -l <err.0)" -eq 6 ]
	grep -q 'not a collx peer' err.0
	grep -q 'wrong token' err.0
}

@test "two jobs on one port never mix: the other job's rank is refused (exit 3)" {
	two_inputs
	port=$(free_port)
	export COLLX_WORLD_SIZE=2 COLLX_MASTER=127.0.0.1:$port
	COLLX_JOB_ID=aaaa COLLX_RANK=0 timeout 60 collx-allreduce --timeout 30 \
	    -i in.0.npy -o out.0.npy 2>err.0 &
	pid0=$!
	wait_listen "$port"
	# No token anywhere: the job identity alone tells the jobs apart.
	run timeout 60 env COLLX_JOB_ID=bbbb COLLX_RANK=1 collx-allreduce --timeout 10 -i in.1.npy
	[ "$status" -eq 3 ]
	[[ "$output" == *"job identity differs"* ]]
	run timeout 60 env COLLX_JOB_ID=aaaa COLLX_RANK=1 collx-allreduce --timeout 30 \
	    -i in.1.npy -o out.1.npy
	[ "$status" -eq 0 ]
	wait "$pid0"
	grep -q 'refused rank 1 from 127\.0\.0\.1:[0-9]*: job identity differs' err.0
	pyx "assert (load('out.0.npy') == np.arange(6, dtype='f4') * 3).all()"
}

@test "collx-run gives each launch its own job identity" {
	run timeout 30 collx-run -n 2 -- sh -c 'echo $COLLX_JOB_ID'
	[ "$status" -eq 0 ]
	[ "${lines[0]}" = "${lines[1]}" ]
	[[ "${lines[0]}" =~ ^[0-9a-f]{32}$ ]]
	first=${lines[0]}
	run timeout 30 collx-run -n 1 -- sh -c 'echo $COLLX_JOB_ID'
	[ "$output" != "$first" ]
	COLLX_JOB_ID=cafe run timeout 30 collx-run -n 1 -- sh -c 'echo $COLLX_JOB_ID'
	[ "$output" = cafe ]
}

@test "a token file others can read draws a warning; a private one none" {
	pyx "save('x.npy', np.arange(3, dtype='f4'))"
	echo s3cret >tok
	chmod 644 tok
	run --separate-stderr timeout 30 collx-allreduce --token-file tok -i x.npy -o y.npy
	[ "$status" -eq 0 ]
	[ "$stderr" = "collx-allreduce: --token-file: tok: readable or writable by group or others (mode 644); chmod 600 it" ]
	chmod 600 tok
	run --separate-stderr timeout 30 collx-allreduce --token-file tok -i x.npy -o y.npy
	[ "$status" -eq 0 ]
	[ -z "$stderr" ]
}

@test "collx-ps listens on the chosen interface's address only; on every address without one" {
	"$PY" -c "
import numpy as np, struct, json
h = json.dumps({'w': {'dtype': 'F32', 'shape': [4], 'data_offsets': [0, 16]}}).encode()
open('P.safetensors', 'wb').write(struct.pack('<Q', len(h)) + h + np.arange(4, dtype='<f4').tobytes())"
	for i in lo ""; do
		timeout 30 collx-ps serve -m P.safetensors --workers 1 --timeout 3 \
		    ${i:+--iface $i} >port 2>serr &
		pid=$!
		for ((k = 0; k < 100; k++)); do [ -s port ] && break; sleep 0.1; done
		wait_listen "$(cat port)"
		ss -Hltn "sport = :$(cat port)" >listen
		kill "$pid"
		wait "$pid" || true
		cat listen
		if [ -n "$i" ]; then
			grep -Eq ' 127\.0\.0\.1:[0-9]+ ' listen
		else
			grep -Eq ' (0\.0\.0\.0|\*|\[::\]):[0-9]+ ' listen
		fi
		rm -f port
	done
}
