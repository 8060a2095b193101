#!/usr/bin/env bats
# collx-dp --ft: ranks killed (SIGKILL) while training; the survivors run
# the step again among themselves and go on. The trained weights are
# those of a run without failures (one process, the same global batch)
# within 1e-5, the loss CSV holds every step once with the replicas that
# ran it, one line says each departure. Bad input: one usage line naming
# the options.
load lib/common
load lib/netns
load lib/ftsuite
bats_require_minimum_version 1.5.0

# killed_ft [netns]: 4 ranks of collx-dp --ft (here, or two to a
# namespace host), ranks 0, 3 and 2 killed after steps 20, 40 and 60 of
# 100 (each time a majority goes on: 3 of 4, 2 of 3, then rank 1, the
# first of the two left): the last replica ends with the weights of a run
# without failures within 1e-5, and a loss CSV holding every step once.
killed_ft() {
	local master r step line pre=() killed=
	collx-dp "${ARGS[@]}" -q -o ref.safetensors --loss-csv ref.csv
	master=127.0.0.1:$(free_port)
	[ "${1:-}" = netns ] && master=$(netns_addr 0):29500
	mkfifo err.fifo
	for r in 0 1 2 3; do
		[ "${1:-}" = netns ] &&
		    pre=(ip netns exec "$(netns_name $((r / 2)))")
		COLLX_RANK=$r COLLX_WORLD_SIZE=4 COLLX_MASTER=$master \
		    COLLX_TIMEOUT=10 "${pre[@]}" collx-dp "${ARGS[@]}" --ft \
		    -v -o ft.safetensors --loss-csv ft.csv 2>err.fifo &
		PIDS+=($!)
	done
	# the step lines of the rank 0 of those left, to the end
	while IFS= read -r line; do
		echo "$line" >>err.log
		step=$(sed -n 's/^collx-dp: step \([0-9]*\) .*/\1/p' <<<"$line")
		case $step:$killed in
		20:) kill -KILL "${PIDS[0]}"; killed=0 ;;
		40:0) kill -KILL "${PIDS[3]}"; killed=3 ;;
		60:3) kill -KILL "${PIDS[2]}"; killed=2 ;;
		esac
	done <err.fifo
	for r in 0 1 2 3; do
		rc=0
		wait "${PIDS[r]}" || rc=$?
		echo "rank $r: exit $rc"
		[ "$rc" -eq "$([ "$r" = 1 ] && echo 0 || echo 137)" ]
	done
	grep -v ': step [0-9]* epoch ' err.log
	# one line each departure, by the rank 0 of the replicas left
	grep -q '^collx-dp: step [0-9]*: rank 0 left; 3 of 4 replicas go on (0.[0-9]* s to agree)$' err.log
	grep -q '^collx-dp: step [0-9]*: rank 3 left; 2 of 3 replicas go on (0.[0-9]* s to agree)$' err.log
	grep -q '^collx-dp: step [0-9]*: rank 2 left; 1 of 2 replicas go on (0.[0-9]* s to agree)$' err.log
	# the summary, once, by the last replica, over every step
	[ "$(grep -c '^collx-dp: 100 steps, final loss ' err.log)" -eq 1 ]
	# the weights, every step once and each loss those of the run without
	# failures; the replicas 4, 3, 2, then 1 to the end
	ft_as_ref 100
	[ "$(tail -n +2 ft.csv | cut -d, -f8 | uniq | tr '\n' ' ')" = "4 3 2 1 " ]
	# what each departure cost: the agreement, then the step run again
	awk -F, 'NR > 2 && $8 != p { print "step " $1 " run again by " $8 \
	    " replicas in " $5 " s" } { p = $8 }' ft.csv
}

@test "--ft: ranks 0, 3 and 2 of 4 killed at steps 20, 40 and 60: the last replica ends with the weights of a run without failures, every step in the loss CSV once" {
	killed_ft
}

@test "--ft over namespaces, 2 hosts x 2 ranks at 1 Gbit/s: the same kills, the same weights" {
	ft_netns killed_ft
}

