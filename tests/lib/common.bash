# Shared set-up for the bats suites: programs from $COLLX_BIN first on PATH,
# a private scratch directory, and a free port for rendezvous.
COLLX_ROOT=$(cd "$BATS_TEST_DIRNAME/.." && pwd)
export COLLX_BIN=${COLLX_BIN:-$COLLX_ROOT/bin}
export PATH="$COLLX_BIN:$PATH"
FIXTURES=$COLLX_ROOT/tests/fixtures
# The distribution's interpreter, where python3-numpy and python3-torch
# install (the first python3 on PATH may be a shim without them).
PY=/usr/bin/python3

# need WHAT CMD...: the test needs CMD to succeed (a test dependency that
# `make deps` installs). Missing, it skips on a developer's machine and
# fails under CI (CI=true), so a green CI means every test ran.
need() {
	local what=$1
	shift
	"$@" >/dev/null 2>&1 && return 0
	if [ "${CI:-}" = true ]; then
		echo "missing test dependency: $what (make deps installs it)" >&2
		return 1
	fi
	skip "missing $what (make deps installs it)"
}

common_setup() {
	T=$(mktemp -d "${BATS_TMPDIR:-/tmp}/collx.XXXXXX")
	cd "$T" || return 1
}

common_teardown() {
	cd / && rm -rf "$T"
}

# A TCP port nobody listens on now (the kernel's choice, then released).
free_port() {
	"$PY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}
