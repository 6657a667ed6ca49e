#!/usr/bin/env bash
# ctest ceph_dev_script: scripts/ceph-dev.sh end to end on a memstore cluster in a temporary
# directory, on a free monitor port: start (and start again: already running), status, env,
# an rbd image, a rados object written and read back (also by the client.ulp-gw key and across
# restart-osd), stop, and then no process of that cluster left; a second start wipes the
# first cluster's data. Any problem fails the test with a message and the daemons' log tails.
#
#   bash tests/ceph/ceph_dev_test.sh scripts/ceph-dev.sh
set -euo pipefail
script=${1:?usage: ceph_dev_test.sh PATH/TO/ceph-dev.sh}
[[ -x $script ]] || script="bash $script"

say() { echo "ceph_dev_test: $*"; }
failure=
fail() {
	failure=$*
	echo "ceph_dev_test: FAIL: $*" >&2
	exit 1
}
now_ms() { echo $(($(date +%s%N) / 1000000)); }
# shellcheck disable=SC2086 # $script may be "bash PATH"
dev() { timeout 120 $script "$@" --dir "$dir"; }

dir=$(mktemp -d /tmp/ulp-ceph-test.XXXXXX)
unset CEPH_ARGS CEPH_KEYRING CEPH_CONF

# A free port for the monitor, so that this test runs beside a developer's default cluster.
port=
for ((i = 0; i < 100; i++)); do
	p=$((20000 + ($$ * 7 + i * 13) % 10000))
	if ! (: </dev/tcp/127.0.0.1/"$p") 2>/dev/null; then
		port=$p
		break
	fi
done
[[ -n $port ]] || fail "no free port found"

