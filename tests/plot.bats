#!/usr/bin/env bats
# collx-plot: every chart kind drawn to a PNG that is non-empty and has the
# asked size (read from the PNG's IHDR here, not by collx), SVG by the
# name, the kind guessed from the columns, a pipeline trace drawn one step
# at a time (what each step holds counted here from the trace), and bad or
# empty input refused with exit 3 naming the file and line.

load lib/common
load lib/coll

setup() {
	common_setup
}

teardown() {
	common_teardown
}

# png_size FILE: "W H" from the IHDR chunk (bytes 16..23, big-endian),
# after checking the 8-byte PNG signature.
png_size() {
	[ "$(od -An -tx1 -N8 "$1" | tr -d ' \n')" = 89504e470d0a1a0a ] || return 1
	od -An -tu1 -j16 -N8 "$1" | awk '{ print $1 * 16777216 + $2 * 65536 + $3 * 256 + $4,
		$5 * 16777216 + $6 * 65536 + $7 * 256 + $8 }'
}

# pipe_trace STEPS: t.json, the trace of a real collx-pipe run of STEPS
# steps on two stages.
pipe_trace() {
	timeout 30 collx-dp --init mlp --dims 16,32,16,4 --seed 1 -o m.safetensors
	timeout 30 collx-tensor create --shape 32,16 --fill randn --seed 1 -o x.npy
	timeout 30 collx-tensor create --shape 32,16 --fill randn --seed 2 -o y.npy
	timeout 60 collx-run -n 2 -- collx-pipe -m m.safetensors -i x.npy \
	    -t y.npy --microbatches 4 --steps "$1" --trace t.json -q "${@:2}"
}

# A coll sweep, a p2p matrix, a dp scaling table, two loss curves and a
# pipeline trace, written here by hand in each program's format.
make_inputs() {
	h=program,op,algo,rank,world_size,dtype,count,bytes,iter,seconds,algbw_gbps,busbw_gbps
	{
		echo "$h,place,redop,min_s,max_s,p99_s,wrong,hosts"
		for a in ring tree; do
			for b in 1024 4096 16384 65536; do
				for p in out in; do
					echo "collx-bench,allreduce,$a,0,4,f32,$((b / 4)),$b,20,0.0001,0.01,0.015,$p,sum,0.00009,0.0002,0.0002,0,1"
				done
			done
		done
	} >coll.csv
	{
		echo "$h,src,dst,min_s,max_s,p99_s,hosts"
		for i in 0 1 2; do
			for j in 0 1 2; do
				[ $i = $j ] && continue
				echo "collx-bench,p2p-latency,-,0,3,u8,8,8,100,0.0000$((i + j + 1)),0.001,0.001,$i,$j,0.00001,0.00009,0.00009,3"
			done
		done
	} >p2p.csv
	{
		echo "$h,src,dst,min_s,max_s,p99_s,hosts"
		for b in 1 8 64 512; do
			echo "collx-bench,p2p-latency,-,0,2,u8,$b,$b,100,0.00001,0.001,0.001,0,1,0.00001,0.00002,0.00002,1"
		done
	} >lat.csv
	{
		echo "$h,tokens_per_s,comm_share,efficiency,hosts"
		for s in ring ps; do
			echo "collx-bench,dp,$s,0,1,f32,100,400,10,0.01,0.04,0.04,1000,0.01,1.0,1"
			echo "collx-bench,dp,$s,0,2,f32,100,400,10,0.012,0.03,0.03,1600,0.3,0.8,1"
		done
	} >dp.csv
	for run in dp single; do
		{
			echo step,epoch,loss,tokens,seconds,tokens_per_s
			for s in $(seq 0 20); do
				echo "$s,0,$(awk -v s=$s -v r=$run 'BEGIN { print 3 / (1 + s) + (r == "dp" ? 0.01 : 0) }'),64,0.01,6400"
			done
		} >"loss-$run.csv"
	done
	"$PY" - <<-'EOF'
	import json
	ev = []
	for s in range(2):
	    t = s * 1000
	    for m in range(3):
	        ev += [dict(name='forward', ph='X', pid=s, tid=0, ts=t, dur=900),
	               dict(name='send', ph='X', pid=s, tid=0, ts=t + 900, dur=100, args={'mb': m})]
	        t += 1000
	    ev.append(dict(name='idle', ph='X', pid=s, tid=0, ts=t, dur=300))
	    ev.append(dict(name='backward', ph='X', pid=s, tid=0, ts=t + 300, dur=1800))
	    ev.append(dict(name='recv', ph='X', pid=s, tid=0, ts=t + 2100, dur=50))
	    ev.append(dict(name='thread_name', ph='M', pid=s, tid=0, args={'name': f'stage {s}'}))
	json.dump({'traceEvents': ev, 'displayTimeUnit': 'ms'}, open('trace.json', 'w'), indent=1)
	EOF
}

