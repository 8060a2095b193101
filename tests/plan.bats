#!/usr/bin/env bats
# collx-bench fit and plan: the cost file fit writes (every field
# collx-bench(1) documents), plan's ranking, columns and speed at 1024
# hosts x 8 ranks, its refusals of bad input, the ASTRA-sim export read
# by a parser written here from ASTRA-sim's documented workload format,
# and --validate's predicted-beside-measured rows. The cost model's
# arithmetic against closed forms is test_bench_plan's.

load lib/common

setup() {
	common_setup
	cd "$BATS_TEST_TMPDIR"
}

teardown() {
	common_teardown
}

# A cost file of round numbers (what fit would write).
write_cost() {
	cat >"${1:-cost.json}" <<-'EOF'
	{
	  "version": 1, "tool": "collx-bench fit", "world": 4, "hosts": 1,
	  "cores": 8, "model": { "arch": "gpt", "dims": "256,32,2,2,16" },
	  "reduce_gbps": 8,
	  "links": {
	    "shm": { "alpha_us": 2, "gbps": 10, "points": 6 },
	    "tcp": { "alpha_us": 20, "gbps": 1.25, "points": 6 }
	  },
	  "collectives": {
	    "tcp": { "allreduce": { "ring": { "alpha_us": 25, "gbps": 1.2,
	      "points": 6 } } }
	  },
	  "compute": {
	    "matmul": [ { "mflop": 0.01, "gflops": 20 },
	      { "mflop": 1000, "gflops": 80 } ],
	    "attention_gflops": 10, "elementwise_gbps": 5
	  }
	}
	EOF
}

PLAN_COLS=program,op,algo,rank,world_size,dtype,count,bytes,iter,seconds,algbw_gbps,busbw_gbps,dp,tp,pp,zero,sched,micro,compute_s,dp_s,tp_s,pp_s,bubble_s,mem_bytes,bytes_dp,bytes_tp,bytes_pp,tokens_per_s,cp,ep,cp_s,ep_s,bytes_cp,bytes_ep

@test "fit -N 2: a cost file with every documented field, both link classes and each algorithm measured" {
	run timeout -k 5 120 collx-bench fit -N 2 --dims 256,32,2,2,16 -b 4K \
	    -e 64K -o cost.json
	[ "$status" -eq 0 ] || { echo "$output"; false; }
	run "$PY" - cost.json "$COLLX_ROOT/man/man1/collx-bench.1" <<-'EOF'
	import json, re, sys
	c = json.load(open(sys.argv[1]))
	man = open(sys.argv[2]).read()
	assert c["version"] == 1 and c["world"] == 2 and c["hosts"] == 1
	assert c["cores"] >= 1 and c["reduce_gbps"] > 0
	assert c["model"] == {"arch": "gpt", "dims": "256,32,2,2,16"}
	for l in ("shm", "tcp"):
	    assert c["links"][l]["gbps"] > 0 and c["links"][l]["alpha_us"] >= 0
	    algos = c["collectives"][l]
	    assert set(algos) == {"allreduce", "allgather", "reduce-scatter",
	                          "broadcast", "alltoall"}, algos.keys()
	    # hier measured on one host only, where it runs all in shm
	    hier = {"hier"} if l == "shm" else set()
	    assert set(algos["allreduce"]) == {"naive", "ring", "tree", "rd",
	                                       "rabenseifner"} | hier
	    for k in ("allgather", "reduce-scatter", "broadcast"):
	        assert ("hier" in algos[k]) == (l == "shm"), (l, k)
	        assert all(a["ranks"] == 2 and a["hosts"] == 1
	                   for a in algos[k].values())
	    assert set(algos["alltoall"]) == {"linear", "pairwise"}
	    # 3 sizes (4K 16K 64K), in place, each size's time kept
	    for k in algos.values():
	        for a in k.values():
	            assert a["points"] == 3 and a["gbps"] > 0, a
	            assert a["sweep_bytes"] == [4096, 16384, 65536], a
	            assert len(a["sweep_us"]) == 3, a
	            assert all(t > 0 for t in a["sweep_us"]), a
	    # a link is ring allgather's constants
	    assert c["links"][l] == algos["allgather"]["ring"]
	mm = c["compute"]["matmul"]
	assert len(mm) >= 10 and all(x["gflops"] > 0 for x in mm)
	assert [x["mflop"] for x in mm] == sorted(x["mflop"] for x in mm)
	assert c["compute"]["attention_gflops"] > 0
	assert c["compute"]["elementwise_gbps"] > 0
	assert c["compute"]["ranks"] == 2
	# every key written is documented in collx-bench(1)
	keys = set()
	def walk(o, top):
	    for k, v in o.items():
	        if top or k in ("alpha_us", "gbps", "points", "mflop",
	                        "sweep_bytes", "sweep_us",
	                        "gflops", "attention_gflops",
	                        "elementwise_gbps", "arch", "dims", "ranks"):
	            keys.add(k)
	        if isinstance(v, dict):
	            walk(v, False)
	        if isinstance(v, list):
	            for x in v:
	                if isinstance(x, dict):
	                    walk(x, False)
	walk(c, True)
	missing = [k for k in keys if not re.search(r"Li (\\\(dq)?" +
	           re.escape(k), man)]
	assert not missing, missing
	EOF
	[ "$status" -eq 0 ] || { echo "$output"; false; }
}

