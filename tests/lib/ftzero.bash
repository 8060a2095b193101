# tests/lib/ftzero.bash: what the suites of collx-dp --ft under ZeRO
# (ft_zero.bats, ft_zero3.bats) share: a run under collx-run, kills at
# step lines or inside a collective, the comparison with a run without
# failures. After lib/ftsuite.

# The mlp of ftsuite (64,1024,64,4): 4 layers of 64*1024+1024+1024*64+64
# = 132160 parameters, a gradient bucket each.
LAYER=132160

# zrun N RESTARTS OPTION...: collx-run -n N --max-restarts RESTARTS of
# collx-dp --ft -v with the options, into ft.safetensors and ft.csv, its
# standard error in run.err, in the background (RUN, in PIDS too).
zrun() {
	local n=$1 k=$2
	shift 2
	COLLX_TIMEOUT=10 collx-run -n "$n" --max-restarts "$k" -- collx-dp \
	    "$@" --ft -v -o ft.safetensors --loss-csv ft.csv 2>run.err &
	RUN=$!
	PIDS+=("$RUN")
}

# kills STEP:RANK...: after each step line, that rank killed (SIGKILL).
kills() {
	local v pid
	for v in "$@"; do
		wait_line "^collx-dp: step ${v%:*} "
		pid=$(rank_pid "$RUN" "${v#*:}")
		kill -KILL "$pid"
	done
}

# same_as_ref STEPS REPLICAS: the weights of the run without failures
# (ref.safetensors, ref.csv) within 1e-5, every step once in order with
# its loss, the last step run by REPLICAS replicas.
same_as_ref() {
	ft_as_ref "$1"
	[ "$(tail -n 1 ft.csv | cut -d, -f8)" = "$2" ]
}

SGD=(--optimizer sgd --momentum 0.9 --lr 0.01)
ADAMW=(--optimizer adamw --lr 0.001)

# kill_in_allgather LOG PID N [WHAT]: SIGKILL PID as soon as LOG (its
# rank's COLLX_DEBUG=trace log) shows the second collective WHAT
# ("allgather of" unless given) after its N-th allreduce of 8 bytes (the
# loss of a step: its agreement passed).
kill_in_allgather() {
	timeout 60 "$PY" -c '
import os, signal, sys, time
path, pid, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
what = sys.argv[4] if len(sys.argv) > 4 else "allgather of"
buf = ""
while True:
    try:
        with open(path) as f:
            f.seek(len(buf))
            buf += f.read()
    except FileNotFoundError:
        pass
    seen = ag = 0
    for line in buf.split("\n")[:-1]:
        if "trace: #" not in line:
            continue
        if "allreduce of 8 bytes" in line:
            seen += 1
        elif what in line and seen >= n:
            ag += 1
            if ag == 2:
                os.kill(pid, signal.SIGKILL)
                sys.exit(0)
    time.sleep(0.001)
' "$@"
}

# neighbours Z WHAT: --zero Z on 4 ranks, ranks 1 and 3 killed at once
# (each slice's mirror lives: the weights of a run without failures),
# then ranks 1 and 2, ring neighbours: slice 2 of WHAT lost, exit 1
# naming it, no outputs.
neighbours() {
	collx-dp "${ARGS[@]}" --steps 40 -q -o ref.safetensors --loss-csv ref.csv
	zrun 4 0 "${ARGS[@]}" --steps 40 --zero "$1"
	wait_line '^collx-dp: step 10 '
	kill -KILL "$(rank_pid "$RUN" 1)" "$(rank_pid "$RUN" 3)"
	ft_ends 0
	same_as_ref 40 2
	rm ft.safetensors ft.csv
	zrun 4 0 "${ARGS[@]}" --steps 40 --zero "$1"
	wait_line '^collx-dp: step 10 '
	kill -KILL "$(rank_pid "$RUN" 1)" "$(rank_pid "$RUN" 2)"
	ft_ends 1
	grep -q "^collx-dp: rank [0-9]: --ft: slice 2 of 4 of the $2 is lost (its owner and the rank before it in the ring, which mirrored it, left at once)\$" run.err
	if [ -e ft.safetensors ]; then false; fi
}
