#!/usr/bin/env bats
# Library users: `make install` puts libcomm.a, its headers and collx.pc
# under PREFIX; a C program builds against them through pkg-config alone
# and runs an allreduce on two ranks; uninstall removes it all again. Only
# the API's headers are installed, and the library keeps to its rooms
# (lib/README): every symbol with its module's prefix, no include upward.
load lib/common

setup() {
	common_setup
	need pkg-config command -v pkg-config
}

teardown() {
	common_teardown
}

@test "install: collx.pc, libcomm.a and headers; examples/allreduce.c builds and runs on 2 ranks" {
	# the plain build, even under `make check SANITIZE=...` (whose
	# MAKEFLAGS and environment would install the sanitizer's library)
	run timeout 600 env -u MAKEFLAGS -u MAKELEVEL -u MFLAGS -u SANITIZE -u O make -s -C "$COLLX_ROOT" \
	    install PREFIX="$T/prefix"
	echo "$output"
	[ "$status" -eq 0 ]
	[ -f "$T/prefix/lib/pkgconfig/collx.pc" ]
	[ -f "$T/prefix/lib/libcomm.a" ]
	[ -f "$T/prefix/include/collx/comm/coll.h" ]
	export PKG_CONFIG_PATH="$T/prefix/lib/pkgconfig"
	[[ "$(pkg-config --cflags collx)" == *"-I$T/prefix/include/collx"* ]]
	# only the installed copy: the example is built outside the tree
	cp "$COLLX_ROOT/examples/allreduce.c" "$T/"
	run timeout 120 sh -c "cc -std=c11 -Wall -Wextra -Werror -o '$T/allreduce' '$T/allreduce.c' \$(pkg-config --cflags --libs collx)"
	echo "$output"
	[ "$status" -eq 0 ]
	run timeout 60 collx-run -n 2 -- "$T/allreduce"
	echo "$output"
	[ "$status" -eq 0 ]
	[ "$(echo "$output" | sort)" = "$(printf 'rank 0 of 2: x[0] = 3, 0 wrong\nrank 1 of 2: x[0] = 3, 0 wrong')" ]
	run timeout 60 env -u MAKEFLAGS -u MAKELEVEL -u MFLAGS -u SANITIZE -u O make -s -C "$COLLX_ROOT" \
	    uninstall PREFIX="$T/prefix"
	[ "$status" -eq 0 ]
	[ -z "$(find "$T/prefix" -type f)" ]
}

@test "every symbol libcomm.a exports carries its module's prefix" {
	local lib=$COLLX_BIN/../lib/libcomm.a bad
	[ -f "$lib" ] || lib=$COLLX_ROOT/lib/libcomm.a
	# (names from "__" are the compiler's, a sanitizer's say)
	bad=$(nm -g --defined-only "$lib" | awk 'NF == 3 && $3 !~ /^__/ { print $3 }' |
	    grep -Ev '^(cli|tensor|dtype|comm|auth|coll|ps|nn|train|dp|ckpt|tp|ulysses|pipe|mesh|cp|ep|trainopt|dpopt|dpcli|meshopt|trainer|tplayer|pscmd|progress|collcli|collref|launch|linetag|bench|chart|prog)_' || true)
	echo "without a module prefix: $bad"
	[ -z "$bad" ]
}

@test "install: only the API's headers, each compiling alone from the install; no folder's private header, none of the program layer" {
	local h inc bad=() n=0
	run timeout 600 env -u MAKEFLAGS -u MAKELEVEL -u MFLAGS -u SANITIZE -u O make -s -C "$COLLX_ROOT" \
	    install PREFIX="$T/prefix"
	echo "$output"
	[ "$status" -eq 0 ]
	inc=$T/prefix/include/collx
	export PKG_CONFIG_PATH="$T/prefix/lib/pkgconfig"
	# the compiler sees the install alone, not the tree's lib/
	for h in $(cd "$inc" && find . -name '*.h' | sed 's|^\./||' | sort); do
		n=$((n + 1))
		case $h in
		*_int.h | *_impl.h | cli/cli.h | prog/* | launch/* | bench/* | chart/*)
			bad+=("$h (private or program layer)") ;;
		esac
		if head -n 3 "$inc/$h" | grep -Eqi 'internal|not part of the API'; then
			bad+=("$h (says it is internal)")
		fi
		printf '#include <%s>\nint main(void) { return 0; }\n' "$h" >"$T/one.c"
		if ! cc -std=c11 -D_GNU_SOURCE -Wall -Wextra -Werror -fsyntax-only \
		    $(pkg-config --cflags collx) "$T/one.c" 2>"$T/one.err"; then
			bad+=("$h (does not compile alone: $(head -n 1 "$T/one.err"))")
		fi
	done
	echo "installed: $n headers; wrong: ${bad[*]}"
	[ "${#bad[@]}" -eq 0 ]
	# the library's API, not its internals: about 15-20 headers
	[ "$n" -ge 12 ]
	[ "$n" -le 20 ]
	[ -f "$inc/tensor/tensor.h" ]
	[ -f "$inc/comm/coll.h" ]
	[ -f "$inc/nn/nn.h" ]
	[ -f "$inc/par/dp.h" ]
	[ ! -e "$inc/comm/sock.h" ]
	[ ! -e "$inc/tensor/format.h" ]
}

@test "rooms: no module of lib/ includes a header of a layer above its own or beside it, and below the programs only cli/util.h of lib/cli" {
	local f inc from to bad=()
	# lib/README's layers, bottom up; comm and nn, and the program rooms,
	# are beside each other and know nothing of each other
	declare -A level=([cli]=0 [tensor]=1 [comm]=2 [nn]=2 [par]=3 [prog]=4 [launch]=4 [bench]=4 [chart]=4)
	for f in "$COLLX_ROOT"/lib/*/*.[ch]; do
		from=${f%/*}
		from=${from##*/}
		[ -n "${level[$from]:-}" ] || bad+=("$from: a folder lib/README does not place")
		for inc in $(sed -nE 's/^#include "([a-z]+\/[a-z_]+\.h)".*/\1/p' "$f"); do
			to=${inc%%/*}
			if [ "$to" = "$from" ]; then
				continue
			fi
			if [ -z "${level[$to]:-}" ] || [ "${level[$to]}" -ge "${level[$from]}" ]; then
				bad+=("${f#"$COLLX_ROOT"/} includes $inc")
			elif [ "$to" = cli ] && [ "${level[$from]}" -lt 4 ] && [ "$inc" != cli/util.h ]; then
				bad+=("${f#"$COLLX_ROOT"/} includes $inc (the programs' part of lib/cli)")
			fi
		done
	done
	echo "reaching up or beside: ${bad[*]}"
	[ "${#bad[@]}" -eq 0 ]
}
