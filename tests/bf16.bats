#!/usr/bin/env bats
# --precision bf16 (collx-dp, collx-tp, collx-pipe, collx-train): a gpt
# trained 300 steps ends within 1% of f32's loss on a curve of its own, in
# every program (an option one of them ignored would train f32's curve);
# --precision f32 is the default's bytes; the portable path (oneDNN held
# below AVX512-BF16 by its own DNNL_MAX_CPU_ISA) says so once and trains
# the native path's losses; -v names oneDNN's implementations; refusals.
# The layers' values against a float64 reference: test_nn_bf16.
load lib/common

GPL=/usr/share/common-licenses/GPL-3

setup() {
	common_setup
	unset COLLX_TOKEN COLLX_IFNAME COLLX_TIMEOUT COLLX_MASTER COLLX_RANK \
	    COLLX_WORLD_SIZE DNNL_MAX_CPU_ISA ONEDNN_MAX_CPU_ISA
}

# A build without oneDNN refuses bf16 before anything else: skip (fail
# under CI) when this one does.
need_dnnl() {
	need "oneDNN in the build (libdnnl-dev)" sh -c \
	    '! collx-dp --precision bf16 2>&1 | grep -q "oneDNN (libdnnl)"'
}

teardown() {
	common_teardown
}

# The losses (column 3) of two loss CSVs: the same number of steps, the
# means of the last 20 within 1% of each other, and not the same curve.
# usage: close_not_equal BF16.csv F32.csv
close_not_equal() {
	"$PY" - "$1" "$2" <<'EOF'
import sys
def losses(path):
    rows = [l.split(",") for l in open(path).read().splitlines()[1:] if l]
    return [float(r[2]) for r in rows]
a, b = losses(sys.argv[1]), losses(sys.argv[2])
ta, tb = sum(a[-20:]) / 20, sum(b[-20:]) / 20
print("bf16 %.6f, f32 %.6f over the last 20 of %d steps; %d losses differ"
      % (ta, tb, len(a), sum(x != y for x, y in zip(a, b))))
sys.exit(0 if len(a) == len(b) >= 20 and abs(ta - tb) <= 0.01 * tb
         and a != b else 1)
EOF
}

# usage: run2 PROGRAM OPTIONS...: on 2 ranks, quiet
run2() {
	timeout 120 collx-run -n 2 --timeout 60 -- "$@" -q
}

@test "collx-dp: a gpt trained 300 steps in bf16 ends within 1% of f32 on its own curve; --precision f32 writes the default's bytes" {
	need_dnnl
	timeout 10 collx-dp --init gpt --dims 256,32,2,2,16 --seed 1 \
	    -o g.safetensors
	for p in f32 bf16; do
		timeout 60 collx-dp -q -m g.safetensors --data "$GPL" --batch 8 \
		    --steps 300 --optimizer adamw --lr 0.01 --precision "$p" \
		    -o "o$p.safetensors" --loss-csv "l$p.csv"
	done
	timeout 60 collx-dp -q -m g.safetensors --data "$GPL" --batch 8 \
	    --steps 300 --optimizer adamw --lr 0.01 -o o.safetensors \
	    --loss-csv l.csv
	close_not_equal lbf16.csv lf32.csv
	cmp o.safetensors of32.safetensors
	cmp <(cut -d, -f1-4 l.csv) <(cut -d, -f1-4 lf32.csv)
}