@test "fit: usage errors exit 2 before any run" {
	run timeout 30 collx-bench fit -N 2
	[ "$status" -eq 2 ]
	[ "${lines[0]}" = "collx-bench: fit: -o COST.json is required" ]
	run timeout 30 collx-bench fit -N 1 -o c.json
	[ "$status" -eq 2 ]
	[ "${lines[0]}" = "collx-bench: fit: a world of 1 has no links to measure: -N 2 or more" ]
	run timeout 30 collx-bench fit --arch llama -o c.json
	[ "$status" -eq 2 ]
	run timeout 30 env COLLX_RANK=0 COLLX_WORLD_SIZE=2 collx-bench fit -o c.json
	[ "$status" -eq 2 ]
	[[ "${lines[0]}" == "collx-bench: fit starts its own ranks"* ]]
	[ ! -e c.json ]
}

# The time bound is generous for a loaded 2-core machine; idle, a plan
# of 1024 x 8 takes milliseconds (the measured time is printed).
@test "plan --hosts 1024 --ranks-per-host 8: the K fastest, fastest first, their parts summing to the step, in under 1 s" {
	write_cost
	start=$(date +%s%N)
	run timeout 30 collx-bench plan --cost cost.json --hosts 1024 \
	    --ranks-per-host 8 --dims 50304,1024,24,16,1024 --batch 8192 \
	    --top 7 --csv
	end=$(date +%s%N)
	echo "# plan of 1024 x 8: $(( (end - start) / 1000000 )) ms" >&3
	[ "$status" -eq 0 ] || { echo "$output"; false; }
	[ $(( (end - start) / 1000000 )) -lt 5000 ]
	[ "${lines[0]}" = "$PLAN_COLS" ]
	[ "${#lines[@]}" -eq 8 ]
	echo "$output" | tail -n +2 | awk -F, -v prev=0 '
		NF != 34 || $2 != "plan" || $5 != 8192 || $7 != 8192 { print; exit 1 }
		$13 * $14 * $15 * $29 != 8192 { print "not a factorization: " $0; exit 1 }
		$10 < prev { print "not fastest first: " $0; exit 1 }
		{ prev = $10; s = $19 + $20 + $21 + $22 + $23 + $31 + $32 }
		s < $10 * 0.999999 || s > $10 * 1.000001 { print "parts: " $0; exit 1 }
		$14 == 1 && $21 != 0 { print; exit 1 }
		$15 == 1 && ($22 != 0 || $23 != 0) { print; exit 1 }
		$16 > 0 && $13 == 1 { print "zero without dp: " $0; exit 1 }
		r = $28 * $10 / (8192 * 1024)
		r < 0.999 || r > 1.001 { print "tokens/s: " $0; exit 1 }'
	# the table says what it planned
	run timeout 30 collx-bench plan --cost cost.json --hosts 1024 \
	    --ranks-per-host 8 --dims 50304,1024,24,16,1024 --batch 8192 \
	    --top 3 --table
	[ "$status" -eq 0 ]
	[[ "${lines[0]}" == "# collx-bench plan: gpt, 1024 hosts x 8 ranks, batch 8192;"* ]]
	[ "$(echo "$output" | grep -c '^ *[0-9]')" -eq 3 ]
}

