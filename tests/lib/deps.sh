#!/bin/sh
# Install the Debian packages collx needs when any is missing.
# usage: deps.sh PACKAGE...   (apt-get as root; otherwise print the command)
missing=
for p in "$@"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'ok installed' ||
		missing="$missing $p"
done
[ -z "$missing" ] && exit 0
if [ "$(id -u)" -eq 0 ]; then
	echo "collx: installing$missing" >&2
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq >/dev/null &&
		apt-get install -y -qq --no-install-recommends $missing >/dev/null ||
		{ echo "collx: apt-get install$missing failed" >&2; exit 1; }
else
	echo "collx: missing packages; run: sudo apt-get install -y$missing" >&2
	exit 1
fi
