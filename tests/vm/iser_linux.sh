#!/usr/bin/env bash
# tests/vm/iser_linux.sh ULP_TARGETD - ulp-targetd's iSER target against the Linux iSER
# initiator (open-iscsi + ib_iser), INSIDE the rxe VM (ctest vm_iser_linux starts it
# through tools/vm/run). Both ends share rxe0 and 10.99.0.1.
#
# What it proves, each step bounded and checked:
#   1. login; both LUNs (ram 64M, file 32M) appear as sd disks of the right size;
#   2. fio with crc32c verify: 4K and 128K random writes read back and checked, on both
#      LUNs, concurrently (the "baseline" regions);
#   3. two rounds of logout while fio writes elsewhere on both LUNs (4K, then 128K), then
#      login again: the logout must succeed, fio must end, the target must close the
#      session, and the baseline data must read back intact after the new login (a third,
#      4K again, repeated the first: 21 s of the VM's time for nothing new);
#   4. LU RESET and TARGET WARM RESET while fio writes with verify: the LU reset is
#      answered; the target reset is not supported (RFC 7143 11.5.1), so the initiator
#      drops the session and logs in again (session recovery). fio must not see an error
#      and its verify must pass: every write lost on the way was retried;
#   5. the target killed (SIGKILL) while fio writes with verify on the file LUN, and
#      restarted on the same file: the initiator reconnects by itself, fio completes
#      without error, and the file LUN's baseline data is intact;
#   6. logout, SIGINT: ulp-targetd exits 0 within its shutdown bound, and neither run of
#      it logged a leak ("left allocated", "still in use", "leak"); the guest kernel
#      logged no BUG/WARNING/Oops.
# On any failure: the reason, then the tails of the target's log, iscsid's log and dmesg.
set -euo pipefail

targetd=${1:?usage: iser_linux.sh ULP_TARGETD}
[[ ${ULP_IN_VM:-} == 1 ]] || { echo "iser_linux: run me inside the VM (tools/vm/run)"; exit 2; }
for t in iscsid iscsiadm fio sg_reset; do
	command -v $t >/dev/null || { echo "iser_linux: $t missing (open-iscsi, fio, sg3-utils)"; exit 1; }
done

iqn=iqn.2026-11.org.ulp:vm-iser
portal=10.99.0.1:3260
work=/tmp/iser-linux # the guest's tmpfs overlay: gone when the VM powers off
mkdir -p "$work"
tlog=$work/targetd.log
ilog=$work/iscsid.log
lun1_img=$work/lun1.img
t_start=$SECONDS
tpid='' ipid='' fpid=''
lun0_sectors=131072 lun1_sectors=65536 # 512-byte sectors: 64 MiB and 32 MiB
# shellcheck source=tests/vm/iscsi_initiator.sh
source "$(dirname "${BASH_SOURCE[0]}")/iscsi_initiator.sh"

