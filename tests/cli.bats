#!/usr/bin/env bats
# What every program shares (collx(7)): --help, --version, usage
# errors, and a man page that agrees with --help (and each command's
# --help) both ways. Runs over every built bin/collx-* program; the one
# place these are checked.
load lib/common

setup() {
	common_setup
	PROGS=()
	for p in "$COLLX_BIN"/collx-*; do
		# In-tree builds keep the sources beside the programs.
		if [ -x "$p" ] && [ "${p%.c}" = "$p" ]; then
			PROGS+=("$(basename "$p")")
		fi
	done
}

teardown() {
	common_teardown
}

# The rendered text of a man page, without formatting.
man_text() {
	mandoc -Tascii "$1" | col -b
}

@test "there are programs to check" {
	[ "${#PROGS[@]}" -ge 1 ]
}

@test "--help: usage on standard output, exit 0, nothing on standard error" {
	bad=
	for p in "${PROGS[@]}"; do
		rc=0
		timeout 20 "$p" --help >"$T/out" 2>"$T/err" || rc=$?
		if [ $rc -ne 0 ] || ! grep -qi '^usage:' "$T/out" || [ -s "$T/err" ]; then
			bad="$bad $p(exit $rc)"
		fi
	done
	echo "failing:$bad"
	[ -z "$bad" ]
}

@test "-V and --version print 'PROGRAM (collx) VERSION'" {
	bad=
	for p in "${PROGS[@]}"; do
		for o in -V --version; do
			out=$(timeout 20 "$p" $o 2>/dev/null) || { bad="$bad $p$o"; continue; }
			[[ $out =~ ^$p\ \(collx\)\ [0-9]+\.[0-9]+ ]] || bad="$bad $p$o"
		done
	done
	echo "failing:$bad"
	[ -z "$bad" ]
}

@test "an unknown option is a usage error: exit 2, one named line and a hint" {
	bad=
	for p in "${PROGS[@]}"; do
		rc=0
		timeout 20 "$p" --no-such-option </dev/null >"$T/out" 2>"$T/err" || rc=$?
		if [ $rc -ne 2 ] || ! grep -q "^$p: " "$T/err" ||
		    ! grep -qF "Try '$p --help'." "$T/err"; then
			bad="$bad $p(exit $rc)"
		fi
	done
	echo "failing:$bad"
	[ -z "$bad" ]
}

# Numbers are decimal with '-' their only sign (collx(7)): what strtol
# and strtod would also take is the usage error any bad number is.
@test "a number with '+', blanks, 0x, or an inf or nan is a usage error: exit 2, one named line" {
	bad=
	check_number() {
		local want=$1 rc=0
		shift
		env ${ENV_TIMEOUT:+COLLX_TIMEOUT="$ENV_TIMEOUT"} timeout 20 "$@" \
		    </dev/null >"$T/out" 2>"$T/err" || rc=$?
		if [ $rc -ne 2 ] || [ "$(head -n 1 "$T/err")" != "$want" ] ||
		    [ "$(wc -l <"$T/err")" -ne 2 ] || [ -s "$T/out" ]; then
			bad="$bad [$*](exit $rc: $(head -n 1 "$T/err"))"
		fi
	}
	for v in +5 " 5" "5 " 0x5 1e3; do
		check_number "collx-pipe: --steps: invalid integer '$v'" \
		    collx-pipe --steps "$v"
	done
	check_number "collx-dp: --steps: invalid integer '+5'" collx-dp --steps +5
	for v in +5 0x10 0x1p3 nan inf " 5"; do
		check_number "collx-allreduce: --timeout: invalid number '$v'" \
		    collx-allreduce --timeout "$v"
	done
	ENV_TIMEOUT=+5 check_number \
	    "collx-allreduce: COLLX_TIMEOUT: invalid number '+5'" collx-allreduce
	for v in +8 1.5e3 0x10; do
		check_number "collx-bench: -b: invalid size '$v' (a whole number of bytes, optionally with K, M, G or T)" \
		    collx-bench coll -b "$v"
	done
	# the optimizer's numbers, read once the model and data are named
	collx-dp --init mlp --dims 2,4,1 --seed 1 -o "$T/m.safetensors"
	collx-tensor create --shape 4,2 --fill randn --seed 2 -o "$T/X.npy"
	collx-tensor create --shape 4,1 --fill randn --seed 3 -o "$T/Y.npy"
	for v in nan +0.1 0x1p-3 " 0.1"; do
		check_number "collx-dp: --lr: '$v' is not a number in [0, 1e+09)" \
		    collx-dp -m "$T/m.safetensors" --data "$T/X.npy" \
		    --targets "$T/Y.npy" --batch 4 --steps 1 -q -o "$T/o.safetensors" \
		    --lr "$v"
	done
	check_number "collx-dp: --betas: 'nan' is not a number in [0, 1)" \
	    collx-dp -m "$T/m.safetensors" --data "$T/X.npy" --targets "$T/Y.npy" \
	    --batch 4 --steps 1 -q -o "$T/o.safetensors" --optimizer adamw \
	    --betas 0.9,nan
	echo "failing:$bad"
	[ -z "$bad" ]
}

