#!/usr/bin/env bats
# collx-dp --sync-every H: local SGD with an outer Nesterov SGD (DiLoCo),
# checked against an independent NumPy local SGD of the mlp
# (tests/lib/dpref.py localsgd) and, for H = 1 with the identity outer
# step, against plain data parallelism byte for byte.
load lib/common
load lib/dpmlp

REF=$COLLX_ROOT/tests/lib/dpref.py

setup() {
	dp_env
	timeout 30 "$PY" "$COLLX_ROOT/tests/lib/moons.py" 200 1 X.npy Y.npy
	timeout 30 collx-dp --init mlp --dims 2,16,1 --seed 3 -o m.safetensors
}

teardown() {
	common_teardown
}

# usage: local_ok TAG WORLD H OUTER_LR OUTER_MOMENTUM [LR [OPTIM]]
local_ok() {
	timeout 60 "$PY" "$REF" localsgd m.safetensors X.npy Y.npy 200 10 \
	    "${6:-0.05}" "$2" "$3" "$4" "$5" "t$1.safetensors" "l$1.csv" "${7:-sgd}"
}

@test "--sync-every 1 --outer-lr 1 --outer-momentum 0: the bytes of plain DP (overlap; ZeRO 2 with bf16)" {
	for s in "" "--zero 2 --momentum 0.9 --wire bf16 --no-overlap"; do
		# shellcheck disable=SC2086
		mlp 2 plain $s
		# shellcheck disable=SC2086
		mlp 2 one $s --sync-every 1 --outer-lr 1 --outer-momentum 0
		cmp tplain.safetensors tone.safetensors
		# the same losses and bytes sent (the seconds differ)
		[ "$(cut -d, -f1-4,7 lplain.csv)" = "$(cut -d, -f1-4,7 lone.csv)" ]
	done
	# the default outer step is not the identity
	mlp 2 outer --sync-every 1
	if cmp -s tplain.safetensors touter.safetensors; then false; fi
}

@test "--sync-every equals NumPy local SGD with outer Nesterov (H 1, 3, 4; 2 and 3 ranks; momentum, AdamW; --wire, int8's bytes, collx-train's alike)" {
	mlp 2 a --sync-every 3
	local_ok a 2 3 0.7 0.9
	# bytes travel only on syncs (steps 2, 5, 8 and the last): 65 f32
	# parameters; every step the loss's f64
	[ "$(tail -n +2 la.csv | cut -d, -f7 | tr '\n' ' ')" = "8 8 268 8 8 268 8 8 268 268 " ]
	mlp 3 b --sync-every 4 --momentum 0.5 --outer-lr 0.5 --outer-momentum 0.8
	local_ok b 3 4 0.5 0.8 0.05 sgd:0.5
	mlp 2 c --sync-every 1
	local_ok c 2 1 0.7 0.9
	mlp 2 d --sync-every 3 --optimizer adamw --lr 0.01 --no-overlap
	local_ok d 2 3 0.7 0.9 0.01 adamw
	# the reference tells H apart
	if local_ok a 2 2 0.7 0.9 >/dev/null; then false; fi
	# the syncs in bf16 and int8: close to f32's, not its bytes
	mlp 2 bf16 --sync-every 3 --optimizer adamw --lr 0.01 --wire bf16
	if cmp -s td.safetensors tbf16.safetensors; then false; fi
	timeout 30 "$PY" "$REF" cmp tbf16.safetensors td.safetensors 1e-2 1e-3
	mlp 2 int8 --sync-every 3 --optimizer adamw --lr 0.01 --wire int8
	if cmp -s td.safetensors tint8.safetensors; then false; fi
	timeout 30 "$PY" "$REF" cmp tint8.safetensors td.safetensors 5e-2 5e-3
	# int8's bytes on the syncs: the 65 floats in 2 chunks of 33, each a
	# scale and 33 values padded to 36 (40 bytes), by alltoall and
	# allgather; every step the loss's f64
	[ "$(tail -n +2 lint8.csv | cut -d, -f7 | tr '\n' ' ')" = "8 8 88 8 8 88 8 8 88 88 " ]
	# collx-train's DP axis syncs the same bytes to the same weights
	timeout 60 collx-run -n 2 --timeout 10 -- collx-train -m m.safetensors \
	    --data X.npy --targets Y.npy --batch 200 --steps 10 --lr 0.01 -q \
	    --optimizer adamw --dp 2 --sync-every 3 --wire int8 \
	    -o ti.safetensors --loss-csv li.csv
	cmp ti.safetensors tint8.safetensors
	[ "$(cut -d, -f1-3,7 li.csv)" = "$(cut -d, -f1-3,7 lint8.csv)" ]
}

