#!/usr/bin/env bats
# collx-dp: data-parallel training checked against an independent NumPy
# mlp (tests/lib/dpref.py) and against single-process training; every sync
# algorithm, the parameter server, uneven splits, windows, shuffling, the
# tiny gpt, outputs and bad input (a rank killed: faults.bats).
load lib/common
load lib/dpps
load lib/dpmlp
load lib/progress

REF=$COLLX_ROOT/tests/lib/dpref.py
GPL=/usr/share/common-licenses/GPL-3

setup() {
	dp_env
	timeout 30 "$PY" "$COLLX_ROOT/tests/lib/moons.py" 200 1 X.npy Y.npy
	timeout 30 collx-dp --init mlp --dims 2,16,1 --seed 3 -o m.safetensors
}

teardown() {
	reap "${pids[@]}"
	common_teardown
}

# The trained model and losses of TAG equal the NumPy reference (batch B,
# optimizer OPTIM as dpref.py takes it).
ref_ok() {
	timeout 60 "$PY" "$REF" mlp m.safetensors X.npy Y.npy "${2:-200}" 10 0.05 \
	    "t$1.safetensors" "l$1.csv" "${3:-sgd}"
}

same_as() {
	timeout 30 "$PY" "$REF" cmp "t$1.safetensors" "t$2.safetensors" 1e-5 1e-6 &&
	    timeout 30 "$PY" "$REF" csvcmp "l$1.csv" "l$2.csv" 1e-5
}

gpt_init() {
	timeout 30 collx-dp --init gpt --dims 256,32,2,2,16 --seed 1 -o g.safetensors
}

# tiny gpt, AdamW lr 0.01, 20 steps of 8 windows of GPL-3
gpt() {
	local w=$1 tag=$2
	shift 2
	timeout 90 collx-run -n "$w" --timeout 20 -- collx-dp -m g.safetensors \
	    --data "$GPL" --batch 8 --steps 20 --optimizer adamw --lr 0.01 \
	    -o "g$tag.safetensors" --loss-csv "gl$tag.csv" -q "$@"
}

# AdamW divides by sqrt(v), so the rounding noise of near-zero gradients
# moves a weight by up to lr*steps; attn.k.bias has an exactly zero gradient
# (softmax ignores a constant shift of the keys), so it is all noise.
gpt_same() {
	timeout 30 "$PY" "$REF" cmp "g$1.safetensors" "g$2.safetensors" 1e-4 5e-5 attn.k.bias &&
	    timeout 30 "$PY" "$REF" csvcmp "gl$1.csv" "gl$2.csv" 1e-5
}

@test "mlp on one rank matches the NumPy reference" {
	mlp 1 1
	ref_ok 1
	[ "$(wc -l <l1.csv)" -eq 11 ]
	[ "$(head -1 l1.csv)" = "step,epoch,loss,tokens,seconds,tokens_per_s,bytes_sent" ]
	# one rank sends nothing
	[ "$(cut -d, -f7 l1.csv | sort -u | head -1)" = 0 ]
}

@test "mlp on 2, 3 and 4 ranks equals one rank and the reference (ring, tree, rd)" {
	mlp 1 1
	mlp 2 2 --sync ring
	mlp 3 3 --sync tree
	mlp 4 4 --sync rd
	for w in 2 3 4; do
		ref_ok $w
		same_as $w 1
	done
}

@test "mlp with rabenseifner, naive and auto on 3 ranks (uneven split)" {
	mlp 1 1
	for a in rabenseifner naive auto; do
		mlp 3 "$a" --sync "$a"
		same_as "$a" 1
	done
}

@test "mlp with a colocated parameter server (sync, 1 and 2 servers) equals allreduce" {
	mlp 1 1
	mlp 3 ps1 --sync ps
	mlp 4 ps2 --sync ps --ps-servers 2
	ref_ok ps1
	ref_ok ps2
	same_as ps2 1
}

@test "windows of a smaller batch wrap around the data (batch 64, 3 ranks)" {
	timeout 60 collx-run -n 3 -- collx-dp -m m.safetensors --data X.npy \
	    --targets Y.npy --batch 64 --steps 10 --lr 0.05 -o tw.safetensors \
	    --loss-csv lw.csv -q
	ref_ok w 64
	# step 3 starts at sample 192: epoch 0; step 4 at 256: epoch 1
	[ "$(sed -n 5p lw.csv | cut -d, -f2)" = 0 ]
	[ "$(sed -n 6p lw.csv | cut -d, -f2)" = 1 ]
}

@test "tiny buckets (one per tensor) change nothing" {
	mlp 1 1
	mlp 2 b --bucket-mb 0.00001
	same_as b 1
}

