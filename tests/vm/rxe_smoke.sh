#!/bin/bash
# The vm label's smoke test; runs INSIDE the rxe VM (tests/vm/CMakeLists.txt starts it
# through tools/vm/run). Proves the harness gives a working verbs device: rxe0's port is
# ACTIVE, and a loopback ib_write_bw (perftest) server+client pair on rxe0 completes.
# Every step is bounded; the Gb/s figure says nothing about hardware (TCG, soft CRC).
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