# The axes of issues 29-31 (collx-train's --zero 3, --cp, --ep): rows of
# each, named for their options; their terms' values are test_bench_plan's.
@test "plan: ZeRO 3 (and HSDP across hosts), cp ring and zigzag, ep by alltoallv and allgather; --validate runs none of them" {
	write_cost
	run timeout 30 collx-bench plan --cost cost.json --hosts 2 \
	    --ranks-per-host 4 --dims 256,64,4,4,32 --batch 32 --experts 4 \
	    --topk 2 --top 100000 --csv
	[ "$status" -eq 0 ] || { echo "$output"; false; }
	for name in '\.cp2\.ring' '\.cp4\.zigzag' '\.ep2\.alltoallv' \
	    '\.ep4\.allgather'; do
		echo "$output" | grep -q "^collx-bench,plan,dp[^,]*$name" ||
		    { echo "no $name"; false; }
	done
	# experts: no ZeRO 3 (collx-dp refuses it); ep divides dp
	echo "$output" | tail -n +2 | awk -F, '
		$16 == 3 { print "zero 3 with experts: " $0; exit 1 }
		$13 % $30 != 0 { print "ep not of dp: " $0; exit 1 }
		$30 == 1 && $32 != 0 { print "ep time without ep: " $0; exit 1 }
		$29 == 1 && $31 != 0 { print "cp time without cp: " $0; exit 1 }'
	run timeout 30 collx-bench plan --cost cost.json --hosts 2 \
	    --ranks-per-host 4 --dims 256,64,4,4,32 --batch 32 --top 100000 --csv
	[ "$status" -eq 0 ]
	echo "$output" | grep -q '^collx-bench,plan,dp[248][^,]*\.z3\.1f1b'
	echo "$output" | grep -q '^collx-bench,plan,dp[248][^,]*\.z3\.hsdp\.'
	run timeout 30 collx-bench plan --cost cost.json --hosts 1 --topk 2
	[ "$status" -eq 2 ]
	[ "${lines[0]}" = "collx-bench: plan: --topk, --capacity and --moe-every go with --experts" ]
	run timeout 30 collx-bench plan --cost cost.json --hosts 1 \
	    --experts 4 --topk 5 --dims 256,64,4,4,32
	[ "$status" -eq 2 ]
	[[ "${lines[0]}" == "collx-bench: plan: topk 5 is above the 4 experts"* ]]
	run timeout 30 collx-bench coll --experts 4
	[ "$status" -eq 2 ]
	[ "${lines[0]}" = "collx-bench: --experts goes with mesh and a gpt, or plan" ]
	run timeout 30 collx-bench coll --topk 2
	[ "$status" -eq 2 ]
	[ "${lines[0]}" = "collx-bench: --topk, --capacity and --moe-every go with plan" ]
}

@test "plan --mem-per-rank: only the meshes whose ranks hold their memory" {
	write_cost
	run timeout 30 collx-bench plan --cost cost.json --hosts 4 \
	    --ranks-per-host 2 --dims 1024,256,8,8,64 --batch 64 --top 1000 --csv
	[ "$status" -eq 0 ]
	all=$(echo "$output" | tail -n +2 | wc -l)
	# the median row's memory as the limit
	lim=$(echo "$output" | tail -n +2 | cut -d, -f24 | sort -n | awk '{ a[NR] = $1 } END { print a[int(NR / 2)] }')
	run timeout 30 collx-bench plan --cost cost.json --hosts 4 \
	    --ranks-per-host 2 --dims 1024,256,8,8,64 --batch 64 --top 1000 \
	    --mem-per-rank "$lim" --csv
	[ "$status" -eq 0 ]
	fit=$(echo "$output" | tail -n +2 | wc -l)
	[ "$fit" -lt "$all" ]
	[ "$fit" -ge $((all / 2)) ]
	echo "$output" | tail -n +2 | awk -F, -v lim="$lim" '$24 > lim { print; exit 1 }'
}

