# tests/lib/ftsuite.bash: what the suites of collx-dp --ft (ft.bats,
# ft_faults.bats) share: their inputs, set-up and tear-down, the training
# options, a run over namespaces, a run under collx-run --max-restarts.

# The inputs: an MLP, its data and targets (FT_INPUTS).
ft_setup_file() {
	export FT_INPUTS=$BATS_FILE_TMPDIR/in
	mkdir -p "$FT_INPUTS"
	cd "$FT_INPUTS" &&
	collx-dp --init mlp --dims 64,1024,64,4 --seed 1 -o m.safetensors &&
	collx-tensor create --shape 2048,64 --fill randn --seed 3 -o X.npy &&
	collx-tensor create --shape 2048,64 --fill randn --seed 4 -o Y.npy
}

ft_setup() {
	common_setup
	unset COLLX_TOKEN COLLX_IFNAME COLLX_TIMEOUT COLLX_MASTER COLLX_RANK \
	    COLLX_WORLD_SIZE COLLX_JOB_ID
	export COLLX_FR_DIR=$T
	cp "$FT_INPUTS"/* .
	PIDS=()
}

# The losses of a run with failures (FT.csv) against a run without
# (REF.csv), step by step, within 1e-5 + 1e-5 |ref| as the weights are:
# the departed share recomputed sums in another order, and those f32
# differences grow as the loss falls (measured up to 2.8e-5 of a 0.04
# loss, 1.2e-6 absolute, with OpenBLAS's Prescott kernels). Prints each
# step out of tolerance.
# usage: ft_losses_close REF.csv FT.csv
ft_losses_close() {
	paste -d, <(tail -n +2 "$1" | cut -d, -f3) \
	    <(tail -n +2 "$2" | cut -d, -f3) |
	    awk -F, '{ d = $1 - $2; if (d < 0) d = -d; r = $1 < 0 ? -$1 : $1
		if (d > 1e-5 + 1e-5 * r) {
			print "step " NR - 1 ": loss " $2 ", without failures " $1
			bad = 1 } }
		END { exit bad }'
}

# The suites' hooks: ft_setup_file, ft_setup, ft_teardown (a suite
# defines its own after loading this one to do more).
setup_file() { ft_setup_file; }
setup() { ft_setup; }
teardown() { ft_teardown; }

# Every process the test started (PIDS) killed, continued first when
# stopped; the namespaces removed.
ft_teardown() {
	local p
	for p in "${PIDS[@]}"; do
		kill -CONT "$p" 2>/dev/null || true
		kill -KILL "$p" 2>/dev/null || true
	done
	netns_teardown
	common_teardown
}

ARGS=(-m m.safetensors --data X.npy --targets Y.npy --batch 512 --steps 100
    --optimizer adamw --lr 0.001)

# ft_netns FN: FN netns, on 2 namespace hosts (at 1 Gbit/s where tc can
# shape the links).
ft_netns() {
	need "root and ip netns" netns_available
	local shape=()
	netns_can_shape rate && shape+=(--rate 1gbit)
	netns_setup 2 "${shape[@]}"
	"$1" netns
}

# ft_run N OPTION...: collx-run -n 4 --max-restarts N of collx-dp --ft -v
# with the options, writing ft.safetensors and ft.csv, its standard error
# in run.err, in the background: RUN its pid (in PIDS too).
ft_run() {
	local n=$1
	shift
	COLLX_TIMEOUT=10 collx-run -n 4 --max-restarts "$n" -- collx-dp "$@" \
	    --ft -v -o ft.safetensors --loss-csv ft.csv 2>run.err &
	RUN=$!
	PIDS+=("$RUN")
}

# wait_line PATTERN: until run.err has a line matching it (60 s at most)
wait_line() {
	local _
	for _ in $(seq 1200); do
		grep -q "$1" run.err && return 0
		sleep 0.05
	done
	echo "no line '$1' in:" >&2
	cat run.err >&2
	return 1
}

# ft_ends STATUS: the run ($RUN) waited for, its lines shown but the
# step lines, its exit status STATUS.
ft_ends() {
	local rc=0
	wait "$RUN" || rc=$?
	grep -v ': step [0-9]* epoch ' run.err
	[ "$rc" -eq "$1" ]
}

# ft_big_inputs: here, a larger model whose state takes a while to copy
# (big.safetensors), its data and targets (BX.npy, BY.npy).
ft_big_inputs() {
	collx-dp --init mlp --dims 256,4096,256,4 --seed 1 -o big.safetensors &&
	collx-tensor create --shape 512,256 --fill randn --seed 3 -o BX.npy &&
	collx-tensor create --shape 512,256 --fill randn --seed 4 -o BY.npy
}

# copying PID BYTES: until process PID (a rank started again) has taken
# in over BYTES on its TCP links, its copy of the state under way (6 s
# at most: a copy that ended first shows in the test's lines).
copying() {
	local _
	for _ in $(seq 3000); do
		[ "$(ss -tnpiH state established 2>/dev/null |
		    awk -v p="pid=$1," 'index($0, p) { on = 1; next }
		    on && match($0, /bytes_received:[0-9]+/) {
			n += substr($0, RSTART + 15, RLENGTH - 15) }
		    { on = 0 } END { print n + 0 }')" -gt "$2" ] && return 0
		sleep 0.002
	done
}

# ft_as_ref STEPS: ft.safetensors and ft.csv against the run without
# failures (ref.safetensors, ref.csv): weights within 1e-5, every step once
# in order, each loss within 1e-5 of the reference's.
ft_as_ref() {
	collx-tensor diff ref.safetensors ft.safetensors --atol 1e-5 --rtol 0
	[ "$(head -1 ft.csv)" = "step,epoch,loss,tokens,seconds,tokens_per_s,bytes_sent,replicas" ]
	[ "$(tail -n +2 ft.csv | cut -d, -f1 | tr '\n' ' ')" = "$(seq -s ' ' 0 $(($1 - 1))) " ]
	paste -d, <(tail -n +2 ref.csv | cut -d, -f3) \
	    <(tail -n +2 ft.csv | cut -d, -f3) |
	    awk -F, '{ d = $1 - $2; if (d < 0) d = -d; if (d > 1e-5 * $1) exit 1 }'
}