# rejoin_ft [netns]: 4 ranks of collx-dp --ft (here, or two to a
# namespace host); ranks 0, 3, 2 and 1 killed (SIGKILL) after steps 20,
# 40, 60 and 80 of 100, each started again at once in its place with
# COLLX_REJOIN=1 (as collx-run --max-restarts does): it rejoins at a step
# boundary, copying the state of the others, and trains on. The weights
# equal those of a run without failures within 1e-5, the loss CSV holds
# every step once, one line says each departure and each rejoin.
rejoin_ft() {
	local master r step line plan=" 20:0 40:3 60:2 80:1 " rc
	local -a rp
	collx-dp "${ARGS[@]}" -q -o ref.safetensors --loss-csv ref.csv
	master=127.0.0.1:$(free_port)
	[ "${1:-}" = netns ] && master=$(netns_addr 0):29500
	mkfifo err.fifo
	# start_rank R [VAR=VALUE...]: rank R, in its namespace with netns
	start_rank() {
		local r=$1 pre=()
		shift
		[ "$NS" = netns ] && pre=(ip netns exec "$(netns_name $((r / 2)))")
		env "$@" COLLX_RANK="$r" COLLX_WORLD_SIZE=4 COLLX_MASTER="$master" \
		    COLLX_TIMEOUT=10 "${pre[@]}" collx-dp "${ARGS[@]}" --ft -v \
		    -o ft.safetensors --loss-csv ft.csv 2>err.fifo &
		rp[r]=$!
		PIDS+=($!)
	}
	NS=${1:-}
	for r in 0 1 2 3; do
		start_rank "$r"
	done
	while IFS= read -r line; do
		echo "$line" >>err.log
		step=$(sed -n 's/^collx-dp: step \([0-9]*\) .*/\1/p' <<<"$line")
		[ -n "$step" ] || continue
		r=$(sed -n "s/.* $step:\([0-9]\) .*/\1/p" <<<"$plan")
		[ -n "$r" ] || continue
		plan=${plan/ $step:$r / }
		kill -KILL "${rp[r]}"
		rc=0
		wait "${rp[r]}" || rc=$?
		[ "$rc" -eq 137 ]
		start_rank "$r" COLLX_REJOIN=1
	done <err.fifo
	for r in 0 1 2 3; do
		wait "${rp[r]}"
	done
	grep -v ': step [0-9]* epoch ' err.log
	[ "$plan" = " " ]
	# the summary, once, by the rank 0 started again, over every step
	[ "$(grep -c '^collx-dp: 100 steps, final loss ' err.log)" -eq 1 ]
	for r in 0 3 2 1; do
		grep -q "^collx-dp: step [0-9]*: rank $r left; 3 of 4 replicas go on (0.[0-9]* s to agree)$" err.log
		grep -q "^collx-dp: step [0-9]*: rank $r rejoined; 4 replicas go on ([0-9.]* s to admit and copy the state)$" err.log
	done
	collx-tensor diff ref.safetensors ft.safetensors --atol 1e-5 --rtol 0
	[ "$(tail -n +2 ft.csv | cut -d, -f1 | tr '\n' ' ')" = "$(seq -s ' ' 0 99) " ]
	# 4 replicas, 3 from the step of each departure up to the step of
	# the rejoin (the next, or later on a loaded machine), then 4 again;
	# a rank started again before the others noticed its death gets the
	# state in their recovery and computes that step with them (the
	# departure and the rejoin lines then name the same step)
	want=$(awk '/^collx-dp: step [0-9]*: rank [0-9]* left;/ { left[$3 + 0]++ }
	    /^collx-dp: step [0-9]*: rank [0-9]* rejoined;/ { back[$3 + 0]++ }
	    END { n = 4; for (k = 0; k < 100; k++) {
		n += back[k] - left[k]; printf "%d ", n } }' err.log)
	[ "$(tail -n +2 ft.csv | cut -d, -f8 | tr '\n' ' ')" = "$want" ]
	[ "$(echo "$want" | tr -cd 3 | wc -c)" -ge 1 ]
	ft_losses_close ref.csv ft.csv
}

@test "--ft rejoin: ranks 0, 3, 2 and 1 of 4 killed at steps 20, 40, 60 and 80, each started again: it rejoins, the weights are those of a run without failures, every step in the loss CSV once" {
	rejoin_ft
}

@test "--ft rejoin over namespaces, 2 hosts x 2 ranks at 1 Gbit/s: the same kills and restarts, the same weights" {
	ft_netns rejoin_ft
}

# ZeRO's slices under the same kills (ft_zero.bats has the rest)
@test "--ft --zero 1 rejoin over namespaces, 2 hosts x 2 ranks at 1 Gbit/s: the same kills and restarts, each rank's slice from its mirror and back, the same weights" {
	ARGS+=(--zero 1)
	ft_netns rejoin_ft
}

@test "--ft: a rank stopped (SIGSTOP) and a rank killed at once: the survivors time out on the stopped one, leave both out, and finish right; continued, the stopped rank, alone, stops" {
	local port r line step
	collx-dp "${ARGS[@]}" --steps 40 -q -o ref.safetensors
	port=$(free_port)
	mkfifo err0.fifo
	for r in 0 1 2 3; do
		COLLX_RANK=$r COLLX_WORLD_SIZE=4 COLLX_MASTER=127.0.0.1:$port \
		    COLLX_TIMEOUT=2 collx-dp "${ARGS[@]}" --steps 40 --ft -v \
		    -o ft.safetensors --loss-csv ft.csv \
		    2>"$([ "$r" = 0 ] && echo err0.fifo || echo "err.$r")" &
		PIDS+=($!)
	done
	start=$SECONDS
	while IFS= read -r line; do
		echo "$line" >>err.0
		step=$(sed -n 's/^collx-dp: step \([0-9]*\) .*/\1/p' <<<"$line")
		if [ "$step" = 10 ]; then
			kill -STOP "${PIDS[3]}"
			kill -KILL "${PIDS[2]}"
		fi
	done <err0.fifo
	for r in 0 1; do
		wait "${PIDS[r]}"
	done
	# within the timeout (2 s) to find the stopped rank, twice it and a
	# second for its abort frame that never comes, and the run
	[ $((SECONDS - start)) -le 30 ]
	sum=$(cksum <ft.safetensors)
	# continued, rank 3 finds its peers gone: 1 of 4 is no majority (it
	# could as well be cut off from them), so it stops, writing nothing
	kill -CONT "${PIDS[3]}"
	rc=0
	wait "${PIDS[3]}" || rc=$?
	cat err.0 err.1 err.3 | grep -v ': step [0-9]* epoch '
	[ "$rc" -eq 1 ]
	grep -q '^collx-dp: rank 3: --ft: 1 of 4 replicas left (ranks 0, 1, 2 gone or cut off), not a majority: stopping, the others may go on$' err.3
	[ "$(cksum <ft.safetensors)" = "$sum" ]
	grep -q '^collx-dp: step [0-9]*: ranks 2, 3 left; 2 of 4 replicas go on (.* s to agree)$' err.0 ||
	    { grep -q '^collx-dp: step [0-9]*: rank 2 left; 3 of 4 replicas go on' err.0 &&
	    grep -q '^collx-dp: step [0-9]*: rank 3 left; 2 of 3 replicas go on' err.0; }
	collx-tensor diff ref.safetensors ft.safetensors --atol 1e-5 --rtol 0
	[ "$(tail -n +2 ft.csv | cut -d, -f1 | tr '\n' ' ')" = "$(seq -s ' ' 0 39) " ]
	[ "$(tail -n 1 ft.csv | cut -d, -f8)" = 2 ]
}

@test "--ft bad input: with --sync ps, --wire, --powersgd, --sync-every, one replica, or two interfaces: one usage line naming the options" {
	local bad name
	for bad in "--sync ps" "--wire bf16" "--powersgd 2" "--sync-every 2"; do
		# shellcheck disable=SC2086
		run -2 --separate-stderr collx-dp "${ARGS[@]}" --ft $bad \
		    --world-size 2 --rank 0 --master 127.0.0.1:1
		echo "$stderr"
		name=${bad% *}
		case $name in --sync) name=$bad ;; esac
		[ "${stderr_lines[0]}" = "collx-dp: --ft goes with plain allreduce, not $name (the state a replica holds would leave with it)" ]
	done
	run -2 --separate-stderr collx-dp "${ARGS[@]}" --ft
	[ "${stderr_lines[0]}" = "collx-dp: --ft needs two replicas or more (--world-size 1)" ]
	# one stream a pair: the survivors read each link to a frame
	run -2 --separate-stderr collx-dp "${ARGS[@]}" --ft --iface lo,lo \
	    --world-size 2 --rank 0 --master 127.0.0.1:1
	[ "${stderr_lines[0]}" = "collx-dp: --ft takes one interface, not --iface lo,lo (or COLLX_IFNAME)" ]
}