@test "every kind, guessed from the columns, to a PNG of the default size 900x560" {
	make_inputs
	for f in coll p2p lat dp trace; do
		ext=csv
		[ $f = trace ] && ext=json
		run timeout 30 collx-plot -v "$f.$ext"
		[ "$status" -eq 0 ]
		[ -s "$f.png" ]
		[ "$(png_size "$f.png")" = "900 560" ]
		case $f in
		coll) echo "$output" | grep -q 'busbw chart in coll.png' ;;
		p2p) echo "$output" | grep -q 'p2p chart in p2p.png' ;;
		lat) echo "$output" | grep -q 'latency chart in lat.png' ;;
		dp) echo "$output" | grep -q 'scaling chart in dp.png' ;;
		trace) echo "$output" | grep -q 'pipeline chart of the whole trace: .* in trace.png' ;;
		esac
	done
	run timeout 30 collx-plot -v -o loss.png loss-dp.csv loss-single.csv
	[ "$status" -eq 0 ]
	echo "$output" | grep -q 'loss chart in loss.png'
	[ "$(png_size loss.png)" = "900 560" ]
	# one series per run, each named after its file
	run timeout 30 collx-plot -o loss.svg loss-dp.csv loss-single.csv
	[ "$status" -eq 0 ]
	grep -q '<title>loss-dp.csv</title>' loss.svg
	grep -q '<title>loss-single.csv</title>' loss.svg
	[ "$(ls *.tmp* 2>/dev/null | wc -l)" -eq 0 ]
}

# Two runs sending 1 MB and 0.1 MB a step: against the bytes sent, one
# ends at 21 MB and the other at 2.1 MB.
@test "--kind loss-bytes: loss against the MB sent, a line per run" {
	for run in 1000000 100000; do
		{
			echo step,epoch,loss,tokens,seconds,tokens_per_s,bytes_sent
			for s in $(seq 0 20); do
				echo "$s,0,$(awk -v s=$s 'BEGIN { print 3 / (1 + s) }'),64,0.01,6400,$run"
			done
		} >"l$run.csv"
	done
	run timeout 30 collx-plot -v --kind loss-bytes -o lb.svg l1000000.csv l100000.csv
	[ "$status" -eq 0 ]
	echo "$output" | grep -q 'loss-bytes chart in lb.svg'
	grep -q '<title>l1000000.csv</title>' lb.svg
	grep -q '<title>l100000.csv</title>' lb.svg
	grep -q 'MB sent' lb.svg
	# gnuplot's x axis reaches the larger run's 21 MB (ticks to 25)
	grep -q '> 25<' lb.svg
	run timeout 30 collx-plot --kind loss -o ls.svg l1000000.csv l100000.csv
	[ "$status" -eq 0 ]
	if grep -q '> 25<' ls.svg; then false; fi
	# a loss CSV without bytes_sent
	printf 'step,epoch,loss,tokens,seconds,tokens_per_s\n0,0,1,64,0.01,6400\n' >old.csv
	run timeout 30 collx-plot --kind loss-bytes -o x.png old.csv
	[ "$status" -eq 3 ]
	[ "$output" = "collx-plot: old.csv:1: no column 'bytes_sent' for a loss-bytes chart" ]
}