@test "a batch smaller than the world leaves ranks idle and still matches" {
	timeout 60 collx-dp -m m.safetensors --data X.npy --targets Y.npy \
	    --batch 2 --steps 5 --lr 0.05 -o a.safetensors --loss-csv a.csv -q
	timeout 60 collx-run -n 3 -- collx-dp -m m.safetensors --data X.npy \
	    --targets Y.npy --batch 2 --steps 5 --lr 0.05 -o b.safetensors \
	    --loss-csv b.csv -q
	timeout 30 "$PY" "$REF" cmp b.safetensors a.safetensors 1e-5 1e-6
	timeout 30 "$PY" "$REF" csvcmp b.csv a.csv 1e-5
}

@test "--shuffle is reproducible from the seed on any world size" {
	mlp 1 s1 --batch 50 --shuffle --seed 5
	mlp 3 s3 --batch 50 --shuffle --seed 5
	mlp 1 s9 --batch 50 --shuffle --seed 9
	mlp 1 n1 --batch 50
	same_as s3 s1
	if cmp -s ls1.csv ls9.csv; then false; fi
	if cmp -s ls1.csv ln1.csv; then false; fi
}

@test "--epochs counts steps over the data, rounded up" {
	timeout 60 collx-dp -m m.safetensors --data X.npy --targets Y.npy \
	    --batch 64 --epochs 2 --lr 0.05 --loss-csv e.csv -q
	# ceil(2 * 200 / 64) = 7 steps
	[ "$(wc -l <e.csv)" -eq 8 ]
	[ "$(tail -1 e.csv | cut -d, -f1,2)" = "6,1" ]
}

@test "tiny gpt: loss drops; 2 and 3 ranks with ring, tree and ps agree with 1" {
	gpt_init
	gpt 1 1
	first=$(sed -n 2p gl1.csv | cut -d, -f3)
	last=$(tail -1 gl1.csv | cut -d, -f3)
	awk -v a="$first" -v b="$last" 'BEGIN { exit !(a > 5 && b < a - 1.5) }'
	[ "$(sed -n 2p gl1.csv | cut -d, -f4)" -eq 128 ]
	gpt 2 2 --sync ring
	gpt 3 3 --sync tree
	gpt 3 ps --sync ps --ps-servers 2
	for t in 2 3 ps; do gpt_same $t 1; done
}

@test "a causal block on 1, 3 ranks and a parameter server agree; loss drops" {
	"$PY" -c "import numpy as np; r = np.random.default_rng(2); np.save('bx.npy', r.standard_normal((24, 8, 16)).astype(np.float32)); np.save('by.npy', r.standard_normal((24, 8, 16)))"
	timeout 30 collx-dp --init block --dims 16,2,32,1 --seed 2 -o blk.safetensors
	for w in 1 3; do
		timeout 60 collx-run -n $w -- collx-dp -m blk.safetensors --data bx.npy \
		    --targets by.npy --batch 24 --steps 8 --lr 0.2 --momentum 0.9 \
		    -o tb$w.safetensors --loss-csv lb$w.csv -q
	done
	timeout 60 collx-run -n 2 -- collx-dp -m blk.safetensors --data bx.npy \
	    --targets by.npy --batch 24 --steps 8 --lr 0.2 --momentum 0.9 \
	    --sync ps -o tbps.safetensors --loss-csv lbps.csv -q
	same_as b3 b1
	same_as bps b1
	[ "$(sed -n 2p lb1.csv | cut -d, -f4)" -eq 192 ]
	awk -F, 'NR == 2 { a = $3 } END { exit !($3 < a) }' lb1.csv
}

@test "gpt reads an integer .npy token file like the same bytes" {
	gpt_init
	"$PY" -c "import numpy as np; np.save('tok.npy', np.frombuffer(open('$GPL','rb').read(), np.uint8).astype(np.int64))"
	gpt 1 raw
	timeout 60 collx-dp -m g.safetensors --data tok.npy --batch 8 --steps 20 \
	    --optimizer adamw --lr 0.01 -o gnpy.safetensors --loss-csv glnpy.csv -q
	cmp gnpy.safetensors graw.safetensors
	[ "$(cut -d, -f1-4 glnpy.csv)" = "$(cut -d, -f1-4 glraw.csv)" ]
}

@test "async parameter server with one worker is plain SGD; 1-D targets are a column" {
	"$PY" -c "import numpy as np; np.save('y1.npy', np.load('Y.npy').reshape(-1))"
	timeout 60 collx-dp -m m.safetensors --data X.npy --targets y1.npy \
	    --batch 200 --steps 10 --lr 0.05 --sync ps --ps-mode async \
	    -o ta1.safetensors --loss-csv la1.csv -q
	ref_ok a1
}

@test "async parameter server trains and ends with identical ranks" {
	# the end-of-run checksum comparison makes a rank that differs fail
	mlp 3 as --sync ps --ps-servers 2 --ps-mode async --staleness 1
	[ "$(wc -l <las.csv)" -eq 11 ]
	if cmp -s tas.safetensors m.safetensors; then false; fi
	run timeout 30 "$PY" "$REF" cmp tas.safetensors m.safetensors 1e-3 1e-3
	[ "$status" -ne 0 ]
}

