#!/usr/bin/env bats
# The documentation runs as written: every command block of README.md and
# of examples/results/README.md and every EXAMPLES block of the man pages
# (man/man1/*.1, man/man7/*.7) runs in a scratch directory, block after
# block as a reader would type them, each block under a time limit. Blocks
# that cannot run here (other hosts, root, benchmarks of minutes) are marked
# in the source, and only those are skipped:
#   Markdown:    <!-- not run: REASON -->   on the line before the fence
#   man pages:   .\" not run: REASON        on the line before .Bd or .Dl
# tests/lib/docblocks.py extracts the blocks (and says what is a command).
load lib/common

setup() {
	common_setup
}

teardown() {
	common_teardown
}

# Seconds one block may run.
BLOCK_LIMIT=${COLLX_DOCS_TIMEOUT:-120}

# run_doc KIND FILE: run the blocks of FILE (relative to the tree) in a
# fresh directory; adds to ran, marked and bad.
run_doc() {
	local kind=$1 file=$2 name work blocks status where base script
	local rc line src
	name=$(basename "$file")
	work=$T/work.$name
	blocks=$T/blocks.$name
	mkdir -p "$work"
	# The README's reader is in a checkout, with the programs in bin/.
	if [ "$kind" = readme ]; then
		ln -s "$COLLX_BIN" "$work/bin"
	fi
	(cd "$COLLX_ROOT" && timeout 60 "$PY" tests/lib/docblocks.py "$kind" "$file" "$blocks") \
	    >"$T/manifest" || { bad="$bad"$'\n'"$file: the extractor failed"; return; }
	export DOCS_ENV=$T/env.$name DOCS_LINE=$T/line DOCS_OUT=$T/shown
	while IFS=$'\t' read -r status where base script; do
		case $status in
		skip)
			marked=$((marked + 1))
			echo "# $where:$base: not run: $script" >&3
			continue ;;
		error)
			bad="$bad"$'\n'"$where:$base: $script"
			continue ;;
		esac
		ran=$((ran + 1))
		rm -f "$DOCS_LINE"
		rc=0
		(cd "$work" && timeout -k 5 "$BLOCK_LIMIT" bash "$script") \
		    >"$T/out" 2>"$T/err" </dev/null || rc=$?
		[ "$rc" -eq 0 ] && continue
		# The source line of the last command the block started.
		line=$(cat "$DOCS_LINE" 2>/dev/null || echo 5)
		src=$((base + line - 5))
		case $rc in
		124) rc="timed out after $BLOCK_LIMIT s" ;;
		97) rc="exit 97"; src=$base ;;
		*) rc="exit $rc" ;;
		esac
		bad="$bad"$'\n'"$where:$src: $rc: $(sed -n "${src}p" "$COLLX_ROOT/$where")"
		bad="$bad"$'\n'"$(tail -n 5 "$T/err" | sed 's/^/    /')"
	done <"$T/manifest"
}