# Three runs with the same losses (one model trained on other meshes): in
# the SVG each run's line has its own dash pattern, point type and width
# (the first widest, so that it shows beside those drawn over it), and
# its points mark other steps than the others'.
@test "--kind loss: runs that coincide stay visible: dash pattern, point type, marked steps and width of their own" {
	local r s
	for r in a b c; do
		{
			echo step,epoch,loss,tokens,seconds,tokens_per_s
			for ((s = 0; s < 80; s++)); do
				echo "$s,0,$((1000 - s)).5,64,0.01,6400"
			done
		} >"same-$r.csv"
	done
	run timeout 30 collx-plot -o same.svg same-a.csv same-b.csv same-c.csv
	[ "$status" -eq 0 ]
	"$PY" - same.svg <<'EOF'
import re, sys
from itertools import combinations
svg = open(sys.argv[1]).read()
runs = re.split(r'<g id="gnuplot_plot_[0-9]+" >', svg)[1:]
assert len(runs) == 3, len(runs)
seen = []
for text in runs:
    width = float(re.search(r'stroke-width="([0-9.]+)"', text).group(1))
    dash = re.search(r"<path stroke='[^']*'( stroke-dasharray='[^']*')?\s+d='",
                     text).group(1)
    marks = re.findall(r"<use xlink:href='#(gpPt[0-9]+)' "
                       r"transform='translate\(([0-9.]+),([0-9.]+)\)", text)
    kinds = {m[0] for m in marks}
    assert len(kinds) == 1 and len(marks) >= 4, marks
    # the last mark is the key's
    seen.append((width, dash, kinds.pop(), {m[1:] for m in marks[:-1]}))
    print(seen[-1][:3], len(marks) - 1, "marks")
assert seen[0][0] > seen[1][0] > seen[2][0], seen
for x, y in combinations(seen, 2):
    assert x[1] != y[1] and x[2] != y[2] and x[3] != y[3], (x, y)
EOF
}

@test "--kind, --size and --title; SVG by the output's name" {
	make_inputs
	run timeout 30 collx-plot --kind latency --size 640,480 --title "my chart" -o l.png coll.csv
	[ "$status" -eq 0 ]
	[ "$(png_size l.png)" = "640 480" ]
	run timeout 30 collx-plot --size 1200,700 -o c.svg coll.csv
	[ "$status" -eq 0 ]
	grep -q '<svg' c.svg
	grep -q 'width="1200"' c.svg
	# the title names the world size and hosts; axes their units
	grep -q '4 ranks on 1 host' c.svg
	grep -q 'GB/s' c.svg
	grep -q 'message size (bytes)' c.svg
	run timeout 30 collx-plot -o p.svg p2p.csv
	grep -q '3 ranks on 3 hosts' p.svg
	grep -q 'sender rank' p.svg
}

@test "a real collx-bench sweep and p2p matrix plot" {
	timeout 60 collx-run -n 2 -- collx-bench coll --algo ring,tree -b 1K -e 64K -f 8 -n 2 -w 0 >real.csv
	run timeout 30 collx-plot -o real.png real.csv
	[ "$status" -eq 0 ]
	[ "$(png_size real.png)" = "900 560" ]
	[ "$(stat -c %s real.png)" -gt 5000 ]
}

@test "bad or empty input: exit 3 naming the file and line, no output left" {
	make_inputs
	: >empty.csv
	run collx-plot -o x.png empty.csv
	[ "$status" -eq 3 ]
	[ "$output" = "collx-plot: empty.csv:1: empty file" ]
	head -3 coll.csv >short.csv
	echo "collx-bench,allreduce,ring,0,4" >>short.csv
	run collx-plot -o x.png short.csv
	[ "$status" -eq 3 ]
	[ "$output" = "collx-plot: short.csv:4: 5 fields, the header has 19" ]
	sed '3s/,0.015,/,fast,/' coll.csv >nan.csv
	run collx-plot -o x.png nan.csv
	[ "$status" -eq 3 ]
	[ "$output" = "collx-plot: nan.csv:3: column busbw_gbps: 'fast' is not a number" ]
	head -1 coll.csv >header.csv
	run collx-plot -o x.png header.csv
	[ "$status" -eq 3 ]
	[[ "$output" == "collx-plot: header.csv:"*": no data rows" ]]
	printf 'a,b\n1,2\n' >odd.csv
	run collx-plot -o x.png odd.csv
	[ "$status" -eq 3 ]
	[[ "$output" == *"odd.csv:1: cannot tell the chart"* ]]
	run collx-plot --kind loss -o x.png coll.csv
	[ "$status" -eq 3 ]
	[ "$output" = "collx-plot: coll.csv:1: no column 'loss' for a loss chart" ]
	printf '{"traceEvents": [\n {"name": "forward", "ph": "X", "ts": 1,\n "dur": }\n]}\n' >bad.json
	run collx-plot -o x.png bad.json
	[ "$status" -eq 3 ]
	[ "$output" = "collx-plot: bad.json:3: expected a value" ]
	printf '[{"name": "forward", "ph": "B", "ts": 1}]\n' >none.json
	run collx-plot -o x.png none.json
	[ "$status" -eq 3 ]
	[[ "$output" == *"none.json:1: no complete"* ]]
	[ ! -e x.png ]
	[ "$(ls | grep -c tmp)" -eq 0 ]
}

