#!/usr/bin/env bats
# collx-bench: output formats (table columns, CSV header and column count),
# --check (exact inputs; a deliberately corrupted result is caught),
# busbw against the nccl-tests closed forms computed here, Ctrl-C (a dead
# rank: faults.bats), p2p on 3 ranks, dp on 1 and 2 ranks. Speed is never
# asserted.

load lib/common
load lib/coll

setup() {
	common_setup
}

teardown() {
	common_teardown
}

CSV_HEADER=program,op,algo,rank,world_size,dtype,count,bytes,iter,seconds,algbw_gbps,busbw_gbps,place,redop,min_s,max_s,p99_s,wrong,hosts

# bench W ARGS...: collx-bench on W local ranks through collx-run.
bench() {
	local w=$1
	shift
	timeout -k 5 90 collx-run -n "$w" --timeout 20 -- collx-bench "$@"
}

@test "coll --table: the nccl-tests columns, two rows (out, in) per size and algorithm, a footer" {
	run bench 3 coll --algo ring,tree -b 1K -e 16K -f 4 -n 3 -w 1 --table --timing t.csv
	[ "$status" -eq 0 ]
	# --timing: the same rows as CSV, rank 0 writing
	[ "$(head -1 t.csv)" = "$CSV_HEADER" ]
	[ "$(wc -l <t.csv)" -eq 13 ]
	echo "$output" | grep -E '^ +size +count +type +redop +algo +place +time_us +min_us +max_us +p99_us +algbw +busbw +#wrong$'
	rows=$(echo "$output" | grep -vE '^#|^ +(size|\(B\))' )
	[ "$(echo "$rows" | wc -l)" -eq 12 ]	# 2 algos x 3 sizes x 2 places
	echo "$rows" | awk 'NF != 13 { print "bad row: " $0; exit 1 }'
	echo "$rows" | awk '{ print $1 }' | sort -nu | tr '\n' ' ' | grep -qx '1024 4096 16384 '
	[ "$(echo "$rows" | awk '$6 == "out"' | wc -l)" -eq 6 ]
	[ "$(echo "$rows" | awk '$13 == "N/A"' | wc -l)" -eq 12 ]
	echo "$output" | grep -E '^# collx-bench coll: allreduce, f32, op sum, 3 ranks on 1 host$'
	echo "$output" | grep -E '^# Avg bus bandwidth +: [0-9.]+ GB/s$'
}

@test "coll CSV (not a terminal): collx(7)'s TIMING CSV columns then min/max/p99, 19 columns a row" {
	run bench 2 coll --op allgather --algo all -b 64 -e 256 -n 2 -w 0 --check
	[ "$status" -eq 0 ]
	[ "${lines[0]}" = "$CSV_HEADER" ]
	nalgo=$(echo "$output" | tail -n +2 | cut -d, -f3 | sort -u | wc -l)
	[ "$nalgo" -ge 3 ]	# auto, ring, rd, bruck...
	[ "${#lines[@]}" -eq $((1 + nalgo * 3 * 2)) ]
	echo "$output" | tail -n +2 | awk -F, 'NF != 19 { print "bad row: " $0; exit 1 }
		$1 != "collx-bench" || $2 != "allgather" || $4 != 0 || $5 != 2 || $6 != "f32" { exit 1 }
		$8 != $7 * 4 || $9 != 2 || $18 != 0 || $19 != 1 { print "bad: " $0; exit 1 }
		!($15 <= $10 && $10 <= $16 && $16 >= $17) { print "order: " $0; exit 1 }'
}

@test "coll: algbw = bytes/time and busbw/algbw = the nccl-tests factor for every collective, W = 2..4" {
	for w in 2 3 4; do
		for op in allreduce broadcast allgather reduce-scatter alltoall; do
			bench $w coll --op $op -b 4K -e 64K -f 16 -n 2 -w 0 --csv >"$op.$w.csv"
		done
	done
	"$PY" - <<-'EOF'
	import csv
	# nccl-tests' PERFORMANCE.md, written out here: allreduce 2(n-1)/n,
	# allgather, reduce-scatter and alltoall (n-1)/n, broadcast 1.
	factor = {'allreduce': lambda n: 2 * (n - 1) / n, 'broadcast': lambda n: 1.0,
	          'allgather': lambda n: (n - 1) / n, 'reduce-scatter': lambda n: (n - 1) / n,
	          'alltoall': lambda n: (n - 1) / n}
	for w in (2, 3, 4):
	    for op in factor:
	        rows = list(csv.DictReader(open(f'{op}.{w}.csv')))
	        assert len(rows) == 4, (op, w, len(rows))
	        for r in rows:
	            n, b, s = int(r['world_size']), int(r['bytes']), float(r['seconds'])
	            assert n == w
	            # the sizes a sweep rounds to: whole elements, whole blocks per rank
	            blocks = w if op in ('allgather', 'reduce-scatter', 'alltoall') else 1
	            assert b % (4 * blocks) == 0 and b > 4096 - 4 * blocks, (op, w, b)
	            algbw = b / s / 1e9
	            assert abs(float(r['algbw_gbps']) - algbw) <= 1e-5 * algbw + 1e-6, r
	            bus = algbw * factor[op](n)
	            assert abs(float(r['busbw_gbps']) - bus) <= 1e-5 * bus + 1e-6, r
	EOF
}

