#!/usr/bin/env bats
# collx-tp: every layer and mode on 1, 2, 3 and 4 ranks against an
# independent PyTorch computation (tests/lib/tpref.py, float64), a case
# known in closed form, training against torch and serial training,
# refusals of sizes the world does not divide, communication volume
# against its closed form (a rank killed: faults.bats).
load lib/common
load lib/progress
load lib/tpsuite

# Sizes 12 (features, heads, sequence) divide by 1, 2, 3 and 4.
@test "column: worlds 1-4, bias and none, forward and backward equal torch" {
	for nb in "" nobias; do
		ref make column 12 0 24 1 $nb
		for w in 1 2 3 4; do fb $w column tp; done
	done
	batch_ok
}

@test "row: worlds 1-4, bias and none, forward and backward equal torch" {
	for nb in "" nobias; do
		ref make row 24 0 12 2 $nb
		for w in 1 2 3 4; do fb $w row tp; done
	done
	batch_ok
}

@test "mlp: worlds 1-4, bias and none, gelu and relu, 12 -> 24 -> 5" {
	for nb in "" nobias; do
		ref make mlp 12 24 5 3 $nb
		for w in 1 2 3 4; do fb $w mlp tp; done
		fb 3 mlp tp "--activation relu" act=relu
		fb 2 mlp ulysses
	done
	batch_ok
}

@test "block tp: worlds 1-4, bias and none, causal and not" {
	for nb in "" nobias; do
		ref make block 24 48 0 4 heads=12 $nb
		for w in 1 2 3 4; do
			fb $w block tp
			fb $w block tp --causal causal
		done
	done
	batch_ok
}

@test "block ulysses: worlds 1-4, bias and none, causal and not" {
	for nb in "" nobias; do
		ref make block 24 48 0 5 heads=12 $nb
		for w in 1 2 3 4; do
			fb $w block ulysses
			fb $w block ulysses --causal causal
		done
	done
	batch_ok
}

@test "block: post-norm and relu in tp and ulysses; --heads over metadata" {
	ref make block 24 36 0 6 heads=6
	fb 3 block tp "--norm post" norm=post
	fb 3 block ulysses "--norm post --activation relu --causal" \
	    "norm=post act=relu causal"
	fb 2 block tp "--heads 12 --causal" "heads=12 causal"
	batch_ok
}

@test "serial mode equals torch for every layer" {
	ref make block 24 48 0 7 heads=4
	fb 1 block serial --causal causal
	ref make mlp 12 8 6 7
	fb 1 mlp serial
	ref make row 12 0 6 7
	fb 1 row serial
	batch_ok
}

@test "column --local-output: each rank writes its own shard" {
	ref make column 12 0 24 8
	tp 3 --layer column -m w.safetensors -i X.npy -o 'Y{rank}.npy' --local-output
	fb 1 column tp
	batch_ok
	timeout 30 "$PY" -c '
import numpy as np
y = np.load("run1/Y.npy")
for r in range(3):
    s = np.load(f"Y{r}.npy")
    assert s.shape == (y.shape[0], 8), s.shape
    np.testing.assert_allclose(s, y[:, 8 * r:8 * r + 8], rtol=1e-6, atol=1e-6)
'
}

@test "row --input-is-parallel: each rank reads its own input shard" {
	ref make row 12 0 5 9
	"$PY" -c '
import numpy as np
x = np.load("X.npy")
for r in range(4):
    np.save(f"X{r}.npy", x[:, 3 * r:3 * r + 3])
'
	rundir
	tp 4 --layer row -m w.safetensors -i 'X{rank}.npy' -o $d/Y.npy \
	    --input-is-parallel --backward --grad-output DY.npy \
	    --grad-input $d/DX.npy --grad-weights $d/GW.safetensors
	ref check row $d
}