@test "collx-train (tp2), collx-pipe (an mlp stack on 2 stages) and collx-tp (a block, tp on 2 ranks) train in bf16 within 1% of f32, on curves of their own" {
	need_dnnl
	need_dnnl
	timeout 10 collx-dp --init gpt --dims 256,32,2,2,16 --seed 1 \
	    -o g.safetensors
	timeout 10 collx-dp --init mlp --dims 16,64,16,2 --seed 2 \
	    -o m.safetensors
	timeout 10 collx-dp --init block --dims 32,4,64 --seed 3 \
	    -o b.safetensors
	timeout 10 collx-tensor create --shape 64,16 --fill randn --seed 4 \
	    -o X.npy
	timeout 10 collx-tensor create --shape 64,16 --fill randn --seed 5 \
	    -o Y.npy
	timeout 10 collx-tensor create --shape 4,8,32 --fill randn --seed 6 \
	    -o BX.npy
	timeout 10 collx-tensor create --shape 4,8,32 --fill randn --seed 7 \
	    -o BY.npy
	for p in f32 bf16; do
		run2 collx-train --tp 2 -m g.safetensors --data "$GPL" \
		    --batch 8 --steps 100 --optimizer adamw --lr 0.01 \
		    --precision "$p" --loss-csv "train$p.csv"
		run2 collx-pipe -m m.safetensors -i X.npy -t Y.npy \
		    --microbatches 2 --batch 16 --steps 100 --lr 0.05 \
		    --precision "$p" --loss-csv "pipe$p.csv"
		run2 collx-tp --layer block --mode tp --heads 4 -m b.safetensors \
		    -i BX.npy --train --targets BY.npy --steps 100 --lr 0.05 \
		    --precision "$p" --loss-csv "tp$p.csv"
	done
	close_not_equal trainbf16.csv trainf32.csv
	close_not_equal pipebf16.csv pipef32.csv
	close_not_equal tpbf16.csv tpf32.csv
}

@test "the portable path (oneDNN held below AVX512-BF16) says so once, on rank 0, and trains the native path's losses" {
	need_dnnl
	timeout 10 collx-dp --init gpt --dims 256,32,2,2,16 --seed 1 \
	    -o g.safetensors
	args=(-m g.safetensors --data "$GPL" --batch 8 --steps 10
	    --optimizer adamw --lr 0.01 --precision bf16)
	run2 collx-dp "${args[@]}" --loss-csv native.csv
	DNNL_MAX_CPU_ISA=AVX512_CORE run timeout 120 collx-run -n 2 \
	    --timeout 60 -- collx-dp "${args[@]}" --loss-csv portable.csv
	echo "$output"
	[ "$status" -eq 0 ]
	[ "$(grep -c 'portable path' <<<"$output")" -eq 1 ]
	"$PY" - native.csv portable.csv <<'EOF'
import sys
a, b = ([float(l.split(",")[2]) for l in open(p).read().splitlines()[1:]]
        for p in sys.argv[1:])
worst = max(abs(x - y) / abs(x) for x, y in zip(a, b))
print("worst relative difference %.3g over %d steps" % (worst, len(a)))
sys.exit(0 if len(a) == len(b) == 10 and worst <= 1e-4 else 1)
EOF
}

@test "-v names the matmuls' implementation: oneDNN's bf16 kernels where the CPU has AVX512-BF16 or AMX, else the portable path" {
	need_dnnl
	timeout 10 collx-dp --init gpt --dims 256,32,2,2,16 --seed 1 \
	    -o g.safetensors
	run timeout 60 collx-dp -v -m g.safetensors --data "$GPL" --batch 8 \
	    --steps 2 --precision bf16
	echo "$output"
	[ "$status" -eq 0 ]
	line=$(grep '^collx-dp: matmuls: ' <<<"$output")
	if grep -qwE 'avx512_bf16|amx_bf16' /proc/cpuinfo; then
		[[ "$line" == *"oneDNN "*" matmul "*"_bf16 ("* ]]
	else
		[[ "$line" == *"portable bf16"* ]]
	fi
}

@test "-v under f32 names OpenBLAS's kernel set and whether OPENBLAS_CORETYPE chose it" {
	timeout 10 collx-dp --init gpt --dims 256,32,2,2,16 --seed 1 \
	    -o g.safetensors
	run env OPENBLAS_CORETYPE=Haswell timeout 60 collx-dp -v \
	    -m g.safetensors --data "$GPL" --batch 8 --steps 2
	echo "$output"
	[ "$status" -eq 0 ]
	line=$(grep '^collx-dp: matmuls: ' <<<"$output")
	[ "$line" = "collx-dp: matmuls: OpenBLAS sgemm, Haswell kernels (chosen by OPENBLAS_CORETYPE)" ]
	run env OPENBLAS_CORETYPE=Haswell timeout 60 collx-dp -m g.safetensors \
	    --data "$GPL" --batch 8 --steps 2
	[ "$status" -eq 0 ]
	if grep -q 'matmuls:' <<<"$output"; then false; fi
}

