#!/usr/bin/env bash
# ctest ceph_dev_script: scripts/ceph-dev.sh end to end on a memstore cluster in a temporary
# directory, on a free monitor port: start (and start again: already running), status, env,
# an rbd image, a rados object written and read back (also by the client.ulp-gw key and across
# restart-osd), stop, and then no process of that cluster left; a second start wipes the
# first cluster's data. Any problem fails the test with a message and the daemons' log tails.
# The plumbing (free port, process list, clean-up) is tests/ceph/cluster.sh's.
#
#   bash tests/ceph/ceph_dev_test.sh scripts/ceph-dev.sh
set -euo pipefail
script=${1:?usage: ceph_dev_test.sh PATH/TO/ceph-dev.sh}

# shellcheck source=SCRIPTDIR/cluster.sh
source "$(dirname "${BASH_SOURCE[0]}")/cluster.sh"
cluster_init ceph_dev_test "$script" ulp-ceph-test

now_ms() { echo $(($(date +%s%N) / 1000000)); }
cluster_free_port

out=$(ceph_dev --help) || fail "--help exits non-zero"
for word in start stop status env restart-osd --store --auth --port --keep; do
	grep -q -- "$word" <<<"$out" || fail "--help does not mention $word"
done

say "start in $cdir on port $port"
t0=$(now_ms)
ceph_dev start --port "$port" --timeout 60 || fail "start failed"
say "start took $(($(now_ms) - t0)) ms"

out=$(ceph_dev status) || fail "status exits non-zero on a running cluster: $out"
grep -q 'mon.a running' <<<"$out" || fail "status does not say mon.a running: $out"
grep -q 'osd.0 running' <<<"$out" || fail "status does not say osd.0 running: $out"
out=$(ceph_dev start) || fail "start on a running cluster exits non-zero: $out"
grep -q 'already running' <<<"$out" || fail "start on a running cluster does not say so: $out"

out=$(ceph_dev env) || fail "env failed"
eval "$out"
[[ $ULP_CEPH_DIR == "$cdir" ]] || fail "env: ULP_CEPH_DIR=$ULP_CEPH_DIR, not $cdir"
[[ $CEPH_CONF == "$cdir/ceph.conf" && -s $CEPH_CONF ]] || fail "env: bad CEPH_CONF=$CEPH_CONF"
[[ -s $CEPH_KEYRING ]] || fail "env: no keyring at CEPH_KEYRING=$CEPH_KEYRING"
[[ $ULP_CEPH_CLIENT == ulp-gw && -s $ULP_CEPH_GW_KEYRING ]] || fail "env: bad gateway client"
[[ $ULP_CEPH_MON_HOST == "v2:127.0.0.1:$port" ]] || fail "env: ULP_CEPH_MON_HOST=$ULP_CEPH_MON_HOST"
[[ $ULP_CEPH_POOL == rbd ]] || fail "env: ULP_CEPH_POOL=$ULP_CEPH_POOL"
grep -q "127.0.0.1:$port" "$CEPH_CONF" || fail "ceph.conf does not use port $port"

ceph_cli rbd create "$ULP_CEPH_POOL/ulp-test" --size 64M || fail "rbd create failed"
ceph_cli rbd ls "$ULP_CEPH_POOL" | grep -qx ulp-test || fail "rbd ls does not list ulp-test"
ceph_cli rbd info "$ULP_CEPH_POOL/ulp-test" | grep -q 'size 64 MiB' || fail "rbd info: wrong size"
ceph_cli rbd --id "$ULP_CEPH_CLIENT" --keyring "$ULP_CEPH_GW_KEYRING" ls "$ULP_CEPH_POOL" | grep -qx ulp-test ||
	fail "client.ulp-gw cannot list the pool"

head -c 1048576 /dev/urandom >"$work/obj.in"
ceph_cli rados -p "$ULP_CEPH_POOL" put ulp-test-obj "$work/obj.in" || fail "rados put failed"
ceph_cli rados -p "$ULP_CEPH_POOL" get ulp-test-obj "$work/obj.out" || fail "rados get failed"
cmp "$work/obj.in" "$work/obj.out" || fail "rados get returned other data"

say "restart-osd"
ceph_dev restart-osd --timeout 60 || fail "restart-osd failed"
rm -f "$work/obj.out"
ceph_cli rados -p "$ULP_CEPH_POOL" get ulp-test-obj "$work/obj.out" || fail "rados get after restart-osd failed"
cmp "$work/obj.in" "$work/obj.out" || fail "the object changed across restart-osd"

pids=$(cat "$cdir/run/mon.a.pid" "$cdir/run/osd.0.pid")
say "stop (daemons $(echo "$pids" | xargs))"
ceph_dev stop --timeout 20 || fail "stop failed"
if out=$(ceph_dev status 2>&1); then
	fail "status exits 0 after stop: $out"
fi
left=$(ours)
[[ -z $left ]] || fail "processes of $cdir left after stop: $left"
for pid in $pids; do
	if [[ -e /proc/$pid && $(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null) != Z ]]; then
		fail "daemon $pid still alive after stop"
	fi
done
[[ ! -e $cdir/run/mon.a.pid && ! -e $cdir/run/osd.0.pid ]] || fail "PID files left after stop"

say "start again: a fresh cluster"
ceph_dev start --port "$port" --timeout 60 || fail "second start failed"
[[ -z $(ceph_cli rbd ls "$ULP_CEPH_POOL") ]] || fail "second start kept the first cluster's images"
ceph_dev stop --timeout 20 || fail "second stop failed"
[[ -z $(ours) ]] || fail "processes of $cdir left after the second stop"
