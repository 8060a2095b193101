#!/bin/bash
# A three-host cluster on one machine: network namespaces on a bridge with
# 1 Gbit/s links (tc), ranks started by collx-run over a stand-in for ssh,
# the group bound to each host's eth0. Shows allreduce busbw per algorithm
# beside the link's limit. Needs root (ip netns); cleans up after itself.
# usage: sudo examples/cluster.sh [RATE]      (default 1gbit)
set -eu
here=$(cd "$(dirname "$0")" && pwd)
export PATH="${COLLX_BIN:-$here/../bin}:$PATH"
rate=${1:-1gbit}
. "$here/../tests/lib/netns.bash"
netns_available || { echo "cluster.sh: needs root and ip netns" >&2; exit 1; }
work=$(mktemp -d)
trap 'netns_teardown; rm -rf "$work"' EXIT
cd "$work"

netns_setup 3 --rate "$rate"
netns_fake_ssh "$work/ssh"
echo "hosts $(netns_hosts), links shaped to $rate"
collx-tensor create --shape $((8 << 20)) --fill 1 -o x.npy	# 32 MiB
for algo in ring rabenseifner tree; do
	collx-run -H "$(netns_hosts)" --ssh "$work/ssh" \
		--master "$(netns_addr 0):29500" -- \
		"$(command -v collx-allreduce)" -i "$work/x.npy" --iface eth0 \
		--algo "$algo" --iters 3 --timing "$work/t.csv" -q
done
# rank 0's rows, grouped by algorithm, fastest first: print each middle one
awk -F, '$4 == 0' t.csv | sort -t, -k3,3 -k10,10g | awk -F, '
	{ n[$3]++; row[$3, n[$3]] = $10 " " $12 }
	END { for (a in n) { split(row[a, int((n[a] + 1) / 2)], v, " ");
		printf "  %-13s median %8.1f ms   busbw %.3f GB/s\n", a, v[1] * 1e3, v[2] } }' | sort
echo "  (a $rate link carries at most $(awk -v r="$rate" 'BEGIN {
	n = r + 0; u = substr(r, length(n) + 1);
	m = (u ~ /^g/) ? 1e9 : (u ~ /^m/) ? 1e6 : (u ~ /^k/) ? 1e3 : 1;
	printf "%.3f", n * m / 8 / 1e9 }') GB/s each way)"