@test "coll --check: every collective, algorithm and placement exact on 3 ranks (#wrong 0)" {
	for op in allreduce broadcast allgather reduce-scatter alltoall; do
		run bench 3 coll --op $op --algo all -b 24 -e 6K -f 16 -n 1 -w 0 --check
		[ "$status" -eq 0 ]
		echo "$output" | tail -n +2 | awk -F, '$18 != "0" { print "wrong: " $0; exit 1 }'
	done
}

@test "coll --check: dtypes and reduction ops, exact small-integer inputs (#wrong 0)" {
	for dt in f64 f16 bf16 i8 i32 i64 u8 bool; do
		for redop in sum prod min max avg; do
			run bench 4 coll --dtype $dt --redop $redop --algo ring,rabenseifner \
				-b 64 -e 1K -f 16 -n 1 -w 0 --check
			[ "$status" -eq 0 ] || { echo "$dt $redop: $output"; false; }
			echo "$output" | tail -n +2 | awk -F, -v d=$dt '$6 != d || $18 != "0" { print; exit 1 }'
		done
	done
}

@test "coll --check catches a corrupted reduction (COLLX_BENCH_FAULT): #wrong = K, exit 4" {
	export COLLX_BENCH_FAULT=3
	run bench 2 coll --algo ring,tree -b 64 -e 256 -n 1 -w 0 --check
	[ "$status" -eq 4 ]
	echo "$output" | grep -q 'collx-bench: rank 0: --check: 36 wrong elements'
	# 2 algorithms x 3 sizes x 2 placements, each with exactly 3 wrong
	[ "$(echo "$output" | grep -c '^collx-bench,allreduce')" -eq 12 ]
	echo "$output" | grep '^collx-bench,allreduce' | awk -F, '$18 != 3 { exit 1 }'
	# the same run without --check cannot see it
	run bench 2 coll --algo ring -b 64 -e 64 -n 1 -w 0
	[ "$status" -eq 0 ]
}

@test "coll --seconds: iteration count chosen from the warm-up, the same on every rank" {
	run bench 2 coll -b 1K -e 1K --seconds 0.2 -w 2
	[ "$status" -eq 0 ]
	# a 1 KiB allreduce takes well under 10 ms even on a loaded machine,
	# so 0.2 s is more iterations than the default -n 20
	echo "$output" | tail -n +2 | awk -F, '$9 <= 20 { exit 1 }'
}

@test "coll: Ctrl-C prints the rows measured so far and exits 130" {
	timeout -k 5 60 collx-run -n 2 -- collx-bench coll -b 64K -e 1G -n 20 \
		--table >out.txt 2>err.txt &
	pid=$!
	for _ in $(seq 100); do
		[ "$(grep -c ' out \| in ' out.txt)" -ge 2 ] && break
		sleep 0.1
	done
	kill -INT "$(pgrep -P "$pid")"
	rc=0
	wait "$pid" || rc=$?
	[ "$rc" -eq 130 ]
	grep -E '^# interrupted after [0-9]+ rows$' out.txt
	grep -E '^# Avg bus bandwidth' out.txt
	[ "$(grep -cE '^ +[0-9]+ ' out.txt)" -ge 2 ]
}

