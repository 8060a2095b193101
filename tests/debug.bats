#!/usr/bin/env bats
# COLLX_DEBUG and COLLX_DEBUG_FILE (collx(7), ENVIRONMENT): each rank's log
# of the group it joined, every peer's address and transport (shared memory
# or TCP, as COLLX_SHM says), each collective's algorithm and why AUTO
# chose it (the cost model's figures, checked for the least), failures.
load lib/common
bats_require_minimum_version 1.5.0

setup() {
	common_setup
	unset COLLX_DEBUG COLLX_DEBUG_FILE COLLX_SHM COLLX_TOKEN COLLX_TIMEOUT \
	    COLLX_MASTER COLLX_RANK COLLX_WORLD_SIZE
	collx-tensor create --shape 1000 --fill ones -o x.npy
}

teardown() {
	common_teardown
}

@test "COLLX_DEBUG=info: a log per rank (%r %p %h), every peer's address and transport" {
	local mode r p f host
	host=$(hostname)
	for mode in shm tcp; do
		rm -f log.*
		[ "$mode" = tcp ] && export COLLX_SHM=0 || unset COLLX_SHM
		run -0 env COLLX_DEBUG=info COLLX_DEBUG_FILE='log.%r.%p.%h' \
		    timeout 60 collx-run -n 3 -- collx-allreduce -q -i x.npy -o y.{rank}.npy
		[ "$output" = "" ]
		for r in 0 1 2; do
			f=$(ls log.$r.*)
			[[ "$f" =~ ^log\.$r\.[0-9]+\.$host$ ]]
			cat "$f"
			grep -qx "collx-allreduce: rank $r: info: joined: rank $r of 3, 1 host, .*" "$f"
			for p in 0 1 2; do
				[ "$p" = "$r" ] && continue
				grep -Eqx "collx-allreduce: rank $r: info: peer $p at 127\.0\.0\.1:[0-9]+: $mode \(host 0\)" "$f"
			done
			if grep -q ': trace: ' "$f"; then false; fi
		done
	done
}

@test "COLLX_DEBUG=trace: each collective's algorithm, AUTO's choice the cheapest of its costs" {
	run -0 env COLLX_DEBUG=trace COLLX_DEBUG_FILE='a.%r' timeout 60 \
	    collx-run -n 2 -- collx-allreduce -q -i x.npy --algo rd
	grep -Eq '^collx-allreduce: rank 0: trace: #[0-9]+ allreduce of 4000 bytes on 2 ranks: rd$' a.0
	# the options' agreement (an allgather) is AUTO's; the allreduce is not
	if grep -q 'auto chose .* for allreduce' a.0; then false; fi
	run -0 env COLLX_DEBUG=trace COLLX_DEBUG_FILE='b.%r' timeout 60 \
	    collx-run -n 2 -- collx-allreduce -q -i x.npy
	cat b.0
	line=$(grep -m1 'trace: auto chose .* for allreduce of 4000 bytes on 2 ranks: ' b.0)
	chosen=$(echo "$line" | sed -E 's/.*auto chose ([a-z-]+) .*/\1/')
	# the least of the figures listed ("ring 20.1 us, tree 10.2 us, ...")
	least=$(echo "${line#*ranks: }" | tr ',' '\n' |
	    awk '{ if (min == "" || $2 + 0 < min) { min = $2 + 0; name = $1 } } END { print name }')
	[ -n "$chosen" ]
	[ "$chosen" = "$least" ]
	grep -Eq "trace: #[0-9]+ allreduce of 4000 bytes on 2 ranks: $chosen\$" b.0
	[ "$(grep -c 'auto chose' b.0)" -ge 1 ]
}

@test "COLLX_DEBUG=warn: a failure in the log; unset: no log; a bad file pattern: one line, exit 1" {
	run env COLLX_DEBUG=warn COLLX_DEBUG_FILE='w.%r' timeout 60 \
	    collx-run -n 2 -- sh -c 'exec collx-allreduce -q -i x.npy --algo $([ $COLLX_RANK = 0 ] && echo ring || echo tree)'
	[ "$status" -ne 0 ]
	cat w.*
	grep -q 'warn: failed: .*started with --algo' w.*
	if grep -q ': info: ' w.*; then false; fi
	run -0 --separate-stderr collx-run -n 2 -- collx-allreduce -q -i x.npy
	[ "$stderr" = "" ]
	run -1 --separate-stderr env COLLX_DEBUG=info COLLX_DEBUG_FILE='x.%q' \
	    collx-allreduce -q -i x.npy
	[[ "$stderr" == *"COLLX_DEBUG_FILE: 'x.%q': a % not followed by h, p, r or %" ]]
	[ ! -e x.%q ]
}

# NCCL_DEBUG's spelling, INFO, is info; an unknown level logs at warn after
# one line per rank saying so, and the job runs.
@test "COLLX_DEBUG: any case; an unknown level warns once per rank and logs at warn" {
	local r
	run -0 --separate-stderr env COLLX_DEBUG=INFO COLLX_DEBUG_FILE='i.%r' \
	    timeout 60 collx-run -n 2 -- collx-allreduce -q -i x.npy -o y.{rank}.npy
	[ "$stderr" = "" ]
	for r in 0 1; do
		grep -qx "collx-allreduce: rank $r: info: joined: rank $r of 2, 1 host, .*" i.$r
	done
	run -0 --separate-stderr env COLLX_DEBUG=Trace COLLX_DEBUG_FILE='t.%r' \
	    timeout 60 collx-run -n 2 -- collx-allreduce -q -i x.npy --algo rd
	grep -Eq '^collx-allreduce: rank 0: trace: #[0-9]+ allreduce of 4000 bytes on 2 ranks: rd$' t.0
	run -0 --separate-stderr env COLLX_DEBUG=loud COLLX_DEBUG_FILE='l.%r' \
	    timeout 60 collx-run -n 2 -- collx-allreduce -q -i x.npy -o z.{rank}.npy
	echo "$stderr"
	[ "${#stderr_lines[@]}" -eq 2 ]
	for r in 0 1; do
		grep -qx "collx-allreduce: rank $r: COLLX_DEBUG: 'loud' is not warn, info or trace; logging at warn" <<<"$stderr"
		cmp y.$r.npy z.$r.npy
	done
	# logging at warn: nothing in a run that did not fail
	cat l.0 l.1
	[ "$(cat l.0 l.1)" = "" ]
	# a failure is logged at warn
	run env COLLX_DEBUG=LOUD COLLX_DEBUG_FILE='f.%r' timeout 60 \
	    collx-run -n 2 -- sh -c 'exec collx-allreduce -q -i x.npy --algo $(if [ $COLLX_RANK = 0 ]; then echo ring; else echo tree; fi)'
	[ "$status" -ne 0 ]
	grep -q 'warn: failed: .*started with --algo' f.*
}