# Overlapped bucket syncs run the same operations as --no-overlap, so the
# trained weights are the same bytes: every --sync algorithm and the
# colocated parameter server, with one bucket per tensor (gpt, 3 ranks:
# uneven split) and with the default single bucket (mlp, 4 ranks).
@test "overlap: trained weights byte for byte those of --no-overlap, every --sync" {
	gpt_init
	for a in ring tree rd rabenseifner naive auto ps; do
		gpt 3 "o$a" --steps 6 --bucket-mb 0.00001 --sync "$a"
		gpt 3 "n$a" --steps 6 --bucket-mb 0.00001 --sync "$a" --no-overlap
		cmp "go$a.safetensors" "gn$a.safetensors"
		cmp "glo$a.csv" "gln$a.csv" || [ "$(cut -d, -f1-4 "glo$a.csv")" = "$(cut -d, -f1-4 "gln$a.csv")" ]
	done
	gpt 3 ops2 --steps 6 --bucket-mb 0.01 --sync ps --ps-servers 2
	gpt 3 nps2 --steps 6 --bucket-mb 0.01 --sync ps --ps-servers 2 --no-overlap
	cmp gops2.safetensors gnps2.safetensors
	mlp 4 o --momentum 0.9
	mlp 4 n --momentum 0.9 --no-overlap
	cmp to.safetensors tn.safetensors
	ref_ok o 200 sgd:0.9
}

# ZeRO: the optimizer steps on each rank's slice of every bucket, so the
# result is plain DP's up to the order the reductions add in (1e-6
# relative; AdamW turns rounding of the gradient into up to ~1e-8 absolute
# on weights of ~0.02) and the float64 NumPy reference's. The mlp has 65
# parameters: uneven slices on 2, 3 and 4 ranks; tiny buckets give a
# bucket of one float (fc2.bias) with empty slices.
@test "--zero 1 and 2 equal plain DP and the reference on 1-4 ranks, SGD momentum and AdamW" {
	for opt in "sgd:0.9 --momentum 0.9" "adamw --optimizer adamw"; do
		spec=${opt%% *}
		flags=${opt#* }
		for w in 1 2 3 4; do
			# shellcheck disable=SC2086
			mlp $w "p$w" $flags --sync ring
			for z in 1 2; do
				# shellcheck disable=SC2086
				mlp $w "z$z$w" $flags --sync ring --zero $z
				timeout 30 "$PY" "$REF" cmp "tz$z$w.safetensors" "tp$w.safetensors" 1e-6 1e-7
				ref_ok "z$z$w" 200 "$spec"
			done
		done
		# shellcheck disable=SC2086
		mlp 3 zb $flags --zero 2 --bucket-mb 0.00001
		timeout 30 "$PY" "$REF" cmp tzb.safetensors tp3.safetensors 1e-6 1e-7
		ref_ok zb 200 "$spec"
	done
}

@test "--zero on a gpt (AdamW) agrees with plain DP; overlap changes no byte" {
	gpt_init
	gpt 3 p --steps 8 --sync ring --bucket-mb 0.01
	gpt 3 z2 --steps 8 --sync ring --bucket-mb 0.01 --zero 2
	gpt 3 z2n --steps 8 --sync ring --bucket-mb 0.01 --zero 2 --no-overlap
	gpt 2 z1 --steps 8 --zero 1
	cmp gz2.safetensors gz2n.safetensors
	gpt_same z2 p
	gpt_same z1 p
}

# 65 parameters, AdamW (m and v): plain DP holds 65*8 bytes on every rank;
# ZeRO on 4 ranks slices of ceil(65/4) = 17, 17, 17 and 14 floats (of
# state, and with --zero 2 of reduced gradients).
@test "--zero -v reports optimizer state of about 1/W per rank and the step time" {
	run timeout 60 collx-run -n 4 --timeout 10 -- collx-dp -m m.safetensors \
	    --data X.npy --targets Y.npy --batch 200 --steps 3 --optimizer adamw \
	    --zero 2 -v
	[ "$status" -eq 0 ]
	for r in 0 1 2; do
		echo "$output" | grep -q "^collx-dp: rank $r: zero 2: optimizer state $((17 * 8)) bytes, reduced gradients $((17 * 4)) bytes, mean step [0-9.]* ms"
	done
	# the reduced slices kept compact: rank 3's are its 14 floats
	echo "$output" | grep -q "^collx-dp: rank 3: zero 2: optimizer state $((14 * 8)) bytes, reduced gradients $((14 * 4)) bytes"
	run timeout 60 collx-run -n 4 --timeout 10 -- collx-dp -m m.safetensors \
	    --data X.npy --targets Y.npy --batch 200 --steps 3 --optimizer adamw -v
	[ "$status" -eq 0 ]
	echo "$output" | grep -q "^collx-dp: rank 3: zero 0: optimizer state $((65 * 8)) bytes, reduced gradients $((65 * 4)) bytes"
}

@test "--timing has compute and communication rows per step and rank" {
	mlp 2 t --timing 'tim{rank}.csv' --sync ring
	[ "$(head -1 tim0.csv | cut -d, -f1-4)" = "program,op,algo,rank" ]
	[ "$(grep -c '^collx-dp,compute,' tim1.csv)" -eq 10 ]
	[ "$(grep -c '^collx-dp,allreduce,ring,1,2,f32,' tim1.csv)" -eq 10 ]
	mlp 2 p --timing tp.csv --sync ps
	[ "$(grep -c '^collx-dp,ps,sync,' tp.csv)" -eq 20 ]
	# communication = hidden + exposed, each step
	for f in tim0.csv tim1.csv; do
		[ "$(grep -c '^collx-dp,allreduce_hidden,ring,' "$f")" -eq 10 ]
		[ "$(grep -c '^collx-dp,allreduce_exposed,ring,' "$f")" -eq 10 ]
		awk -F, '{ v[$2 "," $9] = $10 } END { for (i = 0; i < 10; i++) {
		    h = v["allreduce_hidden," i]
		    d = v["allreduce," i] - h - v["allreduce_exposed," i]
		    if (d > 1e-7 || d < -1e-7 || h < 0) exit 1 } }' "$f"
	done
	mlp 2 z --timing tz.csv --zero 1 --no-overlap
	# without overlap nothing is hidden
	[ "$(grep -c '^collx-dp,reduce_scatter_hidden,auto,0,2,' tz.csv)" -eq 10 ]
	awk -F, '$2 == "reduce_scatter_hidden" && $10 + 0 != 0 { exit 1 }' tz.csv
}