# The anchor is the parameters at a checkpoint (taken on syncs only); the
# outer momentum and, when replicas drift, every rank's own inner optimizer
# state go beside them (local.*), so a resumed run takes the same steps.
@test "--sync-every: --checkpoint then --resume gives the bytes of an uninterrupted run" {
	mlp 2 full --sync-every 2 --optimizer adamw --lr 0.01
	mlp 2 half --sync-every 2 --optimizer adamw --lr 0.01 --steps 4 \
	    --checkpoint ck2.safetensors
	timeout 60 collx-run -n 2 --timeout 10 -- collx-dp --resume ck2.safetensors \
	    --data X.npy --targets Y.npy --batch 200 --steps 10 --optimizer adamw \
	    --lr 0.01 --sync-every 2 -o tres.safetensors --loss-csv lres.csv -q
	cmp tfull.safetensors tres.safetensors
	[ "$(tail -n 6 lfull.csv | cut -d, -f1-4,7)" = "$(tail -n +2 lres.csv | cut -d, -f1-4,7)" ]
	info=$(timeout 30 collx-tensor info ck2.safetensors)
	for n in local.outer_m local.inner_m.0 local.inner_m.1 local.inner_v.0 local.inner_v.1; do
		grep -q " $n " <<<"$info"
	done
	# the outer momentum is not zero: a resume that lost it would differ
	"$PY" -c "
import sys; sys.path.insert(0, '$COLLX_ROOT/tests/lib')
from collpy import load_st
t, _ = load_st('ck2.safetensors')
assert abs(t['local.outer_m']).max() > 0"
}

@test "--sync-every: resumes that cannot continue the run are bad input" {
	mlp 2 h2 --sync-every 2 --optimizer adamw --lr 0.01 --steps 4 --checkpoint ck2.safetensors
	mlp 2 plain --optimizer adamw --lr 0.01 --steps 4 --checkpoint ckp.safetensors
	res() {
		local w=$1 ck=$2
		shift 2
		run timeout 60 collx-run -n "$w" --timeout 10 -- collx-dp --resume "$ck" \
		    --data X.npy --targets Y.npy --batch 200 --steps 10 --optimizer adamw \
		    --lr 0.01 -q "$@"
	}
	res 2 ck2.safetensors
	[ "$status" -eq 3 ]
	[[ "$output" == *"rank 0: the checkpoint holds local SGD state; resume it with --sync-every"* ]]
	res 2 ckp.safetensors --sync-every 2
	[ "$status" -eq 3 ]
	[[ "$output" == *"rank 0: the checkpoint holds no local SGD state; resume it without --sync-every"* ]]
	res 2 ck2.safetensors --sync-every 1
	[ "$status" -eq 3 ]
	[[ "$output" == *"rank 0: the checkpoint holds 'local.inner_m.0', state this run's optimizer does not keep"* ]]
	res 3 ck2.safetensors --sync-every 2
	[ "$status" -eq 3 ]
	[[ "$output" == *"the checkpoint does not hold 'local.inner_m' for each of this run's 3 ranks"* ]]
}

@test "--sync-every: combinations that cannot work are usage errors naming both options" {
	dp_usage --outer-lr 0.5
	[ "${lines[0]}" = "collx-dp: --outer-lr and --outer-momentum go with --sync-every" ]
	dp_usage --sync-every 2 --sync ps
	[ "${lines[0]}" = "collx-dp: --sync-every goes with allreduce, not --sync ps" ]
	dp_usage --sync-every 2 --zero 1
	[ "${lines[0]}" = "collx-dp: --sync-every 2 and --zero 1: each replica's own steps need its whole optimizer state" ]
	dp_usage --sync-every 3 --checkpoint ck.safetensors --checkpoint-every 4
	[ "${lines[0]}" = "collx-dp: --checkpoint-every 4 is no multiple of --sync-every 3 (a checkpoint is taken where the replicas have synced)" ]
	dp_usage --sync-every -1
	[[ "${lines[0]}" == "collx-dp: --sync-every"* ]]
	dp_usage --sync-every 2 --outer-momentum 1.5
	[[ "${lines[0]}" == "collx-dp: --outer-momentum"* ]]
}
