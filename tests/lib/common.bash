# Shared set-up for the bats suites: programs from $COLLX_BIN first on PATH,
# a private scratch directory, and a free port for rendezvous.
COLLX_ROOT=$(cd "$BATS_TEST_DIRNAME/.." && pwd)
export COLLX_BIN=${COLLX_BIN:-$COLLX_ROOT/bin}
export PATH="$COLLX_BIN:$PATH"
FIXTURES=$COLLX_ROOT/tests/fixtures

common_setup() {
	T=$(mktemp -d "${BATS_TMPDIR:-/tmp}/collx.XXXXXX")
	cd "$T" || return 1
}

common_teardown() {
	cd / && rm -rf "$T"
}

# A TCP port nobody listens on now (the kernel's choice, then released).
free_port() {
	python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}
