#!/bin/bash
# The planner's validation (issue 34): fit a cost model for each model,
# predict every mesh collx-bench mesh runs, run them, and print per model
# the median and worst absolute error of predicted against measured step
# and whether the predicted fastest mesh is the measured fastest (or
# within 5% of it). Targets: median <= 10%, worst <= 25%, fastest within
# 5%. Run it on an idle machine: a busy one moves millisecond steps by
# tens of percent, and the fit and the runs then see different machines.
#
# Cases:
#   local    W ranks of this host: `collx-bench plan --validate`
#   netns    2 network namespaces x 2 ranks, at 1 and at 10 Gbit/s (tc's
#            tbf, no delay; tests/lib/netns.bash), DP and PP across them
#   cluster  3 namespaces x NS3_RANKS ranks (2), at 10 Gbit/s
#   all      the three
# On namespaces, `collx-bench fit -H` (one rank a namespace) measures the
# tcp link, `collx-bench mesh -H` runs the meshes and `collx-bench plan
# --hosts H --ranks-per-host L` predicts them; this script joins the two
# by mesh. The namespaces share this machine's cores, so the compute (and
# shm) part of their cost model comes from a local fit of the same world,
# its cores divided among the namespaces (cores and compute.ranks over H:
# a namespace host is a share of the machine, not a machine).
# The namespace cases need root and ip netns; they are skipped, saying so,
# without them.
#
# Results in OUTDIR/CASE: cost-MODEL.json, validate-MODEL.csv (plan's CSV
# with measured_s and error), predicted-MODEL.svg and breakdown-MODEL.svg
# (collx-plot, with gnuplot), and OUTDIR/summary.txt (the verdict lines,
# the load before and after).
# usage: examples/bench-plan.sh [local|netns|cluster|all] [OUTDIR]
#   env W=4 (local ranks), STEPS=8 (per run, the first not timed),
#   REPEAT=3 (rounds at most), NS3_RANKS=2, FIT_MAX=16M (namespaces'
#   largest fitted size; local: 64M), COLLX_BIN=DIR (default bin/)
set -eu
what=${1:-local}
out=${2:-bench-out/plan}
here=$(cd "$(dirname "$0")" && pwd)
bin=${COLLX_BIN:-$here/../bin}
W=${W:-4}
STEPS=${STEPS:-8}
REPEAT=${REPEAT:-3}
NS3_RANKS=${NS3_RANKS:-2}
FIT_MAX=${FIT_MAX:-16M}
PY=/usr/bin/python3
case $what in
local | netns | cluster | all) ;;
*) echo "usage: bench-plan.sh [local|netns|cluster|all] [OUTDIR]" >&2
   exit 2 ;;
esac
mkdir -p "$out"
out=$(cd "$out" && pwd)
work=$(mktemp -d)
. "$here/../tests/lib/netns.bash"
trap '[ -z "${NETNS_TAG:-}" ] || netns_teardown; rm -rf "$work"' EXIT
load() { cut -d' ' -f1-3 /proc/loadavg; }
echo "# $(date -u +%FT%TZ) $(nproc) cores, load $(load), $what" |
    tee -a "$out/summary.txt"

# The two models: a gpt whose every mesh of 4 collx-train admits (4 heads,
# 4 layers) and an mlp of 4 layers. name arch dims batch
MODELS="gpt gpt 256,128,4,4,64 32
mlp mlp 256,1024,256,4 256"

plots() {	# dir name
	command -v gnuplot >/dev/null || return 0
	"$bin/collx-plot" -q "$1/validate-$2.csv" -o "$1/predicted-$2.svg"
	"$bin/collx-plot" -q "$1/plan-$2.csv" -o "$1/breakdown-$2.svg"
}

# local: plan --validate does it all
run_local() {
	local d=$out/local name arch dims batch
	mkdir -p "$d"
	while read -r name arch dims batch; do
		"$bin/collx-bench" fit -N "$W" --arch "$arch" --dims "$dims" -q \
		    -o "$d/cost-$name.json"
		"$bin/collx-bench" plan --cost "$d/cost-$name.json" --hosts 1 \
		    --ranks-per-host "$W" --arch "$arch" --dims "$dims" \
		    --batch "$batch" --validate --steps "$STEPS" \
		    --repeat "$REPEAT" --csv \
		    >"$d/validate-$name.csv" 2>"$d/verdict-$name.txt"
		"$bin/collx-bench" plan --cost "$d/cost-$name.json" --hosts 1 \
		    --ranks-per-host "$W" --arch "$arch" --dims "$dims" \
		    --batch "$batch" --top 20 --csv >"$d/plan-$name.csv"
		echo "local $W ranks, $name ($dims, batch $batch):" \
		    "$(cut -d: -f3- "$d/verdict-$name.txt")" |
		    tee -a "$out/summary.txt"
		plots "$d" "$name"
	done <<<"$MODELS"
}

