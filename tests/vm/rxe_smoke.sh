#!/bin/bash
# rxe_smoke.sh [ULP_TARGETD ULP_INITIATOR] - the vm label's smoke test; runs INSIDE the rxe
# VM (tests/vm/CMakeLists.txt starts it through tools/vm/run). Proves the harness gives a
# working verbs device: rxe0's port is ACTIVE, and a loopback ib_write_bw (perftest)
# server+client pair on rxe0 completes. Every step is bounded; the Gb/s figure says
# nothing about hardware (TCG, soft CRC).
#
# With the two programs: a memory registration past RLIMIT_MEMLOCK. The kernel pins an MR's
# pages within that limit unless the process has CAP_IPC_LOCK (ib_umem_get), which root
# has; so ulp-targetd runs without it in its bounding set and with `ulimit -l 1024`, and an
# SRP login from ulp-initiator must be refused (no hang, no crash) with the daemon's log
# naming RLIMIT_MEMLOCK and how to raise it.
set -euo pipefail

ibv_devinfo -d rxe0 | tee /tmp/devinfo | grep -E 'hca_id|transport|state|active_mtu'
grep -q PORT_ACTIVE /tmp/devinfo || { echo "FAIL: rxe0 port is not PORT_ACTIVE"; exit 1; }

# Server in the background; the client retries until the server listens (its start-up
# under TCG takes a moment). 1000 x 64 KiB writes: a few seconds at ~0.3 Gb/s.
args=(-d rxe0 --report_gbits -s 65536 -n 1000)
timeout 120 ib_write_bw "${args[@]}" >/tmp/server.log 2>&1 &
server=$!
for try in $(seq 30); do
	if timeout 120 ib_write_bw "${args[@]}" 10.99.0.1 >/tmp/client.log 2>&1; then break; fi
	grep -q "Couldn't connect" /tmp/client.log || { cat /tmp/client.log; echo "FAIL: ib_write_bw client"; exit 1; }
	((try < 30)) || { cat /tmp/client.log; echo "FAIL: no ib_write_bw server after 30 s"; exit 1; }
	sleep 1
done
wait "$server" || { cat /tmp/server.log; echo "FAIL: ib_write_bw server"; exit 1; }

# The result row: bytes, iterations, peak Gb/s, average Gb/s, Mpps.
read -r peak avg < <(awk '$1 == 65536 && $2 == 1000 { print $3, $4 }' /tmp/client.log) || true
[[ -n ${avg:-} ]] || { cat /tmp/client.log; echo "FAIL: no result row in ib_write_bw's output"; exit 1; }
echo "ib_write_bw on rxe0 (loopback, 64 KiB, eth0 MTU $(cat /sys/class/net/eth0/mtu)): $avg Gb/s average, $peak peak"

(($# == 2)) || exit 0
targetd=$1 initiator=$2
setpriv --bounding-set=-ipc_lock bash -c "ulimit -l 1024 && exec timeout 90 $targetd \
	--srp-portal 10.99.0.1:5556 --rdma-device rxe0 --lun 0:ram:size=16M" >/tmp/memlock-t.log 2>&1 &
tpid=$!
for _ in $(seq 150); do # bounded: 30 s
	grep -q "listening on 10.99.0.1:5556" /tmp/memlock-t.log && break
	kill -0 $tpid 2>/dev/null || { cat /tmp/memlock-t.log; echo "FAIL: ulp-targetd exited at start"; exit 1; }
	sleep 0.2
done
rc=0
timeout 60 "$initiator" --transport srp -p 10.99.0.1:5556 --rdma-device rxe0 -w randread -r 1 \
	>/tmp/memlock-i.log 2>&1 || rc=$?
# The daemon builds its data heap (256 MiB) on the first connection request and only then
# registers it: under TCG that can outlast the initiator's login timeout, so its line may
# come after the initiator gave up. Bounded: 60 s.
for _ in $(seq 300); do
	grep -q "RLIMIT_MEMLOCK" /tmp/memlock-t.log && break
	sleep 0.2
done
kill $tpid 2>/dev/null
trc=0
wait $tpid || trc=$?
if ((rc != 1)) || ((trc != 0)) || ! grep -q "locked-memory limit (RLIMIT_MEMLOCK) is 1048576 bytes" /tmp/memlock-t.log; then
	cat /tmp/memlock-t.log /tmp/memlock-i.log
	echo "FAIL: past RLIMIT_MEMLOCK: initiator exit $rc (want 1), ulp-targetd exit $trc (want 0), the log line naming the limit"
	exit 1
fi
echo "past RLIMIT_MEMLOCK: the login refused, the daemon says: $(grep -o "the locked-memory limit.*is [0-9]* bytes" /tmp/memlock-t.log | head -1)"