@test "collx-run with --ft: a rank killed leaves, one line says so, the others finish, exit 0" {
	local run pid rc
	collx-dp "${ARGS[@]}" --steps 60 -q -o ref.safetensors
	collx-run -n 3 -- collx-dp "${ARGS[@]}" --steps 60 --ft -v \
	    -o ft.safetensors --loss-csv ft.csv 2>run.err &
	RUN=$!
	run=$RUN
	PIDS+=("$run")
	wait_line '^collx-dp: step 10 '
	pid=$(rank_pid "$run" 1)
	kill -KILL "$pid"
	ft_ends 0
	grep -q "^collx-run: rank 1 (pid $pid) was killed by signal 9 (Killed); the others go on (--ft)$" run.err
	grep -q '^collx-dp: step [0-9]*: rank 1 left; 2 of 3 replicas go on (0.[0-9]* s to agree)$' run.err
	collx-tensor diff ref.safetensors ft.safetensors --atol 1e-5 --rtol 0
	[ "$(tail -n +2 ft.csv | cut -d, -f1 | tr '\n' ' ')" = "$(seq -s ' ' 0 59) " ]
}

@test "collx-run --max-restarts with --ft: ranks 0, 3, 2 and 1 killed at steps 20, 40, 60 and 80 are started again alone and rejoin; the others never stop; the weights are those of a run without failures" {
	local run pid r step plan=(0:20 3:40 2:60 1:80) rc v pids=()
	collx-dp "${ARGS[@]}" -q -o ref.safetensors
	ft_run 4 "${ARGS[@]}"
	run=$RUN
	for v in "${plan[@]}"; do
		r=${v%:*}
		step=${v#*:}
		wait_line "^collx-dp: step $step "
		pid=$(rank_pid "$run" "$r")
		pids+=("$pid")
		kill -KILL "$pid"
	done
	ft_ends 0
	for k in 0 1 2 3; do
		v=${plan[k]}
		r=${v%:*}
		grep -q "^collx-run: restart $((k + 1)) of 4: rank $r (pid ${pids[k]}) was killed by signal 9 (Killed); started again alone in 0.[0-9]* s, to rejoin the others at their next step (--ft)$" run.err
		grep -q "^collx-dp: step [0-9]*: rank $r rejoined; 4 replicas go on" run.err
	done
	collx-tensor diff ref.safetensors ft.safetensors --atol 1e-5 --rtol 0
	[ "$(tail -n +2 ft.csv | cut -d, -f1 | tr '\n' ' ')" = "$(seq -s ' ' 0 99) " ]
	[ "$(tail -n 1 ft.csv | cut -d, -f8)" = 4 ]
}

@test "collx-run --max-restarts with --ft over namespaces, 2 hosts x 2 ranks: a remote rank killed (its shell exits 137) is started again alone on its host and rejoins; the weights are those of a run without failures" {
	need "root and ip netns" netns_available
	local run p victim= rc
	collx-dp "${ARGS[@]}" -q -o ref.safetensors
	netns_setup 2
	netns_fake_ssh "$T/ssh"
	COLLX_TIMEOUT=10 collx-run -H "$(netns_addr 0):2,$(netns_addr 1):2" \
	    --ssh "$T/ssh" --master "$(netns_addr 0):29500" --max-restarts 1 \
	    -- collx-dp "${ARGS[@]}" -m "$T/m.safetensors" --data "$T/X.npy" \
	    --targets "$T/Y.npy" --iface eth0 --ft -v \
	    -o "$T/ft.safetensors" --loss-csv "$T/ft.csv" 2>run.err &
	RUN=$!
	run=$RUN
	PIDS+=("$run")
	wait_line '^collx-dp: step 20 '
	# rank 3's collx-dp, in the second namespace
	for p in $(ip netns pids "$(netns_name 1)"); do
		[ "$(readlink "/proc/$p/exe")" = "$(readlink -f "$(command -v collx-dp)")" ] ||
		    continue
		tr '\0' '\n' <"/proc/$p/environ" | grep -qx COLLX_RANK=3 &&
		    victim=$p
	done
	[ -n "$victim" ]
	kill -KILL "$victim"
	ft_ends 0
	grep -q "^collx-run: restart 1 of 1: rank 3 (host $(netns_addr 1)) was killed by signal 9 (Killed); started again alone in 0.[0-9]* s, to rejoin the others at their next step (--ft)$" run.err
	grep -q '^collx-dp: step [0-9]*: rank 3 rejoined; 4 replicas go on' run.err
	collx-tensor diff ref.safetensors ft.safetensors --atol 1e-5 --rtol 0
	[ "$(tail -n +2 ft.csv | cut -d, -f1 | tr '\n' ' ')" = "$(seq -s ' ' 0 99) " ]
}