@test "verbose step lines on stderr name loss and throughput" {
	run timeout 60 collx-dp -m m.safetensors --data X.npy --targets Y.npy \
	    --batch 200 --steps 3 --lr 0.05 -v
	[ "$status" -eq 0 ]
	[ "$(echo "$output" | grep -c '^collx-dp: step [0-9]* epoch [0-9]* loss [0-9.]* .* samples/s')" -eq 3 ]
}

@test "on a terminal: one live progress line and a summary; elsewhere the summary alone, -v adds lines" {
	args=(-m m.safetensors --data X.npy --targets Y.npy --batch 20 --steps 40 --lr 0.05)
	# on a terminal (a pty through script(1)), -q, off a terminal, -v
	report_ok collx-dp 40 samples 2 '^collx-dp: step [0-9]* epoch' "${args[@]}"
}

@test "under collx-run into a pipe: rank 0's summary alone, once" {
	timeout 60 collx-run -n 2 --timeout 10 -- collx-dp -m m.safetensors \
	    --data X.npy --targets Y.npy --batch 20 --steps 5 --lr 0.05 \
	    --loss-csv l.csv 2>&1 | cat >out.txt
	cat out.txt
	[ "$(wc -l <out.txt)" -eq 1 ]
	summary_ok collx-dp 5 samples out.txt l.csv
}

@test "a missing file is named once, with the rank when there are several" {
	run timeout 30 collx-dp -m nothere.safetensors --data X.npy \
	    --targets Y.npy --batch 10 --steps 1
	[ "$status" -eq 3 ]
	[ "$output" = "collx-dp: nothere.safetensors: No such file or directory" ]
	for o in "--data nothere.npy --targets Y.npy" "--data X.npy --targets nothere.npy"; do
		run timeout 30 collx-dp -m m.safetensors $o --batch 10 --steps 1
		[ "$status" -eq 3 ]
		[ "$output" = "collx-dp: nothere.npy: No such file or directory" ]
	done
	timeout 30 collx-dp --init gpt --dims 256,8,1,1,8 -o g.safetensors
	run timeout 30 collx-dp -m g.safetensors --data nothere.txt --batch 2 --steps 1
	[ "$status" -eq 3 ]
	[ "$output" = "collx-dp: nothere.txt: No such file or directory" ]
	run timeout 30 collx-run -n 2 --timeout 10 -- collx-dp \
	    -m nothere.safetensors --data X.npy --targets Y.npy --batch 10 --steps 1
	echo "$output"
	[ "$status" -eq 3 ]
	for r in 0 1; do
		grep -qx "collx-dp: rank $r: nothere.safetensors: No such file or directory" <<<"$output"
	done
	[ "$(grep -c '^collx-dp: ' <<<"$output")" -eq 2 ]
}

@test "ranks holding different models fail with exit 3" {
	timeout 30 collx-dp --init mlp --dims 2,16,1 --seed 4 -o m1.safetensors
	cp m.safetensors m0.safetensors
	run timeout 60 collx-run -n 2 --timeout 10 -- collx-dp -m 'm{rank}.safetensors' \
	    --data X.npy --targets Y.npy --batch 10 --steps 2
	[ "$status" -eq 3 ]
	[[ "$output" == *"parameters of rank 1 differ from rank 0 before training"* ]]
}