@test "plan: bad input, one line naming it: a cost file of another version or missing a field (3), a mesh of another world (2), a model no mesh or memory holds (3)" {
	write_cost
	sed 's/"version": 1/"version": 7/' cost.json >v7.json
	run timeout 30 collx-bench plan --cost v7.json --hosts 2 --dims 256,32,2,2,16
	[ "$status" -eq 3 ]
	[ "${#lines[@]}" -eq 1 ]
	[ "${lines[0]}" = "collx-bench: v7.json: version 7, this collx-bench reads version 1 (fit it again)" ]
	grep -v attention_gflops cost.json | sed 's/"gflops": 80 } ],/"gflops": 80 } ]/' >miss.json
	run timeout 30 collx-bench plan --cost miss.json --hosts 2 --dims 256,32,2,2,16
	[ "$status" -eq 3 ]
	[ "${lines[0]}" = "collx-bench: miss.json: missing field compute.attention_gflops" ]
	run timeout 30 collx-bench plan --cost nothere.json --hosts 2
	[ "$status" -eq 3 ]
	[[ "${lines[0]}" == "collx-bench: nothere.json: "* ]]
	echo '{ "version": 1, ' >bad.json
	run timeout 30 collx-bench plan --cost bad.json --hosts 2
	[ "$status" -eq 3 ]
	[[ "${lines[0]}" == "collx-bench: bad.json:"* ]]
	run timeout 30 collx-bench plan --cost cost.json --hosts 2 \
	    --ranks-per-host 4 --mesh 4,4,1 --dims 256,32,2,2,16
	[ "$status" -eq 2 ]
	[ "${lines[0]}" = "collx-bench: --mesh 4,4,1: 16 ranks, not a factorization of the world's 8 (2 hosts x 4)" ]
	# 3 heads, 1 layer, 15 positions: tp 2, pp 2 and cp 2 refused;
	# batch 2 cannot feed dp 4
	run timeout 30 collx-bench plan --cost cost.json --hosts 1 \
	    --ranks-per-host 4 --dims 256,33,1,3,15 --batch 2
	[ "$status" -eq 3 ]
	[[ "${lines[0]}" == "collx-bench: no mesh of 4 ranks fits the model and a global batch of 2"* ]]
	run timeout 30 collx-bench plan --cost cost.json --hosts 2 \
	    --dims 256,32,2,2,16 --mem-per-rank 1K
	[ "$status" -eq 3 ]
	[[ "${lines[0]}" == "collx-bench: no mesh fits --mem-per-rank 1024 bytes: the smallest needs "* ]]
	run timeout 30 collx-bench plan --hosts 2
	[ "$status" -eq 2 ]
	[ "${lines[0]}" = "collx-bench: plan: --cost COST.json is required (collx-bench fit writes it)" ]
	run timeout 30 collx-bench plan --cost cost.json
	[ "$status" -eq 2 ]
	run timeout 30 collx-bench mesh --top 3
	[ "$status" -eq 2 ]
	[[ "${lines[0]}" == *"go with plan" ]]
}

