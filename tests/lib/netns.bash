# Network-namespace harness for the bats suites: N "hosts" on one private
# bridge, each a namespace with one veth (eth0) at 10.78.0.(I+1)/24, with
# optional rate limiting and delay, and a stand-in for ssh that runs a
# command inside the namespace of a host. Names carry a random tag, so runs
# side by side never clash; the bridge has no address, so no route leaks.
#
#   load lib/netns
#   need "root and ip netns" netns_available
#   netns_setup 3 [--rate 1gbit] [--delay 2ms] [--burst 256kb]
#   netns_exec 1 ip addr          # run a command in host 1's namespace
#   netns_addr 1                  # 10.78.0.2
#   netns_fake_ssh "$T/ssh"       # then: collx-run --ssh "$T/ssh" -H "$(netns_hosts)"
#   netns_teardown                # kills what runs inside, removes it all
#
# Shaping: --rate limits every host's link in both directions (tbf on each
# end of its veth); --delay adds one-way delay on every host's sending side,
# so a round trip between two hosts takes twice DELAY. Rates and delays use
# tc's units. netns_can_shape rate|delay says whether the kernel has them.

NETNS_SUBNET=10.78.0

# Root, the ip command, and the kernel's namespaces, bridges and veths.
netns_available() {
	local probe="cxq$$$RANDOM"
	[ "$(id -u)" -eq 0 ] || return 1
	command -v ip >/dev/null 2>&1 || return 1
	ip netns add "$probe" >/dev/null 2>&1 || return 1
	if ! ip link add "${probe:0:12}v" type veth peer name eth0 netns "$probe" \
	    >/dev/null 2>&1; then
		ip netns del "$probe"
		return 1
	fi
	ip netns del "$probe"
	ip link add "${probe:0:12}b" type bridge >/dev/null 2>&1 || return 1
	ip link del "${probe:0:12}b"
}

# Whether tc can do "rate" (tbf) or "delay" (netem) here.
netns_can_shape() {
	local probe="cxs$$$RANDOM" rc qd
	command -v tc >/dev/null 2>&1 || return 1
	case $1 in
	rate) qd="tbf rate 1gbit burst 64kb latency 50ms" ;;
	delay) qd="netem delay 1ms" ;;
	*) return 2 ;;
	esac
	ip link add "${probe:0:12}a" type veth peer name "${probe:0:12}b" \
	    >/dev/null 2>&1 || return 1
	tc qdisc add dev "${probe:0:12}a" root $qd >/dev/null 2>&1
	rc=$?
	ip link del "${probe:0:12}a"
	return $rc
}

netns_name() { echo "cxt$NETNS_TAG-$1"; }
netns_addr() { echo "$NETNS_SUBNET.$(($1 + 1))"; }

# The hosts' addresses as a comma list (for collx-run -H).
netns_hosts() {
	local i out=
	for ((i = 0; i < NETNS_N; i++)); do
		out=$out${out:+,}$(netns_addr "$i")
	done
	echo "$out"
}

netns_exec() {
	local i=$1
	shift
	ip netns exec "$(netns_name "$i")" "$@"
}

# tc qdiscs on one device: netem (delay) at the root, tbf (rate) below it.
_netns_shape_dev() {
	local ns=$1 dev=$2 rate=$3 delay=$4 burst=$5 tcx=(tc)
	[ -n "$ns" ] && tcx=(ip netns exec "$ns" tc)
	if [ -n "$delay" ]; then
		"${tcx[@]}" qdisc add dev "$dev" root handle 1: netem delay "$delay" \
		    limit 100000 || return 1
		[ -z "$rate" ] && return 0
		"${tcx[@]}" qdisc add dev "$dev" parent 1:1 handle 10: tbf \
		    rate "$rate" burst "$burst" latency 200ms
	elif [ -n "$rate" ]; then
		"${tcx[@]}" qdisc add dev "$dev" root tbf rate "$rate" \
		    burst "$burst" latency 200ms
	fi
}

_netns_add_host() {
	local i=$1 rate=$2 delay=$3 burst=$4 ns hostdev
	ns=$(netns_name "$i")
	hostdev="cx${NETNS_TAG}v$i"
	ip netns add "$ns" &&
	ip link add "$hostdev" type veth peer name eth0 netns "$ns" &&
	ip link set "$hostdev" master "cxb$NETNS_TAG" up &&
	ip -n "$ns" link set lo up &&
	ip -n "$ns" addr add "$(netns_addr "$i")/24" dev eth0 &&
	ip -n "$ns" link set eth0 up &&
	_netns_shape_dev "$ns" eth0 "$rate" "$delay" "$burst" &&
	_netns_shape_dev "" "$hostdev" "$rate" "" "$burst"
}

