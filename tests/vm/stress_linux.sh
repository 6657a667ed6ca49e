#!/usr/bin/env bash
# tests/vm/stress_linux.sh ULP_TARGETD ULPCTL [ULP_STRESS] [-- PART...] - teardown under I/O
# with the Linux initiators against one ulp-targetd on rxe0, INSIDE the rxe VM (ctest
# vm_stress_linux starts it through tools/vm/run). One daemon serves
# iSER (10.99.0.1:3260), SRP (:5555) and iSCSI/TCP (:3261) on three RAM LUNs (256 MiB,
# 64 MiB, 16 MiB) with an admin socket; both initiators share rxe0 and 10.99.0.1 with it.
#
# The parts, each bounded (every wait has a limit and logs while it waits), each ending with
# the daemon's resource counts back at the baseline taken before the first login (sessions,
# connections and channels, commands in flight, per RDMA portal its connections, QPs, CQ
# entries, MRs and data-heap bytes in use; read through the admin socket with ulpctl):
#   a  iSER (open-iscsi + ib_iser): fio 4K randwrite with crc32c verify on a dm-multipath
#      device (queue_if_no_path) over the iSER disk while the session logs out and in
#      again, twice (a fio per round: it starts, writes, the session logs out under it,
#      logs in, the new disk becomes the path, fio ends); fio must see no error and its
#      verify must pass: what was queued while no path existed is written after the login.
#      blktests srp/011 (srp/002 with a file system), over iSER.
#   b  SRP (ib_srp, ch_count=4): the same, the logout being remove_target (the remote
#      port's delete) and the login add_target: blktests srp/011 and srp/002.
#   c  sg_reset -d/-b during verified I/O over SRP (blktests srp/014) is vm_srp_linux's
#      case f, identically (sg_reset --no-esc every second under fio with verify, then the
#      credits and the TMF count): not repeated here.
#   f  ulp-stress --target-address against this daemon from inside the guest over rxe0
#      (login storms and target-side drops, iSER, SRP and TCP, short profile, a few
#      cycles): the tool works against a daemon it did not start.
#   d  device removal (blktests srp/016): `rdma link del rxe0` while ib_srp and iSER write;
#      the daemon must neither die nor hang, must log the removal, must keep serving its TCP
#      portal (a verified login over TCP while rxe0 is gone), must let the removal complete
#      (rxe has no disassociate_ucontext: the kernel waits for every process to close its
#      verbs context), and once `rdma link add rxe0` brings the device back, must serve
#      RDMA again: ib_srp and iSER log in and write with verify.
#   e  the end: verified I/O over iSER, SRP and TCP, counts at the baseline, SIGTERM: exit 0
#      within the bound, no leak lines; the guest kernel logged no BUG/WARNING.
# PART...: a subset of a b f d (default: all, in that order; e always last). On a failure:
# the reason, the tails of the daemon's and iscsid's logs and dmesg; the run goes on with
# the next part and exits 1.
set -euo pipefail