@test "ranks started with different -b, -e or --op refuse each other, naming it (exit 3)" {
	for o in "-b 1K:-b 8" "-e 4K:-e 16M" "--op allgather:--op allreduce"; do
		one=${o%%:*} zero=${o#*:}
		run timeout 30 collx-run -n 2 --timeout 10 -- sh -c "exec collx-bench \
		    coll -n 1 -w 0 \$( [ \"\$COLLX_RANK\" = 1 ] && echo $one )"
		echo "$o: $status: $output"
		[ "$status" -eq 3 ]
		grep -q "rank 1 was started with $one, rank 0 with $zero" <<<"$output"
	done
	run timeout 30 collx-run -n 2 --timeout 10 -- sh -c 'exec collx-bench \
	    $( [ "$COLLX_RANK" = 1 ] && echo p2p || echo coll ) -n 1 -w 0'
	[ "$status" -eq 3 ]
	grep -q "rank 1 runs collx-bench p2p, rank 0 collx-bench coll" <<<"$output"
}

@test "usage errors exit 2 with the program's name" {
	run collx-bench
	[ "$status" -eq 2 ]
	[[ "$output" == collx-bench:* ]]
	run collx-bench coll --op gather
	[ "$status" -eq 2 ]
	run collx-bench coll --algo bruck
	[ "$status" -eq 2 ]
	echo "$output" | grep -q "allreduce has no algorithm 'bruck'"
	run collx-bench p2p
	[ "$status" -eq 2 ]
	run collx-bench coll -b 1M -e 1K
	[ "$status" -eq 2 ]
	run collx-bench --help
	[ "$status" -eq 0 ]
	run collx-bench -V
	[ "$status" -eq 0 ]
}

@test "dp: an --arch it cannot train or --dims that do not fit the arch exit 2 before any run" {
	run timeout 30 collx-bench dp --arch llama
	[ "$status" -eq 2 ]
	[ "${lines[0]}" = "collx-bench: --arch: want gpt or mlp, not 'llama'" ]
	run timeout 30 collx-bench dp --arch block --dims 16,2
	[ "$status" -eq 2 ]
	[ "${lines[0]}" = "collx-bench: --arch: want gpt or mlp, not 'block'" ]
	run timeout 30 collx-bench dp --arch mlp --dims 16,32
	[ "$status" -eq 2 ]
	[[ "${lines[0]}" == "collx-bench: "*"--dims"*"16,32"* ]]
	# 3 heads do not divide d_model 64
	run timeout 30 collx-bench dp --dims 256,64,2,3,32
	[ "$status" -eq 2 ]
	[[ "${lines[0]}" == "collx-bench: --dims 256,64,2,3,32: "* ]]
}

@test "p2p --all-pairs on 3 ranks: six ordered pairs, CSV and a matrix" {
	run bench 3 p2p --all-pairs -b 8 -e 64 -f 8 -n 10 -w 2
	[ "$status" -eq 0 ]
	[ "${lines[0]}" = "program,op,algo,rank,world_size,dtype,count,bytes,iter,seconds,algbw_gbps,busbw_gbps,src,dst,min_s,max_s,p99_s,hosts,transport" ]
	[ "${#lines[@]}" -eq 13 ]
	echo "$output" | tail -n +2 | cut -d, -f13,14 | sort -u | tr '\n' ' ' |
		grep -qx '0,1 0,2 1,0 1,2 2,0 2,1 '
	echo "$output" | tail -n +2 | awk -F, '$2 != "p2p-latency" || NF != 19 || $10 <= 0 { exit 1 }'
	run bench 3 p2p --all-pairs -b 8 -e 8 -n 10 --table
	[ "$status" -eq 0 ]
	echo "$output" | grep -qE '^ +src +dst +transport +size\(B\) +lat_us +min_us +max_us +p99_us +GB/s$'
	[ "$(echo "$output" | grep -cE '^ +[0-2] +[0-2] +(shm|tcp) +8 ')" -eq 6 ]
	echo "$output" | grep -q '^# latency (us) matrix at 8 bytes'
	[ "$(echo "$output" | grep -cE '^ +[0-2] +(- +[0-9.]+ +[0-9.]+|[0-9.]+ +- +[0-9.]+|[0-9.]+ +[0-9.]+ +-)$')" -eq 3 ]
}

# p2p_transport ARGS0 [ARGS1]: collx-bench p2p on 2 local ranks, rank 0
# given the words ARGS0 and rank 1 ARGS1 (default ARGS0); $transport: the
# CSV's distinct "SRC-DST TRANSPORT" rows, each followed by a blank.
p2p_transport() {
	run timeout -k 5 90 collx-run -n 2 --timeout 20 -- sh -c '
		a=$1
		[ "$COLLX_RANK" = 1 ] && a=$2
		exec collx-bench p2p -b 8 -e 64 -f 8 -n 3 -w 1 $a' sh "$1" "${2-$1}"
	[ "$status" -eq 0 ] || { echo "$output"; return 1; }
	transport=$(awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) col[$i] = i; next }
	    { print $col["src"] "-" $col["dst"], $col["transport"] }' <<<"$output" |
	    sort -u | tr '\n' ' ')
}