@test "usage: no file, bad --kind or --size exit 2; --help and -V exit 0" {
	run collx-plot
	[ "$status" -eq 2 ]
	[[ "$output" == collx-plot:* ]]
	run collx-plot --kind pie x.csv
	[ "$status" -eq 2 ]
	run collx-plot --size 10 x.csv
	[ "$status" -eq 2 ]
	run collx-plot --help
	[ "$status" -eq 0 ]
	run collx-plot -V
	[ "$status" -eq 0 ]
}

@test "-o names PNG or SVG: another extension is a usage error, not a PNG under that name" {
	make_inputs
	for out in x.jpg x.jpeg x.pdf x; do
		run collx-plot -o "$out" coll.csv
		[ "$status" -eq 2 ]
		[ "${lines[0]}" = "collx-plot: -o $out: want a name ending in .png or .svg" ]
		[ ! -e "$out" ]
	done
	# the extension in any case
	run timeout 30 collx-plot -o X.PNG coll.csv
	[ "$status" -eq 0 ]
	[ "$(png_size X.PNG)" = "900 560" ]
	run timeout 30 collx-plot -o X.SVG coll.csv
	[ "$status" -eq 0 ]
	grep -q '<svg' X.SVG
	# the default name from an input without an extension
	cp coll.csv sweep
	run timeout 30 collx-plot sweep
	[ "$status" -eq 0 ]
	[ "$(png_size sweep.png)" = "900 560" ]
}

@test "a real collx-pipe trace: the timeline's legend has the span kinds, nothing unnamed" {
	pipe_trace 2
	run timeout 60 collx-plot -o tl.svg t.json
	[ "$status" -eq 0 ]
	for kind in forward backward send recv; do
		grep -q ">$kind<" tl.svg || { echo "no $kind in the legend"; false; }
	done
	if grep -q ">other<" tl.svg; then false; fi
}

# ZB-H1's weight passes are a kind of their own: named, in their own
# colour (the box file the legend's weight entry draws holds every W span
# of the step), not drawn as backward.
@test "a zb-h1 trace: the timeline draws W passes as weight, in a colour and legend entry of their own" {
	pipe_trace 2 --schedule zb-h1
	run timeout 60 collx-plot -o tl.svg t.json
	[ "$status" -eq 0 ]
	for kind in forward backward weight send recv; do
		grep -q ">$kind<" tl.svg || { echo "no $kind in the legend"; false; }
	done
	if grep -q ">other<" tl.svg; then false; fi
	# gnuplot's SVG writes the colour as rgb(229, 174, 56): the boxes
	grep -q "rgb(229, 174,  56)" tl.svg
	# the spans behind them: step 1's W passes, 4 on each of 2 stages
	"$PY" -c '
import json, sys
ev = json.load(open("t.json"))["traceEvents"]
w = [e for e in ev if e.get("cat") == "weight" and e["args"]["step"] == 1]
b = [e for e in ev if e.get("cat") == "backward"]
assert len(w) == 8 and all(e["name"][0] == "W" for e in w), w
assert all(e["name"][0] == "B" for e in b), b'
}