# netns_setup N [--rate R] [--delay D] [--burst B]: sets and exports
# NETNS_TAG and NETNS_N; on failure removes what it made and returns 1.
netns_setup() {
	local n=$1 rate= delay= burst=256kb i
	shift
	while [ $# -gt 0 ]; do
		case $1 in
		--rate) rate=$2 ;;
		--delay) delay=$2 ;;
		--burst) burst=$2 ;;
		*) echo "netns_setup: unknown option $1" >&2; return 2 ;;
		esac
		shift 2
	done
	if ! [[ $n =~ ^[0-9]+$ ]] || [ "$n" -lt 1 ] || [ "$n" -gt 254 ]; then
		echo "netns_setup: want 1 to 254 hosts, not '$n'" >&2
		return 2
	fi
	# 5 hex digits keep "cx<tag>v<i>" within the 15 bytes of a link name.
	NETNS_TAG=$(printf '%05x' $(((RANDOM << 15 ^ RANDOM ^ $$) & 0xfffff)))
	NETNS_N=$n
	export NETNS_TAG NETNS_N
	ip link add "cxb$NETNS_TAG" type bridge || return 1
	ip link set "cxb$NETNS_TAG" up || { netns_teardown; return 1; }
	for ((i = 0; i < n; i++)); do
		_netns_add_host "$i" "$rate" "$delay" "$burst" ||
			{ echo "netns_setup: host $i failed" >&2; netns_teardown; return 1; }
	done
}

# Remove everything netns_setup made, stopping whatever still runs inside.
# Safe under set -e, and when nothing was set up.
netns_teardown() {
	local i ns
	[ -n "${NETNS_TAG:-}" ] || return 0
	for ((i = 0; i < ${NETNS_N:-0}; i++)); do
		ns=$(netns_name "$i")
		ip netns pids "$ns" 2>/dev/null | xargs -r kill -KILL 2>/dev/null || true
		ip netns del "$ns" 2>/dev/null || true
		# Usually gone with its peer; not when the namespace never got it.
		ip link del "cx${NETNS_TAG}v$i" 2>/dev/null || true
	done
	ip link del "cxb$NETNS_TAG" 2>/dev/null || true
	unset NETNS_TAG NETNS_N
	return 0
}

# netns_fake_ssh FILE [LOG]: write a stand-in for ssh: "FILE HOST CMD..."
# runs CMD (joined and read by sh, as sshd does) in HOST's namespace, HOST
# being a host address or namespace name, with a bare environment as a
# remote login would have. Each call appends HOST to LOG when given.
netns_fake_ssh() {
	local file=$1 log=${2:-/dev/null}
	cat >"$file" <<EOF
#!/bin/sh
host=\$1
shift
echo "\$host" >>'$log'
case \$host in
$NETNS_SUBNET.*) ns=cxt$NETNS_TAG-\$((\${host##*.} - 1)) ;;
*) ns=\$host ;;
esac
exec ip netns exec "\$ns" env -i PATH="\$PATH" HOME="\${HOME:-/}" sh -c "\$*"
EOF
	chmod +x "$file"
}

# netns_placed "H0 H1 ..." PROGRAM ARG...: rank i in namespace Hi (ranks
# sharing a namespace are one host), rendezvous at rank 0's host, traffic
# on eth0; statuses in RCS, messages in err.i, output in stdout.i
# (HOST_TIMEOUT: the ranks' COLLX_TIMEOUT, 20).
netns_placed() {
	local place=($1) r pids=()
	shift
	rm -f err.* stdout.*
	for r in "${!place[@]}"; do
		netns_exec "${place[r]}" env COLLX_RANK=$r COLLX_WORLD_SIZE=${#place[@]} \
		    COLLX_MASTER="$(netns_addr "${place[0]}"):29500" \
		    COLLX_TIMEOUT=${HOST_TIMEOUT:-20} \
		    timeout -k 5 60 "$@" --iface eth0 >"stdout.$r" 2>"err.$r" &
		pids+=($!)
	done
	RCS=()
	for r in "${!place[@]}"; do
		wait "${pids[r]}" && RCS+=(0) || RCS+=($?)
	done
}