@test "p2p names the transport: shm between 2 local ranks, tcp with --no-shm or COLLX_SHM=0" {
	unset COLLX_SHM
	p2p_transport ""
	[ "$transport" = "0-1 shm " ]
	p2p_transport --no-shm
	[ "$transport" = "0-1 tcp " ]
	# A host uses shared memory only when all its ranks allow it.
	p2p_transport "" --no-shm
	[ "$transport" = "0-1 tcp " ]
	export COLLX_SHM=0
	p2p_transport ""
	[ "$transport" = "0-1 tcp " ]
	export COLLX_SHM=1
	p2p_transport ""
	[ "$transport" = "0-1 shm " ]
	p2p_transport --no-shm	# the option beats the variable
	[ "$transport" = "0-1 tcp " ]
	unset COLLX_SHM
}

@test "p2p bw and bibw between one pair: GB/s = bytes (twice for bibw) / time per message" {
	for t in bw bibw; do
		run bench 3 p2p --test $t --pair 2,0 -b 1K -e 64K -f 8 -n 5 -w 1 --window 8
		[ "$status" -eq 0 ]
		[ "${#lines[@]}" -eq 4 ]
		echo "$output" | tail -n +2 | awk -F, -v t=$t '
			$2 != "p2p-" t || $13 != 2 || $14 != 0 { exit 1 }
			{ want = $8 / $10 / 1e9; if ($11 < want * 0.999 || $11 > want * 1.001) exit 1 }
			t == "bibw" && $8 != 2 * $7 { exit 1 }'
	done
}

@test "dp on 1 and 2 ranks: tokens/s, step time, communication share, efficiency" {
	run timeout -k 5 240 collx-bench dp -N 2 --sync ring,ps --steps 4 --batch 2 \
		--dims 256,16,1,2,8
	[ "$status" -eq 0 ]
	[ "${lines[0]}" = "program,op,algo,rank,world_size,dtype,count,bytes,iter,seconds,algbw_gbps,busbw_gbps,tokens_per_s,comm_share,efficiency,hosts" ]
	[ "${#lines[@]}" -eq 5 ]
	echo "$output" | tail -n +2 | awk -F, '
		$2 != "dp" || NF != 16 || $9 != 3 || $10 <= 0 || $13 <= 0 { print; exit 1 }
		$5 == 1 && ($14 < 0 || $14 >= 1 || $15 != 1) { print; exit 1 }
		$5 == 2 && ($14 <= 0 || $14 >= 1 || $15 <= 0) { print; exit 1 }'
	[ "$(echo "$output" | cut -d, -f3 | sort -u | tr '\n' ' ')" = "algo ps ring " ]
}

@test "dp --wire: passed to every run and named as the rows' dtype; combinations collx-dp refuses exit 2 first" {
	run timeout -k 5 240 collx-bench dp -N 2 --sync ring --steps 3 --batch 2 \
		--dims 256,16,1,2,8 --wire bf16
	[ "$status" -eq 0 ]
	[ "${#lines[@]}" -eq 3 ]
	[ "$(echo "$output" | tail -n +2 | cut -d, -f6 | sort -u)" = bf16 ]
	run timeout 30 collx-bench dp --wire bf16
	[ "$status" -eq 2 ]
	[ "${lines[0]}" = "collx-bench: --wire bf16 goes with allreduce, not --sync ps" ]
	run timeout 30 collx-bench dp --sync auto,ring --wire int8
	[ "$status" -eq 2 ]
	[ "${lines[0]}" = "collx-bench: --wire int8 goes with --sync auto only, not --sync ring" ]
	run timeout 30 collx-bench dp --sync ring --wire fp8
	[ "$status" -eq 2 ]
}