@test "bad input and usage errors have their exit codes" {
	run timeout 30 collx-dp -m m.safetensors --data X.npy --targets X.npy --batch 4 --steps 1
	[ "$status" -eq 3 ]
	[[ "$output" == *"targets of shape [200, 2]"* ]]
	run timeout 30 collx-dp -m X.npy --data X.npy --targets Y.npy --batch 4 --steps 1
	[ "$status" -eq 3 ]
	run timeout 30 collx-dp -m m.safetensors --data X.npy --targets Y.npy --steps 1
	[ "$status" -eq 2 ]
	run timeout 30 collx-dp -m m.safetensors --data X.npy --targets Y.npy --batch 4 --steps 1 --epochs 1
	[ "$status" -eq 2 ]
	run timeout 30 collx-dp -m m.safetensors --data X.npy --targets Y.npy --batch 4 --steps 1 --sync ps --ps-servers 2
	[ "$status" -eq 2 ]
	run timeout 30 collx-dp -m m.safetensors --data X.npy --targets Y.npy --batch 4 --steps 1 --sync bogus
	[ "$status" -eq 2 ]
	run timeout 30 collx-dp -m m.safetensors --data X.npy --targets Y.npy --batch 4 --steps 1 --zero 4
	[ "$status" -eq 2 ]
	run timeout 30 collx-dp -m m.safetensors --data X.npy --targets Y.npy --batch 4 --steps 1 --zero 1 --sync ps
	[ "$status" -eq 2 ]
	[[ "$output" == *"--zero goes with allreduce"* ]]
	run timeout 30 collx-dp -m m.safetensors --data X.npy --batch 4 --steps 1
	[ "$status" -eq 2 ]
	[[ "$output" == "collx-dp: the mlp model needs --targets"* ]]
	run timeout 30 collx-dp --init gpt --dims 256,30,2,4,16 -o x.safetensors
	[ "$status" -eq 2 ]
	gpt_init
	printf 'short' >short.txt
	run timeout 30 collx-dp -m g.safetensors --data short.txt --batch 4 --steps 1
	[ "$status" -eq 3 ]
	[[ "$output" == *"make no window"* ]]
	[ ! -e x.safetensors ]
}

# The forms --init takes are those its parser names in a refusal; --help
# and the man page must give each one whole (LAYERS of an mlp included).
@test "--help and the man page give every --dims form that --init takes" {
	need mandoc command -v mandoc
	help=$(collx-dp --help | tr -s ' \n' '  ')
	man=$(mandoc -Tascii "$COLLX_ROOT/man/man1/collx-dp.1" | col -b | tr -s ' \n' '  ')
	for arch in mlp block gpt; do
		run collx-dp --init "$arch" --dims x -o never.safetensors
		[ "$status" -eq 2 ]
		form=$(sed -n "s/^collx-dp: bad --dims 'x' for $arch: expected //p" <<<"$output")
		echo "$arch: $form"
		[ -n "$form" ]
		[[ "$help" == *"$arch $form"* ]]
		lower=$(tr '[:upper:]' '[:lower:]' <<<"$form")
		[[ "$man" == *"$arch $lower"* ]]
	done
	# LAYERS of an mlp: a stack of that many, layers.0.* ... layers.L-1.*
	timeout 30 collx-dp --init mlp --dims 3,5,3,4 -o st.safetensors
	run collx-tensor info st.safetensors
	[ "$(grep -c 'layers\.[0-3]\.fc1\.weight' <<<"$output")" -eq 4 ]
	if grep -q 'layers\.4\.' <<<"$output"; then false; fi
}

@test "ranks started with a different --lr refuse each other, naming it" {
	port=$(free_port)
	timeout 30 collx-dp -m m.safetensors --data X.npy --targets Y.npy \
	    --batch 200 --steps 1 --lr 0.05 --rank 0 --world-size 2 \
	    --master "127.0.0.1:$port" --timeout 4 -q 2>err0 &
	pid0=$!
	sleep 0.3
	rc1=0
	timeout 30 collx-dp -m m.safetensors --data X.npy --targets Y.npy \
	    --batch 200 --steps 1 --lr 0.1 --rank 1 --world-size 2 \
	    --master "127.0.0.1:$port" --timeout 4 -q 2>err1 || rc1=$?
	wait "$pid0" || true
	[ "$rc1" -eq 3 ] || { cat err1; false; }
	grep -q -- "rank 1 was started with --lr 0.1, rank 0 with --lr 0.05" err1 ||
	    { cat err1; false; }
}

