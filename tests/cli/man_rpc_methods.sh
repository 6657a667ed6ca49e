#!/usr/bin/env bash
# tests/cli/man_rpc_methods.sh ULP_TARGETD ULPCTL PAGE - ulpctl.8's RPC METHODS lists
# exactly the methods a running daemon offers: it starts ulp-targetd (a null LUN on a
# loopback port of the kernel's choosing, its admin socket and state in a temporary
# directory) and compares `ulpctl methods` with the page's entries. A method added to the
# daemon without its entry, or an entry for one that is gone, fails here.
set -euo pipefail
targetd=${1:?usage: man_rpc_methods.sh ULP_TARGETD ULPCTL PAGE}
ulpctl=${2:?}
page=${3:?}
work=$(mktemp -d)
pid=''
cleanup()
{
	if [[ -n $pid ]]; then
		kill -TERM "$pid" 2>/dev/null
		wait "$pid" 2>/dev/null
	fi
	rm -rf "$work"
}
trap cleanup EXIT

# --state-dir: not the system's /var/lib/ulp-targetd, which the daemon would create.
"$targetd" --portal 127.0.0.1:0 --lun 0:null:size=1M --admin-socket "$work/admin.sock" \
	--state-dir "$work/state" --ready-fd 3 3>"$work/ready" 2>"$work/log" &
pid=$!
for _ in $(seq 100); do
	[[ -s $work/ready ]] && break
	kill -0 "$pid" 2>/dev/null || break
	sleep 0.1
done
[[ -s $work/ready ]] || {
	echo "FAIL: ulp-targetd did not start:" >&2
	cat "$work/log" >&2
	exit 1
}

# `ulpctl methods`: "name: what it does" at the line's start, its parameters indented.
daemon=$("$ulpctl" --socket "$work/admin.sock" methods | sed -n 's/^\([a-z_]*\): .*/\1/p' |
	sort)
# The page: the tag of each .TP entry in the section RPC METHODS.
documented=$(awk '/^\.SH RPC METHODS/ { s = 1; next } /^\.SH/ { s = 0 }
	s && prev ~ /^\.TP/ { print $2 } { prev = $0 }' "$page" | sort)
[[ -n $daemon ]] || {
	echo "FAIL: ulpctl methods listed nothing" >&2
	exit 1
}
if [[ $daemon != "$documented" ]]; then
	echo "FAIL: $(basename "$page")'s RPC METHODS differ from the daemon's (< daemon, > page):" >&2
	diff <(echo "$daemon") <(echo "$documented") >&2 || true
	exit 1
fi
echo "PASS: $(basename "$page") lists the daemon's $(wc -l <<<"$daemon") RPC methods"