@test "dp --sync-every, --outer-lr, --outer-momentum, --powersgd: passed to every run; combinations collx-dp refuses exit 2 first" {
	bench_logging_dp
	run timeout -k 5 240 bin/collx-bench dp -N 2 --sync ring --steps 3 --batch 2 \
		--dims 256,16,1,2,8 --sync-every 2 --outer-lr 0.5 --outer-momentum 0.8
	[ "$status" -eq 0 ]
	[ "${#lines[@]}" -eq 3 ]
	# every rank of the runs on 1 and 2 ranks, not --init
	[ "$(grep -c -- "--sync-every 2 --outer-lr 0.5 --outer-momentum 0.8" dp.log)" -eq 3 ]
	[ "$(wc -l <dp.log)" -eq 4 ]
	run timeout 30 collx-bench dp --sync ring,ps --sync-every 4
	[ "$status" -eq 2 ]
	[ "${lines[0]}" = "collx-bench: --sync-every goes with allreduce, not --sync ps" ]
	run timeout 30 collx-bench dp --sync ring --outer-lr 0.5
	[ "$status" -eq 2 ]
	[ "${lines[0]}" = "collx-bench: --outer-lr and --outer-momentum go with --sync-every" ]
	rm dp.log
	run timeout -k 5 240 bin/collx-bench dp -N 2 --sync ring --steps 3 --batch 2 \
		--dims 256,16,1,2,8 --powersgd 2 --powersgd-start 1
	[ "$status" -eq 0 ]
	[ "$(grep -c -- "--powersgd 2 --powersgd-start 1" dp.log)" -eq 3 ]
	run timeout 30 collx-bench dp --powersgd 2
	[ "$status" -eq 2 ]
	[ "${lines[0]}" = "collx-bench: --powersgd goes with allreduce, not --sync ps" ]
	run timeout 30 collx-bench dp --sync ring --powersgd 2 --wire bf16
	[ "$status" -eq 2 ]
	[ "${lines[0]}" = "collx-bench: --powersgd and --wire bf16: PowerSGD's factors travel in f32" ]
}

# The progress line in FILE (from script(1)): WHAT at K of N, drawn at the
# start of the line and erased (carriage return, erase to the end of line)
# before the row that follows; LEFT: the time-left part's pattern.
# usage: progress_ok FILE WHAT K N LEFT
progress_ok() {
	grep -q $'\r\e\\[K'"collx-bench: $2 ($3/$4)$5"$'\r\e\\[K' "$1"
}

@test "coll and dp on a terminal: a progress line on stderr; none with -q or off a terminal" {
	args="coll -b 1K -e 4K -f 4 -n 3 -w 1 --algo ring"
	timeout 60 script -qec "collx-bench $args" /dev/null >tty.out
	progress_ok tty.out "ring 1K out of place" 1 4 ""
	progress_ok tty.out "ring 4K in place" 4 4 ", about [0-9]* s left"
	[ "$(grep -c ' ring  *\(in\|out\) ' tty.out)" -eq 4 ]
	timeout 60 script -qec "collx-bench $args -q" /dev/null >tty.out
	[ "$(grep -c $'\e' tty.out)" -eq 0 ]
	timeout 60 collx-bench $args 2>err.out >/dev/null
	[ ! -s err.out ]
	# dp: world 1 once, then world 2 for each method
	args="dp -N 2 --sync ring,ps --steps 3 --batch 2 --dims 256,16,1,2,8"
	timeout -k 5 240 script -qec "collx-bench $args" /dev/null >tty.out
	progress_ok tty.out "world 1, sync ring" 1 3 ""
	progress_ok tty.out "world 2, sync ring" 2 3 ", about [0-9]* s left"
	progress_ok tty.out "world 2, sync ps" 3 3 ", about [0-9]* s left"
	timeout -k 5 240 script -qec "collx-bench $args -q" /dev/null >tty.out
	[ "$(grep -c $'\e' tty.out)" -eq 0 ]
	timeout -k 5 240 collx-bench $args 2>err.out >/dev/null
	[ ! -s err.out ]
}

# Every D,T,P with D*T*P = W, one per line, sorted.
factorizations() {
	local w=$1 d t
	for ((d = 1; d <= w; d++)); do
		for ((t = 1; t <= w; t++)); do
			((w % (d * t) == 0)) && echo "$d,$t,$((w / d / t))"
		done
	done | sort
}