# ours: the live processes started with -c $dir/ceph.conf (a zombie has no cmdline).
ours() {
	local p args i
	for p in /proc/[0-9]*; do
		mapfile -d '' args 2>/dev/null <"$p/cmdline" || continue
		for ((i = 1; i + 1 < ${#args[@]}; i++)); do
			if [[ ${args[i]} == -c && ${args[i + 1]} == "$dir/ceph.conf" ]]; then
				echo "${p#/proc/} ${args[*]}"
				break
			fi
		done
	done
}

cleanup() {
	local rc=$? left f
	trap - EXIT
	if [[ -e $dir/ceph.conf ]]; then
		dev stop --timeout 10 >/dev/null 2>&1 || true
	fi
	left=$(ours)
	if [[ -n $left ]]; then
		echo "ceph_dev_test: FAIL: processes of $dir left after stop:" >&2
		echo "$left" >&2
		# ours alone, by PID: they run with this test's own $dir/ceph.conf
		# shellcheck disable=SC2046
		kill -KILL $(awk '{print $1}' <<<"$left") 2>/dev/null || true
		rc=1
	fi
	if ((rc)); then
		for f in "$dir"/log/*.out "$dir"/log/mon.a.log "$dir"/log/osd.0.log; do
			[[ -s $f ]] || continue
			echo "---- tail of $f (log lines only: memstore dumps JSON on unmount)" >&2
			grep -E '^[0-9]{4}-' "$f" | tail -n 30 >&2
		done
		echo "ceph_dev_test: FAILED (rc $rc)${failure:+: $failure}" >&2
	else
		say "PASS"
	fi
	rm -rf "$dir"
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 143' TERM INT # through cleanup: the daemons live in their own sessions

# bounded client calls on the test's cluster (CEPH_CONF from env)
rbd_() { timeout 30 rbd --client-mount-timeout 10 "$@"; }
rados_() { timeout 30 rados --client-mount-timeout 10 "$@"; }

out=$(dev --help) || fail "--help exits non-zero"
for word in start stop status env restart-osd --store --auth --port --keep; do
	grep -q -- "$word" <<<"$out" || fail "--help does not mention $word"
done

say "start in $dir on port $port"
t0=$(now_ms)
dev start --port "$port" --timeout 60 || fail "start failed"
say "start took $(($(now_ms) - t0)) ms"

out=$(dev status) || fail "status exits non-zero on a running cluster: $out"
grep -q 'mon.a running' <<<"$out" || fail "status does not say mon.a running: $out"
grep -q 'osd.0 running' <<<"$out" || fail "status does not say osd.0 running: $out"
out=$(dev start) || fail "start on a running cluster exits non-zero: $out"
grep -q 'already running' <<<"$out" || fail "start on a running cluster does not say so: $out"

out=$(dev env) || fail "env failed"
eval "$out"
[[ $ULP_CEPH_DIR == "$dir" ]] || fail "env: ULP_CEPH_DIR=$ULP_CEPH_DIR, not $dir"
[[ $CEPH_CONF == "$dir/ceph.conf" && -s $CEPH_CONF ]] || fail "env: bad CEPH_CONF=$CEPH_CONF"
[[ -s $CEPH_KEYRING ]] || fail "env: no keyring at CEPH_KEYRING=$CEPH_KEYRING"
[[ $ULP_CEPH_CLIENT == ulp-gw && -s $ULP_CEPH_GW_KEYRING ]] || fail "env: bad gateway client"
[[ $ULP_CEPH_MON_HOST == "v2:127.0.0.1:$port" ]] || fail "env: ULP_CEPH_MON_HOST=$ULP_CEPH_MON_HOST"
[[ $ULP_CEPH_POOL == rbd ]] || fail "env: ULP_CEPH_POOL=$ULP_CEPH_POOL"
grep -q "127.0.0.1:$port" "$CEPH_CONF" || fail "ceph.conf does not use port $port"

rbd_ create "$ULP_CEPH_POOL/ulp-test" --size 64M || fail "rbd create failed"
rbd_ ls "$ULP_CEPH_POOL" | grep -qx ulp-test || fail "rbd ls does not list ulp-test"
rbd_ info "$ULP_CEPH_POOL/ulp-test" | grep -q 'size 64 MiB' || fail "rbd info: wrong size"
rbd_ --id "$ULP_CEPH_CLIENT" --keyring "$ULP_CEPH_GW_KEYRING" ls "$ULP_CEPH_POOL" | grep -qx ulp-test ||
	fail "client.ulp-gw cannot list the pool"

head -c 1048576 /dev/urandom >"$dir/obj.in"
rados_ -p "$ULP_CEPH_POOL" put ulp-test-obj "$dir/obj.in" || fail "rados put failed"
rados_ -p "$ULP_CEPH_POOL" get ulp-test-obj "$dir/obj.out" || fail "rados get failed"
cmp "$dir/obj.in" "$dir/obj.out" || fail "rados get returned other data"

say "restart-osd"
dev restart-osd --timeout 60 || fail "restart-osd failed"
rm -f "$dir/obj.out"
rados_ -p "$ULP_CEPH_POOL" get ulp-test-obj "$dir/obj.out" || fail "rados get after restart-osd failed"
cmp "$dir/obj.in" "$dir/obj.out" || fail "the object changed across restart-osd"

pids=$(cat "$dir/run/mon.a.pid" "$dir/run/osd.0.pid")
say "stop (daemons $(echo "$pids" | xargs))"
dev stop --timeout 20 || fail "stop failed"
if out=$(dev status 2>&1); then
	fail "status exits 0 after stop: $out"
fi
left=$(ours)
[[ -z $left ]] || fail "processes of $dir left after stop: $left"
for pid in $pids; do
	if [[ -e /proc/$pid && $(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null) != Z ]]; then
		fail "daemon $pid still alive after stop"
	fi
done
[[ ! -e $dir/run/mon.a.pid && ! -e $dir/run/osd.0.pid ]] || fail "PID files left after stop"

say "start again: a fresh cluster"
dev start --port "$port" --timeout 60 || fail "second start failed"
[[ -z $(rbd_ ls "$ULP_CEPH_POOL") ]] || fail "second start kept the first cluster's images"
dev stop --timeout 20 || fail "second stop failed"
[[ -z $(ours) ]] || fail "processes of $dir left after the second stop"
