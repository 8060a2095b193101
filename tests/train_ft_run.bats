#!/usr/bin/env bats
# collx-train --ft under collx-run --max-restarts: every rank killed is
# started again, and so is every rank that left with its replica (exit 1)
# each time a rank died since its last start, so that a replica rejoins
# as often as it is lost. The issue's case (one rank killed every 20 steps
# over 100, ranks 3, 0, 2 and 1) on dp2 x pp2, dp2 x tp2, dp4 and over 2
# namespaces x 2 ranks; and deaths around a rejoin: the rank started
# again killed within its rejoin step (its copy done, the step not yet
# committed) and during its copy of the state, and a rank of the replica
# it copies from killed within that step. Each ends with exit 0, the
# weights of a failure-free run of the same mesh within 1e-5 and the loss
# CSV holding every step once, with the replicas that ran it.
load lib/common
load lib/netns
load lib/ftsuite
bats_require_minimum_version 1.5.0

setup_file() {
	ft_setup_file && ft_big_inputs
}

# steps long beside a restart (the whole data set a step)
TARGS=(-m m.safetensors --data X.npy --targets Y.npy --batch 2048
    --steps 100 --optimizer adamw --lr 0.001)

# ft_train MAX MESH...: the failure-free run of MESH (ref.safetensors,
# ref.csv), then collx-run -n 4 --max-restarts MAX of collx-train --ft -v
# on it in the background (RUN, in PIDS), its standard error into
# err.fifo (read it: the lines into run.err). TARGS: the options but the
# mesh; LAUNCH: collx-run's options placing the ranks, and OUT the
# folder of the outputs (other hosts).
ft_train() {
	local max=$1
	shift
	collx-run -n 4 -- collx-train "${TARGS[@]}" "$@" -q \
	    -o ref.safetensors --loss-csv ref.csv
	mkfifo err.fifo
	COLLX_TIMEOUT=10 collx-run -n 4 "${LAUNCH[@]}" --max-restarts "$max" \
	    -- collx-train "${TARGS[@]}" "$@" --ft -v \
	    -o "${OUT:-.}/ft.safetensors" --loss-csv "${OUT:-.}/ft.csv" \
	    2>err.fifo >ft.out &
	RUN=$!
	PIDS+=("$RUN")
}

# rpid R: the pid of rank R's collx-train (under collx-run, or in a
# namespace with LAUNCH's hosts)
rpid() {
	local p
	if [ "${NS:-}" != netns ]; then
		rank_pid "$RUN" "$1"
		return
	fi
	for p in $(ip netns pids "$(netns_name $(($1 / 2)))"); do
		[ "$(readlink "/proc/$p/exe")" = "$(readlink -f "$(command -v collx-train)")" ] ||
		    continue
		if tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null |
		    grep -qx "COLLX_RANK=$1"; then
			echo "$p"
			return 0
		fi
	done
	return 1
}

# hold R...: ranks R stopped for 1 s (well within the timeout), so that
# the ranks started again are at their door before a fast machine ends
# the run
hold() {
	local p pids=()
	for p in "$@"; do
		pids+=("$(rpid "$p")")
	done
	kill -STOP "${pids[@]}"
	sleep 1
	kill -CONT "${pids[@]}"
}