@test "mesh -N 4: every factorization once (refused ones with the reason), fastest first, shares in [0,1], tokens/s = tokens per step / step time" {
	run timeout -k 5 120 bash -c 'collx-bench mesh -N 4 --dims 256,16,2,2,8 \
		--steps 2 --repeat 1 --csv 2>"$0"' "$BATS_TEST_TMPDIR/err"
	[ "$status" -eq 0 ]
	[ "${lines[0]}" = "program,op,algo,rank,world_size,dtype,count,bytes,iter,seconds,algbw_gbps,busbw_gbps,dp,tp,pp,tokens_per_s,comm_dp,comm_tp,comm_pp,peak_bytes,step_q1_s,step_q3_s,rounds,tie,cp,comm_cp" ]
	# 2 heads refuse tp 4; 2 layers refuse pp 4; the gpt's 4 meshes with
	# cp 2 and 4 (seq 8 is 2C zigzag chunks of each) run.
	[ "${#lines[@]}" -eq 9 ]
	[ "$(echo "$output" | awk -F, 'NR > 1 && $25 > 1 { print $13 "," $14 "," $15 "," $25 }' | sort)" = \
	    "$( (factorizations 2 | sed 's/$/,2/'; echo 1,1,1,4) | sort)" ]
	grep -q 'mesh dp 1 tp 4 pp 1 refused: .*heads' "$BATS_TEST_TMPDIR/err"
	grep -q 'mesh dp 1 tp 1 pp 4 refused: .*layers' "$BATS_TEST_TMPDIR/err"
	[ "$(wc -l <"$BATS_TEST_TMPDIR/err")" -eq 2 ]
	{ echo "$output" | tail -n +2 | awk -F, '$25 == 1' | cut -d, -f13-15
	  sed -n 's/.*mesh dp \([0-9]*\) tp \([0-9]*\) pp \([0-9]*\) refused.*/\1,\2,\3/p' \
		"$BATS_TEST_TMPDIR/err"; } | sort >"$BATS_TEST_TMPDIR/got"
	[ "$(cat "$BATS_TEST_TMPDIR/got")" = "$(factorizations 4)" ]
	# batch 32 (8 x W) of seq 8: 256 tokens a step; one timed step.
	echo "$output" | tail -n +2 | awk -F, -v prev=1e300 '
		$2 != "mesh" || NF != 26 || $5 != 4 || $9 != 1 || $10 <= 0 { print; exit 1 }
		$21 != $10 || $22 != $10 || $23 != 1 { print "one step, one round: " $0; exit 1 }
		$3 != "dp" $13 ".tp" $14 ".pp" $15 ($25 > 1 ? ".cp" $25 : "") { print; exit 1 }
		$13 * $14 * $15 * $25 != 4 { print; exit 1 }
		$16 > prev { print "not fastest first: " $0; exit 1 }
		{ prev = $16; r = $16 * $10 / 256 }
		r < 0.99 || r > 1.01 { print "tokens/s: " $0; exit 1 }
		$17 < 0 || $18 < 0 || $19 < 0 || $26 < 0 { print; exit 1 }
		$17 + $18 + $19 + $26 > 1 { print; exit 1 }
		# the D*C ranks of a stage and shard sum the gradients (dp)
		($13 * $25 > 1) != ($17 > 0) || ($14 > 1) != ($18 > 0) { print; exit 1 }
		($25 > 1) != ($26 > 0) { print "cp: " $0; exit 1 }
		($15 > 1) != ($19 > 0) || $20 < 1048576 { print; exit 1 }'
}

@test "mesh -N 2 --table: the three meshes and cp 2, fastest first, with the columns" {
	run timeout -k 5 60 collx-bench mesh -N 2 --dims 256,16,2,2,8 --steps 2 \
		--batch 4 --table --repeat 1
	[ "$status" -eq 0 ]
	echo "$output" | grep -q '^# collx-bench mesh: collx-train gpt 256,16,2,2,8, world 2, batch 4'
	echo "$output" | grep -Eq '^ +dp +tp +pp +tokens/s +step_ms +spread% +dp% +tp% +pp% +peak_bytes +cp +cp%$'
	[ "$(echo "$output" | grep -c refused)" -eq 0 ]
	echo "$output" | awk '$1 ~ /^[0-9]+$/ && $11 == 1 { print $1 "," $2 "," $3 }' | sort \
		>"$BATS_TEST_TMPDIR/got"
	[ "$(cat "$BATS_TEST_TMPDIR/got")" = "$(factorizations 2)" ]
	# and the gpt's cp 2
	[ "$(echo "$output" | awk '$1 ~ /^[0-9]+$/ && $11 != 1 { print $1 $2 $3 $11 }')" = 1112 ]
	echo "$output" | awk -v prev=1e300 '$1 ~ /^[0-9]+$/ {
		if ($4 > prev || NF < 12 || NF > 13) { print; exit 1 } prev = $4 }'
	echo "$output" | grep -Eq '^# (ranking not stable after 1 round|[234] meshes tie after 1 round)'
}