@test "plan --optimizer: AdamW's rows dearer and heavier than SGD's (the default, as collx-train's); mesh and --validate give the runs it; a bad name or --optimizer with coll, p2p or fit exit 2" {
	write_cost
	for o in sgd adamw; do
		run timeout 30 collx-bench plan --cost cost.json --hosts 1 \
		    --ranks-per-host 2 --dims 256,32,2,2,16 --mesh 2,1,1 \
		    --optimizer "$o" --top 1000 --csv
		[ "$status" -eq 0 ]
		echo "$output" | awk -F, '$16 == 0 && NR > 1 { print $10, $19, $24 }' >"$o.txt"
		[ "$(wc -l <"$o.txt")" -eq 1 ]
	done
	run timeout 30 collx-bench plan --cost cost.json --hosts 1 \
	    --ranks-per-host 2 --dims 256,32,2,2,16 --mesh 2,1,1 --top 1000 --csv
	[ "$status" -eq 0 ]
	[ "$(echo "$output" | awk -F, '$16 == 0 && NR > 1 { print $10, $19, $24 }')" = "$(cat sgd.txt)" ]
	read -r s c m <sgd.txt
	read -r s2 c2 m2 <adamw.txt
	# dp 2, ZeRO 0: AdamW reads and writes 16 bytes more a parameter
	# and holds two moments, 8 bytes a parameter more
	awk -v a="$c" -v b="$c2" -v s="$s" -v t="$s2" 'BEGIN { d = (t - s) - (b - a); exit !(b > a && (d < 0 ? -d : d) < 1e-5 * t) }'
	awk -v a="$m" -v b="$m2" 'BEGIN { exit !(b > a) }'
	run timeout 30 collx-bench plan --cost cost.json --hosts 1 \
	    --dims 256,32,2,2,16 --optimizer adam
	[ "$status" -eq 2 ]
	[ "${lines[0]}" = "collx-bench: --optimizer: want sgd or adamw, not 'adam'" ]
	# mesh's and --validate's runs: a stand-in collx-run beside a copy
	# of collx-bench records what it was given
	mkdir fake
	cp "$(command -v collx-bench)" fake/
	ln -s "$(command -v collx-dp)" fake/collx-dp
	ln -s "$(command -v collx-tensor)" fake/collx-tensor
	printf '#!/bin/sh\nprintf "%%s\\n" "$*" >>"%s/args"\nexit 1\n' "$PWD" \
	    >fake/collx-run
	chmod +x fake/collx-run
	run timeout 60 fake/collx-bench mesh -N 2 --arch mlp --dims 8,8,8,2 \
	    --steps 2 --repeat 1 --optimizer adamw
	grep -q -- '^-n 2 .* -- .*/collx-train .* --optimizer adamw' args ||
	    { cat args; false; }
	rm args
	run timeout 60 fake/collx-bench plan --cost cost.json --hosts 1 \
	    --ranks-per-host 2 --dims 256,32,2,2,16 --optimizer adamw \
	    --validate --steps 2 --repeat 1
	grep -q -- '^-n 2 .* -- .*/collx-train .* --optimizer adamw' args ||
	    { cat args; false; }
	for sub in coll p2p; do
		run timeout 30 collx-bench "$sub" --optimizer sgd
		[ "$status" -eq 2 ]
		[ "${lines[0]}" = "collx-bench: --optimizer goes with dp, mesh and plan" ]
	done
}