note() { printf 'iser_linux [%3ds]: %s\n' $((SECONDS - t_start)) "$*"; }
dump() {
	echo "--- ulp-targetd log (tail)"
	tail -n 60 "$tlog" 2>/dev/null || true
	echo "--- iscsid log (tail)"
	tail -n 30 "$ilog" 2>/dev/null || true
	echo "--- dmesg (tail)"
	dmesg | tail -n 50
	keep_logs
}
# Every log, for a --share run (tools/vm/run --share DIR keeps /run/ulp-vm).
keep_logs() {
	if [[ -d /run/ulp-vm ]]; then
		mkdir -p /run/ulp-vm/iser_linux
		cp "$work"/*.log /run/ulp-vm/iser_linux/ 2>/dev/null || true
		dmesg >/run/ulp-vm/iser_linux/dmesg.log || true
	fi
}
fail() {
	echo "iser_linux: FAIL [$((SECONDS - t_start))s]: $*"
	dump
	exit 1
}
cleanup() {
	# Keeps the script's status: nothing here may fail it (errexit applies in traps).
	set +e
	# Only what we started, by pid; the VM powers off after us anyway.
	# fpid is a `timeout` running fio, whose job processes lead groups of their own.
	[[ -n $fpid ]] && kill -KILL "$fpid" 2>/dev/null && pkill -KILL -x fio
	timeout 20 iscsiadm -m node -T $iqn -p $portal --logout >/dev/null 2>&1
	[[ -n $ipid ]] && kill -TERM "$ipid" 2>/dev/null
	[[ -n $tpid ]] && kill -KILL "$tpid" 2>/dev/null
	return 0
}
trap cleanup EXIT

# ---- the target -----------------------------------------------------------------------------

# LUN 0 in RAM; LUN 1 a file on the guest's tmpfs (no O_DIRECT there before 6.6: the
# backstore falls back to the page cache). A file LUN outlives the daemon: step 5.
start_targetd() {
	rm -f "$work/port"
	"$targetd" --iser-portal $portal --rdma-device rxe0 --target $iqn \
		--lun 0:ram:size=64M --lun "1:file:path=$lun1_img,size=32M" \
		--ready-fd 9 9>"$work/port" 2>>"$tlog" &
	tpid=$!
	for _ in $(seq 300); do # bounded: 30 s (TCG)
		[[ -s $work/port ]] && break
		kill -0 $tpid 2>/dev/null || fail "ulp-targetd exited during start-up"
		sleep 0.1
	done
	[[ $(cat "$work/port" 2>/dev/null) == 3260 ]] || fail "ulp-targetd not listening after 30 s"
}
count_log() { grep -c -- "$1" "$tlog" || true; }

# ---- the initiator --------------------------------------------------------------------------

start_targetd
note "ulp-targetd listening on $portal (rxe0)"
iscsi_start
iscsi_node_new iser
# Every session the target opened must be closed by it (bounded: 15 s, TCG).
wait_sessions_closed() {
	local logins closed
	for _ in $(seq 150); do
		logins=$(count_log ' login: ')
		closed=$(count_log 'session closed: ')
		((logins == closed)) && return 0
		sleep 0.1
	done
	fail "$1: the target logged $logins logins but closed $closed sessions"
}

# ---- fio ------------------------------------------------------------------------------------

# Verified writes: every block carries a crc32c and its own offset (misplaced or stale
# data fails), the first failure is fatal, and fio's status says so. libaio + O_DIRECT, so
# every I/O reaches the target. Each job writes its region once (randommap) and reads it
# back; --verify_only later replays the same job (same seeds: randrepeat) and only reads.
fio_common=(--ioengine=libaio --direct=1 --verify=crc32c --do_verify=1 --verify_fatal=1
	--randrepeat=1)
# fio's status and every job's "err= 0" line: $1 the log, $2 the status.
fio_ok() { (($2 == 0)) && grep -q 'err= 0' "$1" && ! grep -qE 'err= *[1-9]' "$1"; }
# The baseline regions: 4K on [0, 2M) and 128K on [8M, 12M) of each LUN; four jobs at
# once (TCG: a few hundred 4K IOPS each). Set after each login (the disks' names). LUN 1's
# jobs first: fio seeds each job by its position, and step 5 replays them alone.
set_baseline_jobs() {
	jobs=(--name=l1-4k "--filename=$dev1" --rw=randwrite --bs=4k --iodepth=16 --offset=0 --size=2M
		--name=l1-128k "--filename=$dev1" --rw=randwrite --bs=128k --iodepth=4 --offset=8M --size=4M
		--name=l0-4k "--filename=$dev0" --rw=randwrite --bs=4k --iodepth=16 --offset=0 --size=2M
		--name=l0-128k "--filename=$dev0" --rw=randwrite --bs=128k --iodepth=4 --offset=8M --size=4M)
}
# $1: what (for messages), $2: the timeout; the rest: fio's job arguments.
run_fio() {
	local what=$1 limit=$2
	shift 2
	local rc=0
	timeout -k 5 "$limit" fio "${fio_common[@]}" "$@" >"$work/fio-$what.log" 2>&1 || rc=$?
	if ! fio_ok "$work/fio-$what.log" $rc; then
		tail -n 40 "$work/fio-$what.log"
		((rc == 124)) && fail "fio $what: still running after $limit s"
		fail "fio $what: status $rc"
	fi
	note "fio $what: ok ($(grep -hoE '(read|write): IOPS=[^,]*' "$work/fio-$what.log" | tr '\n' ' '))"
}
# Writes in the background until the session goes away (or 60 s pass): the scratch
# regions [24M, 64M) of LUN 0 and [16M, 32M) of LUN 1. No verify: these end in errors.
start_scratch_io() {
	local bs=$1
	timeout -k 5 90 fio --ioengine=libaio --direct=1 --time_based --runtime=60 \
		--name=s0 --filename=$dev0 --rw=randwrite --bs=$bs --iodepth=16 --offset=24M --size=40M \
		--name=s1 --filename=$dev1 --rw=randrw --bs=$bs --iodepth=16 --offset=16M --size=16M \
		>"$work/fio-scratch.log" 2>&1 &
	fpid=$!
}
# Completed writes of a disk (/sys/block/X/stat field 5).
writes_done() { awk '{ print $5 }' "/sys/block/$(basename "$1")/stat"; }
# Wait until fio has completed at least $2 more writes on $1 (bounded: 30 s).
wait_io_running() {
	local dev=$1 want=$(($(writes_done "$1") + $2))
	for _ in $(seq 300); do
		(($(writes_done "$dev") >= want)) && return 0
		kill -0 "$fpid" 2>/dev/null || { cat "$work/fio-scratch.log"; fail "background fio ended early"; }
		sleep 0.1
	done
	fail "background fio did not write $2 blocks to $dev in 30 s"
}
# The disruption must hit running I/O, or the step proves nothing.
still_running() {
	kill -0 "$fpid" 2>/dev/null || fail "fio ended before $1: give it a larger region"
}
wait_fio_gone() {
	local rc=0
	for _ in $(seq 300); do # bounded: 30 s after the logout
		kill -0 "$fpid" 2>/dev/null || break
		sleep 0.1
	done
	kill -0 "$fpid" 2>/dev/null && { tail "$work/fio-scratch.log"; fail "fio still running 30 s after $1"; }
	wait "$fpid" || rc=$?
	fpid=''
	note "background fio ended with status $rc after $1 (errors expected: the disks went away)"
}

# ---- 1, 2: login, verified writes -----------------------------------------------------------

iscsi_login "first"
set_baseline_jobs
run_fio baseline-write 120 "${jobs[@]}"
run_fio baseline-check 120 --verify_only "${jobs[@]}"

# ---- 3: logout while I/O runs, twice ---------------------------------------------------------

for round in 1 2; do
	bs=$([[ $round == 2 ]] && echo 128k || echo 4k)
	start_scratch_io $bs
	wait_io_running $dev0 100
	wait_io_running $dev1 20
	still_running "the logout"
	iscsi_logout "round $round, $bs I/O running"
	note "round $round: logged out while $bs I/O ran"
	wait_fio_gone "logout"
	wait_sessions_closed "round $round"
	iscsi_login "round $round"
	set_baseline_jobs
	run_fio "round$round-check" 120 --verify_only "${jobs[@]}"
done

# ---- 4: LU RESET and TARGET WARM RESET while verified writes run -----------------------------

logins_before=$(count_log ' login: ')
timeout -k 5 150 fio "${fio_common[@]}" --verify_backlog=256 \
	--name=r0 --filename=$dev0 --rw=randwrite --bs=4k --iodepth=16 --offset=24M --size=8M \
	--name=r1 --filename=$dev1 --rw=randwrite --bs=64k --iodepth=8 --offset=16M --size=8M \
	>"$work/fio-resets.log" 2>&1 &
fpid=$!
wait_io_running $dev0 200
timeout -k 5 60 sg_reset --device $dev0 >"$work/sg_reset.out" 2>&1 ||
	{ cat "$work/sg_reset.out"; fail "LU RESET of $dev0 failed"; }
note "LU RESET of LUN 0 answered while fio ran"
wait_io_running $dev0 200
# The initiator's target reset: Function not supported, so it escalates to a session reset
# (iscsi_eh_session_reset) and iscsid logs in again. sg_reset's own status follows the
# escalation's outcome, which depends on timing: not checked; the relogin is.
still_running "the target reset"
timeout -k 5 90 sg_reset --target $dev0 >"$work/sg_reset.out" 2>&1 || true
note "TARGET WARM RESET: $(tr '\n' ' ' <"$work/sg_reset.out")"
for _ in $(seq 300); do # bounded: 30 s
	(($(count_log ' login: ') > logins_before)) && break
	sleep 0.1
done
(($(count_log ' login: ') > logins_before)) || fail "no new login after the target reset escalated"
rc=0
wait $fpid || rc=$?
fpid=''
if ! fio_ok "$work/fio-resets.log" $rc; then
	tail -n 40 "$work/fio-resets.log"
	fail "fio across the resets: status $rc"
fi
note "fio across LU reset + session recovery: ok"
# The session was re-established, not replaced: the same disks, still there.
[[ -b $dev0 && $(iscsi_disk_of 0) == "$(basename $dev0)" ]] || fail "LUN 0's disk changed across session recovery"
run_fio resets-check 120 --verify_only "${jobs[@]}"

# ---- 5: the target killed and restarted under verified writes --------------------------------

timeout -k 5 150 fio "${fio_common[@]}" --verify_backlog=256 \
	--name=k1 --filename=$dev1 --rw=randwrite --bs=4k --iodepth=16 --offset=16M --size=8M \
	>"$work/fio-kill.log" 2>&1 &
fpid=$!
wait_io_running $dev1 300
# Only LUN 1 (a file) carries data across this: LUN 0's RAM goes with the process.
still_running "the kill"
kill -KILL $tpid
wait $tpid || true
echo "--- (ulp-targetd killed with SIGKILL; restarted)" >>"$tlog"
cp "$tlog" "$work/targetd-first.log"
: >"$tlog"
note "ulp-targetd killed while fio wrote to LUN 1"
sleep 2 # the initiator notices while no one listens: its reconnect attempts fail first
start_targetd
note "ulp-targetd restarted"
rc=0
wait $fpid || rc=$?
fpid=''
if ! fio_ok "$work/fio-kill.log" $rc; then
	tail -n 40 "$work/fio-kill.log"
	fail "fio across the target's restart: status $rc"
fi
note "fio across the target's restart: ok"
(($(count_log ' login: ') >= 1)) || fail "the initiator did not log in to the restarted target"
# The baseline jobs of LUN 1 only: the first two (7 words each), so the same seeds.
run_fio kill-check-lun1 120 --verify_only "${jobs[@]:0:14}"
# The new process serves LUN 0 too (fresh RAM): a verified write.
run_fio after-restart-lun0 120 \
	--name=n0 --filename=$dev0 --rw=randwrite --bs=4k --iodepth=16 --offset=0 --size=4M

# ---- 6: clean logout, SIGINT, bounded exit, no leaks ----------------------------------------

iscsi_logout "final"
wait_sessions_closed "final"
kill -INT $tpid
# ulp-targetd's whole shutdown bound is 15 s (shutdown_timeout_ms); 25 s under TCG.
for _ in $(seq 250); do
	kill -0 $tpid 2>/dev/null || break
	sleep 0.1
done
kill -0 $tpid 2>/dev/null && fail "ulp-targetd still running 25 s after SIGINT"
rc=0
wait $tpid || rc=$?
tpid=''
((rc == 0)) || fail "ulp-targetd exited with status $rc after SIGINT"
grep -q 'ulp-targetd: stopped' "$tlog" || fail "no 'stopped' line after SIGINT"
if grep -E -i 'left allocated|still in use|leak' "$work/targetd-first.log" "$tlog"; then
	fail "ulp-targetd logged a leak"
fi
if dmesg | grep -E 'BUG:|WARNING:|Oops|general protection|hung_task|blocked for more than'; then
	fail "the guest kernel complained"
fi
sessions=$(($(grep -c ' login: ' "$work/targetd-first.log") + $(count_log ' login: ')))
keep_logs
note "passed: $sessions sessions, ulp-targetd stopped cleanly"
