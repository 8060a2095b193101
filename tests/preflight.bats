#!/usr/bin/env bats
# collx-run --preflight: every pair of ranks tested (latency, a checksummed
# 1 MiB transfer) before PROGRAM starts; the matrix printed, slow pairs
# named, PROGRAM not run (exit 4) when a rank cannot be reached. Locally,
# and over network namespaces: a host's link shaped (tc tbf) to a tenth of
# the others' rate, a host whose link is down.
load lib/common
load lib/netns
bats_require_minimum_version 1.5.0

setup() {
	common_setup
	unset COLLX_TOKEN COLLX_IFNAME COLLX_TIMEOUT COLLX_MASTER COLLX_RANK \
	    COLLX_WORLD_SIZE COLLX_JOB_ID
	export COLLX_FR_DIR=$T
}

teardown() {
	netns_teardown
	common_teardown
}

# The bandwidth, MB/s, of pair A B in the matrix of preflight's report
# in FILE.
bw_of() {
	awk -v a="$2" -v b="$3" '
	    /^bandwidth, MB\/s$/ { on = 1; getline; next }
	    on && $1 == a { print $(b + 2); exit }' "$1"
}

@test "--preflight, 4 local ranks: a matrix of every pair, then PROGRAM runs; 16 ranks within 5 s" {
	run -0 --separate-stderr collx-run --preflight -n 4 -- \
	    sh -c 'echo "rank $COLLX_RANK ran" >ran.$COLLX_RANK'
	echo "$stderr"
	for r in 0 1 2 3; do
		[ "$(cat "ran.$r")" = "rank $r ran" ]
	done
	[[ ${stderr_lines[0]} == "collx-run: preflight of 4 ranks in "*" s: each pair's latency (best of 5 round trips, halved) and bandwidth (best of 2 transfers of 1024 KiB, checksummed)" ]]
	[ "${stderr_lines[1]}" = "latency, us" ]
	[ "${stderr_lines[7]}" = "bandwidth, MB/s" ]
	# each matrix symmetric, positive off the diagonal
	grep -A5 '^latency, us$' <<<"$stderr" >lat
	grep -A5 '^bandwidth, MB/s$' <<<"$stderr" >bw
	for m in lat bw; do
		awk 'NR > 2 { for (j = 2; j <= NF; j++) v[$1, j - 2] = $j }
		    END {
			for (a = 0; a < 4; a++)
				for (b = 0; b < 4; b++) {
					if (a == b && v[a, b] != "-")
						exit 1
					if (a != b && (v[a, b] != v[b, a] ||
					    v[a, b] + 0 <= 0))
						exit 1
				}
		    }' "$m"
	done
	grep -q '^collx-run: preflight: 6 pairs sound, [0-6] of them slow$' <<<"$stderr"
	# 16 ranks on this machine: the whole run, launch included, in 5 s
	start=$SECONDS
	run -0 --separate-stderr collx-run --preflight -n 16 -- true
	[ $((SECONDS - start)) -le 5 ]
	grep -q '^collx-run: preflight: 120 pairs sound, ' <<<"$stderr"
	# -q: only what went wrong
	run -0 --separate-stderr collx-run -q --preflight -n 2 -- true
	if grep -q 'latency' <<<"$stderr"; then false; fi
}

@test "--preflight-rank is the ranks' own: no PROGRAM after it" {
	run -2 --separate-stderr collx-run --preflight-rank -- true
	[ "${stderr_lines[0]}" = "collx-run: --preflight-rank starts no PROGRAM" ]
}

@test "--preflight over namespaces: a host whose link runs at a tenth of the others' rate is named, pair by pair; PROGRAM still runs" {
	need "root and ip netns" netns_available
	need "tc tbf" netns_can_shape rate
	netns_setup 4 --rate 400mbit --burst 64kb
	netns_fake_ssh "$T/ssh"
	# host 3 at 40 Mbit/s, both ends of its link
	netns_exec 3 tc qdisc replace dev eth0 root tbf rate 40mbit \
	    burst 64kb latency 200ms
	tc qdisc replace dev "cx${NETNS_TAG}v3" root tbf rate 40mbit \
	    burst 64kb latency 200ms
	run -0 --separate-stderr timeout 30 collx-run --ssh "$T/ssh" \
	    -H "$(netns_hosts)" --preflight -- sh -c 'echo ran >ran.$COLLX_RANK'
	echo "$stderr" >report
	cat report
	for r in 0 1 2 3; do
		[ "$(cat "ran.$r")" = ran ]
	done
	# exactly the three pairs of host 3 named, with their hosts
	[ "$(grep -c ' ran slow: ' report)" -eq 3 ]
	for r in 0 1 2; do
		grep -q "^collx-run: preflight: ranks $r and 3 ($(netns_addr $r), $(netns_addr 3)) ran slow: [0-9.]* MB/s, below half the median [0-9.]* MB/s of the pairs over TCP$" report
	done
	grep -q '^collx-run: preflight: 6 pairs sound, 3 of them slow$' report
	# the figures: host 3's pairs near 40 Mbit/s (5 MB/s), the others
	# well above it
	for r in 0 1 2; do
		awk -v s="$(bw_of report $r 3)" 'BEGIN { exit !(s > 2 && s < 6) }'
	done
	for p in "0 1" "0 2" "1 2"; do
		awk -v s="$(bw_of report $p)" 'BEGIN { exit !(s > 20) }'
	done
}

# cut_case HOW: three namespace hosts, host 2 cut as HOW says, under
# --preflight: PROGRAM not run, exit 4, within the preflight's 4 s wait
# (and the launch); its lines in err.
cut_case() {
	netns_setup 3
	netns_fake_ssh "$T/ssh"
	"$@"
	start=$SECONDS
	run -4 --separate-stderr timeout 30 collx-run --ssh "$T/ssh" \
	    -H "$(netns_hosts)" --preflight -- sh -c 'echo ran >ran.$COLLX_RANK'
	echo "$stderr" | tee err
	[ $((SECONDS - start)) -le 9 ]
	if ls ran.* 2>/dev/null; then false; fi
	grep -q "^collx-run: --preflight failed: sh not run$" err
	netns_teardown
}

@test "--preflight over namespaces: a host that cannot be reached is named; PROGRAM not run, exit 4, within the preflight's 4 s wait" {
	need "root and ip netns" netns_available
	# its link cut on the bridge's side: rank 0 waits for it in vain
	cut_case eval 'ip link set "cx${NETNS_TAG}v2" down'
	grep -q "^collx-run: preflight: rank 0: timed out after 4 s waiting for rank(s) 2 to join at $(netns_addr 0):[0-9]*; the program is not run$" err
	# its own side down: it knows at once, and says so
	cut_case netns_exec 2 ip link set eth0 down
	grep -q "^collx-run: preflight: rank 2: .*no route to $(netns_addr 0):[0-9]*: Network is unreachable; the program is not run$" err
}