# A checkpoint holds the parameters, every optimizer moment and the step,
# so a resumed run takes exactly the steps the uninterrupted one takes:
# the same bytes, whichever way the optimizer state is sharded.
@test "--checkpoint then --resume: the bytes of an uninterrupted run (plain, ZeRO 1 and 2, colocated servers)" {
	gpt_init
	for s in "ring" "ring --zero 1" "rd --zero 2 --bucket-mb 0.01" \
	    "ps --ps-servers 2 --bucket-mb 0.01" "ps --ps-servers 2 --no-overlap"; do
		# shellcheck disable=SC2086
		gpt 3 full --steps 9 --sync $s
		# shellcheck disable=SC2086
		gpt 3 half --steps 5 --sync $s --checkpoint ck.safetensors
		# shellcheck disable=SC2086
		timeout 90 collx-run -n 3 --timeout 20 -- collx-dp --resume ck.safetensors \
		    --data "$GPL" --batch 8 --steps 9 --optimizer adamw --lr 0.01 \
		    -o gres.safetensors --loss-csv glres.csv -q --sync $s
		cmp gfull.safetensors gres.safetensors
		[ "$(tail -n 4 glfull.csv | cut -d, -f1-4)" = "$(tail -n +2 glres.csv | cut -d, -f1-4)" ]
	done
	# SGD with momentum keeps one moment, SGD without none
	mlp 2 full --momentum 0.9 --zero 1
	mlp 2 half --momentum 0.9 --zero 1 --steps 4 --checkpoint ck.safetensors
	mlp 2 res --momentum 0.9 --zero 1 --resume ck.safetensors
	cmp tfull.safetensors tres.safetensors
	mlp 1 full
	mlp 1 half --steps 3 --checkpoint ck.safetensors
	mlp 1 res --resume ck.safetensors
	cmp tfull.safetensors tres.safetensors
}

@test "a checkpoint does not depend on the layout: ZeRO-2 on 2 ranks resumed plain on 3" {
	gpt_init
	gpt 2 full --steps 10 --zero 2
	gpt 2 half --steps 5 --zero 2 --checkpoint ck.safetensors
	timeout 90 collx-run -n 3 --timeout 20 -- collx-dp --resume ck.safetensors \
	    --data "$GPL" --batch 8 --steps 10 --optimizer adamw --lr 0.01 \
	    -o gres.safetensors -q
	timeout 30 "$PY" "$REF" cmp gfull.safetensors gres.safetensors 1e-4 5e-5 attn.k.bias
	# the checkpoint is a model too: its parameters are those of the -o file
	timeout 30 collx-tensor get ck.safetensors wte -o a.npy
	timeout 30 collx-tensor get ghalf.safetensors wte -o b.npy
	cmp a.npy b.npy
	timeout 30 collx-tensor info ck.safetensors | grep -q 'collx.checkpoint.step = 5'
	timeout 30 collx-tensor info ck.safetensors | grep -q 'optim.v.wte'
}

# Killed with SIGKILL, every rank at once, after a checkpoint: resumed, the
# run ends on the bytes of one that was never interrupted.
@test "training killed after a checkpoint and resumed equals a run never interrupted" {
	export ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0
	gpt_init
	port=$(free_port)
	pids=()
	for r in 0 1; do
		COLLX_RANK=$r COLLX_WORLD_SIZE=2 COLLX_MASTER=127.0.0.1:$port \
		    collx-dp -m g.safetensors --data "$GPL" --batch 8 --steps 100000000 \
		    --optimizer adamw --lr 0.01 --zero 1 --timeout 10 -q \
		    --checkpoint ck.safetensors --checkpoint-every 3 2>"err$r" &
		pids+=($!)
	done
	for _ in $(seq 300); do
		[ -s ck.safetensors ] && break
		sleep 0.1
	done
	sleep 0.3
	kill -KILL "${pids[@]}"
	wait "${pids[@]}" || true
	step=$(collx-tensor info ck.safetensors | awk '/collx.checkpoint.step/ { print $NF }')
	echo "killed after step $step"
	[ "$step" -ge 3 ]
	[ $((step % 3)) -eq 0 ]
	total=$((step + 4))
	gpt 2 full --steps "$total" --zero 1
	timeout 90 collx-run -n 2 --timeout 20 -- collx-dp --resume ck.safetensors \
	    --data "$GPL" --batch 8 --steps "$total" --optimizer adamw --lr 0.01 \
	    --zero 1 -o gres.safetensors -q
	cmp gfull.safetensors gres.safetensors
}

