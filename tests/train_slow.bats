#!/usr/bin/env bats
# collx-train's DP axis for slow links: --wire, --powersgd and --sync-every
# on dp2 and dp2 x pp2 (and dp2 x tp2 for --sync-every and --wire), against
# the references collx-dp's suites use (PyTorch's powerSGD_hook:
# tests/lib/psgdref.py; NumPy local SGD: tests/lib/dpref.py localsgd), and
# where exactness is defined against collx-dp's bytes with the same options
# on the same model and data, or plain DP's; refused combinations.
load lib/common

PSGDREF=$COLLX_ROOT/tests/lib/psgdref.py
DPREF=$COLLX_ROOT/tests/lib/dpref.py

setup() {
	common_setup
	unset COLLX_TOKEN COLLX_IFNAME COLLX_TIMEOUT COLLX_MASTER COLLX_RANK \
	    COLLX_WORLD_SIZE
	need python3-numpy "$PY" -c "import numpy"
	# the mlp of collx-dp's PowerSGD suite, and a stack of two of its
	# layers for the pipeline: fc1 64x8 and fc2 8x64 compress at rank 1
	timeout 30 collx-dp --init mlp --dims 8,64,8 --seed 3 -o m.safetensors
	timeout 30 collx-dp --init mlp --dims 8,64,8,2 --seed 3 -o s.safetensors
	timeout 30 collx-tensor create --shape 200,8 --fill randn --seed 4 -o X.npy
	timeout 30 collx-tensor create --shape 200,8 --fill randn --seed 5 -o Y.npy
}

teardown() {
	common_teardown
}

# usage: train WORLD TAG MODEL [collx-train options...]: tTAG, lTAG.csv
train() {
	timeout 60 collx-run -n "$1" --timeout 10 -- collx-train -m "$3" \
	    --data X.npy --targets Y.npy --batch 20 --steps 8 --lr 0.1 -q \
	    -o "t$2.safetensors" --loss-csv "l$2.csv" "${@:4}"
}

# usage: dp TAG MODEL [collx-dp options...]: collx-dp on 2 ranks, dTAG
dp() {
	timeout 60 collx-run -n 2 --timeout 10 -- collx-dp -m "$2" \
	    --data X.npy --targets Y.npy --batch 20 --steps 8 --lr 0.1 -q \
	    -o "d$1.safetensors" --loss-csv "d$1.csv" "${@:3}"
}

# usage: same TAG MODEL CSV: tTAG.safetensors is MODEL byte for byte, and
# lTAG.csv has CSV's losses (and its bytes sent, with a fourth word: on
# dp2, where all that rank 0 sends is the DP axis's)
same() {
	local f=1-3${4:+,7}

	cmp "t$1.safetensors" "$2.safetensors"
	[ "$(cut -d, -f"$f" "l$1.csv")" = "$(cut -d, -f"$f" "$3")" ]
}

@test "--wire f32 and --sync-every 1 --outer-lr 1 --outer-momentum 0 train plain DP's bytes (dp2, dp2 x pp2)" {
	train 2 p m.safetensors --dp 2
	train 2 f m.safetensors --dp 2 --wire f32
	train 2 o m.safetensors --dp 2 --sync-every 1 --outer-lr 1 --outer-momentum 0
	same f tp lp.csv bytes
	same o tp lp.csv bytes
	train 4 pp s.safetensors --dp 2 --pp 2 --microbatches 2
	train 4 op s.safetensors --dp 2 --pp 2 --microbatches 2 \
	    --sync-every 1 --outer-lr 1 --outer-momentum 0
	same op tpp lpp.csv
}

@test "--powersgd equals torch's powerSGD_hook (dp2) and collx-dp's bytes (dp2 x pp2); plain before --powersgd-start" {
	need python3-torch "$PY" -c "import torch"
	train 2 a m.safetensors --dp 2 --powersgd 3 --powersgd-start 2
	# collx-train draws the first Qs as collx-dp --seed 0 does
	timeout 120 "$PY" "$PSGDREF" m.safetensors X.npy Y.npy 20 8 0.1 3 2 0 \
	    ta.safetensors la.csv
	# plain: 1096 f32 and the loss (8); then P and Q of both matrices
	# (64x2 + 8x2, twice) and the 72 biases: 360 f32 (powersgd.bats)
	train 2 b m.safetensors --dp 2 --powersgd 2 --powersgd-start 3
	[ "$(tail -n +2 lb.csv | cut -d, -f7 | tr '\n' ' ')" = "4392 4392 4392 1448 1448 1448 1448 1448 " ]
	train 4 c s.safetensors --dp 2 --pp 2 --powersgd 2 --powersgd-start 2
	dp c s.safetensors --powersgd 2 --powersgd-start 2
	same c dc dc.csv
}