# Under a launcher every rank has the same command line, so a usage error
# is every rank's: rank 0 says it, the others exit 2 as well but say
# nothing (with -v each says it).
@test "under collx-run a usage error is said once, by rank 0; -v: by every rank" {
	bad=
	for p in collx-allreduce collx-broadcast collx-allgather \
	    collx-reduce-scatter collx-alltoall collx-dp collx-tp collx-pipe \
	    collx-ps collx-bench; do
		rc=0
		timeout 30 collx-run -n 3 --timeout 10 -- "$p" \
		    --no-such-option </dev/null >"$T/out" 2>"$T/err" || rc=$?
		if [ $rc -ne 2 ] ||
		    [ "$(grep -c "^$p: unknown option '--no-such-option'" "$T/err")" -ne 1 ] ||
		    [ "$(grep -cxF "Try '$p --help'." "$T/err")" -ne 1 ]; then
			bad="$bad $p(exit $rc)"
			cat "$T/err"
		fi
		# rank 1 alone (collx-run stops the others at the first exit)
		for v in "" -v; do
			rc=0
			COLLX_RANK=1 COLLX_WORLD_SIZE=3 COLLX_MASTER=127.0.0.1:9 \
			    timeout 30 "$p" $v --no-such-option </dev/null \
			    >"$T/out" 2>"$T/err" || rc=$?
			want=$([ -z "$v" ] && echo 0 || echo 2)
			if [ $rc -ne 2 ] || [ "$(wc -l <"$T/err")" -ne "$want" ] ||
			    { [ -n "$v" ] && ! grep -q "^$p: unknown option" "$T/err"; }; then
				bad="$bad $p-rank1$v(exit $rc)"
				cat "$T/err"
			fi
		done
	done
	# a program that is not a rank says its own, launcher or not
	for p in collx-tensor collx-plot collx-run; do
		rc=0
		COLLX_RANK=1 timeout 30 "$p" --no-such-option </dev/null \
		    >"$T/out" 2>"$T/err" || rc=$?
		[ $rc -eq 2 ] && grep -q "^$p: unknown option" "$T/err" ||
		    bad="$bad $p-rank1(exit $rc)"
	done
	echo "failing:$bad"
	[ -z "$bad" ]
}

@test "every program has a lint-clean man page with the required sections" {
	bad=
	for p in "${PROGS[@]}"; do
		page=$COLLX_ROOT/man/man1/$p.1
		if [ ! -f "$page" ]; then
			bad="$bad $p(no page)"
			continue
		fi
		lint=$(mandoc -Tlint -W warning "$page" 2>&1)
		[ -z "$lint" ] || bad="$bad $p(lint: $lint)"
		for s in NAME SYNOPSIS DESCRIPTION ENVIRONMENT "EXIT STATUS" EXAMPLES "SEE ALSO"; do
			grep -q "^\.Sh $s\$" "$page" || bad="$bad $p(no $s)"
		done
	done
	echo "failing:$bad"
	[ -z "$bad" ]
}

