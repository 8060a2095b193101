# Shared by the train and train_zero suites: collx-train's clean
# environment, its runs, and their checks against the float64 PyTorch
# reference (piperef.py), collx-dp on one rank (trainref.py) and an
# uninterrupted run (dpref.py).

REF=$COLLX_ROOT/tests/lib/piperef.py
DPREF=$COLLX_ROOT/tests/lib/dpref.py
CHECK=$COLLX_ROOT/tests/lib/trainref.py
GPL=/usr/share/common-licenses/GPL-3

# The environment of a collx-train test: no group variables of the
# caller's.
train_env() {
	common_setup
	unset COLLX_TOKEN COLLX_IFNAME COLLX_TIMEOUT COLLX_MASTER COLLX_RANK \
	    COLLX_WORLD_SIZE
	export PYTHONPATH=$COLLX_ROOT/tests/lib
}

# usage: train WORLD TAG [collx-train options...]: model tTAG, losses lTAG
train() {
	timeout 60 collx-run -n "$1" --timeout 20 -- collx-train -q \
	    -o "t$2.safetensors" --loss-csv "l$2.csv" "${@:3}"
}

# Each mesh of MESHES ("W:collx-train-options" words, options joined by
# commas) trained with the options given; outputs listed in outs.
# usage: meshes "2:--dp,2 4:--dp,2,--pp,2" collx-train-options...
meshes() {
	local spec=$1 m w o tag
	shift
	outs=()
	for m in $spec; do
		w=${m%%:*} o=${m#*:}
		tag=$w$(tr -d ',-' <<<"$o")
		train "$w" "$tag" "$@" ${o//,/ }
		outs+=("t$tag.safetensors" "l$tag.csv")
	done
}

# collx-dp on one rank, then each of outs against it and the reference
# r.safetensors, r.csv (or ra.*, REF_TAG=a).
# usage: check collx-dp-options...
check() {
	timeout 60 collx-dp "$@" -o dp1.safetensors --loss-csv dp1.csv -q
	timeout 60 "$PY" "$CHECK" cmp "r${REF_TAG:-}.safetensors" "r${REF_TAG:-}.csv" \
	    dp1.safetensors dp1.csv "${outs[@]}"
}

# The run resumed on its own mesh after 3 steps (tsame, lsame) has
# tfull's bytes and lfull's losses; each other resumed run of TAGS equals
# tfull within float rounding.
# usage: resumed_equal TAGS
resumed_equal() {
	local t

	cmp tfull.safetensors tsame.safetensors
	[ "$(cut -d, -f1-3 lsame.csv)" = "$(sed -n '1p;5,$p' lfull.csv | cut -d, -f1-3)" ]
	for t in $1; do
		timeout 30 "$PY" "$DPREF" cmp tfull.safetensors "t$t.safetensors" \
		    1e-5 1e-6 >/dev/null
	done
}

# Standard normal f32 X [n, XSHAPE] and Y [n, YSHAPE] (shapes as "4" or
# "5,8") from a seed.
# usage: data N XSHAPE YSHAPE SEED
data() {
	timeout 10 collx-tensor create --shape "$1,$2" --fill randn \
	    --seed "$4" -o X.npy
	timeout 10 collx-tensor create --shape "$1,$3" --fill randn \
	    --seed "$(($4 + 1000))" -o Y.npy
}

# usage: refused WORLD "MESSAGE" collx-train-options...: every rank, each
# started alone (no launcher to stop the others when the first exits, and
# no peer to talk to), exits 3 and says MESSAGE
refused() {
	local w=$1 msg=$2 r rc port
	shift 2
	port=$(free_port)
	for ((r = 0; r < w; r++)); do
		rc=0
		COLLX_RANK=$r COLLX_WORLD_SIZE=$w COLLX_MASTER=127.0.0.1:$port \
		    COLLX_TIMEOUT=10 timeout 30 collx-train "$@" --steps 1 -q \
		    2>err || rc=$?
		echo "rank $r: $rc: $(cat err)"
		[ "$rc" -eq 3 ]
		[ "$(cat err)" = "collx-train: rank $r: $msg" ]
	done
}