@test "--sync-every equals NumPy local SGD with outer Nesterov (dp2), collx-dp's bytes (dp2 x pp2), close to it (dp2 x tp2)" {
	timeout 30 "$PY" "$COLLX_ROOT/tests/lib/moons.py" 200 1 M.npy N.npy
	timeout 30 collx-dp --init mlp --dims 2,16,1 --seed 3 -o moons.safetensors
	timeout 60 collx-run -n 2 --timeout 10 -- collx-train -m moons.safetensors \
	    --data M.npy --targets N.npy --batch 200 --steps 10 --lr 0.05 -q \
	    --dp 2 --sync-every 3 -o ta.safetensors --loss-csv la.csv
	timeout 60 "$PY" "$DPREF" localsgd moons.safetensors M.npy N.npy 200 10 \
	    0.05 2 3 0.7 0.9 ta.safetensors la.csv sgd
	# bytes travel only on syncs (steps 2, 5 and the last): 65 f32
	# parameters; every step the loss's f64
	[ "$(tail -n +2 la.csv | cut -d, -f7 | tr '\n' ' ')" = "8 8 268 8 8 268 8 8 268 268 " ]
	train 4 b s.safetensors --dp 2 --pp 2 --sync-every 3 --momentum 0.5
	dp b s.safetensors --sync-every 3 --momentum 0.5
	same b db db.csv
	train 4 c s.safetensors --dp 2 --tp 2 --sync-every 3 --momentum 0.5
	if cmp -s tb.safetensors tc.safetensors; then false; fi
	timeout 30 "$PY" "$DPREF" cmp tc.safetensors db.safetensors 1e-4 1e-5
}

@test "--wire bf16 gives collx-dp's bytes (dp2, dp2 x pp2; within 1e-7 on dp2 x tp2, where f32 is not)" {
	dp b s.safetensors --wire bf16
	train 2 b s.safetensors --dp 2 --wire bf16
	same b db db.csv bytes
	train 4 p s.safetensors --dp 2 --pp 2 --wire bf16
	same p db db.csv
	# TP's sums round otherwise (about 3e-9 here); f32 is 5e-5 away
	train 4 t s.safetensors --dp 2 --tp 2 --wire bf16
	timeout 30 "$PY" "$DPREF" cmp tt.safetensors db.safetensors 0 1e-7
	train 4 u s.safetensors --dp 2 --tp 2
	if timeout 30 "$PY" "$DPREF" cmp tu.safetensors db.safetensors 0 1e-7; then false; fi
}

# usage: dp3 TAG MODEL [collx-dp options...]: collx-dp on 3 ranks, dTAG
dp3() {
	timeout 60 collx-run -n 3 --timeout 10 -- collx-dp -m "$2" \
	    --data X.npy --targets Y.npy --batch 20 --steps 8 --lr 0.1 -q \
	    -o "d$1.safetensors" --loss-csv "d$1.csv" "${@:3}"
}

@test "--wire int8 gives collx-dp's bytes (dp2, dp3; weights, losses and bytes sent), error feedback and all" {
	# int8 on dp2: the 1096 gradients in 2 chunks of 548, each 3 scales
	# and 548 values (560 bytes), sent by alltoall and allgather; the loss
	dp i m.safetensors --wire int8
	train 2 i m.safetensors --dp 2 --wire int8
	same i di di.csv bytes
	[ "$(tail -n +2 li.csv | cut -d, -f7 | sort -u)" = 1128 ]
	dp3 j s.safetensors --wire int8
	train 3 j s.safetensors --dp 3 --wire int8
	same j dj dj.csv bytes
	# plain f32 on dp3 too: the buckets, and so the algorithms, are one
	dp3 k s.safetensors
	train 3 k s.safetensors --dp 3
	same k dk dk.csv bytes
	# error feedback keeps int8 within 1.5e-4 of f32 here (7e-5; without
	# it 3.7e-4)
	train 2 f m.safetensors --dp 2
	if cmp -s ti.safetensors tf.safetensors; then false; fi
	timeout 30 "$PY" "$DPREF" cmp ti.safetensors tf.safetensors 0 1.5e-4
}

