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
