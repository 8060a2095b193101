#!/usr/bin/env bats
# examples/bench-cp.sh's sp part (ONLY=sp, one host): every figure of its
# table the median of its rounds in the raw rows, comm alone 4 allgathers
# and 4 reduce-scatters, the ratios their quotients; OLD_BIN's column.

load lib/common

setup() {
	common_setup
}

teardown() {
	common_teardown
}

@test "bench-cp.sh ONLY=sp: the sp table from the raw rows, comm alone beside none's comm, OLD_BIN interleaved" {
	run timeout 300 env ONLY=sp NETNS=no SP_SEQ=64 OUT="$T/out" \
	    OLD_BIN="$COLLX_BIN" "$COLLX_ROOT/examples/bench-cp.sh" 3 1
	[ "$status" -eq 0 ] || { echo "$output"; false; }
	echo "$output" >"$T/table"
	"$PY" - "$T/table" "$T/out/results.csv" <<'PYEOF'
import statistics, sys
table, raw = sys.argv[1], sys.argv[2]
rows = [l.rstrip("\n").split(",") for l in open(raw)]
# ONLY=sp: the sp runs alone, 3 rounds of each, on one host
modes = sorted(set(r[2] for r in rows))
assert modes == ["sp comm alone", "sp overlap none", "sp overlap ring",
                 "sp overlap ring old"], modes
assert all(r[0] == "host" and r[7] == "64" for r in rows)
def med(mode, col):
    v = [float(r[col]) for r in rows if r[2] == mode]
    assert len(v) == 3, (mode, v)
    # the awk median of an odd count is the middle value
    return statistics.median(v)
line = [l for l in open(table) if l.startswith("| one host |")]
assert len(line) == 1, line
f = [x.strip() for x in line[0].strip().strip("|").split("|")]
n, m, a, c = (med("sp overlap none", 4), med("sp overlap none", 8),
              med("sp comm alone", 8), med("sp overlap none", 9))
o, g = med("sp overlap ring", 4), med("sp overlap ring old", 4)
for got, want in zip(f[1:6], (n, m, a, c, o)):
    assert abs(float(got) - want) < 1e-4, (f, got, want)
# comm alone: 4 x (allgather + reduce-scatter), rank 0's median of each
# in that round's kept rows
import csv, os
for r in rows:
    if r[2] != "sp comm alone":
        continue
    t = []
    for op in ("ag", "rs"):
        with open(os.path.join(os.path.dirname(raw), "%s.host.%s.csv" % (op, r[3]))) as fh:
            v = [float(x["seconds"]) for x in csv.DictReader(fh) if x["rank"] == "0"]
        assert len(v) == 1, v	# ITERS = 1
        t.append(statistics.median(v))
    assert abs(float(r[4]) - 4 * sum(t)) < 1e-6 and r[4] == r[8], (r, t)
for got, want in ((f[6], o / max(m, c)), (f[7], o / max(a, c)),
                  (f[10], g / max(a, c))):
    assert abs(float(got.rstrip("x")) - round(want, 2)) <= 0.011, (f, got, want)
assert abs(float(f[9]) - g) < 1e-4, (f, g)
# the ring's hidden share: hidden over hidden + exposed of its rows
h = med("sp overlap ring", 5)
assert 0 <= h <= 1 and abs(float(f[8].rstrip("%")) - 100 * h) <= 0.51, (f, h)
PYEOF
	# nothing of the other parts ran
	if grep -q "zigzag" "$T/out/results.csv"; then false; fi
}

@test "bench-cp.sh: ONLY is sp or unset" {
	run timeout 30 env ONLY=zigzag NETNS=no "$COLLX_ROOT/examples/bench-cp.sh" 1 1
	[ "$status" -eq 2 ]
	[ "$output" = "bench-cp.sh: ONLY is sp or unset" ]
}