targetd=${1:?usage: stress_linux.sh ULP_TARGETD ULPCTL [ULP_STRESS] [-- PART...]}
ulpctl=${2:?usage: stress_linux.sh ULP_TARGETD ULPCTL [ULP_STRESS] [-- PART...]}
shift 2
ustress=''
if (($#)) && [[ $1 != -- ]]; then
	ustress=$1
	shift
fi
[[ ${1:-} == -- ]] && shift
parts=${*:-a b f d}
[[ ${ULP_IN_VM:-} == 1 ]] || { echo "stress_linux: run me inside the VM (tools/vm/run)"; exit 2; }
for t in fio iscsid iscsiadm dmsetup jq rdma; do
	command -v $t >/dev/null || { echo "stress_linux: $t missing (fio, open-iscsi, dmsetup, jq, iproute2)"; exit 1; }
done

iqn=iqn.2026-11.org.ulp:vm-stress
portal=10.99.0.1:3260     # iSER
tcp_portal=10.99.0.1:3261 # iSCSI/TCP
srp_portal=10.99.0.1:5555
add_target=/sys/class/infiniband_srp/srp-rxe0-1/add_target
work=/tmp/stress-linux # the guest's tmpfs overlay: gone when the VM powers off
mkdir -p "$work"
tlog=$work/targetd.log
ilog=$work/iscsid.log
asock=$work/admin.sock
peer=ulp
lun0_sectors=524288 lun1_sectors=131072 # 256 MiB, 64 MiB
# Logouts under I/O per transport (a, b). Two: the dm table's path moves from the first
# login's disk to a new one, then from that one to another; a third round only repeated
# the second (iser_linux.sh has three plain iSER logouts, srp_linux.sh two SRP ones).
rounds=2
t_start=$SECONDS
tpid='' ipid='' fpid='' rpid='' login_line='' base=''
failed=()

# shellcheck source=tests/vm/srp_initiator.sh
source "$(dirname "${BASH_SOURCE[0]}")/srp_initiator.sh"
# shellcheck source=tests/vm/iscsi_initiator.sh
source "$(dirname "${BASH_SOURCE[0]}")/iscsi_initiator.sh"

note() { printf 'stress_linux [%3ds]: %s\n' $((SECONDS - t_start)) "$*"; }
keep_logs() {
	if [[ -d /run/ulp-vm ]]; then
		mkdir -p /run/ulp-vm/stress_linux
		cp "$work"/*.log /run/ulp-vm/stress_linux/ 2>/dev/null || true
		dmesg >/run/ulp-vm/stress_linux/dmesg.log || true
	fi
}
dump() {
	echo "--- ulp-targetd log (tail)"
	tail -n 60 "$tlog" 2>/dev/null || true
	echo "--- iscsid log (tail)"
	tail -n 20 "$ilog" 2>/dev/null || true
	echo "--- dmesg (tail)"
	dmesg | tail -n 50
	keep_logs
}
# Inside a part (a subshell): the reason, the logs, and out of the part.
fail() {
	echo "stress_linux: FAIL [$((SECONDS - t_start))s]: $*"
	stop_bg
	dump
	exit 1
}
# Between parts and at the end: no fio, no multipath device, nobody logged in.
reset_initiators() {
	stop_bg
	set +e # (after stop_bg, which sets -e again)
	pkill -KILL -x fio
	local m
	for m in $(dmsetup ls --target multipath 2>/dev/null | awk '/^mp-/ { print $1 }'); do
		timeout -k 2 10 dmsetup message "$m" 0 fail_if_no_path >/dev/null 2>&1
		timeout -k 2 20 dmsetup --noudevsync remove --retry "$m" >/dev/null 2>&1
	done
	timeout -k 5 30 iscsiadm -m node --logoutall=all >/dev/null 2>&1
	logout_all_quiet
	for _ in $(seq 100); do # bounded: 10 s
		[[ -z $(srp_hosts) ]] && break
		sleep 0.1
	done
	set -e
	return 0
}
cleanup() {
	set +e
	reset_initiators
	[[ -n $ipid ]] && kill -TERM "$ipid" 2>/dev/null
	[[ -n $tpid ]] && kill -KILL "$tpid" 2>/dev/null
	return 0
}
trap cleanup EXIT

# ---- the target and its counts --------------------------------------------------------------

start_targetd() {
	rm -f "$work/port" "$asock"
	"$targetd" --portal $tcp_portal --iser-portal $portal --srp-portal $srp_portal \
		--rdma-device rxe0 --target $iqn --admin-socket "$asock" --state-dir "$work/state" \
		--lun 0:ram:size=256M --lun 1:ram:size=64M --lun 2:ram:size=16M \
		--ready-fd 9 9>"$work/port" 2>>"$tlog" &
	tpid=$!
	for _ in $(seq 300); do # bounded: 30 s (TCG)
		[[ -s $work/port ]] && grep -q '^srp ' "$work/port" && break
		kill -0 $tpid 2>/dev/null || { echo "stress_linux: ulp-targetd exited during start-up"; dump; exit 1; }
		sleep 0.1
	done
	grep -q '^srp 5555$' "$work/port" 2>/dev/null || { echo "stress_linux: ulp-targetd not listening after 30 s"; dump; exit 1; }
	login_line=$(grep -oE 'echo id_ext=[0-9a-f]{16},ioc_guid=[0-9a-f]{16},dest=10\.99\.0\.1:5555 ' \
		"$tlog" | head -n 1 | sed 's/^echo //; s/ $//')
	[[ -n $login_line ]] || { echo "stress_linux: no add_target line in ulp-targetd's log"; dump; exit 1; }
}
# Alive: a process, not a zombie (a part runs in a subshell: it sees a killed daemon as a
# zombie until the main shell waits for it).
daemon_alive() {
	local st
	st=$(ps -o stat= -p "$tpid" 2>/dev/null) && [[ $st != Z* ]]
}
ctl() { timeout -k 2 10 "$ulpctl" --socket "$asock" --json "$@"; }
# The counts that must come back: one line, name=value each. A daemon without the admin
# socket's answer gives "no answer".
counts() {
	local s l
	s=$(ctl stats 2>/dev/null) && l=$(ctl session list 2>/dev/null) || { echo "no answer"; return 0; }
	jq -r '[ "sessions=\(.sessions)", "cmds_in_flight=\(.cmds_in_flight)",
	         "iscsi_sessions=\(.iscsi.sessions_open)", "iscsi_conns=\(.iscsi.connections_open)",
	         "srp_nexuses=\(.srp.nexuses_open)", "srp_channels=\(.srp.channels_open)" ]
	       + [ .rdma_portals[] | "\(.transport)_conns=\(.connections)",
	           "\(.transport)_qps=\(.qps)", "\(.transport)_cq_entries=\(.cq_entries)",
	           "\(.transport)_mrs_used=\(.mrs_used)",
	           "\(.transport)_heap_used=\(.heap_bytes_used)" ] | join(" ")' <<<"$s" |
		tr '\n' ' '
	jq -r '"connections=\([.[].connections] | add // 0)"' <<<"$l"
}
# Reported beside the counts, not compared: the process's descriptors and threads.
proc_info() {
	[[ -n $tpid && -d /proc/$tpid ]] || { echo "(no process)"; return 0; }
	echo "fds=$(find /proc/"$tpid"/fd -mindepth 1 -maxdepth 1 | wc -l) threads=$(awk '/^Threads:/ { print $2 }' /proc/"$tpid"/status)"
}
# The counts back at the baseline (bounded: 30 s, a line every 5 s while waiting).
wait_baseline() {
	local now t0=$SECONDS next=$((SECONDS + 5))
	while :; do
		now=$(counts)
		[[ $now == "$base" ]] && break
		((SECONDS - t0 >= 30)) && fail "$1: the daemon's counts are not back at the baseline after 30 s: $now (baseline: $base)"
		if ((SECONDS >= next)); then
			note "$1: waiting for the counts to return to the baseline ($((SECONDS - t0)) s): $now"
			next=$((SECONDS + 5))
		fi
		sleep 0.2
	done
	note "$1: counts at the baseline ($now; $(proc_info))"
}

# ---- dm-multipath: what blktests' srp/002 and srp/011 run fio on -----------------------------

# One path, queue_if_no_path: I/O to a path that failed (its disk went with a logout) waits
# in dm until a new path is loaded. No multipathd here: the table is reloaded by hand as
# multipathd would, suspended without flushing what is queued.
mp_table() { # $1: the disk
	echo "0 $(cat /sys/block/"$(basename "$1")"/size) multipath 1 queue_if_no_path 0 1 1 round-robin 0 1 1 $(cat /sys/block/"$(basename "$1")"/dev) 1000"
}
mp_create() { # $1: name, $2: disk
	timeout -k 2 20 dmsetup --noudevsync create "$1" --table "$(mp_table "$2")" || fail "dmsetup create $1 over $2"
	timeout -k 2 10 dmsetup mknodes "$1" || true
	[[ -b /dev/mapper/$1 ]] || fail "no /dev/mapper/$1"
}
mp_switch() { # $1: name, $2: the new disk
	timeout -k 2 30 dmsetup --noudevsync suspend --noflush "$1" || fail "dmsetup suspend $1"
	timeout -k 2 20 dmsetup --noudevsync load "$1" --table "$(mp_table "$2")" || fail "dmsetup load $1 ($2)"
	timeout -k 2 30 dmsetup --noudevsync resume "$1" || fail "dmsetup resume $1"
}
mp_remove() {
	timeout -k 2 30 dmsetup --noudevsync remove --retry "$1" || fail "dmsetup remove $1"
}

# fio 4K randwrite with crc32c verify (every 64 blocks written are read back and checked
# while it runs) on $1 for $2 s, on [$3, $3 + 32M); in the background (fpid). When the path
# goes away before $2 s are up, its I/O waits in dm, and fio ends once the new path took it.
start_mp_fio() {
	timeout -k 5 $(($2 + 300)) fio "${fio_common[@]}" --verify_backlog=64 --serialize_overlap=1 \
		--time_based --runtime="$2" --name=mp --filename="$1" --rw=randwrite --bs=4k \
		--iodepth=16 --offset="$3" --size=32M >"$work/fio-bg.log" 2>&1 &
	fpid=$!
}
end_mp_fio() { # $1: what
	local rc=0 t0=$SECONDS
	while kill -0 "$fpid" 2>/dev/null && ((SECONDS - t0 < 120)); do # bounded: 120 s
		sleep 0.2
	done
	kill -0 "$fpid" 2>/dev/null && { tail -n 20 "$work/fio-bg.log"; fail "fio across $1 still running 120 s after the login"; }
	wait "$fpid" || rc=$?
	fpid=''
	local log=$work/fio-${1// /-}.log reads
	cp "$work/fio-bg.log" "$log"
	# fio counts its verify reads as issued reads only ("issued rwts: total=R,W,...").
	reads=$(grep -oE 'issued rwts: total=[0-9]+' "$log" | grep -oE '[0-9]+$' || echo 0)
	if ! fio_ok "$log" $rc || ((reads == 0)); then
		tail -n 40 "$log"
		fail "fio with verify across $1: status $rc, $reads blocks read back"
	fi
	note "fio with verify across $1: ok ($(grep -hoE 'write: IOPS=[^,]*' "$log"), $reads blocks read back and checked)"
}
# Writes completed on a disk or dm device ($1), from sysfs.
wait_writes() { # $1: device, $2: how many more, $3: what
	local want=$(($(writes_done "$1") + $2)) t0=$SECONDS
	while ((SECONDS - t0 < 60)); do # bounded: 60 s (TCG on a busy host)
		(($(writes_done "$1") >= want)) && return 0
		kill -0 "$fpid" 2>/dev/null || { tail -n 20 "$work/fio-bg.log"; fail "fio ended before $3"; }
		sleep 0.1
	done
	fail "fio did not write $2 blocks to $1 in 60 s ($3)"
}
# Its name under /sys/block (dm-N): without udev /dev/mapper/NAME is a node, not a link.
mp_dev() { basename "$(readlink /sys/dev/block/"$(dmsetup info -c --noheadings -o major,minor --separator : "$1" | tr -d ' ')")"; }
# One round's fio runs this long at least (s): it is writing when the logout comes.
mp_runtime=12

# ---- a: iSER logout/login under verified I/O -------------------------------------------------

part_a() {
	local r mp=mp-iser
	iscsi_login "a, first"
	mp_create $mp "$dev0"
	for r in $(seq $rounds); do
		start_mp_fio /dev/mapper/$mp $mp_runtime 0
		wait_writes "$(mp_dev $mp)" 200 "logout $r"
		iscsi_logout "a, round $r, under I/O"
		note "a: round $r: logged out while fio wrote (dm: $(dmsetup status $mp))"
		iscsi_login "a, round $r"
		mp_switch $mp "$dev0"
		note "a: round $r: $dev0 is the path again"
		end_mp_fio "iSER logout $r"
	done
	mp_remove $mp
	iscsi_logout "a, last"
	wait_baseline "a"
}

# ---- b: SRP logout/login under verified I/O (ch_count=4) -------------------------------------

part_b() {
	local r mp=mp-srp
	logout_all
	login ""
	mp_create $mp "$dev0"
	for r in $(seq $rounds); do
		start_mp_fio /dev/mapper/$mp $mp_runtime 64M
		wait_writes "$(mp_dev $mp)" 200 "logout $r"
		logout_all
		note "b: round $r: every channel logged out while fio wrote"
		login ""
		mp_switch $mp "$dev0"
		note "b: round $r: $dev0 is the path again"
		end_mp_fio "SRP logout $r"
	done
	mp_remove $mp
	check_credits "b, after the rounds"
	logout_all
	wait_baseline "b"
}

# ---- f: ulp-stress against this daemon -------------------------------------------------------

part_f() {
	local rc=0
	[[ -n $ustress ]] || { note "f: no ulp-stress given: skipped"; return 0; }
	# Over rxe0 only (TCP is the soft-provider runs' business), a few cycles: the tool
	# against a daemon it did not start, not a figure.
	timeout -k 5 240 "$ustress" --target-address 10.99.0.1 --tcp-port 3261 --iser-port 3260 \
		--srp-port 5555 --target-name $iqn --admin-socket "$asock" --target-pid "$tpid" \
		--rdma-device rxe0 --lun 2 --profile short --transport iser,srp \
		--scenario login-storm,target-disconnect --cycles 2 --sessions 2 \
		>"$work/ulp-stress.log" 2>&1 || rc=$?
	grep -vE '^\[' "$work/ulp-stress.log" | tail -n 20
	((rc == 0)) || fail "ulp-stress --target-address: status $rc"
	wait_baseline "f"
}

# ---- d: device removal under I/O (srp/016) ---------------------------------------------------

rxe_active() { grep -q ACTIVE /sys/class/infiniband/rxe0/ports/1/state 2>/dev/null; }
part_d() {
	local idev sdev lpid rc t0 line
	iscsi_login "d"
	idev=$dev0
	logout_all
	login ""
	sdev=$dev0
	# Unverified writes on both until their disks go (or 90 s pass): [128M, 192M) over iSER,
	# [192M, 256M) over SRP.
	timeout -k 5 360 fio --ioengine=libaio --direct=1 --time_based --runtime=300 \
		--name=di --filename="$idev" --rw=randwrite --bs=4k --iodepth=16 --offset=128M --size=64M \
		--name=ds --filename="$sdev" --rw=randwrite --bs=4k --iodepth=16 --offset=192M --size=64M \
		>"$work/fio-bg.log" 2>&1 &
	fpid=$!
	wait_writes "$idev" 100 "the removal (iSER)"
	wait_writes "$sdev" 100 "the removal (SRP)"
	line=$(wc -l <"$tlog")
	note "d: rdma link del rxe0 while ib_srp and iSER write"
	rdma link del rxe0 >"$work/link-del.log" 2>&1 &
	lpid=$!
	t0=$SECONDS
	while kill -0 $lpid 2>/dev/null && ((SECONDS - t0 < 60)); do
		sleep 1
		(((SECONDS - t0) % 10 == 0)) && note "d: waiting for rdma link del ($((SECONDS - t0)) s; its state: $(ps -o stat= -p $lpid 2>/dev/null), its kernel wait: $(cat /proc/$lpid/wchan 2>/dev/null))"
		daemon_alive || fail "ulp-targetd died after the device removal"
	done
	if kill -0 $lpid 2>/dev/null; then
		note "d: rdma link del blocked for 60 s; ulp-targetd's log since: $(tail -n +"$((line + 1))" "$tlog" | tail -n 15)"
		note "d: its threads: $(ps -L -o tid=,stat=,wchan:30=,comm= -p "$tpid" | tr -s ' ' | tr '\n' ';')"
		# The kernel waits for ulp-targetd to close rxe0's verbs context; it never does.
		kill -KILL "$tpid"
		for _ in $(seq 300); do kill -0 $lpid 2>/dev/null || break; sleep 0.1; done
		fail "rdma link del rxe0 did not complete in 60 s while ulp-targetd ran (it completed once ulp-targetd was killed: $(kill -0 $lpid 2>/dev/null && echo no || echo yes)): the daemon does not let go of a removed device"
	fi
	rc=0
	wait $lpid || rc=$?
	((rc == 0)) || fail "rdma link del rxe0: status $rc: $(cat "$work/link-del.log")"
	note "d: rxe0 removed in $((SECONDS - t0)) s; ulp-targetd is alive"
	tail -n +"$((line + 1))" "$tlog" | grep -iE 'remov|listen' | head -n 12 | sed 's/^/    targetd: /'
	tail -n +"$((line + 1))" "$tlog" | grep -qi 'device removal\|removed' ||
		fail "ulp-targetd logged nothing about the removal"
	# The initiators lost their disks: ib_srp removed its target, iSER's session is in
	# recovery (30 s) until logged out here.
	timeout -k 5 30 iscsiadm -m node --logoutall=all >/dev/null 2>&1 || true
	wait_fio_gone "the device removal"
	for _ in $(seq 300); do [[ -z $(srp_hosts) ]] && break; sleep 0.1; done
	[[ -z $(srp_hosts) ]] || fail "ib_srp still has a remote port 30 s after the device went"
	# TCP serves on while rxe0 is gone: a verified login.
	iscsi_login "d, TCP while rxe0 is gone" $tcp_portal
	run_fio d-tcp 120 --name=t --filename="$dev0" --rw=randwrite --bs=4k --iodepth=16 \
		--offset=104M --size=4M
	iscsi_logout "d, TCP" $tcp_portal
	wait_baseline "d, rxe0 gone"
	# The device comes back.
	rdma link add rxe0 type rxe netdev eth0 || fail "rdma link add rxe0"
	for _ in $(seq 100); do rxe_active && break; sleep 0.1; done
	rxe_active || fail "rxe0's port never became ACTIVE again"
	note "d: rxe0 back"
	for _ in $(seq 100); do [[ -e $add_target ]] && break; sleep 0.1; done
	[[ -e $add_target ]] || fail "ib_srp has no $add_target after rxe0 came back"
	# The daemon must listen again on its own: ib_srp's login is retried for 40 s.
	t0=$SECONDS
	while ! echo "$login_line,ch_count=4" 2>"$work/add_target.err" >"$add_target"; do
		((SECONDS - t0 >= 40)) && fail "ulp-targetd does not accept SRP logins 40 s after rxe0 came back: $(cat "$work/add_target.err"); its log: $(tail -n 8 "$tlog" | tr '\n' ';')"
		(((SECONDS - t0) % 10 == 0)) && note "d: SRP login refused ($(cat "$work/add_target.err")); retrying"
		sleep 2
	done
	note "d: SRP login accepted $((SECONDS - t0)) s after rxe0 came back"
	logout_all
	login ""
	run_fio d-srp 120 --name=s --filename="$dev0" --rw=randwrite --bs=4k --iodepth=16 \
		--offset=96M --size=4M
	logout_all
	iscsi_login "d, iSER after rxe0 came back"
	run_fio d-iser 120 --name=i --filename="$dev0" --rw=randwrite --bs=4k --iodepth=16 \
		--offset=32M --size=4M
	iscsi_logout "d, iSER"
	wait_baseline "d"
}

# ---- e: the end ------------------------------------------------------------------------------

part_e() {
	local rc=0
	iscsi_login "e, iSER"
	run_fio e-iser 120 --name=i --filename="$dev0" --rw=randwrite --bs=4k --iodepth=16 \
		--offset=40M --size=4M
	iscsi_logout "e, iSER"
	iscsi_login "e, TCP" $tcp_portal
	run_fio e-tcp 120 --name=t --filename="$dev0" --rw=randwrite --bs=4k --iodepth=16 \
		--offset=112M --size=4M
	iscsi_logout "e, TCP" $tcp_portal
	logout_all
	login ""
	run_fio e-srp 120 --name=s --filename="$dev0" --rw=randwrite --bs=4k --iodepth=16 \
		--offset=120M --size=4M
	check_credits "e"
	logout_all
	wait_baseline "e"
	kill -TERM "$tpid"
	for _ in $(seq 250); do # ulp-targetd's bound is 15 s; 25 s under TCG
		kill -0 "$tpid" 2>/dev/null || break
		sleep 0.1
	done
	kill -0 "$tpid" 2>/dev/null && fail "ulp-targetd still running 25 s after SIGTERM"
	wait "$tpid" || rc=$?
	tpid=''
	((rc == 0)) || fail "ulp-targetd exited with status $rc after SIGTERM"
	grep -q 'ulp-targetd: stopped' "$tlog" || fail "no 'stopped' line after SIGTERM"
	if grep -E -i 'left allocated|still in use|leak' "$tlog"; then
		fail "ulp-targetd logged a leak"
	fi
	if dmesg | grep -E 'BUG:|WARNING:|Oops|general protection|hung_task|blocked for more than'; then
		fail "the guest kernel complained"
	fi
}

# ---- run -------------------------------------------------------------------------------------

modprobe ib_srp indirect_sg_entries=2048
modprobe dm_multipath
modprobe dm_round_robin
iscsi_start
start_targetd
iscsi_node_new iser $portal
iscsi_node_new default $tcp_portal
[[ -e $add_target ]] || { echo "stress_linux: FAIL: no $add_target (ib_srp on rxe0)"; exit 1; }
base=$(counts)
[[ $base != "no answer" ]] || { echo "stress_linux: FAIL: the admin socket does not answer"; dump; exit 1; }
note "ulp-targetd on rxe0: iSER $portal, SRP $srp_portal, TCP $tcp_portal; baseline: $base; $(proc_info)"

declare -A what=([a]="iSER logout/login x$rounds under fio verify on dm-multipath (blktests srp/011, srp/002 over iSER)"
	[b]="SRP ch_count=4 logout/login x$rounds under fio verify on dm-multipath (blktests srp/011, srp/002)"
	[f]="ulp-stress --target-address against this daemon over rxe0"
	[d]="rdma link del rxe0 under I/O, TCP serves on, rdma link add: RDMA serves again (blktests srp/016)"
	[e]="verified I/O over iSER, TCP and SRP, counts at the baseline, SIGTERM")
note "c: sg_reset -d/-b under verified I/O over SRP (blktests srp/014) is vm_srp_linux's case f: not repeated"
for p in $parts e; do
	[[ -n ${what[$p]:-} ]] || { echo "stress_linux: no part $p"; exit 2; }
	if ! daemon_alive; then
		wait "$tpid" 2>/dev/null || true
		note "ulp-targetd is gone: started again for what follows"
		# Its log goes aside: the SRP login and close lines are counted per process.
		cp "$tlog" "$work/targetd-before-restart.log"
		: >"$tlog"
		start_targetd
		base=$(counts)
	fi
	note "part $p: ${what[$p]}"
	t0=$SECONDS
	set +e
	if [[ $p == e ]]; then
		part_e # here: it waits for the daemon, this shell's child (its fail ends the run)
	else
		(
			set -e
			part_$p
		)
	fi
	rc=$?
	set -e
	if ((rc == 0)); then
		echo "stress_linux: PASS $p ($((SECONDS - t0)) s): ${what[$p]}"
	else
		echo "stress_linux: FAIL $p ($((SECONDS - t0)) s): ${what[$p]}"
		failed+=("$p")
		reset_initiators
	fi
done
keep_logs
if ((${#failed[@]})); then
	echo "stress_linux: FAILED: ${failed[*]}"
	exit 1
fi
note "passed: $parts e"