@test "README.md: every command block runs as written" {
	ran=0 marked=0 bad=
	# The reader has not put bin/ on PATH yet: the README says how.
	PATH=${PATH#"$COLLX_BIN:"} run_doc readme README.md
	echo "# README.md: ran $ran blocks, $marked marked not run" >&3
	echo "failing:$bad"
	[ -z "$bad" ]
	[ "$ran" -ge 3 ]
}

# The README is the newcomer's map: it names every program, shows the two
# commands, and its tree names every room of lib/.
@test "README.md names every program, make demo, make check and every room of lib/" {
	bad=
	for c in "$COLLX_ROOT"/bin/collx-*.c; do
		c=$(basename "$c" .c)
		grep -q "\`$c\`" "$COLLX_ROOT/README.md" || bad="$bad $c"
	done
	for d in "$COLLX_ROOT"/lib/*/; do
		d=lib/$(basename "$d")
		grep -qE "^$d +[a-z]" "$COLLX_ROOT/README.md" || bad="$bad $d"
	done
	for m in 'make demo' 'make check'; do
		grep -q "^$m " "$COLLX_ROOT/README.md" || bad="$bad '$m'"
	done
	echo "missing:$bad"
	[ -z "$bad" ]
}

# Every relative link and image of the two Markdown pages names a file of
# the tree (the charts moved once, with their tables).
@test "README.md and examples/results/README.md link only to files that exist" {
	bad=
	for page in README.md examples/results/README.md; do
		dir=$(dirname "$COLLX_ROOT/$page")
		while read -r target; do
			target=${target%%#*}
			[ -n "$target" ] || continue
			[ -e "$dir/$target" ] || bad="$bad $page:$target"
		done < <(grep -oE '\]\([^)]+\)' "$COLLX_ROOT/$page" |
		    sed 's/^](//; s/)$//' | grep -v '^[a-z]*://')
	done
	echo "missing:$bad"
	[ -z "$bad" ]
}

# The measurements' page keeps its command blocks honest too: each runs or
# is marked (the benchmarks are), and none is left without a language.
@test "examples/results/README.md: every command block runs or is marked" {
	ran=0 marked=0 bad=
	run_doc readme examples/results/README.md
	echo "# examples/results/README.md: ran $ran blocks, $marked marked not run" >&3
	echo "failing:$bad"
	[ -z "$bad" ]
	[ "$((ran + marked))" -ge 1 ]
}

# The cluster table is a run of bench-cluster.sh whose CSV
# examples/results/README.md keeps beside it (cluster-RATE.csv): each row's busbw is the
# CSV's 16 MiB out-of-place figure and its latency the 4 KiB one, and
# busbw / goodput their quotient, so the table and its data do not part.
@test "examples/results/README.md: the cluster table holds the figures of its CSV" {
	"$PY" - "$COLLX_ROOT/examples/results/README.md" "$COLLX_ROOT/examples/results" <<'PYEOF'
import csv, re, sys
readme, results = sys.argv[1], sys.argv[2]
rows = [[c.strip() for c in l.split("|")[1:-1]] for l in open(readme)
        if re.match(r"\| 10? Gbit/s \| [0-9.]+ GB/s \|", l)]
assert len(rows) == 6, rows
for link, gp, algo, lat, bw, ratio in rows:
    path = "%s/cluster-%sgbit.csv" % (results, link.split()[0])
    mine = {int(r["bytes"]): r for r in csv.DictReader(open(path))
            if r["algo"] == algo and r["place"] == "out" and r["rank"] == "0"}
    busbw = float(mine[16 << 20]["busbw_gbps"])
    # to 0.001 from the summary's 0.0001 (0.57849 went by 0.5785)
    assert bw.endswith(" GB/s") and \
        abs(float(bw.split()[0]) - busbw) <= 0.00056, (link, algo, bw, busbw)
    us = float(mine[4096]["seconds"]) * 1e6
    assert lat == "%.0f us" % us, (link, algo, lat, us)
    # the goodput as the table rounds it: the quotient to 0.01
    q = busbw / float(gp.split()[0])
    assert abs(float(ratio) - q) <= 0.01, (link, algo, ratio, q)
PYEOF
}

# The slow-link loss table is collx-dp's loss CSVs kept in
# examples/results/dp-loss: the last step's loss, the mean of the last 20,
# the change of that mean from plain's and the megabytes rank 0 sent.
@test "examples/results/README.md: the slow-link loss table holds the figures of dp-loss/" {
	"$PY" - "$COLLX_ROOT/examples/results/README.md" "$COLLX_ROOT/examples/results/dp-loss" <<'PYEOF'
import csv, re, sys
readme, results = sys.argv[1], sys.argv[2]
files = {"plain": "plain", "`--wire bf16`": "wire-bf16",
         "`--wire int8`": "wire-int8",
         "`--powersgd 4` (from step 10)": "powersgd-4",
         "`--sync-every 16`": "sync-every-16"}
rows = [[c.strip() for c in l.split("|")[1:-1]] for l in open(readme)]
rows = [r for r in rows if len(r) == 5 and r[0] in files]
assert len(rows) == 5, rows
base = None
for name, last, mean, change, mb in rows:
    data = list(csv.DictReader(open("%s/%s.csv" % (results, files[name]))))
    loss = [float(r["loss"]) for r in data]
    assert len(loss) == 200, name
    m = sum(loss[-20:]) / 20
    base = base or m
    assert last == "%.4f" % loss[-1] and mean == "%.4f" % m, (name, last, mean)
    assert change == ("" if m == base else "%+.1f%%" % (100 * (m / base - 1))), \
        (name, change)
    assert mb == "%.0f" % (sum(int(r["bytes_sent"]) for r in data) / 1e6), \
        (name, mb)
PYEOF
}

@test "every man page's EXAMPLES run as written" {
	ran=0 marked=0 bad=
	for page in "$COLLX_ROOT"/man/man1/*.1 "$COLLX_ROOT"/man/man7/*.7; do
		run_doc man "${page#"$COLLX_ROOT"/}"
	done
	echo "# man pages: ran $ran blocks, $marked marked not run" >&3
	echo "failing:$bad"
	[ -z "$bad" ]
	[ "$ran" -ge 10 ]
}

@test "the extractor: commands, output, markers, and what it refuses" {
	cat >page.1 <<'PAGE'
.Dd January 1, 2000
.Dt X 1
.Os
.Sh EXAMPLES
.Bd -literal
$ echo 'a \e
  b' >x.txt
$ cat x.txt
a \e
  b
.Ed
.\" not run: needs hosts
.Bd -literal
$ ssh node1 true
.Ed
.Dl $ true
.Bd -literal
node1$ ssh node2 true
.Ed
.\" not run: stray
.Pp
.Sh SEE ALSO
PAGE
	timeout 60 "$PY" "$COLLX_ROOT/tests/lib/docblocks.py" man page.1 blocks >manifest
	cat manifest
	[ "$(cut -f1,3 manifest | tr '\t\n' ':,')" = "run:6,skip:14,run:16,error:18,error:20," ]
	# The command and its continuation lines at their lines; the one
	# whose output the page shows is grouped to compare it; output blanked.
	[ "$(sed -n '5,6p' blocks/001.sh)" = "echo 'a \\
  b' >x.txt" ]
	[[ "$(sed -n 7p blocks/001.sh)" == '{ cat x.txt ; } >"$DOCS_OUT"; docs_expect '* ]]
	[ -z "$(sed -n '8,9p' blocks/001.sh | tr -d '\n')" ]
	DOCS_ENV=$T/env DOCS_LINE=$T/line DOCS_OUT=$T/shown timeout 20 bash blocks/001.sh
	grep -qx 'true' blocks/002.sh
	cat >README.md <<'MD'
```sh
echo hi
```
<!-- not run: needs root -->
```sh
sudo true
```
```text
lib/   not a command
```
```
no language
```

    indented
MD
	timeout 60 "$PY" "$COLLX_ROOT/tests/lib/docblocks.py" readme README.md rblocks >manifest
	cat manifest
	[ "$(cut -f1,3 manifest | tr '\t\n' ':,')" = "run:2,skip:6,error:11,error:15," ]
}

@test "the output a page shows is compared with what the command prints" {
	for shown in hi ho; do
		cat >page.1 <<PAGE
.Dd January 1, 2000
.Dt X 1
.Os
.Sh EXAMPLES
.Bd -literal
\$ echo hi
$shown
\$ printf 'b\\ena\\en'
a
b
.Ed
PAGE
		timeout 60 "$PY" "$COLLX_ROOT/tests/lib/docblocks.py" man page.1 "b.$shown" >manifest
		rc=0
		DOCS_ENV=$T/env DOCS_LINE=$T/line DOCS_OUT=$T/shown \
		    timeout 20 bash "b.$shown/001.sh" 2>err || rc=$?
		cat err
		if [ "$shown" = hi ]; then
			[ "$rc" -eq 0 ]
		else
			[ "$rc" -ne 0 ]
			grep -q 'the output differs from the page' err
			# Script line 5 is the page's line 6, the command.
			[ "$(cat "$T/line")" -eq 5 ]
		fi
	done
}