@test "a pipeline chart draws one step: the last by default, --step N that one, --step all the run" {
	pipe_trace 3
	# per step, from the trace here: its spans other than idle, and the
	# time from the first one's start to the last one's end
	"$PY" - t.json >want <<-'EOF'
	import json, sys
	ev = [e for e in json.load(open(sys.argv[1]))['traceEvents']
	      if e['ph'] == 'X' and e['cat'] != 'idle']
	def line(what, w):
	    t0 = min(e['ts'] for e in w)
	    t1 = max(e['ts'] + e['dur'] for e in w)
	    print('%s: %d spans in %.3f ms' % (what, len(w), (t1 - t0) / 1e3))
	for s in sorted({e['args']['step'] for e in ev}):
	    line('step %d' % s, [e for e in ev if e['args']['step'] == s])
	line('steps 0 to 2', ev)
	EOF
	[ "$(wc -l <want)" -eq 4 ]
	run timeout 30 collx-plot -v -o last.svg t.json
	[ "$status" -eq 0 ]
	[ "$output" = "collx-plot: pipeline chart of $(sed -n 3p want) in last.svg" ]
	grep -q 'step 2 (steps 0 to 2)' last.svg
	run timeout 30 collx-plot -v --step 1 -o one.svg t.json
	[ "$status" -eq 0 ]
	[ "$output" = "collx-plot: pipeline chart of $(sed -n 2p want) in one.svg" ]
	run timeout 30 collx-plot -v --step all -o all.png t.json
	[ "$status" -eq 0 ]
	[ "$output" = "collx-plot: pipeline chart of $(sed -n 4p want) in all.png" ]
	run collx-plot --step 3 -o x.png t.json
	[ "$status" -eq 3 ]
	[ "$output" = "collx-plot: t.json: no step 3 in the trace (steps 0 to 2)" ]
	[ ! -e x.png ]
	run collx-plot --step first -o x.png t.json
	[ "$status" -eq 2 ]
	make_inputs
	run collx-plot --step 1 -o x.png coll.csv
	[ "$status" -eq 2 ]
	[ "$output" = "collx-plot: --step is for a pipeline trace, not coll.csv" ]
	# a trace that marks no steps is drawn whole; a step of it is refused
	run timeout 30 collx-plot -v -o trace.png trace.json
	[ "$status" -eq 0 ]
	[ "$output" = "collx-plot: pipeline chart of the whole trace: 16 spans in 6.150 ms in trace.png" ]
	run collx-plot --step 0 -o x.png trace.json
	[ "$status" -eq 3 ]
	[[ "$output" == *"trace.json: the trace marks no steps"* ]]
}

@test "mesh: a bar per mesh in the file's order, labelled DxTxP, guessed from the dp,tp,pp,tokens_per_s columns" {
	{
		echo "program,op,algo,rank,world_size,dtype,count,bytes,iter,seconds,algbw_gbps,busbw_gbps,dp,tp,pp,tokens_per_s,comm_dp,comm_tp,comm_pp,peak_bytes"
		echo "collx-bench,mesh,dp2.tp1.pp2,0,4,f32,32,0,3,0.01,0,0,2,1,2,3000,0.1,0,0.2,30000000"
		echo "collx-bench,mesh,dp4.tp1.pp1,0,4,f32,32,0,3,0.02,0,0,4,1,1,2000,0.3,0,0,30000000"
		echo "collx-bench,mesh,dp1.tp4.pp1,0,4,f32,32,0,3,0.03,0,0,1,4,1,1000,0,0.4,0,30000000"
	} >mesh.csv
	run timeout 30 collx-plot -v mesh.csv
	[ "$status" -eq 0 ]
	echo "$output" | grep -q 'mesh chart in mesh.png'
	[ "$(png_size mesh.png)" = "900 560" ]
	run timeout 30 collx-plot -o mesh.svg mesh.csv
	[ "$status" -eq 0 ]
	grep -q 'Training throughput per mesh, 4 ranks' mesh.svg
	# the tic labels, left to right as the rows
	[ "$(grep -o '>[0-9]x[0-9]x[0-9]<' mesh.svg | tr -d '<>' | tr '\n' ' ')" = "2x1x2 4x1x1 1x4x1 " ]
	sed 's/,2000,/,fast,/' mesh.csv >bad.csv
	run timeout 30 collx-plot -o bad.png bad.csv
	[ "$status" -eq 3 ]
	[[ "$output" == *"bad.csv:3"* ]]
	[ ! -e bad.png ]
	make_inputs
	run timeout 30 collx-plot --kind mesh -o bad.png coll.csv
	[ "$status" -eq 3 ]
	[[ "$output" == *"no column 'dp' for a mesh chart"* ]]
}

@test "a real collx-bench mesh plots" {
	timeout -k 5 60 collx-bench mesh -N 2 --dims 256,16,2,2,8 --steps 2 --csv >real.csv
	run timeout 30 collx-plot -o real.png real.csv
	[ "$status" -eq 0 ]
	[ "$(png_size real.png)" = "900 560" ]
	[ "$(stat -c %s real.png)" -gt 5000 ]
	# the gpt's mesh with --cp 2 is a bar of its own, named so
	timeout 30 collx-plot -o real.svg real.csv
	grep -q '1x1x1/cp2' real.svg
}