@test "--wire int8 on dp2 x tp2 trains (replicated tensors in buckets of their own), the buckets' closed-form bytes, close to collx-dp's int8" {
	train 4 t s.safetensors --dp 2 --tp 2 --wire int8 --timing tm.csv
	# the DP axis's bytes, every rank and step: per layer and TP rank,
	# buckets of fc1's shards (32 + 256), fc2's replicated bias (8) and
	# fc2's weight shard (256): chunks of 144, 4 and 128 floats, each a
	# scale and its values (148, 8, 132 bytes), sent by alltoall and
	# allgather; two layers, and the loss's f64
	[ "$(awk -F, '$13 == "dp" { print $8 }' tm.csv | sort -u)" = 1160 ]
	dp t s.safetensors --wire int8
	dp f s.safetensors
	if cmp -s tt.safetensors dt.safetensors; then false; fi
	# a shard's int8 blocks are not the whole tensor's, so only close:
	# 5e-5 from collx-dp's int8 and 4e-5 from its f32 here
	timeout 30 "$PY" "$DPREF" cmp tt.safetensors dt.safetensors 0 1e-4
	timeout 30 "$PY" "$DPREF" cmp tt.safetensors df.safetensors 0 1e-4
	if cmp -s tt.safetensors df.safetensors; then false; fi
	# and the gpt of the issue: it trains, its replicated tensors alike
	timeout 30 collx-dp --init gpt --dims 256,16,2,2,8 --seed 1 -o g.safetensors
	seq 1 400 >text
	timeout 60 collx-run -n 4 --timeout 10 -- collx-train -m g.safetensors \
	    --data text --batch 8 --steps 3 --optimizer adamw --lr 0.05 -q \
	    --dp 2 --tp 2 --wire int8 -o tg.safetensors
}

# usage: refused "MESSAGE" collx-train options...
refused() {
	run timeout 30 collx-train -m m.safetensors --data X.npy --targets Y.npy \
	    --batch 20 --steps 2 "${@:2}"
	[ "$status" -eq 2 ]
	[ "${lines[0]}" = "collx-train: $1" ]
}

@test "combinations that cannot work are usage errors naming both options" {
	refused "--powersgd and --wire int8: PowerSGD's factors travel in f32" \
	    --powersgd 2 --wire int8
	refused "--powersgd and --sync-every: local SGD syncs parameters, not gradients" \
	    --powersgd 2 --sync-every 4
	refused "--powersgd-start goes with --powersgd" --powersgd-start 3
	refused "--outer-lr and --outer-momentum go with --sync-every" --outer-lr 1
	COLLX_RANK=0 COLLX_WORLD_SIZE=2 COLLX_MASTER=127.0.0.1:9 \
	    refused "--powersgd and --tp 2: PowerSGD compresses whole matrices, not a TP rank's shards" \
	    --powersgd 2 --tp 2
	refused "--checkpoint-every 3 is no multiple of --sync-every 2 (a checkpoint is taken where the replicas have synced)" \
	    --sync-every 2 --checkpoint ck.safetensors --checkpoint-every 3
	COLLX_RANK=0 COLLX_WORLD_SIZE=2 COLLX_MASTER=127.0.0.1:9 \
	    refused "--wire int8 with --tp 2 and --checkpoint or --resume: checkpoints keep its state for stages of one TP rank only" \
	    --wire int8 --tp 2 --checkpoint ck.safetensors
	timeout 30 collx-dp --init gpt --dims 256,8,2,1,8 -o g.safetensors
	COLLX_RANK=0 COLLX_WORLD_SIZE=2 COLLX_MASTER=127.0.0.1:9 \
	    run timeout 30 collx-train -m g.safetensors --data X.npy --batch 20 \
	    --steps 2 --wire int8 --pp 2 --checkpoint ck.safetensors
	[ "$status" -eq 2 ]
	[ "${lines[0]}" = "collx-train: --wire int8 with --pp 2 on a gpt and --checkpoint or --resume: the tied embedding's two stages keep their own error feedback, checkpoints one" ]
	refused "--wire: want f32, bf16, f16 or int8, not 'f8'" --wire f8
}