# A mesh's median lies between its steps' quartiles; a tie is exactly a
# lower quartile at or below the fastest's upper one, recomputed here from
# the CSV's quartiles; the verdict line names exactly the tied meshes.
@test "mesh --repeat 3: rounds until the ranking holds twice, medians over every step, ties named with median and spread" {
	run timeout -k 5 120 collx-bench mesh -N 2 --dims 256,16,2,2,8 --steps 4 \
		--batch 4 --repeat 3 --csv -v
	[ "$status" -eq 0 ] || { echo "$output"; false; }
	csv=$(echo "$output" | grep '^collx-bench,mesh,')
	[ "$(echo "$csv" | wc -l)" -eq 4 ]	# dp, tp, pp 2; cp 2
	# every mesh ran the same 2 or 3 rounds of 3 timed steps each, its
	# median between its quartiles
	echo "$csv" | awk -F, '{ r[$23]++ }
		($23 != 2 && $23 != 3) || $9 != 3 * $23 { print; exit 1 }
		$21 > $10 || $10 > $22 { print "quartiles: " $0; exit 1 }
		END { if (length(r) != 1) exit 1 }'
	# a tie: a mesh whose lower quartile is at or below the fastest's
	# upper one (the fastest too when any is)
	echo "$csv" | awk -F, 'NR == 1 { q3 = $22; next }
		{ t = $21 <= q3; n += t; if (t != $24) { print "tie: " $0; exit 1 } }
		END { exit 0 }'
	first=$(echo "$csv" | awk -F, -v q3=0 'NR == 1 { q3 = $22; t = $24; next }
		$21 <= q3 { any = 1 } END { print (any == t) ? "ok" : "bad" }')
	[ "$first" = ok ]
	verdict=$(echo "$output" | grep '^collx-bench: mesh ')
	rounds=$(echo "$csv" | head -1 | cut -d, -f23)
	if [ "$rounds" -eq 2 ]; then
		[[ "$verdict" == *"after 2 rounds (ranking stable"* ]] ||
		[[ "$verdict" == *"ranking stable after 2 rounds"* ]]
	else
		[[ "$verdict" == *"not stable"* ]] ||
		[[ "$verdict" == *"after 3 rounds"* ]]
	fi
	# a tie names every mesh whose tie column is 1, and only those
	ties=$(echo "$csv" | awk -F, '$24 == 1 { print $3 }' | sort | tr '\n' ' ')
	named=$(echo "$verdict" | grep -o 'dp[0-9]*\.tp[0-9]*\.pp[0-9]*\(\.cp[0-9]*\)\?' | sort | tr '\n' ' ')
	[ "$ties" = "$named" ]
	if [ -n "$ties" ]; then
		[[ "$verdict" == *"$(echo "$ties" | wc -w) meshes tie"* ]]
	fi
}

@test "mesh and dp: -n (iterations) for the world, or a run under a launcher, exit 2 with one line before any run" {
	run timeout 30 collx-bench mesh -n 4
	[ "$status" -eq 2 ]
	[ "${lines[0]}" = "collx-bench: mesh: -n is coll's and p2p's iterations; mesh starts its own ranks, -N WORLD (now 2) says how many" ]
	run timeout 30 collx-bench dp -N 3 -n 4
	[ "$status" -eq 2 ]
	[[ "${lines[0]}" == *"dp starts its own ranks, -N WORLD (now 3)"* ]]
	run timeout 30 env COLLX_RANK=0 COLLX_WORLD_SIZE=4 collx-bench mesh -N 4
	[ "$status" -eq 2 ]
	[ "${lines[0]}" = "collx-bench: mesh starts its own ranks; run it once, not as rank 0 of 4 under a launcher (COLLX_WORLD_SIZE is set): use -N or -H for its world" ]
	# the other ranks exit alike, leaving the line to rank 0
	run timeout 30 env COLLX_RANK=3 COLLX_WORLD_SIZE=4 collx-bench mesh -N 4
	[ "$status" -eq 2 ]
	[ -z "$output" ]
	run timeout 30 env OMPI_COMM_WORLD_RANK=0 OMPI_COMM_WORLD_SIZE=2 collx-bench dp
	[ "$status" -eq 2 ]
	[[ "${lines[0]}" == *"(OMPI_COMM_WORLD_SIZE is set)"* ]]
	# a world of one, or a batch script's allocation, is no launcher's
	run timeout 30 env COLLX_RANK=0 COLLX_WORLD_SIZE=1 SLURM_PROCID=0 \
	    SLURM_NTASKS=8 collx-bench mesh --ssh ssh
	[ "$status" -eq 2 ]
	[ "${lines[0]}" = "collx-bench: --ssh needs hosts (-H)" ]
	run timeout -k 5 60 collx-run -n 2 -- collx-bench mesh
	[ "$status" -eq 2 ]
	echo "$output" | grep -q 'collx-bench: mesh starts its own ranks; run it once, not as rank 0 of 2 under a launcher'
	run timeout 30 collx-bench coll --repeat 2
	[ "$status" -eq 2 ]
	[ "${lines[0]}" = "collx-bench: --repeat goes with mesh and plan --validate" ]
}

@test "mesh: usage errors exit 2 before any run" {
	run timeout 30 collx-bench mesh --sync ring
	[ "$status" -eq 2 ]
	[[ "$output" == "collx-bench: mesh: --sync"* ]]
	run timeout 30 collx-bench mesh --wire bf16
	[ "$status" -eq 2 ]
	run timeout 30 collx-bench mesh --arch llama
	[ "$status" -eq 2 ]
	run timeout 30 collx-bench mesh --dims 256,64,2,3,32
	[ "$status" -eq 2 ]
	run timeout 30 collx-bench mesh -N 0
	[ "$status" -eq 2 ]
	run timeout 30 collx-bench mesh --steps 1
	[ "$status" -eq 2 ]
	run timeout 30 collx-bench mesh extra
	[ "$status" -eq 2 ]
	run collx-bench --help
	[ "$status" -eq 0 ]
	echo "$output" | grep -q 'collx-bench mesh \[-N WORLD\] \[--arch A --dims D\] \[--batch B\] \[--steps K\]'
}

@test "mesh -H: hosts' usage errors exit 2 before any run; on local hosts the world is their ranks, under TMPDIR" {
	run timeout 30 collx-bench mesh -N 3 -H localhost:2,127.0.0.1:2
	[ "$status" -eq 2 ]
	[ "${lines[0]}" = "collx-bench: -N 3: the hosts localhost:2,127.0.0.1:2 hold 4 ranks" ]
	run timeout 30 collx-bench mesh --ssh ssh
	[ "$status" -eq 2 ]
	[ "${lines[0]}" = "collx-bench: --ssh needs hosts (-H)" ]
	run timeout 30 collx-bench dp -H localhost
	[ "$status" -eq 2 ]
	[ "${lines[0]}" = "collx-bench: -H and --ssh go with mesh and fit" ]
	# world 4, two rounds at most: twenty runs (the gpt's six and its
	# four with --cp) on ports 65525..65544
	run timeout 30 collx-bench mesh -H localhost:4 --master 127.0.0.1:65525 \
	    --repeat 2
	[ "$status" -eq 2 ]
	[[ "${lines[0]}" == "collx-bench: --master 127.0.0.1:65525: the 20 runs"* ]]
	[ -z "$(ls "$BATS_TEST_TMPDIR" | grep collx-bench)" ]
	run timeout -k 5 60 env TMPDIR="$BATS_TEST_TMPDIR" collx-bench mesh \
	    -H localhost,127.0.0.1 --master 127.0.0.1:29640 \
	    --dims 256,16,2,2,8 --steps 2 --batch 4 --table --repeat 1
	[ "$status" -eq 0 ] || { echo "$output"; false; }
	echo "$output" | grep -q '^# collx-bench mesh: collx-train gpt 256,16,2,2,8, world 2 on 2 hosts, batch 4'
	# the three meshes of 2 ranks and the gpt's cp 2
	[ "$(echo "$output" | awk '$1 ~ /^[0-9]+$/ && $4 > 0' | wc -l)" -eq 4 ]
	[ -z "$(ls "$BATS_TEST_TMPDIR" | grep collx-bench)" ]
}

@test "mesh --experts E: each mesh of D >= 2 runs again with every --ep dividing D and E; --experts elsewhere is a usage error" {
	run timeout -k 5 120 collx-bench mesh -N 2 --dims 256,16,2,2,8 \
	    --experts 4 --steps 3 --repeat 1 --csv
	[ "$status" -eq 0 ]
	# dp2, tp2, pp2, the gpt's cp2 (experts train under --cp), and dp2
	# with --ep 2 (the only X dividing D 2)
	[ "$(echo "$output" | grep -c '^collx-bench,mesh,')" -eq 5 ]
	echo "$output" | grep -q '^collx-bench,mesh,dp1\.tp1\.pp1\.cp2,'
	echo "$output" | grep -Eq '^collx-bench,mesh,dp2\.tp1\.pp1\.ep2,0,2,.*,2,1,1,[0-9.e+]+,'
	[ "$(echo "$output" | grep -c '\.ep')" -eq 1 ]
	run timeout 10 collx-bench dp --experts 4
	[ "$status" -eq 2 ]
	[[ "$output" == *"--experts goes with mesh and a gpt"* ]]
}