# ASTRA-sim 1.0's documented text workload: the parallelism, the layer
# count, then a line a layer: name, a reserved integer, and three times a
# compute time in cycles, a collective (ALLREDUCE, ALLGATHER, ALLTOALL;
# NONE in its examples for none) and its bytes, then the update delay.
@test "plan --export astra-sim DIR: the fastest mesh's workload as ASTRA-sim's text format, system and network files" {
	write_cost
	run timeout 30 collx-bench plan --cost cost.json --hosts 16 \
	    --ranks-per-host 4 --dims 1024,256,8,8,64 --batch 256 --top 1 \
	    --csv --export astra-sim out
	[ "$status" -eq 0 ] || { echo "$output"; false; }
	best=$(echo "$output" | tail -n 1)
	run "$PY" - out "$best" <<-'EOF'
	import json, sys
	d, best = sys.argv[1], sys.argv[2].split(",")
	dp, tp, pp = int(best[12]), int(best[13]), int(best[14])
	lines = open(d + "/workload.txt").read().split("\n")
	assert lines[-1] == "", "ends in a newline"
	lines = lines[:-1]
	kind = lines[0]
	assert kind in ("DATA", "HYBRID_TRANSFORMER", "HYBRID_DLRM"), kind
	assert (kind == "DATA") == (tp == 1 and pp == 1)
	n = int(lines[1])
	assert n == 8 and len(lines) == 2 + n, (n, len(lines))
	colls = ("ALLREDUCE", "ALLGATHER", "ALLTOALL", "NONE")
	for i, l in enumerate(lines[2:]):
	    f = l.split()
	    assert len(f) == 12, l
	    assert f[0] and int(f[1]) == -1
	    for k in (2, 5, 8):
	        assert int(f[k]) >= 0, l          # cycles
	        assert f[k + 1] in colls, l
	        assert int(f[k + 2]) >= 0, l       # bytes
	        assert (f[k + 1] == "NONE") == (int(f[k + 2]) == 0), l
	    assert int(f[11]) >= 0
	    # TP's allreduces in the passes, DP's in the weight gradient
	    assert (f[3] != "NONE") == (tp > 1) and (f[9] != "NONE") == (dp > 1)
	s = json.load(open(d + "/system.json"))
	for k in ("scheduling-policy", "endpoint-delay",
	          "all-reduce-implementation", "all-gather-implementation"):
	    assert k in s, k
	net = dict(l.split(": ", 1) for l in open(d + "/network.yml").read().splitlines())
	assert net["units-count"] == "[4, 16]" and net["dimensions-count"] == "2"
	assert net["link-bandwidth"] == "[10.000, 1.250]", net
	EOF
	[ "$status" -eq 0 ] || { echo "$output"; false; }
	run timeout 30 collx-bench plan --cost cost.json --hosts 2 --export dot out
	[ "$status" -eq 2 ]
	run timeout 30 collx-bench plan --cost cost.json --hosts 2 --export astra-sim
	[ "$status" -eq 2 ]
}

@test "plan --validate on 2 ranks: every mesh mesh runs, predicted beside measured, the error and the fastest named" {
	write_cost
	run timeout -k 5 120 collx-bench plan --cost cost.json --hosts 1 \
	    --ranks-per-host 2 --dims 256,16,2,2,8 --batch 4 --validate \
	    --csv -v --repeat 1 --steps 3
	[ "$status" -eq 0 ] || { echo "$output"; false; }
	[ "$(echo "$output" | head -1)" = "$PLAN_COLS,measured_s,error" ]
	rows=$(echo "$output" | grep '^collx-bench,plan,')
	[ "$(echo "$rows" | wc -l)" -eq 3 ]
	# as mesh runs them: ZeRO 0, 1F1B, P micro-batches; the error is
	# (predicted - measured) / measured
	echo "$rows" | awk -F, '$16 != 0 || $17 != "1f1b" || $18 != $15 { print; exit 1 }
		$29 != 1 || $30 != 1 { print "cp or ep: " $0; exit 1 }
		$35 <= 0 { print "not measured: " $0; exit 1 }
		{ e = ($10 - $35) / $35 }
		e - $36 > 0.0001 || $36 - e > 0.0001 { print "error: " $0; exit 1 }'
	echo "$output" | grep -Eq '^collx-bench: plan --validate: 3 meshes: median \|error\| [0-9.]+%, worst [0-9.]+%; predicted fastest dp[0-9]\.tp[0-9]\.pp[0-9]\.z0\.1f1b\.m[0-9], measured fastest'
}