@test "experts: a line per layer and expert against the step, guessed from collx-train --expert-counts' columns" {
	{
		echo step,layer,expert,tokens,dropped
		for s in 0 1 2 3; do
			for e in 0 1; do
				echo "$s,1,$e,$((e ? 95 - 10 * s : 5 + 10 * s)),0"
			done
		done
	} >ec.csv
	run timeout 30 collx-plot -v -o ec.svg ec.csv
	[ "$status" -eq 0 ]
	echo "$output" | grep -q 'experts chart in ec.svg'
	grep -q 'Tokens per expert, 2 lines (layer, expert)' ec.svg
	grep -q '<title>layer 1 expert 0</title>' ec.svg
	grep -q '<title>layer 1 expert 1</title>' ec.svg
	# the y axis (tick labels anchored at their end) reaches expert 1's
	# 95 at step 0 (ticks to 100), the x axis (centred labels) step 3
	grep -B1 '> 100<' ec.svg | grep -q 'text-anchor="end"'
	grep -B1 '> 3<' ec.svg | grep -q 'text-anchor="middle"'
	if grep -B1 '> 100<' ec.svg | grep -q 'text-anchor="middle"'; then
		false
	fi
	sed 's/^2,1,0,25,0$/2,1,0,many,0/' ec.csv >bad.csv
	run timeout 30 collx-plot -o bad.png bad.csv
	[ "$status" -eq 3 ]
	[[ "$output" == *"bad.csv:6"* ]]
	[ ! -e bad.png ]
}

@test "a real collx-train --expert-counts: every step's counts sum to its tokens x topk x MoE layers, and plot" {
	"$PY" -c 'import numpy as np; np.random.seed(3)
np.save("tok.npy", np.random.randint(0, 32, size=700).astype(np.int32))'
	timeout 10 collx-dp --init gpt --dims 32,8,3,2,6 --seed 6 --experts 4 \
	    --topk 2 --moe-every 2 --capacity 0.5 -o m.safetensors
	timeout 60 collx-run -n 2 --timeout 20 -- collx-train -q --dp 2 --ep 2 \
	    -m m.safetensors --data tok.npy --batch 8 --steps 3 \
	    --expert-counts ec.csv --loss-csv l.csv
	"$PY" - <<'PYEOF'
import csv
rows = list(csv.DictReader(open("ec.csv")))
loss = list(csv.DictReader(open("l.csv")))
# one MoE block (layer 1 of 3), 4 experts, 3 steps
assert len(rows) == 3 * 4, len(rows)
for st in loss:
    mine = [r for r in rows if r["step"] == st["step"]]
    assert {r["layer"] for r in mine} == {"1"}, mine
    assert sum(int(r["tokens"]) for r in mine) == int(st["tokens"]) * 2, (mine, st)
    dropped = int(mine[0]["dropped"])
    assert round(float(st["moe_dropped"]) * int(st["tokens"]) * 2) == dropped, (st, dropped)
PYEOF
	run timeout 30 collx-plot -o ec.png ec.csv
	[ "$status" -eq 0 ]
	[ "$(png_size ec.png)" = "900 560" ]
}

# collx-train --zero 3 on dp2 x pp2, a gpt of 4 blocks: each stage's
# gathers and reduce-scatters, run beside its passes by ZeRO-3's thread,
# are spans of their own (prefetch 1, resharding: stage 0's uses go
# E 0 1 1' 0', so 4 gathers; stage 1's 2 3 E E' 3' 2', 5; each stage 3
# reduce-scatters), drawn as kinds of their own in the timeline.
@test "a collx-train --zero 3 trace: gathers and reduce-scatters beside forward and backward, named in the legend and drawn in their colours" {
	timeout 30 collx-dp --init gpt --dims 256,16,4,2,8 --seed 1 -o g.safetensors
	timeout 60 collx-run -n 4 -- collx-train -m g.safetensors \
	    --data /usr/share/common-licenses/GPL-3 --batch 8 --steps 2 \
	    --dp 2 --pp 2 --zero 3 --trace t.json -q
	"$PY" -c '
import json
ev = json.load(open("t.json"))["traceEvents"]
for step in 0, 1:
    for stage, g in (0, 4), (1, 5):
        n = lambda c: sum(1 for e in ev if e.get("cat") == c and
            e["tid"] == stage and e["args"]["step"] == step)
        assert (n("gather"), n("reduce-scatter")) == (g, 3), (step, stage)'
	run timeout 60 collx-plot -o tl.svg t.json
	[ "$status" -eq 0 ]
	for kind in forward backward gather reduce-scatter; do
		grep -q ">$kind<" tl.svg || { echo "no $kind in the legend"; false; }
	done
	# gnuplot's SVG colours: gather #64B5CD, reduce-scatter #937860
	grep -q "rgb(100, 181, 205)" tl.svg
	grep -q "rgb(147, 120,  96)" tl.svg
}
