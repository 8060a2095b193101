# Shared by the dp, localsgd and powersgd suites: a collx-dp test's clean
# environment, and the mlp runs they compare.

# The environment of a collx-dp test: no group variables of the caller's.
dp_env() {
	common_setup
	unset COLLX_TOKEN COLLX_IFNAME COLLX_TIMEOUT COLLX_MASTER COLLX_RANK COLLX_WORLD_SIZE
	need python3-numpy "$PY" -c "import numpy"
}

# The mlp m.safetensors trained on X.npy, Y.npy on W ranks, with
# MLP_TRAIN's batch, steps and learning rate (two-moons: full batch of
# 200, SGD lr 0.05, 10 steps), into tTAG.safetensors and lTAG.csv.
# usage: mlp WORLD TAG [collx-dp options...]
MLP_TRAIN=(--batch 200 --steps 10 --lr 0.05)
mlp() {
	local w=$1 tag=$2
	shift 2
	timeout 60 collx-run -n "$w" --timeout 10 -- collx-dp -m m.safetensors \
	    --data X.npy --targets Y.npy "${MLP_TRAIN[@]}" \
	    -o "t$tag.safetensors" --loss-csv "l$tag.csv" -q "$@"
}

# collx-dp on the mlp with options that must be refused as a usage error.
# usage: dp_usage [collx-dp options...]
dp_usage() {
	run timeout 30 collx-dp -m m.safetensors --data X.npy --targets Y.npy \
	    "${MLP_TRAIN[@]}" "$@"
	[ "$status" -eq 2 ]
}