# The long options --help names anywhere, with those of each command's
# --help for a program with commands (collx-tensor).
help_long_options() {
	local p=$1 c
	{
		timeout 20 "$p" --help
		for c in $(timeout 20 "$p" --help | awk '/^commands:/ { on = 1; next }
		    on && /^  [a-z]/ { print $1 }'); do
			timeout 20 "$p" "$c" --help
		done
	} 2>/dev/null | grep -oE -- '--[a-z][a-z0-9-]*' | sort -u
}

# The long options of --help's option column: the lines that start with an
# option, up to the two spaces before the description.
help_column_options() {
	timeout 20 "$1" --help 2>/dev/null | sed -nE 's/^ +(-[^ ].*)$/\1/p' |
	    sed -E 's/  .*//' | grep -oE -- '--[a-z][a-z0-9-]*' | sort -u
}

# Whether LIST (lines) has a line equal to WORD: a pattern match, not a
# grep process for each of some thousand looks.
has_line() {
	[[ $'\n'$1$'\n' == *$'\n'"$2"$'\n'* ]]
}

# The options of joining a group, which every program that runs as ranks
# takes and collx(7) documents once, under GROUP MEMBERSHIP.
group_options() {
	awk '/^\.Sh /{p = ($0 == ".Sh GROUP MEMBERSHIP")} p' \
	    "$COLLX_ROOT/man/man7/collx.7" | grep -oE 'Fl \\-[a-z][a-z\\-]*' |
	    sed 's/^Fl /-/; s/\\//g' | sort -u
}

@test "every long option of --help, and of each command's --help, is on the man page" {
	bad=
	for p in "${PROGS[@]}"; do
		page=$COLLX_ROOT/man/man1/$p.1
		[ -f "$page" ] || continue
		# A collective program's common options are in collx(7).
		text=$(man_page_text "$page")
		for o in $(help_long_options "$p"); do
			[[ $text == *"$o"* ]] || bad="$bad $p:$o"
		done
	done
	echo "missing:$bad"
	[ -z "$bad" ]
}

@test "every option a man page lists is in --help" {
	bad=
	for p in "${PROGS[@]}"; do
		page=$COLLX_ROOT/man/man1/$p.1
		[ -f "$page" ] || continue
		help=$(help_long_options "$p")
		for o in $(man_long_options "$page"); do
			has_line "$help" "$o" || bad="$bad $p:$o"
		done
	done
	echo "not in --help:$bad"
	[ -z "$bad" ]
}

@test "every option of --help's option column has an entry on the man page (group options: collx(7))" {
	bad=
	group=$(group_options)
	[ -n "$group" ]
	for p in "${PROGS[@]}"; do
		page=$COLLX_ROOT/man/man1/$p.1
		[ -f "$page" ] || continue
		listed=$(man_long_options "$page")
		for o in $(help_column_options "$p"); do
			has_line "$listed" "$o" || has_line "$group" "$o" ||
			    bad="$bad $p:$o"
		done
	done
	echo "no entry:$bad"
	[ -z "$bad" ]
}

# The programs that take the group options are those whose --help lists
# them (cli_group_help); each must take the last one added too.
@test "every program that takes the group options takes --no-shm, and its page names --no-shm and COLLX_SHM" {
	group=$(group_options)
	grep -qx -- --no-shm <<<"$group"
	n=0 bad=
	for p in "${PROGS[@]}"; do
		timeout 20 "$p" --help 2>/dev/null | grep -q -- '--token-file' || continue
		n=$((n + 1))
		# An unknown option would be a usage error before --help.
		rc=0
		timeout 20 "$p" --no-shm --help >/dev/null 2>&1 || rc=$?
		[ "$rc" -eq 0 ] || bad="$bad $p:exit-$rc"
		text=$(man_text "$COLLX_ROOT/man/man1/$p.1")
		grep -qF -- --no-shm <<<"$text" || bad="$bad $p.1:--no-shm"
		grep -qw COLLX_SHM <<<"$text" || bad="$bad $p.1:COLLX_SHM"
	done
	echo "failing:$bad"
	[ -z "$bad" ]
	[ "$n" -ge 1 ]
}

@test "man_long_options: shared options count once, an option on neither page is missing" {
	man=$COLLX_ROOT/man/man1/collx-allreduce.1
	# --iters is only in collx(7), --op only on the program's page.
	[ -z "$(grep '^\.It Fl \\-iters' "$man")" ]
	man_long_options "$man" | grep -qx -- --iters
	man_long_options "$man" | grep -qx -- --op
	# A page without its --op entry no longer documents --op.
	grep -v '^\.It Fl \\-op' "$man" >"$T/no-op.1"
	[ -z "$(man_long_options "$T/no-op.1" | grep -x -- --op)" ]
	# A page that does not refer to collx(7)'s section has no shared options.
	grep -v 'COLLECTIVE PROGRAMS' "$man" >"$T/alone.1"
	[ -z "$(man_long_options "$T/alone.1" | grep -x -- --iters)" ]
	# The other forms of an entry: a short option first, and a command's.
	man_long_options "$COLLX_ROOT/man/man1/collx-tp.1" | grep -qx -- --model
	man_long_options "$COLLX_ROOT/man/man1/collx-tensor.1" | grep -qx -- --rtol
}

# The programs the tree has: one bin/collx-*.c each.
tree_programs() {
	local c
	for c in "$COLLX_ROOT"/bin/collx-*.c; do
		basename "$c" .c
	done
}

@test "collx(7) is lint-clean and lists every program, and only those" {
	page=$COLLX_ROOT/man/man7/collx.7
	run mandoc -Tlint -W warning "$page"
	[ "$status" -eq 0 ]
	[ -z "$output" ]
	listed=$(sed -n 's/^\.It Xr \(collx-[a-z-]*\) 1$/\1/p' "$page" | sort)
	diff <(tree_programs | sort) - <<<"$listed"
	text=$(man_text "$page")
	for p in "${PROGS[@]}"; do
		grep -q "$p(1)" <<<"$text" || { echo "missing $p"; return 1; }
	done
}

# Every cross-reference to a collx page (.Xr collx-NAME 1, .Xr collx 7)
# names a page of man/, and a section-1 one a program of bin/.
@test "every Xr to a collx page names a page and program that exist" {
	bad=
	progs=$(tree_programs)
	for page in "$COLLX_ROOT"/man/man1/*.1 "$COLLX_ROOT"/man/man7/collx.7; do
		while read -r name sec; do
			[ -f "$COLLX_ROOT/man/man$sec/$name.$sec" ] ||
			    bad="$bad ${page##*/}:$name($sec)(no page)"
			[ "$sec" != 1 ] || grep -qx "$name" <<<"$progs" ||
			    bad="$bad ${page##*/}:$name($sec)(no program)"
		done < <(grep -oE 'Xr collx(-[a-z-]+)? [0-9]' "$page" | cut -c4-)
	done
	echo "failing:$bad"
	[ -z "$bad" ]
}

