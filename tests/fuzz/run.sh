#!/bin/sh
# Run each libFuzzer target for SECONDS from its seed corpus; a crash
# leaves its input in build/fuzz/crash/ and fails the run.
# usage: run.sh SECONDS FUZZER...
secs=$1
shift
root=$(cd "$(dirname "$0")/../.." && pwd)
out=$root/build/fuzz
mkdir -p "$out/crash"
rc=0
for f in "$@"; do
	name=$(basename "$f")
	# New inputs go to a scratch corpus; the tree's seeds stay as they are.
	work=$out/corpus/$name
	mkdir -p "$work"
	echo "fuzz: $name for ${secs}s" >&2
	if ! "$f" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 \
	    -max_len=8192 -print_final_stats=1 \
	    -artifact_prefix="$out/crash/$name-" "$work" \
	    "$root/tests/fuzz/corpus/$name" >"$out/$name.log" 2>&1; then
		echo "fuzz: $name FAILED (see $out/$name.log):" >&2
		grep -E '^(==|SUMMARY|.*runtime error)' "$out/$name.log" | head -n 5 >&2
		rc=1
	else
		grep -E '^stat::number_of_executed_units' "$out/$name.log" |
		    sed "s/^/fuzz: $name: /" >&2
	fi
done
exit $rc
