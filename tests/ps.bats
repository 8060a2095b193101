#!/usr/bin/env bats
# collx-ps: sharded servers driven from the shell (closed-form SGD results
# computed by NumPy), collx-dp training through external servers, server
# ends and tokens (workers or servers killed: faults.bats).
load lib/common
load lib/dpps

REF=$COLLX_ROOT/tests/lib/dpref.py

setup() {
	common_setup
	unset COLLX_TOKEN COLLX_IFNAME COLLX_TIMEOUT COLLX_MASTER COLLX_RANK COLLX_WORLD_SIZE
	need python3-numpy "$PY" -c "import numpy"
	timeout 30 "$PY" "$REF" psfiles . 3
	spids=() wpids=()
}

teardown() {
	reap "${spids[@]}" "${wpids[@]}"
	common_teardown
}

# Start N servers by hand (rank r of N, port printed on stdout); SERVERS
# gets their list. usage: serve N [collx-ps serve options...]
serve() {
	local n=$1 r mport p
	shift
	mport=$(free_port)
	for ((r = 0; r < n; r++)); do
		COLLX_RANK=$r COLLX_WORLD_SIZE=$n COLLX_MASTER=127.0.0.1:$mport \
		    collx-ps serve "$@" >"port$r" 2>"serr$r" &
		spids+=($!)
	done
	SERVERS=
	for ((r = 0; r < n; r++)); do
		for _ in $(seq 100); do
			[ -s "port$r" ] && break
			sleep 0.1
		done
		p=$(head -1 "port$r")
		[ -n "$p" ] || { echo "server $r did not start: $(cat "serr$r")"; return 1; }
		SERVERS=$SERVERS${SERVERS:+,}127.0.0.1:$p
	done
}

# Every server exits with status want within 20 s.
servers_exit() {
	local want=$1 p rc

	for p in "${spids[@]}"; do
		rc=0
		wait_pid "$p" 20 || rc=$?
		[ "$rc" -eq "$want" ] || { echo "server exit $rc, want $want"; cat serr*; return 1; }
	done
	spids=()
}

@test "two servers: pushes of three workers give p - lr * mean(g), twice" {
	serve 2 -m P.safetensors --workers 3 --lr 0.1 --timeout 10 -o final.safetensors
	for i in 0 1 2; do
		timeout 30 collx-ps push --server "$SERVERS" --timeout 10 G$i.safetensors &
		wpids+=($!)
	done
	for p in "${wpids[@]}"; do wait_pid "$p" 30; done
	wpids=()
	timeout 30 collx-ps pull --server "$SERVERS" --timeout 10 -o got1.safetensors
	timeout 30 "$PY" "$REF" psexpect P.safetensors 0.1 got1.safetensors 1 G0.safetensors G1.safetensors G2.safetensors
	# the second round, each worker done after it; the servers then end
	for i in 0 1 2; do
		timeout 30 collx-ps push --server "$SERVERS" --timeout 10 --done \
		    -o "new$i.safetensors" G$i.safetensors &
		wpids+=($!)
	done
	for p in "${wpids[@]}"; do wait_pid "$p" 30; done
	wpids=()
	servers_exit 0
	timeout 30 "$PY" "$REF" psexpect P.safetensors 0.1 final.safetensors 2 G0.safetensors G1.safetensors G2.safetensors
	cmp new0.safetensors final.safetensors
	cmp new2.safetensors final.safetensors
}

@test "async mode applies every push as it arrives" {
	serve 1 -m P.safetensors --workers 3 --lr 0.05 --mode async --timeout 10
	for i in 0 1 2; do
		timeout 30 collx-ps push --server "$SERVERS" --timeout 10 G$i.safetensors
	done
	timeout 30 collx-ps pull --server "$SERVERS" --timeout 10 -o got.safetensors
	# SGD is linear: three single pushes move p by lr * (g0 + g1 + g2)
	timeout 30 "$PY" "$REF" psexpect P.safetensors 0.05 got.safetensors 3 G0.safetensors G1.safetensors G2.safetensors
	kill -TERM "${spids[0]}"
	servers_exit 0
}

