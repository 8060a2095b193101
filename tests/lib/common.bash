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

# A TCP port nobody listens on now, outside the kernel's ephemeral range:
# one from inside it could be taken, before rank 0 binds it, by another
# rank's listener or outgoing connection (collx-run chooses the same way).
free_port() {
	"$PY" -c '
import random, socket
lo, hi = map(int, open("/proc/sys/net/ipv4/ip_local_port_range").read().split())
ports = list(range(10240, lo)) + list(range(hi + 1, 65536))
for p in random.sample(ports, len(ports)):
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", p))
        except OSError:
            continue
    print(p)
    break
'
}

# The long options a man page documents in its lists: the long options of
# its ".It" lines that hold a flag (".It Fl \-name", ".It Fl m , \-name",
# ".It Cm diff Oo Fl -rtol"), with those of the section COLLECTIVE PROGRAMS of
# collx(7) when the page refers to it: the five collective programs
# document their common options there once. An option on neither page is
# missing.
man_long_options() {
	{
		grep -E '^\.It .*Fl' "$1"
		if grep -q 'COLLECTIVE PROGRAMS' "$1"; then
			awk '/^\.Sh /{p = ($0 == ".Sh COLLECTIVE PROGRAMS")} p' \
			    "$COLLX_ROOT/man/man7/collx.7" | grep -E '^\.It .*Fl'
		fi
	} | grep -oE '(^| )\\?-\\?-?[a-z][a-z0-9\\-]+' |
	    sed 's/^ //; s/\\//g; s/^-*/--/' | sort -u
}

# The rendered text of man page $1, and of the section COLLECTIVE PROGRAMS
# of collx(7) when the page refers to it.
man_page_text() {
	mandoc -Tascii "$1" | col -b
	if grep -q 'COLLECTIVE PROGRAMS' "$1"; then
		mandoc -Tascii "$COLLX_ROOT/man/man7/collx.7" | col -b |
		    awk '/^[A-Z][A-Z ]+$/{p = ($0 == "COLLECTIVE PROGRAMS")} p'
	fi
}

# bin/ here holding collx-bench beside a collx-dp that logs each run's
# options to dp.log, then runs the real one: collx-bench runs the
# collx-dp beside it.
bench_logging_dp() {
	mkdir bin
	cp "$COLLX_BIN/collx-bench" bin/
	ln -s "$COLLX_BIN/collx-run" "$COLLX_BIN/collx-tensor" bin/
	printf '#!/bin/sh\necho "$*" >>%s/dp.log\nexec %s "$@"\n' "$PWD" \
	    "$COLLX_BIN/collx-dp" >bin/collx-dp
	chmod +x bin/collx-dp
}

# The pid of rank R among the ranks collx-run RUN started.
rank_pid() {
	local p
	for p in $(pgrep -P "$1"); do
		if tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null |
		    grep -qx "COLLX_RANK=$2"; then
			echo "$p"
			return 0
		fi
	done
	return 1
}

# usage_refused PROG ARGS...: PROG with ARGS is a usage error: exit 2,
# one line naming the program and the --help hint, no out.safetensors.
usage_refused() {
	local prog=$1
	shift
	run timeout 30 "$prog" "$@"
	[ "$status" -eq 2 ]
	[[ "${lines[0]}" == "$prog: "* ]]
	[ "${lines[1]}" = "Try '$prog --help'." ]
	[ "${#lines[@]}" -eq 2 ]
	[ ! -e out.safetensors ]
}
