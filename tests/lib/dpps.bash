# Shared by the dp, ps and faults suites: background processes waited for with a
# time bound, so a test can kill one process and time the others' exit.

# Exit status of background PID within LIMIT seconds; 124 (after killing
# it) when it is still running by then.
wait_pid() {
	local pid=$1 end=$((SECONDS + $2))

	while kill -0 "$pid" 2>/dev/null; do
		# an exited child not yet reaped still answers kill -0
		[ "$(cut -d' ' -f3 "/proc/$pid/stat" 2>/dev/null)" = Z ] && break
		if [ "$SECONDS" -ge "$end" ]; then
			echo "# pid $pid still running: $(cat "/proc/$pid/wchan" 2>/dev/null) $(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null)" >&2
			kill -KILL "$pid" 2>/dev/null
			wait "$pid" 2>/dev/null
			return 124
		fi
		sleep 0.1
	done
	wait "$pid"
}

# Kill whatever of PIDS still runs (teardown).
reap() {
	local p

	for p in "$@"; do
		kill -KILL "$p" 2>/dev/null
	done
	return 0
}