@test "a push of another model's gradients is refused with exit 3" {
	serve 2 -m P.safetensors --workers 1 --timeout 10 -o final.safetensors
	"$PY" -c "import sys; sys.path.insert(0, '$COLLX_ROOT/tests/lib'); import dpref, numpy as np; dpref.save('bad.safetensors', {'a.weight': np.zeros((3, 5))})"
	run timeout 30 collx-ps push --server "$SERVERS" --timeout 10 bad.safetensors
	[ "$status" -eq 3 ]
	[[ "$output" == *"differ from the model of the servers"* ]]
	# the servers are unharmed; SIGTERM ends them, writing the parameters
	timeout 30 collx-ps pull --server "$SERVERS" --timeout 10 -o got.safetensors
	kill -TERM "${spids[@]}"
	servers_exit 0
	timeout 30 "$PY" "$REF" cmp final.safetensors P.safetensors 0 0
	cmp got.safetensors final.safetensors
}

@test "collx-dp through two external servers equals the NumPy reference" {
	timeout 30 "$PY" "$COLLX_ROOT/tests/lib/moons.py" 200 1 X.npy Y.npy
	timeout 30 collx-dp --init mlp --dims 2,16,1 --seed 3 -o m.safetensors
	serve 2 -m m.safetensors --workers 3 --lr 0.05 --timeout 10 -o final.safetensors
	timeout 60 collx-run -n 3 --timeout 10 -- collx-dp -m m.safetensors \
	    --data X.npy --targets Y.npy --batch 200 --steps 10 --ps "$SERVERS" \
	    -o t.safetensors --loss-csv l.csv -q
	servers_exit 0
	timeout 60 "$PY" "$REF" mlp m.safetensors X.npy Y.npy 200 10 0.05 t.safetensors l.csv
	cmp final.safetensors t.safetensors
	# servers sum pushes in worker order, as colocated ones do in rank
	# order: the same bits
	timeout 60 collx-run -n 3 --timeout 10 -- collx-dp -m m.safetensors \
	    --data X.npy --targets Y.npy --batch 200 --steps 10 --lr 0.05 \
	    --sync ps --ps-servers 2 -o tc.safetensors -q
	cmp tc.safetensors t.safetensors
}

@test "collx-dp through an async external server with a staleness bound" {
	timeout 30 "$PY" "$COLLX_ROOT/tests/lib/moons.py" 200 1 X.npy Y.npy
	timeout 30 collx-dp --init mlp --dims 2,16,1 --seed 3 -o m.safetensors
	serve 1 -m m.safetensors --workers 2 --lr 0.05 --mode async --staleness 0 --timeout 10
	timeout 60 collx-run -n 2 --timeout 10 -- collx-dp -m m.safetensors \
	    --data X.npy --targets Y.npy --batch 200 --steps 10 --ps "$SERVERS" \
	    --ps-mode async -o t.safetensors --loss-csv l.csv -q
	servers_exit 0
	[ "$(wc -l <l.csv)" -eq 11 ]
	if cmp -s t.safetensors m.safetensors; then false; fi
}

@test "servers of another model are refused by collx-dp with exit 3" {
	timeout 30 "$PY" "$COLLX_ROOT/tests/lib/moons.py" 20 1 X.npy Y.npy
	timeout 30 collx-dp --init mlp --dims 2,16,1 --seed 3 -o m.safetensors
	serve 1 -m P.safetensors --workers 1 --timeout 10
	run timeout 60 collx-dp -m m.safetensors --data X.npy --targets Y.npy \
	    --batch 20 --steps 1 --ps "$SERVERS" --timeout 10
	[ "$status" -eq 3 ]
	[[ "$output" == *"hold another model"* ]]
}