@test "a row layer known in closed form (integers, exact)" {
	"$PY" -c '
import sys; sys.path.insert(0, sys.argv[1])
import numpy as np
from collpy import save, save_st
save_st("w.safetensors", {"weight": np.ones((2, 4), "<f4"),
                          "bias": np.array([0.5, -0.5], "<f4")})
save("X.npy", np.array([[1, 2, 3, 4], [0, -1, 0, 1]], "<f4"))
save("DY.npy", np.ones((2, 2), "<f4"))
' "$COLLX_ROOT/tests/lib"
	tp 2 --layer row -m w.safetensors -i X.npy -o Y.npy --backward \
	    --grad-output DY.npy --grad-input DX.npy --grad-weights GW.safetensors
	"$PY" -c '
import sys; sys.path.insert(0, sys.argv[1])
import numpy as np
from collpy import load_st
# Y = X 1^T + b; DX = DY 1 = 2; dW = DY^T X (column sums of X); db = 2
assert np.array_equal(np.load("Y.npy"), [[10.5, 9.5], [0.5, -0.5]])
assert np.array_equal(np.load("DX.npy"), np.full((2, 4), 2.0))
g, _ = load_st("GW.safetensors")
assert np.array_equal(g["weight"], [[1, 1, 3, 5], [1, 1, 3, 5]])
assert np.array_equal(g["bias"], [2, 2])
' "$COLLX_ROOT/tests/lib"
}

@test "--check passes for every layer on 3 ranks" {
	ref make block 24 48 0 10 heads=6
	tp 3 --layer block --mode tp -m w.safetensors -i X.npy --check \
	    --backward --grad-output DY.npy
	tp 3 --layer block --mode ulysses -m w.safetensors -i X.npy --check \
	    --causal --backward --grad-output DY.npy
	ref make mlp 12 24 6 10
	tp 3 --layer mlp -m w.safetensors -i X.npy --check --backward \
	    --grad-output DY.npy
}

# --train: LAYER MODE on WORLD ranks, 5 SGD steps, queued for the torch
# comparison (DIR/L.csv, DIR/TR.safetensors); the run's directory is left
# in $d for same_as.
tr() {
	rundir
	tp "$1" --layer "$2" --mode "$3" -m w.safetensors -i X.npy --train \
	    --targets T.npy --steps 5 --lr 0.2 -o $d/TR.safetensors \
	    --loss-csv $d/L.csv $4
	echo "train $2 $d 5 0.2 $5" >>batch
}

# Queues the direct comparison of the last tr run with serial training
# run in directory SERIAL: losses and weights within 1e-5 relative.
same_as() {
	echo "same $1 $d" >>batch
}

@test "--train mlp (tp, ulysses): losses and weights equal torch and serial" {
	ref make mlp 12 24 3 11
	tr 1 mlp serial
	ser=$d
	tr 4 mlp tp
	same_as $ser
	tr 2 mlp ulysses
	same_as $ser
	tr 1 mlp serial "--activation relu" act=relu
	ser=$d
	tr 3 mlp ulysses "--activation relu" act=relu
	same_as $ser
	tr 3 mlp tp "--activation relu" act=relu
	same_as $ser
	batch_ok
	head -1 $ser/L.csv | grep -qx 'step,epoch,loss,tokens,seconds,tokens_per_s'
}

@test "--train block (tp, ulysses): losses and weights equal torch and serial" {
	ref make block 24 48 0 12 heads=12
	tr 1 block serial --causal causal
	ser=$d
	tr 4 block tp --causal causal
	same_as $ser
	tr 2 block ulysses --causal causal
	same_as $ser
	tr 3 block ulysses --causal causal
	same_as $ser
	tr 1 block serial "--norm post --activation relu" "norm=post act=relu"
	ser=$d
	tr 3 block tp "--norm post --activation relu" "norm=post act=relu"
	same_as $ser
	tr 4 block ulysses "--norm post --activation relu" "norm=post act=relu"
	same_as $ser
	batch_ok
	timeout 30 "$PY" -c '
import sys; sys.path.insert(0, sys.argv[1])
from collpy import load_st
m = load_st(sys.argv[2])[1]
assert m.get("heads") == "12", m
' "$COLLX_ROOT/tests/lib" run2/TR.safetensors
}

