# Helpers for the collective program suites: launch W local ranks, look at
# their exit statuses and messages, and run Python (with NumPy) to make
# inputs and check results independently of collx.

# pyx CODE: run CODE with collpy's helpers (save, load, same, close...).
pyx() {
	"$PY" -c "import sys; sys.path.insert(0, '$COLLX_ROOT/tests/lib')
from collpy import *
$1"
}

# ranks W PROGRAM ARG...: W local ranks, each under `timeout` (RANK_TIMEOUT,
# default 60 s); rank r's stdout and stderr in stdout.r and err.r (those of
# an earlier call removed first), exit statuses in the array RCS. Extra environment for every rank may come in
# the caller's environment (COLLX_TIMEOUT, say).
ranks() {
	local w=$1 r port pids=()
	shift
	rm -f stdout.* err.*
	port=$(free_port)
	for ((r = 0; r < w; r++)); do
		COLLX_RANK=$r COLLX_WORLD_SIZE=$w COLLX_MASTER=127.0.0.1:$port \
		    timeout -k 5 "${RANK_TIMEOUT:-60}" "$@" >"stdout.$r" 2>"err.$r" &
		pids+=($!)
	done
	RCS=()
	for ((r = 0; r < w; r++)); do
		wait "${pids[r]}" && RCS+=(0) || RCS+=($?)
	done
}

# all_exit CODE: every rank of the last `ranks` exited with CODE.
all_exit() {
	local r
	for r in "${!RCS[@]}"; do
		if [ "${RCS[r]}" != "$1" ]; then
			echo "rank $r exited ${RCS[r]}, wanted $1 (all: ${RCS[*]})"
			tail -n 5 err.* stdout.* 2>/dev/null
			return 1
		fi
	done
}

# ok_ranks W PROGRAM ARG...: ranks, all of which must succeed.
ok_ranks() {
	ranks "$@"
	all_exit 0
}

# each_err PATTERN: every rank's stderr has a line matching PATTERN (ERE).
each_err() {
	local f
	for f in err.*; do
		grep -Eq -- "$1" "$f" || { echo "$f lacks /$1/:"; cat "$f"; return 1; }
	done
}
