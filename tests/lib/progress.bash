# Shared by the dp, tp and pipe suites: the step report of a training
# program on a terminal (script(1) gives it a pty) and elsewhere.

# The summary line in FILE (carriage returns dropped): K steps, the final
# loss the last of the loss CSV, throughput in UNIT/s, times.
# usage: summary_ok PROG K UNIT FILE LOSS.csv
summary_ok() {
	local prog=$1 k=$2 unit=$3 summary last

	last=$(tail -n 1 "$5" | cut -d, -f3)
	summary=$(command tr -d '\r' <"$4" | grep "^$prog: $k steps")
	echo "$summary / $last"
	[[ "$summary" =~ ^$prog:\ $k\ steps,\ final\ loss\ ([0-9.]+),\ mean\ [0-9]+\ $unit/s,\ [0-9.]+\ s,\ [0-9.]+\ s\ \([0-9]+%\)\ in\ communication$ ]]
	"$PY" -c "import sys; assert abs(float(sys.argv[1]) - float(sys.argv[2])) < 1e-6" \
	    "${BASH_REMATCH[1]}" "$last"
}

# The output of a run on a terminal, in FILE: the live line redrawn in
# place (a carriage return before, erase to the end of line after) up to
# step K of K, no newline until the run ends, then the summary (summary_ok).
# NL: the newlines in FILE, the summary's two and any the program writes
# on standard output.
# usage: live_report_ok PROG K UNIT FILE LOSS.csv NL
live_report_ok() {
	local prog=$1 k=$2 unit=$3 f=$4 csv=$5 nl=$6

	grep -q $'\r'"$prog: step $k/$k loss [0-9.]* [0-9]* $unit/s ETA 0:00"$'\e\\[K' "$f"
	# and where OpenBLAS runs kernels slower than the CPU's, the line
	# that says so (bf16.bats pins when)
	nl=$((nl + $(grep -c "^$prog: matmuls: .* runs faster ones)" "$f")))
	[ "$(command tr -cd '\n' <"$f" | wc -c)" -eq "$nl" ]
	summary_ok "$prog" "$k" "$unit" "$f" "$csv"
}

# With -v off a terminal, in FILE: K step lines matching the grep pattern
# LINE, one summary, no carriage return.
# usage: lines_report_ok PROG K LINE FILE
lines_report_ok() {
	[ "$(grep -c "$3" "$4")" -eq "$2" ]
	[ "$(grep -c "^$1: $2 steps, final loss" "$4")" -eq 1 ]
	! grep -q $'\r' "$4" || return 1
}

# A run of PROG with ARGS (K steps of UNIT) in the four ways: on a terminal
# (live_report_ok, NL newlines), -q on a terminal (nothing at all), off a
# terminal (the summary alone on standard error, as a log or a pipe needs
# it) and with -v there (lines_report_ok with LINE). Leaves the loss CSV
# in l.csv, the outputs in tty.out, err.out.
# usage: report_ok PROG K UNIT NL LINE ARGS...
report_ok() {
	local prog=$1 k=$2 unit=$3 nl=$4 line=$5

	shift 5
	timeout 60 script -qec "$prog $* --loss-csv l.csv" /dev/null >tty.out
	live_report_ok "$prog" "$k" "$unit" tty.out l.csv "$nl"
	timeout 60 script -qec "$prog $* -q" /dev/null >tty.out
	[ ! -s tty.out ]
	timeout 60 "$prog" "$@" --loss-csv l.csv 2>err.out >/dev/null
	cat err.out
	[ "$(wc -l <err.out)" -eq 1 ]
	summary_ok "$prog" "$k" "$unit" err.out l.csv
	timeout 60 "$prog" "$@" -v 2>err.out >/dev/null
	lines_report_ok "$prog" "$k" "$line" err.out
}