# The local fit's compute and shm beside the namespaces' tcp, the cores
# a namespace's share: merge LOCAL NS H OUT
merge() {
	"$PY" - "$@" <<-'EOF'
	import json, sys
	loc, ns, h = json.load(open(sys.argv[1])), json.load(open(sys.argv[2])), int(sys.argv[3])
	c = dict(loc)
	c["hosts"] = h
	c["cores"] = max(1, loc["cores"] // h)
	c["compute"] = dict(loc["compute"])
	c["compute"]["ranks"] = max(1, loc["compute"].get("ranks", 1) // h)
	c["links"] = dict(loc["links"], tcp=ns["links"]["tcp"])
	c["collectives"] = dict(loc["collectives"], tcp=ns["collectives"]["tcp"])
	json.dump(c, open(sys.argv[4], "w"), indent=1)
	EOF
}

# plan's rows that mesh runs (ZeRO 0, 1F1B, P micro-batches, no cp or
# ep) beside mesh's measured medians, joined by dp, tp, pp: plan's CSV
# with measured_s and error, and the verdict line as plan --validate's
join_rows() {	# plan.csv mesh.csv out.csv
	"$PY" - "$@" <<-'EOF'
	import csv, statistics, sys
	plan = list(csv.DictReader(open(sys.argv[1])))
	meas = {}
	for r in csv.DictReader(open(sys.argv[2])):
	    meas[(r["dp"], r["tp"], r["pp"])] = float(r["seconds"])
	rows = [r for r in plan if r["zero"] == "0" and r["sched"] == "1f1b"
	        and r["micro"] == r["pp"] and r["cp"] == "1" and r["ep"] == "1"
	        and (r["dp"], r["tp"], r["pp"]) in meas]
	w = csv.writer(open(sys.argv[3], "w"), lineterminator="\n")
	w.writerow(list(plan[0].keys()) + ["measured_s", "error"])
	err = []
	for r in rows:
	    m = meas[(r["dp"], r["tp"], r["pp"])]
	    e = (float(r["seconds"]) - m) / m
	    err.append(e)
	    w.writerow(list(r.values()) + ["%.6g" % m, "%.4f" % e])
	if not rows:
	    sys.exit("no mesh both planned and measured")
	pf = rows[0]
	mf = min(rows, key=lambda r: meas[(r["dp"], r["tp"], r["pp"])])
	k = lambda r: (r["dp"], r["tp"], r["pp"])
	print("%d meshes: median |error| %.1f%%, worst %.1f%%; predicted "
	      "fastest %s, measured fastest %s (the predicted one %.1f%% "
	      "slower)" % (len(rows), statistics.median(abs(e) for e in err)
	      * 100, max(abs(e) for e in err) * 100, pf["algo"], mf["algo"],
	      (meas[k(pf)] / meas[k(mf)] - 1) * 100))
	EOF
}

# H namespaces of L ranks at RATE: fit, mesh, plan, join. case H L RATE
run_ns() {
	local tag=$1 H=$2 L=$3 rate=$4 d=$out/$1 name arch dims batch
	local hosts one master
	mkdir -p "$d"
	netns_setup "$H" --rate "$rate"
	netns_fake_ssh "$work/ssh"
	hosts=$(netns_hosts | sed "s/\\([^,]*\\)/\\1:$L/g")
	one=$(netns_hosts)
	master="$(netns_addr 0):29500"
	while read -r name arch dims batch; do
		batch=$((batch * H * L / 4))
		"$bin/collx-bench" fit -N $((H * L)) --arch "$arch" \
		    --dims "$dims" -q -o "$d/local-$name.json"
		TMPDIR=$work "$bin/collx-bench" fit -H "$one" --ssh "$work/ssh" \
		    --master "$master" --iface eth0 --arch "$arch" \
		    --dims "$dims" -e "$FIT_MAX" -q -o "$d/ns-$name.json"
		merge "$d/local-$name.json" "$d/ns-$name.json" "$H" \
		    "$d/cost-$name.json"
		TMPDIR=$work "$bin/collx-bench" mesh -H "$hosts" \
		    --ssh "$work/ssh" --master "$(netns_addr 0):29600" \
		    --iface eth0 --arch "$arch" --dims "$dims" \
		    --batch "$batch" --steps "$STEPS" --repeat "$REPEAT" -q \
		    --csv >"$d/mesh-$name.csv"
		"$bin/collx-bench" plan --cost "$d/cost-$name.json" \
		    --hosts "$H" --ranks-per-host "$L" --arch "$arch" \
		    --dims "$dims" --batch "$batch" --top 100000 --csv \
		    >"$d/plan-all-$name.csv"
		head -21 "$d/plan-all-$name.csv" >"$d/plan-$name.csv"
		echo "$tag: $H namespaces x $L ranks at $rate, $name ($dims," \
		    "batch $batch): $(join_rows "$d/plan-all-$name.csv" \
		    "$d/mesh-$name.csv" "$d/validate-$name.csv")" |
		    tee -a "$out/summary.txt"
		plots "$d" "$name"
	done <<<"$MODELS"
	netns_teardown
	unset NETNS_TAG
}

ns_ok() {
	netns_available && netns_can_shape rate && return 0
	echo "bench-plan.sh: $1 skipped: needs root, ip netns and tc's tbf" |
	    tee -a "$out/summary.txt" >&2
	return 1
}

case $what in local | all) run_local ;; esac
case $what in netns | all)
	if ns_ok netns; then
		run_ns netns-1g 2 2 1gbit
		run_ns netns-10g 2 2 10gbit
	fi ;;
esac
case $what in cluster | all)
	if ns_ok cluster; then
		run_ns cluster 3 "$NS3_RANKS" 10gbit
	fi ;;
esac
echo "# load after: $(load)" | tee -a "$out/summary.txt"
