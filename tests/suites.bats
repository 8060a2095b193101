#!/usr/bin/env bats
# The suites themselves: checks that bats would let pass unchecked.
load lib/common

setup() {
	common_setup
}

teardown() {
	common_teardown
}

# bash's errexit ignores the status of a command negated with '!', so in
# a bats test `! cmp -s a b` checks nothing unless it is the test's last
# line; negations are written `if cmd; then false; fi` or `run ! cmd`.
@test "no test asserts with a bare '! cmd', whose status bats ignores" {
	run grep -nE '^[[:space:]]*! ' "$COLLX_ROOT"/tests/*.bats \
	    "$COLLX_ROOT"/tests/lib/*.bash
	# a negation inside an if condition, or one followed by || return, is
	# checked
	bad=$(grep -vE '; then$|\|\| return' <<<"$output" || true)
	[ -z "$bad" ] || { echo "$bad"; false; }
}

# Under errexit bash ignores a failure left of &&, so `[ x ] && [ y ]` in
# the middle of a test checks nothing of x; tests/lib/unchecked.py finds
# that shape (outside guards such as `[ -n "$x" ] && y=1`).
@test "no test asserts with an unchecked 'a && b' in its body" {
	run "$PY" "$COLLX_ROOT"/tests/lib/unchecked.py "$COLLX_ROOT"/tests/*.bats
	echo "$output"
	[ "$status" -eq 0 ]
	[ "$output" = "" ]
}

@test "unchecked.py finds an 'a && b' bats would not check, and lets the checked shapes be" {
	# (@test at a line's start would be bats' own, even in a heredoc)
	sed 's/^TEST/@test/' >t.bats <<'EOF'
TEST "one" {
	x=$(true && echo 1)
	run sh -c 'true && false'
	if [ -e a ] && [ -e b ]; then echo; fi
	[[ -n "$x" && -z "" ]]
	[ -n "$x" ] && y=1
	for f in a b; do [ "$f" = a ] && continue; done
	[ -e a ] && [ -e b ] || { echo both; false; }
	pyx "
a = 1 if b && c else 2"
	cat <<EOT
[ -e a ] && [ -e b ]
EOT
	[ -e a ] && # first
	    [ -e b ]
	grep -q x a && grep -q x b
	[ -e a ] && [ -e b ]
}
EOF
	run "$PY" "$COLLX_ROOT"/tests/lib/unchecked.py t.bats
	echo "$output"
	[ "$status" -eq 1 ]
	[ "${#lines[@]}" -eq 2 ]
	[ "${lines[0]}" = "t.bats:14: [ -e a ] && [ -e b ]" ]
	[ "${lines[1]}" = "t.bats:16: grep -q x a && grep -q x b" ]
}