@test "bad checkpoints and resumes: exit 3 naming the file, 2 for options that cannot go together" {
	mlp 1 a --steps 2 --checkpoint ck.safetensors
	run timeout 30 collx-dp --resume ck.safetensors --data X.npy --targets Y.npy --batch 100 --steps 4 -q
	[ "$status" -eq 3 ]
	[[ "$output" == "collx-dp: ck.safetensors: trained with --batch 200, not 100"* ]]
	run timeout 30 collx-dp --resume m.safetensors --data X.npy --targets Y.npy --batch 200 --steps 4 -q
	[ "$status" -eq 3 ]
	[[ "$output" == *"m.safetensors: not a collx checkpoint"* ]]
	run timeout 30 collx-dp --resume ck.safetensors --data X.npy --targets Y.npy --batch 200 --steps 4 --optimizer adamw -q
	[ "$status" -eq 3 ]
	[[ "$output" == *"the checkpoint holds 0 optimizer moment(s), this run's optimizer keeps 2"* ]]
	run timeout 30 collx-dp --resume nothere.safetensors --data X.npy --targets Y.npy --batch 200 --steps 4 -q
	[ "$status" -eq 3 ]
	run timeout 30 collx-dp -m m.safetensors --data X.npy --targets Y.npy --batch 200 --steps 4 --checkpoint-every 2
	[ "$status" -eq 2 ]
	run timeout 30 collx-dp -m m.safetensors --data X.npy --targets Y.npy --batch 200 --steps 4 --checkpoint c.safetensors --sync ps --ps-mode async
	[ "$status" -eq 2 ]
	[ ! -e c.safetensors ]
}

# --- gradients on the wire (--wire): the rounding itself is checked bit
# for bit against a NumPy model in test_par_wire; here collx-dp's use of it.

@test "--wire f32: the bytes of a run without --wire (plain, overlap off, ZeRO 2)" {
	gpt_init
	for s in "ring" "ring --no-overlap" "ring --zero 2 --bucket-mb 0.01"; do
		# shellcheck disable=SC2086
		gpt 2 plain --steps 6 --sync $s
		# shellcheck disable=SC2086
		gpt 2 f32 --steps 6 --sync $s --wire f32
		cmp gplain.safetensors gf32.safetensors
		[ "$(cut -d, -f1-4,7 glplain.csv)" = "$(cut -d, -f1-4,7 glf32.csv)" ]
	done
}