# The fixture fits no shm algorithm: a ring allreduce of n bytes on 2
# ranks is the link's 2 alpha + n / beta + n / (2 gamma).
@test "coll --cost: expected_us from the cost model's closed form and eff = expected over measured, on every row" {
	write_cost
	run timeout -k 5 60 collx-run -n 2 -- collx-bench coll --cost cost.json \
	    --algo ring,auto -b 4K -e 64K -f 16 -n 3 -w 1 --csv
	[ "$status" -eq 0 ] || { echo "$output"; false; }
	[ "${lines[0]}" = "program,op,algo,rank,world_size,dtype,count,bytes,iter,seconds,algbw_gbps,busbw_gbps,place,redop,min_s,max_s,p99_s,wrong,hosts,expected_us,eff" ]
	# two algorithms, two sizes, out of place and in place
	[ "${#lines[@]}" -eq 9 ]
	echo "$output" | tail -n +2 | awk -F, '
		NF != 21 { print; exit 1 }
		$3 == "ring" { want = 2 * 2 + $8 / 10e3 + $8 / 16e3
			if ($20 < want * 0.999 || $20 > want * 1.001) { print "expected: " $0; exit 1 } }
		{ e = $20 / 1e6 / $10 }
		e < $21 * 0.99 - 0.0001 || e > $21 * 1.01 + 0.0001 { print "eff: " $0; exit 1 }'
	run timeout 30 collx-run -n 2 -- collx-bench coll --cost nothere.json
	[ "$status" -ne 0 ]
	echo "$output" | grep -q 'collx-bench: nothere.json: '
}

@test "collx-plot: plan's step breakdown, a stacked bar per mesh in the file's order; --validate's rows as predicted against measured with y = x" {
	command -v gnuplot >/dev/null || skip "no gnuplot"
	write_cost
	run timeout 30 collx-bench plan --cost cost.json --hosts 4 \
	    --ranks-per-host 4 --dims 256,64,8,4,32 --top 5 --csv
	[ "$status" -eq 0 ]
	echo "$output" >plan.csv
	run timeout 60 collx-plot -v plan.csv -o b.svg
	[ "$status" -eq 0 ]
	[ "$output" = "collx-plot: breakdown chart in b.svg" ]
	for part in compute 'dp exposed' 'tp exposed' pp bubble 'cp exposed' \
	    'ep exposed'; do
		grep -q ">$part<" b.svg
	done
	# every mesh's label, in the file's order
	tail -n +2 plan.csv | cut -d, -f3 >want
	grep -o '>dp[0-9]*\.tp[0-9]*\.pp[0-9]*\.z[0-9][a-z0-9.]*<' b.svg |
	    tr -d '<>' >got
	diff want got
	# predicted against measured: a refused mesh (measured 0) is left out
	{ echo "$PLAN_COLS,measured_s,error"
	  echo "collx-bench,plan,dp2.tp1.pp1.z0.1f1b.m1,0,2,f32,4,0,0,0.002,0,0,2,1,1,0,1f1b,1,0.001,0.001,0,0,0,1,1,0,0,1000,1,1,0,0,0,0,0.0025,-0.2"
	  echo "collx-bench,plan,dp1.tp2.pp1.z0.1f1b.m1,0,2,f32,4,0,0,0.003,0,0,1,2,1,0,1f1b,1,0.002,0,0.001,0,0,1,0,1,0,1000,1,1,0,0,0,0,0.003,0"
	  echo "collx-bench,plan,dp1.tp1.pp2.z0.1f1b.m2,0,2,f32,4,0,0,0.004,0,0,1,1,2,0,1f1b,2,0.002,0,0,0.001,0.001,1,0,0,1,1000,1,1,0,0,0,0,0,0"
	} >val.csv
	run timeout 60 collx-plot val.csv -o p.svg
	[ "$status" -eq 0 ]
	grep -q 'Predicted against measured step, 2 meshes' p.svg
	grep -q '>y = x<' p.svg
	grep -q '>dp2.tp1.pp1.z0.1f1b.m1<' p.svg
	if grep -q 'dp1.tp1.pp2' p.svg; then false; fi
	# a plan CSV without measurements is no predicted chart
	run timeout 30 collx-plot --kind predicted plan.csv -o x.svg
	[ "$status" -eq 3 ]
	[ "$output" = "collx-plot: plan.csv:1: no column 'measured_s' for a predicted chart" ]
	[ ! -e x.svg ]
}