# usage: resumed TAG WORLD MODEL [options...]: 8 steps in one run, and 4
# checkpointed then resumed for 4 more, end byte for byte the same
resumed() {
	train "$2" "$1" "$3" "${@:4}"
	timeout 60 collx-run -n "$2" --timeout 10 -- collx-train -m "$3" \
	    --data X.npy --targets Y.npy --batch 20 --steps 4 --lr 0.1 -q \
	    --checkpoint "c$1.safetensors" "${@:4}"
	timeout 60 collx-run -n "$2" --timeout 10 -- collx-train \
	    --resume "c$1.safetensors" --data X.npy --targets Y.npy --batch 20 \
	    --steps 8 --lr 0.1 -q -o "r$1.safetensors" "${@:4}"
	cmp "t$1.safetensors" "r$1.safetensors"
}

@test "checkpoints keep int8's error feedback, PowerSGD's and local SGD's state: resumed runs end byte for byte as one (dp2, dp2 x pp2)" {
	resumed i 2 m.safetensors --dp 2 --wire int8
	resumed p 2 m.safetensors --dp 2 --powersgd 2 --powersgd-start 2
	resumed l 2 m.safetensors --dp 2 --sync-every 2 --optimizer adamw \
	    --outer-momentum 0.9
	resumed s 4 s.safetensors --dp 2 --pp 2 --microbatches 2 \
	    --sync-every 2 --momentum 0.5 --outer-momentum 0.9
	# the state is collx-dp's, each replica's own where they differ
	timeout 30 collx-tensor info cl.safetensors > info
	grep -q '^ *local.inner_v.1 ' info
	grep -q '^ *local.outer_m ' info
}

@test "ZeRO's int8 error feedback resumes byte for byte (dp2 --zero 1, dp2 x pp2 --zero 2)" {
	resumed z 2 m.safetensors --dp 2 --zero 1 --wire int8 --momentum 0.5
	resumed y 4 s.safetensors --dp 2 --pp 2 --zero 2 --wire int8 \
	    --optimizer adamw
}

@test "collx-train's and collx-dp's checkpoints are one format: PowerSGD resumed across them" {
	dp a m.safetensors --powersgd 2 --powersgd-start 2
	timeout 60 collx-run -n 2 --timeout 10 -- collx-dp -m m.safetensors \
	    --data X.npy --targets Y.npy --batch 20 --steps 4 --lr 0.1 -q \
	    --powersgd 2 --powersgd-start 2 --checkpoint ca.safetensors
	timeout 60 collx-run -n 2 --timeout 10 -- collx-train \
	    --resume ca.safetensors --data X.npy --targets Y.npy --batch 20 \
	    --steps 8 --lr 0.1 -q -o ra.safetensors --dp 2 --powersgd 2 \
	    --powersgd-start 2
	cmp da.safetensors ra.safetensors
}

# usage: refused_resume "MESSAGE" WORLD collx-train options...: exit 3 on
# every rank, each saying MESSAGE
refused_resume() {
	run timeout 60 collx-run -n "$2" --timeout 10 -- collx-train \
	    --resume ck.safetensors --data X.npy --targets Y.npy --batch 20 \
	    --steps 8 --lr 0.1 -q "${@:3}"
	[ "$status" -eq 3 ]
	[ "$(grep -c "^collx-train: rank 0: $1\$" <<<"$output")" -eq "$2" ]
}

@test "state of each replica resumes on as many replicas only, and none is dropped (exit 3)" {
	timeout 60 collx-run -n 2 --timeout 10 -- collx-train -m m.safetensors \
	    --data X.npy --targets Y.npy --batch 20 --steps 4 --lr 0.1 -q \
	    --dp 2 --wire int8 --checkpoint ck.safetensors
	refused_resume "the checkpoint holds 'wire.ef' of 2 DP replicas, not 4: each replica's own state resumes only on as many" \
	    4 --dp 4 --wire int8
	refused_resume "the checkpoint holds 'wire.ef', state this run does not keep; resume it with the options that wrote it" \
	    2 --dp 2
}