# The widest kernel set this CPU runs, read from /proc/cpuinfo's flags:
# SkylakeX's needs AVX-512 F, CD, BW, DQ and VL; Haswell's AVX2 and FMA.
cpu_widest_set() {
	local flags
	flags=$(grep -m 1 '^flags' /proc/cpuinfo)
	if [[ " $flags " == *" avx512f "* && " $flags " == *" avx512cd "* &&
	    " $flags " == *" avx512bw "* && " $flags " == *" avx512dq "* &&
	    " $flags " == *" avx512vl "* ]]; then
		echo SkylakeX
	elif [[ " $flags " == *" avx2 "* && " $flags " == *" fma "* ]]; then
		echo Haswell
	fi
}

@test "OpenBLAS's own kernel set narrower than the CPU's: named, with the OPENBLAS_CORETYPE that runs faster ones, on a terminal (not under -q, nor in a log) and in -v's line" {
	timeout 10 collx-dp --init gpt --dims 256,32,2,2,16 --seed 1 \
	    -o g.safetensors
	run env -u OPENBLAS_CORETYPE timeout 60 collx-dp -v \
	    -m g.safetensors --data "$GPL" --batch 8 --steps 2
	echo "$output"
	[ "$status" -eq 0 ]
	line=$(grep '^collx-dp: matmuls: ' <<<"$output")
	core=$(sed -n 's/^collx-dp: matmuls: OpenBLAS sgemm, \([A-Za-z0-9]*\) kernels (.*/\1/p' <<<"$line")
	[ -n "$core" ]
	widest=$(cpu_widest_set)
	case "$widest/$core" in
	SkylakeX/SkylakeX | SkylakeX/Cooperlake | SkylakeX/SapphireRapids | \
	Haswell/Haswell | Haswell/Zen | Haswell/Excavator | \
	Haswell/SkylakeX | Haswell/Cooperlake | Haswell/SapphireRapids | /*)
		advice= ;;
	*)	advice=$widest ;;
	esac
	echo "CPU's widest set: ${widest:-none}, OpenBLAS's: $core, advice: ${advice:-none}"
	plain="collx-dp: matmuls: OpenBLAS sgemm, $core kernels (OpenBLAS's choice for this CPU"
	# a log: the summary alone
	run env -u OPENBLAS_CORETYPE timeout 60 collx-dp -m g.safetensors \
	    --data "$GPL" --batch 8 --steps 2
	[ "$status" -eq 0 ]
	[ "${#lines[@]}" -eq 1 ]
	[[ "${lines[0]}" == "collx-dp: 2 steps, final loss "* ]]
	timeout 60 script -qec "env -u OPENBLAS_CORETYPE collx-dp -m g.safetensors --data $GPL --batch 8 --steps 2" /dev/null >tty.out
	timeout 60 script -qec "env -u OPENBLAS_CORETYPE collx-dp -q -m g.safetensors --data $GPL --batch 8 --steps 2" /dev/null >q.out
	[ ! -s q.out ]
	if [ -z "$advice" ]; then
		[ "$line" = "$plain)" ]
		if grep -q 'matmuls:' tty.out; then false; fi
		return 0
	fi
	[ "$line" = "$plain; OPENBLAS_CORETYPE=$advice runs faster ones)" ]
	# the last line on the terminal, after the summary
	[ "$(command tr -d '\r' <tty.out | tail -n 1)" = "$line" ]
	[ "$(grep -c 'matmuls:' tty.out)" -eq 1 ]
	# the advice names a set this OpenBLAS takes
	run env OPENBLAS_CORETYPE="$advice" timeout 60 collx-dp -v \
	    -m g.safetensors --data "$GPL" --batch 8 --steps 2
	[ "$status" -eq 0 ]
	line=$(grep '^collx-dp: matmuls: ' <<<"$output")
	[ "$line" = "collx-dp: matmuls: OpenBLAS sgemm, $advice kernels (chosen by OPENBLAS_CORETYPE)" ]
}

@test "--precision other than f32 or bf16 is a usage error in every program (exit 2), naming the value" {
	for prog in collx-dp collx-tp collx-pipe collx-train; do
		run timeout 10 "$prog" --precision fp8
		echo "$output"
		[ "$status" -eq 2 ]
		[ "${lines[0]}" = "$prog: --precision: want f32 or bf16, not 'fp8'" ]
	done
}

@test "a build without oneDNN refuses bf16: one line naming the library, exit 2, before reading anything" {
	# This build's collx-dp where it lacks oneDNN, else the one the
	# Makefile links for this test from gemm.c compiled without it.
	local dp=collx-dp
	if ! collx-dp --precision bf16 2>&1 | grep -q "oneDNN (libdnnl)"; then
		dp=$COLLX_UNITS/nodnnl/collx-dp
		[ -x "$dp" ]
	fi
	run timeout 10 "$dp" --precision bf16 -m nothere.safetensors \
	    --data nothere.txt
	echo "$output"
	[ "$status" -eq 2 ]
	[ "${lines[0]}" = "collx-dp: --precision bf16: needs oneDNN (libdnnl), which this build of collx lacks" ]
	run timeout 10 "$dp" --help
	[ "$status" -eq 0 ]
}

@test "collx-bench dp --precision f32,bf16: the sweep once per precision, passed to every run, bf16's rows named dp-bf16; a value other than f32 or bf16 exit 2" {
	need_dnnl
	bench_logging_dp
	run timeout -k 5 240 bin/collx-bench dp -N 2 --sync ring --steps 3 \
	    --batch 2 --dims 256,16,1,2,8 --precision f32,bf16 --csv
	echo "$output"
	[ "$status" -eq 0 ]
	[ "${#lines[@]}" -eq 5 ]
	[ "$(tail -n +2 <<<"$output" | cut -d, -f2,5 | tr '\n' ' ')" = \
	    "dp,1 dp,2 dp-bf16,1 dp-bf16,2 " ]
	# world 1 once and world 2's two ranks, per precision; not --init
	[ "$(grep -c -- "--precision f32" dp.log)" -eq 3 ]
	[ "$(grep -c -- "--precision bf16" dp.log)" -eq 3 ]
	[ "$(wc -l <dp.log)" -eq 7 ]
	run timeout 30 collx-bench dp --precision f32,fp8
	[ "$status" -eq 2 ]
	[ "${lines[0]}" = "collx-bench: --precision: want f32 or bf16, not 'fp8'" ]
}

@test "the peer, examples/peers/torch_autocast.py, trains collx's weights to collx --precision bf16's losses (first within 1e-3, the 30th within 1e-2)" {
	need_dnnl
	need "PyTorch (python3-torch)" "$PY" -c 'import torch'
	timeout 10 collx-dp --init gpt --dims 256,32,2,2,16 --seed 1 \
	    -o g.safetensors
	timeout 60 collx-dp -q -m g.safetensors --data "$GPL" --batch 8 \
	    --steps 30 --optimizer adamw --lr 0.01 --precision bf16 \
	    --loss-csv l.csv
	run timeout 120 "$PY" "$COLLX_ROOT/examples/peers/torch_autocast.py" \
	    "$GPL" 32 2 2 16 8 30 0.01 g.safetensors
	echo "$output"
	[ "$status" -eq 0 ]
	"$PY" - "$output" l.csv <<'PYEOF'
import re, sys
m = re.search(r"loss ([0-9.]+), step 0 loss ([0-9.]+)", sys.argv[1])
last, first = float(m.group(1)), float(m.group(2))
rows = open(sys.argv[2]).read().splitlines()[1:]
c0, c29 = float(rows[0].split(",")[2]), float(rows[-1].split(",")[2])
print("step 0: torch %.6f collx %.6f; step 29: torch %.6f collx %.6f"
      % (first, c0, last, c29))
sys.exit(0 if len(rows) == 30 and abs(first - c0) <= 1e-3 * c0
         and abs(last - c29) <= 1e-2 * c29 else 1)
PYEOF
}