@test "servers started with a different --lr, --optimizer or --mode refuse each other (exit 3)" {
	for o in "--lr 0.2:--lr 0.1" "--optimizer adamw:--optimizer sgd" \
	    "--mode async:--mode sync"; do
		one=${o%%:*} zero=${o#*:}
		mport=$(free_port)
		COLLX_RANK=0 COLLX_WORLD_SIZE=2 COLLX_MASTER=127.0.0.1:$mport \
		    timeout 30 collx-ps serve -m P.safetensors --workers 1 \
		    --lr 0.1 --timeout 2 >/dev/null 2>serr0 &
		spids=($!)
		rc=0
		COLLX_RANK=1 COLLX_WORLD_SIZE=2 COLLX_MASTER=127.0.0.1:$mport \
		    timeout 30 collx-ps serve -m P.safetensors --workers 1 \
		    --lr 0.1 $one --timeout 2 >/dev/null 2>serr1 || rc=$?
		cat serr1
		[ "$rc" -eq 3 ]
		grep -qx "collx-ps: rank 1: refused by rank 0 at 127.0.0.1:$mport: rank 1 was started with $one, rank 0 with $zero" serr1
		servers_exit 1
		grep -q "refused rank 1 from .*: rank 1 was started with $one" serr0
	done
}

@test "with a token, a client without it is refused" {
	echo s3cret >tok
	serve 1 -m P.safetensors --workers 1 --timeout 5 --token-file tok
	run timeout 30 collx-ps pull --server "$SERVERS" --timeout 5 -o x.safetensors
	[ "$status" -eq 1 ]
	[ ! -e x.safetensors ]
	timeout 30 collx-ps pull --server "$SERVERS" --timeout 5 --token-file tok -o y.safetensors
	timeout 30 "$PY" "$REF" cmp y.safetensors P.safetensors 0 0
	kill -TERM "${spids[@]}"
	servers_exit 0
}

@test "collx-dp proves the group's token to external servers" {
	echo s3cret >tok
	timeout 30 "$PY" "$COLLX_ROOT/tests/lib/moons.py" 20 1 X.npy Y.npy
	timeout 30 collx-dp --init mlp --dims 2,4,1 --seed 3 -o m.safetensors
	serve 1 -m m.safetensors --workers 1 --timeout 5 --token-file tok
	run timeout 60 collx-dp -m m.safetensors --data X.npy --targets Y.npy \
	    --batch 20 --steps 2 --ps "$SERVERS" --timeout 5
	[ "$status" -eq 1 ]
	[[ "$output" == *"parameter server"* ]]
	COLLX_TOKEN=s3cret timeout 60 collx-dp -m m.safetensors --data X.npy \
	    --targets Y.npy --batch 20 --steps 2 --ps "$SERVERS" --timeout 5
	servers_exit 0
}

@test "a server that is not there: exit 1 naming it, within the timeout" {
	port=$(free_port)
	run timeout 30 collx-ps pull --server "127.0.0.1:$port" --timeout 2 -o x.safetensors
	[ "$status" -eq 1 ]
	[[ "$output" == *"server 127.0.0.1:$port"* ]]
	run timeout 30 collx-ps push --timeout 2 G0.safetensors
	[ "$status" -eq 2 ]
	run timeout 30 collx-ps serve -m P.safetensors
	[ "$status" -eq 2 ]
	run timeout 30 collx-ps serve -m nothere.safetensors --workers 1
	[ "$status" -eq 3 ]
	[ "$output" = "collx-ps: nothere.safetensors: No such file or directory" ]
	run timeout 30 collx-ps frobnicate
	[ "$status" -eq 2 ]
}
@test "a client waiting for a server says after 5 s which address it tries; -q does not" {
	port=$(free_port) start=$SECONDS
	timeout 30 collx-ps pull --server "127.0.0.1:$port" --timeout 7 \
	    -o x.safetensors 2>err.txt &
	timeout 30 collx-ps pull --server "127.0.0.1:$port" --timeout 7 -q \
	    -o x.safetensors 2>quiet.txt &
	wait
	cat err.txt quiet.txt
	[ $((SECONDS - start)) -lt 15 ]
	[ "$(wc -l <err.txt)" -eq 2 ]
	[ "$(head -n 1 err.txt)" = "collx-ps: still trying to reach server 0 at 127.0.0.1:$port" ]
	[ "$(wc -l <quiet.txt)" -eq 1 ]
	grep -q "^collx-ps: server 127.0.0.1:$port: " quiet.txt
}

@test "a collx-dp worker waiting for an external server names its address after 5 s" {
	timeout 30 "$PY" "$COLLX_ROOT/tests/lib/moons.py" 20 1 X.npy Y.npy
	timeout 30 collx-dp --init mlp --dims 2,4,1 --seed 3 -o m.safetensors
	port=$(free_port)
	run timeout 30 collx-dp -m m.safetensors --data X.npy --targets Y.npy \
	    --batch 10 --steps 1 --sync ps --ps "127.0.0.1:$port" --timeout 7
	echo "$output"
	[ "$status" -eq 1 ]
	[ "${lines[0]}" = "collx-dp: still trying to reach server 0 at 127.0.0.1:$port" ]
	[ "${#lines[@]}" -eq 2 ]
}