# same_as_ref: the run (RUN) ends with exit 0; the weights of the
# failure-free run within 1e-5, its losses, every step once, the
# summary once, the replicas column as the departure and rejoin lines
# say, ending with 2 (REPLICAS: that of the failure-free mesh). STEPS:
# the run's (100).
same_as_ref() {
	local rc=0 want
	wait "$RUN" || rc=$?
	grep -v ': step [0-9]* epoch ' run.err
	[ "$rc" -eq 0 ]
	[ "$(grep -c "^collx-train: ${STEPS:-100} steps, final loss " run.err)" -eq 1 ]
	collx-tensor diff ref.safetensors "${OUT:-.}/ft.safetensors" \
	    --atol 1e-5 --rtol 0
	[ "$(tail -n +2 "${OUT:-.}/ft.csv" | cut -d, -f1 | tr '\n' ' ')" = "$(seq -s ' ' 0 $((${STEPS:-100} - 1))) " ]
	# the replicas of a step: its last line's count, else the step's
	# before
	want=$(awk -v n="${REPLICAS:-2}" -v steps="${STEPS:-100}" '
	    /^collx-train: step [0-9]*: .* replicas? go(es)? on/ {
		for (i = 4; $i != "go" && $i != "goes"; i++)
			;
		at[$3 + 0] = $(i - 3) == "of" ? $(i - 4) : $(i - 2) }
	    END { for (k = 0; k < steps; k++) {
		if (k in at) n = at[k]; printf "%d ", n } }' run.err)
	[ "$(tail -n +2 "${OUT:-.}/ft.csv" | cut -d, -f8 | tr '\n' ' ')" = "$want" ]
	[ "$(tail -n 1 "${OUT:-.}/ft.csv" | cut -d, -f8)" = "${REPLICAS:-2}" ]
	ft_losses_close ref.csv "${OUT:-.}/ft.csv"
	# a pipeline's bubbles (rank 0's summary), its stages' with ranks
	# started again among them: each between 0 and 1, the share of the
	# stage's steps outside its passes (a rank started again takes its
	# stage's records of the steps before it from a live replica)
	cat ft.out
	awk '{ for (i = 1; i < NF; i++) if ($i == "bubble") {
		v = $(i + 1) + 0; if (v <= 0 || v >= 1) bad = 1 } }
	    END { exit bad }' ft.out
}