@test "collx(7) lists the timing columns and launcher variables" {
	text=$(man_text "$COLLX_ROOT/man/man7/collx.7")
	grep -qF "program,op,algo,rank,world_size,dtype,count,bytes,iter,seconds,algbw_gbps,busbw_gbps" <<<"$text"
	for v in COLLX_RANK RANK OMPI_COMM_WORLD_RANK PMI_RANK SLURM_PROCID COLLX_WORLD_SIZE \
	    WORLD_SIZE OMPI_COMM_WORLD_SIZE PMI_SIZE SLURM_NTASKS COLLX_MASTER MASTER_ADDR \
	    MASTER_PORT COLLX_IFNAME COLLX_TIMEOUT COLLX_TOKEN COLLX_SHM; do
		grep -qw "$v" <<<"$text" || { echo "missing $v"; return 1; }
	done
}

# Rank 0 of a world of 2 and a rank 1 that says the world has 3, at one
# rendezvous: rank 1 is refused. Each pair's files are $T/TAG.*; the
# pairs of a test run at once (each waits out rank 0's timeout).
# usage: expect_refused TAG PROGRAM ARGS... (in the background), then
# refused_report TAG...: adds to $bad each TAG whose rank 1 did not exit 3
# with one line or whose rank 0 did not exit 1.
expect_refused() {
	local tag=$1 port rc0=0 rc1=0 pid0
	shift
	port=$(free_port)
	timeout 30 "$@" --rank 0 --world-size 2 --master "127.0.0.1:$port" \
	    --timeout 4 >"$T/$tag.r0.out" 2>"$T/$tag.r0.err" &
	pid0=$!
	sleep 0.3
	timeout 30 "$@" --rank 1 --world-size 3 --master "127.0.0.1:$port" \
	    --timeout 4 >"$T/$tag.r1.out" 2>"$T/$tag.r1.err" || rc1=$?
	wait "$pid0" || rc0=$?
	echo "$rc0 $rc1" >"$T/$tag.rc"
}