@test "--train ulysses: the loss allreduce's timing rows are one f64, 8 bytes" {
	ref make block 24 48 0 12 heads=12
	tp 2 --layer block --mode ulysses -m w.safetensors -i X.npy --train \
	    --targets T.npy --steps 2 --lr 0.1 --timing 't{rank}.csv'
	for r in 0 1; do
		rows=$(awk -F, '$NF == "allreduce loss" { print $2, $6, $7, $8, $9 }' "t$r.csv")
		echo "rank $r: $rows"
		[ "$rows" = "$(printf 'allreduce f64 1 8 %s\n' 0 1)" ]
	done
}

@test "--train on a terminal: one live progress line and a summary; elsewhere the summary alone, -v adds lines" {
	ref make mlp 12 24 3 11
	args=(--layer mlp --mode serial -m w.safetensors -i X.npy --train
	    --targets T.npy --steps 40 --lr 0.2)
	# on a terminal (a pty through script(1)), -q, off a terminal, -v
	report_ok collx-tp 40 samples 2 '^collx-tp: step [0-9]* loss [0-9.]* ' \
	    "${args[@]}"
}

@test "non-divisible heads, features and sequence: exit 3 on every rank" {
	ref make block 24 40 0 13 heads=12 seq=10
	refused 5 "12 heads are not divisible by world size 5" \
	    --layer block -m w.safetensors -i X.npy
	refused 3 "40 feed-forward features are not divisible by world size 3" \
	    --layer block -m w.safetensors -i X.npy
	refused 4 "sequence length 10 is not divisible by world size 4" \
	    --layer block --mode ulysses -m w.safetensors -i X.npy
	ref make mlp 12 10 6 13
	refused 4 "10 hidden features are not divisible by world size 4" \
	    --layer mlp -m w.safetensors -i X.npy
	ref make column 12 0 10 13
	refused 3 "10 output features are not divisible by world size 3" \
	    --layer column -m w.safetensors -i X.npy
	ref make row 10 0 6 13
	refused 4 "10 input features are not divisible by world size 4" \
	    --layer row -m w.safetensors -i X.npy
}

@test "ulysses: heads the world does not divide: exit 3 on every rank" {
	# sequence 12 and d_ff 40 divide by 4 (ulysses keeps the mlp whole),
	# the 6 heads the all-to-all spreads over ranks do not
	ref make block 24 40 0 17 heads=6 seq=12
	refused 4 "6 heads are not divisible by world size 4" \
	    --layer block --mode ulysses -m w.safetensors -i X.npy --causal \
	    --backward --grad-output DY.npy --grad-input DX.npy \
	    --grad-weights GW.safetensors
	[ ! -e DX.npy ]
	[ ! -e GW.safetensors ]
	refused 4 "6 heads are not divisible by world size 4" \
	    --layer block --mode ulysses -m w.safetensors -i X.npy --train \
	    --targets T.npy --steps 2 --lr 0.1 --loss-csv L.csv
	[ ! -e L.csv ]
}

@test "ranks started with different --mode or --lr refuse each other, naming it (exit 3)" {
	ref make block 8 16 0 3 heads=2 seq=4
	run timeout 30 collx-run -n 2 --timeout 10 -- sh -c 'exec collx-tp \
	    --layer block -m w.safetensors -i X.npy \
	    --mode $( [ "$COLLX_RANK" = 1 ] && echo ulysses || echo tp )'
	echo "$output"
	[ "$status" -eq 3 ]
	grep -qx "collx-tp: rank 1: refused by rank 0 at 127.0.0.1:[0-9]*: rank 1 was started with --mode ulysses, rank 0 with --mode tp" <<<"$output"
	ref make mlp 12 24 3 11
	run timeout 30 collx-run -n 2 --timeout 10 -- sh -c 'exec collx-tp \
	    --layer mlp -m w.safetensors -i X.npy --train --targets T.npy \
	    --steps 2 --lr $( [ "$COLLX_RANK" = 1 ] && echo 0.5 || echo 0.2 )'
	echo "$output"
	[ "$status" -eq 3 ]
	grep -q "rank 1 was started with --lr 0.5, rank 0 with --lr 0.2" <<<"$output"
}