# every20 PEERS MESH...: the issue's case under collx-run: ranks 3, 0, 2
# and 1 killed (SIGKILL) at steps 20, 40, 60 and 80 (each once the
# replica killed before is back); PEERS "R:P ...": P, the other rank of
# R's replica, leaves with it (exit 1), or none (dp4). Every rank killed,
# and every peer that left, is started again (one line each, counted
# against --max-restarts, which is just enough) and the replica rejoins.
every20() {
	local peers=" $1 " max=4 line r p k i=0 away=0 want
	local -a victim=(3 0 2 1) at=(20 40 60 80) pid
	shift
	[ "$peers" = "  " ] || max=8
	REPLICAS=$(($# > 1 && $2 == 4 ? 4 : 2))
	ft_train "$max" "$@"
	while IFS= read -r line; do
		echo "$line" >>run.err
		[[ "$line" != *" rejoined; "* ]] || away=0
		if [[ "$line" == *" left, taking 1 replica out; "* ]]; then
			hold $(for k in 0 1 2 3; do
			    [ "$k" = "${victim[i - 1]}" ] ||
			    [[ "$peers" == *" ${victim[i - 1]}:$k "* ]] ||
			    echo "$k"; done)
			continue
		fi
		[[ "$line" =~ ^collx-train:\ step\ ([0-9]+)\ epoch ]] || continue
		if [ "$i" -ge 4 ] || [ "$away" = 1 ] ||
		    [ "${BASH_REMATCH[1]}" -lt "${at[i]}" ]; then
			continue
		fi
		pid[i]=$(rpid "${victim[i]}")
		kill -KILL "${pid[i]}"
		i=$((i + 1))
		away=1
	done <err.fifo
	[ "$i" -eq 4 ]
	same_as_ref
	[ "$(grep -c '^collx-run: restart [0-9]* of '"$max"': ' run.err)" -eq "$max" ]
	for i in 0 1 2 3; do
		r=${victim[i]}
		grep -q "^collx-run: restart [0-9]* of $max: rank $r (\(pid ${pid[i]}\|host [0-9.]*\)) was killed by signal 9 (Killed); started again alone in [0-9.]* s, to rejoin the others at their next step (--ft)$" run.err
		p=$(sed -n "s/.* $r:\([0-9]*\) .*/\1/p" <<<"$peers")
		if [ -z "$p" ]; then
			grep -q "^collx-train: step [0-9]*: rank $r rejoined; $REPLICAS replicas go on" run.err
			continue
		fi
		grep -q "^collx-train: rank $p: --ft: rank $r left, taking replica [01] out; this rank leaves with it (1 replica goes on)$" run.err
		grep -q "^collx-train: step [0-9]*: ranks $((r < p ? r : p)), $((r < p ? p : r)) rejoined; 2 replicas go on" run.err
	done
	# each peer that left started again, the second time too
	for p in $(tr ' ' '\n' <<<"$peers" | cut -d: -f2); do
		want=$(grep -c "^collx-train: rank $p: --ft: rank [0-9]* left" run.err)
		[ "$(grep -c "^collx-run: restart [0-9]* of $max: rank $p ([^)]*) exited with status 1 after a death; started again alone" run.err)" -eq "$want" ]
	done
}

@test "collx-run --max-restarts 8, collx-train --ft --dp 2 --pp 2: ranks 3, 0, 2 and 1 killed at steps 20, 40, 60 and 80; each and its peer started again (ranks 0 and 1 twice) rejoin; the weights of a run without failures, every step once" {
	every20 "3:1 0:2 2:0 1:3" --dp 2 --pp 2
}

@test "collx-run --max-restarts 8, collx-train --ft --dp 2 --tp 2: the same kills; each and its peer started again rejoin; the weights of a run without failures" {
	every20 "3:2 0:1 2:3 1:0" --dp 2 --tp 2
}

@test "collx-run --max-restarts 4, collx-train --ft --dp 4: the same kills; each rank started again rejoins; the weights of a run without failures" {
	every20 "" --dp 4
}

@test "collx-run --max-restarts 8 over namespaces, 2 hosts x 2 ranks, collx-train --ft --dp 2 --pp 2 (each replica on both hosts): the same kills, each remote shell's exit taken; the weights of a run without failures" {
	over_netns() {
		netns_fake_ssh "$T/ssh"
		LAUNCH=(-H "$(netns_addr 0):2,$(netns_addr 1):2" --ssh "$T/ssh"
		    --master "$(netns_addr 0):29500")
		OUT=$T
		TARGS=(-m "$T/m.safetensors" --data "$T/X.npy"
		    --targets "$T/Y.npy" --batch 2048 --steps 100
		    --optimizer adamw --lr 0.001 --iface eth0)
		NS=netns every20 "3:1 0:2 2:0 1:3" --dp 2 --pp 2
	}
	ft_netns over_netns
}

# rejoin_fault WHAT: collx-run --max-restarts 4 of collx-train --ft
# --dp 2 --pp 2 (replicas 0: ranks 0 and 2, 1: ranks 1 and 3); rank 3
# killed after step 10, rank 1 leaves with it, both started again; as
# they rejoin (the line of it by rank 0), rank 0 is stopped, so that the
# step cannot be committed, and half a second later (the ranks started
# again past their copy, in the step: no rank waits on rank 0 before) a
# rank is killed there, rank 0 continued: WHAT joiner: rank 3 again (its
# replica leaves again, and is started again, rank 1 the second time
# since a rank died since its start); live: rank 2 (replica 0 leaves,
# rank 0 with it; replica 1, its copy done, goes on alone; ranks 2 and 0
# are started again and copy from it). The departure is in the step of
# the rejoin.
rejoin_fault() {
	local line n=0 victim=3 peer=1 p0 joined left
	[ "$1" = joiner ] || { victim=2; peer=0; }
	# steps of a tenth of a second or more (the whole data set), well
	# past the time this reader takes to stop rank 0 on a loaded machine,
	# the ranks waiting without spinning so as not to hold it
	export COLLX_SPIN_US=0
	STEPS=50
	TARGS=(-m big.safetensors --data BX.npy --targets BY.npy --batch 512
	    --steps $STEPS --optimizer adamw --lr 0.001)
	ft_train 4 --dp 2 --pp 2
	while IFS= read -r line; do
		echo "$line" >>run.err
		if [ "$n" = 0 ] && [[ "$line" == "collx-train: step 10 epoch"* ]]; then
			p0=$(rpid 0)
			kill -KILL "$(rpid 3)"
			n=1
		elif [ "$n" = 1 ] && [[ "$line" == *" left, taking 1 replica out; "* ]]; then
			hold 0 2
			n=2
		elif [ "$n" = 2 ] && [[ "$line" == *" rejoined; "* ]]; then
			kill -STOP "$p0"
			sleep 0.5
			kill -KILL "$(rpid "$victim")"
			kill -CONT "$p0"
			n=3
		elif [ "$n" = 3 ] && [[ "$line" == *" left, taking 1 replica out; "* ]]; then
			# the replica left alone waits for the others
			if [ "$1" = joiner ]; then hold 0 2; else hold 1 3; fi
			n=4
		fi
	done <err.fifo
	[ "$n" = 4 ]
	same_as_ref
	[ "$(grep -c '^  stage [01]: layers [0-9-]*, bubble ' ft.out)" -eq 2 ]
	joined=$(sed -n 's/^collx-train: step \([0-9]*\): ranks 1, 3 rejoined; .*/\1/p' run.err | head -1)
	left=$(sed -n "s/^collx-train: step \([0-9]*\): rank $victim left, taking 1 replica out; 1 of 2 replicas go on .*/\1/p" run.err | tail -1)
	[ "$left" = "$joined" ]
	grep -q "^collx-train: rank $peer: --ft: rank $victim left, taking replica $((victim % 2)) out; this rank leaves with it (1 replica goes on)$" run.err
	grep -q "^collx-run: restart 3 of 4: rank $victim (pid [0-9]*) was killed by signal 9 (Killed); started again alone" run.err
	grep -q "^collx-run: restart 4 of 4: rank $peer (pid [0-9]*) exited with status 1 after a death; started again alone" run.err
	grep -q "^collx-train: step [0-9]*: ranks $peer, $victim rejoined; 2 replicas go on" run.err
	[ "$(grep -c ' rejoined; ' run.err)" -eq 2 ]
}

@test "collx-run --max-restarts 4, collx-train --ft --dp 2 --pp 2: rank 3 started again killed within its rejoin step (its copy done, the step not committed); rank 1 leaves again; both are started again (rank 1 the second time) and rejoin; the weights of a run without failures" {
	rejoin_fault joiner
}

@test "collx-run --max-restarts 4, collx-train --ft --dp 2 --pp 2: rank 2 of the replica the state came from killed within the rejoin step; rank 0 leaves; the replica just rejoined goes on alone; ranks 2 and 0 are started again and copy from it; the weights of a run without failures" {
	rejoin_fault live
}

@test "collx-run --max-restarts 4, collx-train --ft --dp 2 --pp 2 on a larger model: rank 3 started again killed during its copy of the state (over 1 MB of it in); rank 1, started again too, leaves again; both are started again and rejoin; the weights of a run without failures" {
	local line n=0 joiner sender
	TARGS=(-m big.safetensors --data BX.npy --targets BY.npy --batch 64
	    --steps 100 --optimizer adamw --lr 0.001)
	ft_train 4 --dp 2 --pp 2
	while IFS= read -r line; do
		echo "$line" >>run.err
		if [ "$n" = 0 ] && [[ "$line" == "collx-train: step 5 epoch"* ]]; then
			kill -KILL "$(rpid 3)"
			n=1
		elif [ "$n" = 1 ] && [[ "$line" == "collx-run: restart 1 of 4: "* ]]; then
			joiner=$(rpid 3)
			sender=$(rpid 2)
			n=2
		elif [ "$n" = 2 ] && [[ "$line" == "collx-run: restart 2 of 4: "* ]]; then
			# the copy under way: over 1 MB in at rank 3 (the set-up
			# before it sends little; the stage's state is some 12 MB)
			copying "$joiner" 1000000
			kill -STOP "$sender"
			kill -KILL "$joiner"
			kill -CONT "$sender"
			n=3
		elif [ "$n" = 3 ] && [[ "$line" == *" left, taking 1 replica out; "* ]]; then
			# the replica left alone waits for the others
			hold 0 2
			n=4
		fi
	done <err.fifo
	[ "$n" = 4 ]
	same_as_ref
	# no rejoin before the second death: the copy did not end
	[ "$(sed -n '/^collx-run: restart 3 of 4/q;p' run.err | grep -c 'rejoined')" -eq 0 ]
	grep -q '^collx-run: restart 3 of 4: rank 3 (pid [0-9]*) was killed by signal 9 (Killed)' run.err
	grep -q '^collx-run: restart 4 of 4: rank 1 (pid [0-9]*) exited with status 1 after a death; started again alone' run.err
	[ "$(grep -c '^collx-train: step [0-9]*: ranks 1, 3 rejoined; 2 replicas go on' run.err)" -eq 1 ]
}