# Rank 0's payload bytes per step, in closed form, for the mlp's 65
# parameters (one bucket) on 2 ranks: the loss allreduce is 8 bytes (one
# f64); a ring allreduce sends the whole vector once in each of its two
# halves; ZeRO's reduce-scatter sends rank 1's slice of 33 values and the
# allgather rank 0's 33 floats; int8 sends chunks of 33 values as one f32
# scale and 33 bytes padded to 36, by alltoall and (without ZeRO)
# allgather.
@test "bytes_sent: the closed form of every wire type, with and without ZeRO" {
	for c in "f32 268" "bf16 138" "f16 138" "int8 88" "f32-z1 272" \
	    "bf16-z1 206" "int8-z1 180" "int8-z2 180"; do
		set -- $c
		w=${1%-z*}
		z=0
		[[ "$1" == *-z* ]] && z=${1#*-z}
		sync=ring
		[ "$w" = int8 ] && sync=auto
		mlp 2 "b$1" --wire "$w" --zero "$z" --sync "$sync"
		echo "$1: want $2 bytes a step, got $(cut -d, -f7 "lb$1.csv" | tail -n +2 | sort -u | tr '\n' ' ')"
		[ "$(cut -d, -f7 "lb$1.csv" | tail -n +2 | sort -u)" = "$2" ]
	done
}

# Overlap runs each bucket's operation as --no-overlap does: the same bytes
# for every wire type. On 2 ranks every sum is one addition, so bf16 and
# f16 with ZeRO (reduce-scatter) equal their allreduce bit for bit; int8
# with ZeRO keeps the reduced slices in f32 (no second quantization), so
# stages 1 and 2 agree with each other. None gives f32's bytes.
@test "--wire bf16, f16 and int8 compose with overlap and ZeRO" {
	gpt_init
	gpt 2 f32 --steps 6 --bucket-mb 0.01 --sync ring
	for w in bf16 f16 int8; do
		sync=ring
		[ "$w" = int8 ] && sync=auto
		gpt 2 "o$w" --steps 6 --bucket-mb 0.01 --sync $sync --wire $w
		gpt 2 "n$w" --steps 6 --bucket-mb 0.01 --sync $sync --wire $w --no-overlap
		cmp "go$w.safetensors" "gn$w.safetensors"
		gpt 2 "z1$w" --steps 6 --bucket-mb 0.01 --sync $sync --wire $w --zero 1
		gpt 2 "z2$w" --steps 6 --bucket-mb 0.01 --sync $sync --wire $w --zero 2 --no-overlap
		cmp "gz1$w.safetensors" "gz2$w.safetensors"
		if [ "$w" != int8 ]; then
			cmp "go$w.safetensors" "gz1$w.safetensors"
		fi
		if cmp -s "go$w.safetensors" gf32.safetensors; then false; fi
	done
}

# SGD steps lr times the mean gradient, so a gradient off by a wire type's
# rounding (2^-9 relative in bf16; int8: a 254th of its block's largest,
# fed back the step after) moves a weight by a few 1e-3 at most in 10 steps.
@test "--wire on 3 ranks trains the mlp close to f32 (the NumPy reference's), not to its bytes" {
	mlp 3 f32 --sync ring
	ref_ok f32
	for w in bf16 f16 int8; do
		sync=ring
		[ "$w" = int8 ] && sync=auto
		mlp 3 "$w" --sync $sync --wire $w
		if cmp -s "t$w.safetensors" tf32.safetensors; then false; fi
		timeout 30 "$PY" "$REF" cmp "t$w.safetensors" tf32.safetensors 1e-2 1e-3
		timeout 30 "$PY" "$REF" csvcmp "l$w.csv" lf32.csv 1e-2
	done
}

# int8's error feedback is every rank's own and goes into the checkpoint
# (wire.ef.RANK), so a resumed run takes the uninterrupted one's steps.
@test "--wire int8: --checkpoint then --resume gives the bytes of an uninterrupted run" {
	gpt_init
	for s in "" "--zero 1" "--zero 2 --no-overlap"; do
		# shellcheck disable=SC2086
		gpt 3 full --steps 9 --bucket-mb 0.01 --wire int8 $s
		# shellcheck disable=SC2086
		gpt 3 half --steps 5 --bucket-mb 0.01 --wire int8 $s --checkpoint ck.safetensors
		# shellcheck disable=SC2086
		timeout 90 collx-run -n 3 --timeout 20 -- collx-dp --resume ck.safetensors \
		    --data "$GPL" --batch 8 --steps 9 --optimizer adamw --lr 0.01 \
		    --bucket-mb 0.01 --wire int8 $s -o gres.safetensors --loss-csv glres.csv -q
		cmp gfull.safetensors gres.safetensors
		[ "$(tail -n 4 glfull.csv | cut -d, -f1-4,7)" = "$(tail -n +2 glres.csv | cut -d, -f1-4,7)" ]
	done
	info=$(timeout 30 collx-tensor info ck.safetensors)
	for r in 0 1 2; do
		grep -q "wire\.ef\.$r" <<<"$info"
	done
	if grep -q "wire\.ef\.3" <<<"$info"; then false; fi
	# without the error feedback the resumed run would differ: the state is not zero
	"$PY" -c "
import sys; sys.path.insert(0, '$COLLX_ROOT/tests/lib')
from collpy import load_st
t, _ = load_st('ck.safetensors')
assert all(abs(t['wire.ef.%d' % r]).max() > 0 for r in range(3))"
	run timeout 90 collx-run -n 3 --timeout 20 -- collx-dp --resume ck.safetensors \
	    --data "$GPL" --batch 8 --steps 9 --optimizer adamw --lr 0.01 --wire bf16 -q
	[ "$status" -eq 3 ]
	[[ "$output" == *"holds --wire int8 error feedback; resume it with --wire int8"* ]]
	run timeout 90 collx-run -n 2 --timeout 20 -- collx-dp --resume ck.safetensors \
	    --data "$GPL" --batch 8 --steps 9 --optimizer adamw --lr 0.01 --wire int8 -q
	[ "$status" -eq 3 ]
	[[ "$output" == *"the error feedback of 3 ranks, not 2"* ]]
	# a rank's error feedback missing: bad input
	"$PY" -c "
import sys; sys.path.insert(0, '$COLLX_ROOT/tests/lib')
from collpy import load_st, save_st
t, meta = load_st('ck.safetensors')
del t['wire.ef.1']
save_st('ck2.safetensors', t, meta)"
	run timeout 30 collx-dp --resume ck2.safetensors --data "$GPL" --batch 8 \
	    --steps 9 --optimizer adamw --wire int8 -q
	[ "$status" -eq 3 ]
	[[ "${lines[0]}" == "collx-dp: ck2.safetensors: error feedback of 2 ranks, but no 'wire.ef.1'" ]]
}

@test "--wire: bad types and combinations that cannot work are usage errors naming both options" {
	run timeout 30 collx-dp -m m.safetensors --data X.npy --targets Y.npy --batch 200 --steps 1 --wire fp8
	[ "$status" -eq 2 ]
	[[ "${lines[0]}" == "collx-dp: --wire: want f32, bf16, f16 or int8, not 'fp8'" ]]
	run timeout 30 collx-dp -m m.safetensors --data X.npy --targets Y.npy --batch 200 --steps 1 --wire bf16 --sync ps
	[ "$status" -eq 2 ]
	[[ "${lines[0]}" == "collx-dp: --wire bf16 goes with allreduce, not --sync ps" ]]
	run timeout 30 collx-dp -m m.safetensors --data X.npy --targets Y.npy --batch 200 --steps 1 --wire int8 --sync ring
	[ "$status" -eq 2 ]
	[[ "${lines[0]}" == "collx-dp: --wire int8 sends by alltoall and allgather; --sync ring does not apply" ]]
}