@test "bad input and usage: exit 3 and 2, one line naming the program" {
	ref make mlp 12 24 6 14
	run timeout 20 collx-tp --layer mlp -m nothere.safetensors -i X.npy
	[ "$status" -eq 3 ]
	[ "$output" = "collx-tp: nothere.safetensors: No such file or directory" ]
	run timeout 20 collx-tp --layer mlp -m w.safetensors -i nothere.npy
	[ "$status" -eq 3 ]
	[ "$output" = "collx-tp: nothere.npy: No such file or directory" ]
	run timeout 20 collx-tp --layer block -m w.safetensors -i X.npy --heads 2
	[ "$status" -eq 3 ]
	[[ "$output" == "collx-tp: "*"attn.q.weight"* ]]
	run timeout 20 collx-tp --layer row -m w.safetensors -i X.npy
	[ "$status" -eq 3 ]
	run timeout 20 collx-tp --layer mlp -m w.safetensors -i DY.npy
	[ "$status" -eq 3 ]
	[[ "$output" == *"want [..., 12]"* ]]
	run timeout 20 collx-tp --layer conv -m w.safetensors -i X.npy
	[ "$status" -eq 2 ]
	run timeout 20 collx-tp --layer column --mode ulysses -m w.safetensors -i X.npy
	[ "$status" -eq 2 ]
	run timeout 20 collx-tp --layer mlp -m w.safetensors -i X.npy --backward
	[ "$status" -eq 2 ]
	run timeout 20 collx-tp --help
	[ "$status" -eq 0 ]
	[[ "$output" == *"--input-is-parallel"* ]]
	run timeout 20 collx-tp -V
	[ "$status" -eq 0 ]
}

# Sum of comm_bytes over the timing rows of rank R whose op is OP.
bytes_of() {
	awk -F, -v op="$2" 'NR > 1 && $2 == op { s += $13; n++ }
	    END { print s + 0, n + 0 }' "$1"
}

@test "comm_bytes: Megatron 4 ring allreduces, Ulysses 8 all-to-alls (closed form)" {
	# b*s*d = 3*12*24 = 864 floats
	ref make block 24 48 0 15 heads=12
	for w in 2 3 4; do
		rm -f t*.csv
		tp $w --layer block -m w.safetensors -i X.npy --backward \
		    --grad-output DY.npy --timing 't{rank}.csv'
		for ((r = 0; r < w; r++)); do
			# ring: 2(W-1)/W of the vector per allreduce
			[ "$(bytes_of "t$r.csv" allreduce)" = "$((4 * 2 * (w - 1) * 864 * 4 / w)) 4" ]
		done
		rm -f t*.csv
		tp $w --layer block --mode ulysses -m w.safetensors -i X.npy \
		    --backward --grad-output DY.npy --timing 't{rank}.csv'
		for ((r = 0; r < w; r++)); do
			# q, k, v, out forward; dout, dq, dk, dv backward: each
			# sends (W-1)/W of b*s*d/W floats
			[ "$(bytes_of "t$r.csv" alltoall)" = "$((8 * (w - 1) * 864 / w * 4 / w)) 4" ]
		done
	done
	# mlp: one allreduce of n*out forward, one of n*in backward
	ref make mlp 12 24 8 15
	rm -f t*.csv
	tp 4 --layer mlp -m w.safetensors -i X.npy --backward \
	    --grad-output DY.npy --timing 't{rank}.csv'
	[ "$(bytes_of t2.csv allreduce)" = "$(( (36 * 8 + 36 * 12) * 2 * 3 / 4 * 4)) 2" ]
	grep -q 'fwd allreduce mlp.fc2 (g)' t0.csv
	grep -q 'bwd allreduce mlp.fc1 (f)' t0.csv
	head -1 t0.csv | grep -q ',busbw_gbps,comm_bytes,phase$'
}