refused_report() {
	local tag rc0 rc1
	for tag in "$@"; do
		read -r rc0 rc1 <"$T/$tag.rc" || rc0=none
		[ "$rc1" = 3 ] && [ "$rc0" = 1 ] &&
		    [ "$(wc -l <"$T/$tag.r1.err")" -eq 1 ] ||
		    bad="$bad $tag($rc0,$rc1: $(cat "$T/$tag.r1.err"))"
	done
}

# Joining is one function for every rank program: a rank the group refuses
# (here, another world size) exits 3 with one line, the one it did not
# reach gives up at its timeout with exit 1. The models divide among 2 and
# 3 ranks (6 output features, 3 layers), so only the join refuses.
@test "a refused rank exits 3 from every rank program" {
	collx-tensor create --shape 4 --fill 1 -o "$T/x.npy"
	collx-dp --init mlp --dims 2,4,1 --seed 1 -o "$T/m.safetensors"
	collx-dp --init mlp --dims 2,4,1,3 --seed 1 -o "$T/m3.safetensors"
	collx-tensor create --shape 8,2 --fill randn --seed 2 -o "$T/X.npy"
	collx-tensor create --shape 8,1 --fill randn --seed 3 -o "$T/Y.npy"
	collx-tensor create --shape 6,2 --fill randn --seed 4 -o "$T/w.npy"
	collx-tensor create --shape 6 --fill randn --seed 5 -o "$T/b.npy"
	collx-tensor pack -o "$T/w.safetensors" weight="$T/w.npy" bias="$T/b.npy"
	bad=
	for p in allreduce broadcast allgather reduce-scatter alltoall; do
		expect_refused "$p" "collx-$p" -i "$T/x.npy" &
	done
	expect_refused dp collx-dp -m "$T/m.safetensors" --data "$T/X.npy" \
	    --targets "$T/Y.npy" --batch 8 --steps 1 -q &
	expect_refused ps collx-ps serve -m "$T/m.safetensors" --workers 1 -q &
	expect_refused tp collx-tp --layer column -m "$T/w.safetensors" \
	    -i "$T/X.npy" -q &
	expect_refused pipe collx-pipe -m "$T/m3.safetensors" -i "$T/X.npy" \
	    -t "$T/Y.npy" --microbatches 2 -q &
	expect_refused train collx-train -m "$T/m3.safetensors" -i "$T/X.npy" \
	    -t "$T/Y.npy" --batch 8 --steps 1 -q &
	expect_refused bench collx-bench coll -b 1K -e 1K -n 1 -w 0 &
	wait
	refused_report allreduce broadcast allgather reduce-scatter alltoall \
	    dp ps tp pipe train bench
	echo "failing:$bad"
	[ -z "$bad" ]
}
