# Shared by collx-tp's suites (tp.bats, tp_seq.bats): runs of collx-tp on
# WORLD local ranks, the independent torch reference (tests/lib/tpref.py,
# float64) queued in one batch, and the check that bad input is refused
# on every rank before any communication.
PY=/usr/bin/python3
REF=$COLLX_ROOT/tests/lib/tpref.py

setup() {
	common_setup
	unset COLLX_TOKEN COLLX_IFNAME COLLX_TIMEOUT COLLX_MASTER COLLX_RANK COLLX_WORLD_SIZE
	nrun=0
	rm -f batch
}

teardown() {
	common_teardown
}

# usage: tp WORLD collx-tp-options...
tp() {
	local w=$1
	shift
	timeout 60 collx-run -n "$w" --timeout 20 -- collx-tp -q "$@"
}

ref() {
	timeout 120 "$PY" "$REF" "$@"
}

# A fresh directory holding the current inputs, named in $d.
rundir() {
	nrun=$((nrun + 1))
	d=run$nrun
	mkdir "$d" && cp w.safetensors X.npy DY.npy T.npy "$d"/
}

# Forward and backward of LAYER on WORLD ranks, queued for the torch
# comparison that batch_ok makes (torch takes seconds to import).
# usage: fb WORLD LAYER MODE "collx options" "tpref options"
fb() {
	rundir
	echo "# $d: $*"
	tp "$1" --layer "$2" --mode "$3" -m "$d/w.safetensors" -i "$d/X.npy" \
	    -o "$d/Y.npy" --backward --grad-output "$d/DY.npy" \
	    --grad-input "$d/DX.npy" --grad-weights "$d/GW.safetensors" $4
	echo "check $2 $d $5" >>batch
}

batch_ok() {
	ref batch batch
}

# usage: refused WORLD MESSAGE collx-tp-options...: every rank exits 3
# with MESSAGE before it reaches for the others (the rendezvous address
# has no listener), and writes no output.
refused() {
	local w=$1 msg=$2 r
	shift 2
	for ((r = 0; r < w; r++)); do
		run timeout 20 collx-tp --rank "$r" --world-size "$w" \
		    --master 127.0.0.1:9 --timeout 5 -o Y.npy "$@"
		echo "# rank $r: $status: $output"
		[ "$status" -eq 3 ]
		[[ "$output" == "collx-tp: "*"$msg"* ]]
		[ ! -e Y.npy ]
	done
}
