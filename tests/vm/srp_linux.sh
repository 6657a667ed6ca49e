#!/usr/bin/env bash
# tests/vm/srp_linux.sh ULP_TARGETD|--lio [CASE...] - ulp-targetd's SRP target against the
# Linux SRP initiator (ib_srp over RDMA/CM), INSIDE the rxe VM (ctest vm_srp_linux starts it
# through tools/vm/run). Both ends share rxe0 (MTU 9000) and 10.99.0.1. The cases mirror
# blktests' srp group (which runs LIO's ib_srpt); each logs in with its own add_target
# options, is bounded, and prints one PASS or FAIL line:
#   a  fio 4K randwrite + crc32c verify (iodepth 32) on both LUNs, then a verify-only pass:
#      the "baseline" regions later cases read back (srp/001-ish)
#   b  logout (srp_remote_ports/port-*/delete) while fio writes, login again, twice: the
#      baseline reads back intact, then a verified write pass on the new login (srp/002,
#      srp/011)
#   c  large transfers: cmd_sg_entries=255,max_sect=131072; dd and fio bs=1M and 4M direct
#      with verify (srp/005)
#   d  cmd_sg_entries=1; the same (srp/007)
#   e  allow_ext_sg=1,cmd_sg_entries=2: 8M I/O (four 2 MiB fast-reg MRs on rxe, more than
#      two descriptors) so that the initiator sends an external descriptor table and the
#      target must fetch it by RDMA READ (neither ib_srpt nor SCST does); the target's
#      ext_tables counter must grow
#   f  sg_reset --no-esc -d and -b every second while fio writes with verify (srp/014)
#   g  sg_reset -H (ib_srp's host reset: every channel disconnects and logs in again,
#      channel 0 with SINGLE) while fio writes with verify
#   h  ACLs (--srp-acl): a login refused, one admitted by port id, one by address
#   k  ulp-targetd killed (SIGKILL) under I/O and restarted: ib_srp reconnects by itself,
#      I/O goes on, a verified pass works (main shell: it replaces the daemon)
#   z  SIGTERM with the initiator logged in: exit 0 within the bound, "stopped", no leak
#      lines; the guest kernel logged no BUG/WARNING
# CASE...: a subset (default: all, in order; z always last). On a failure: the reason, the
# tails of the target's log and dmesg; the script goes on with the next case and exits 1.
# --lio instead of ULP_TARGETD: the same cases against the kernel's LIO ib_srpt (configfs,
# two rd_mcp RAM disks of the same sizes, RDMA/CM port 5555, blktests' module options),
# to tell the initiator's behaviour from ulp's; the checks of ulp's counters and log are
# skipped, and so is z. ULP_SRP_TARGETD_FLAGS: more ulp-targetd flags (e.g. --srp-srq;
# tools/vm/run passes ULP_* variables into the guest).
set -euo pipefail

targetd=${1:?usage: srp_linux.sh ULP_TARGETD|--lio [CASE...]}
shift
peer=ulp
[[ $targetd == --lio ]] && peer=lio
cases=${*:-a b c d e f g h k}
[[ ${ULP_IN_VM:-} == 1 ]] || { echo "srp_linux: run me inside the VM (tools/vm/run)"; exit 2; }
for t in fio sg_reset dd cmp; do
	command -v $t >/dev/null || { echo "srp_linux: $t missing (fio, sg3-utils)"; exit 1; }
done

# shellcheck source=tests/vm/lio_srpt.sh
source "$(dirname "${BASH_SOURCE[0]}")/lio_srpt.sh"
# shellcheck source=tests/vm/srp_initiator.sh
source "$(dirname "${BASH_SOURCE[0]}")/srp_initiator.sh"
portal=10.99.0.1:5555
add_target=/sys/class/infiniband_srp/srp-rxe0-1/add_target
work=/tmp/srp-linux # the guest's tmpfs overlay: gone when the VM powers off
mkdir -p "$work"
tlog=$work/targetd.log
t_start=$SECONDS
tpid='' fpid='' rpid=''
failed=()

note() { printf 'srp_linux [%3ds]: %s\n' $((SECONDS - t_start)) "$*"; }
keep_logs() {
	if [[ -d /run/ulp-vm ]]; then
		mkdir -p /run/ulp-vm/srp_linux
		cp "$work"/*.log /run/ulp-vm/srp_linux/ 2>/dev/null || true
		dmesg >/run/ulp-vm/srp_linux/dmesg.log || true
	fi
}
# The initiator's side first: ib_srp's own lines say why it gave up on a channel or a TMF
# (a failed completion and its status, DREQ, reconnect), and a long target log printed
# before them can push them out of a report that keeps only a failure's first lines.
srp_dmesg() { dmesg | grep -E 'scsi host[0-9]+|ib_srp|srp_|SRP' || true; }
dump() {
	echo "--- dmesg: ib_srp and SCSI host lines (tail)"
	srp_dmesg | tail -n 40
	echo "--- ulp-targetd log (tail)"
	tail -n 40 "$tlog" 2>/dev/null || true
	echo "--- dmesg (tail)"
	dmesg | tail -n 30
	keep_logs
}
# Inside a case (a subshell): the reason, the logs, and out of the case.
fail() {
	echo "srp_linux: FAIL [$((SECONDS - t_start))s]: $*"
	stop_bg
	dump
	exit 1
}
cleanup() {
	set +e
	stop_bg
	logout_all_quiet
	[[ -n $tpid ]] && kill -KILL "$tpid" 2>/dev/null
	return 0
}
trap cleanup EXIT

# ---- the target -----------------------------------------------------------------------------

# Two RAM LUNs: 256 MiB and 64 MiB. Both outlive every login (the process stays).
start_targetd() {
	rm -f "$work/port"
	# shellcheck disable=SC2086 # word-split on purpose: flags
	"$targetd" --srp-portal $portal --rdma-device rxe0 ${ULP_SRP_TARGETD_FLAGS:-} \
		--lun 0:ram:size=256M --lun 1:ram:size=64M \
		--ready-fd 9 9>"$work/port" 2>>"$tlog" &
	tpid=$!
	for _ in $(seq 300); do # bounded: 30 s (TCG)
		[[ -s $work/port ]] && break
		kill -0 $tpid 2>/dev/null || fail "ulp-targetd exited during start-up"
		sleep 0.1
	done
	[[ $(cat "$work/port" 2>/dev/null) == 5555 ]] || fail "ulp-targetd not listening after 30 s"
	# The line Portal::listen logs, at the default level: what add_target takes.
	login_line=$(grep -oE 'echo id_ext=[0-9a-f]{16},ioc_guid=[0-9a-f]{16},dest=10\.99\.0\.1:5555 ' \
		"$tlog" | head -n 1 | sed 's/^echo //; s/ $//')
	[[ -n $login_line ]] || fail "no add_target line in ulp-targetd's log"
}
# LIO: the kernel's ib_srpt on rxe0 (tests/vm/lio_srpt.sh), the same LUN sizes as ours.
start_lio() {
	lio_srpt_start || fail "LIO ib_srpt set-up failed"
	login_line=$lio_srpt_login
	echo "(LIO ib_srpt, target port $lio_srpt_port)" >"$tlog"
}
# One counter of the "SRP stats:" line ulp-targetd logs on SIGHUP (fresh each call).
stat_of() {
	local before
	before=$(count_log 'SRP stats:')
	kill -HUP $tpid
	for _ in $(seq 100); do # bounded: 10 s
		(($(count_log 'SRP stats:') > before)) && break
		sleep 0.1
	done
	grep 'SRP stats:' "$tlog" | tail -n 1 | grep -oE " $1 [0-9]+" | awk '{ print $2 }'
}

# ---- fio (the helpers: srp_initiator.sh) ----------------------------------------------------

# The baseline: 4K randwrite at iodepth 32, 16 MiB of LUN 0 and 4 MiB of LUN 1 (5,120
# commands over the four channels; under TCG each 4K command costs about 3 ms of the
# host's CPU, and the baseline is written once and read back four times).
baseline_jobs() {
	jobs=(--name=l0 "--filename=$dev0" --rw=randwrite --bs=4k --iodepth=32 --offset=0 --size=16M
		--name=l1 "--filename=$dev1" --rw=randwrite --bs=4k --iodepth=32 --offset=0 --size=4M)
}
# Unverified writes in the scratch regions ([128M, 256M) of LUN 0, [32M, 64M) of LUN 1)
# until the disks go away (or 60 s pass).
start_scratch_io() {
	timeout -k 5 90 fio --ioengine=libaio --direct=1 --time_based --runtime=60 \
		--name=s0 --filename=$dev0 --rw=randwrite --bs=$1 --iodepth=16 --offset=128M --size=128M \
		--name=s1 --filename=$dev1 --rw=randrw --bs=$1 --iodepth=16 --offset=32M --size=32M \
		>"$work/fio-bg.log" 2>&1 &
	fpid=$!
}
# dd of $2 MiB in blocks of $1 to LUN 0 at 192M and back, direct, compared.
dd_check() {
	local bs=$1 mib=$2
	head -c $((mib << 20)) /dev/urandom >"$work/dd.in"
	timeout -k 5 120 dd if="$work/dd.in" of=$dev0 bs=$bs seek=$((192 << 20)) oflag=direct,seek_bytes \
		status=none || fail "dd write bs=$bs"
	timeout -k 5 120 dd if=$dev0 of="$work/dd.out" bs=$bs skip=$((192 << 20)) count=$((mib << 20)) \
		iflag=direct,skip_bytes,count_bytes status=none || fail "dd read bs=$bs"
	cmp -s "$work/dd.in" "$work/dd.out" || fail "dd bs=$bs: what was read back differs"
	note "dd bs=$bs: $mib MiB written and read back identical"
}

# ---- the cases ------------------------------------------------------------------------------

case_a() {
	login ""
	baseline_jobs
	run_fio a-write 300 "${jobs[@]}"
	run_fio a-check 300 --verify_only "${jobs[@]}"
	touch "$work/baseline.done" # later cases read it back
	check_credits "after the baseline"
	local imm
	[[ $peer == ulp ]] || return 0
	imm=$(stat_of immediate)
	((imm > 0)) || fail "no command came with immediate data (ib_srp sends 4K writes so)"
	note "immediate-data commands so far: $imm"
}

case_b() {
	local round bs
	[[ -e $work/baseline.done ]] || fail "case b reads back case a's baseline: run a first"
	ensure_login
	for round in 1 2; do
		bs=$([[ $round == 1 ]] && echo 4k || echo 128k)
		start_scratch_io $bs
		wait_io_running $dev0 100
		wait_io_running $dev1 20
		kill -0 "$fpid" 2>/dev/null || fail "fio ended before the logout"
		logout_all
		note "round $round: logged out while $bs I/O ran"
		wait_fio_gone "logout"
		login ""
		baseline_jobs
		run_fio "b$round-check" 300 --verify_only "${jobs[@]}"
		run_fio "b$round-write" 300 \
			--name=n0 --filename=$dev0 --rw=randwrite --bs=$bs --iodepth=16 --offset=128M --size=8M
		check_credits "round $round"
	done
}

# Let requests grow to what the host and the LU allow: sd caps max_sectors_kb at the LU's
# OPTIMAL TRANSFER LENGTH (128 KiB for ulp's LUs), below max_sect's and MAXIMUM TRANSFER
# LENGTH's max_hw_sectors_kb, so large transfers need this as much as the option.
open_queue() {
	local q kb
	q=/sys/block/$(basename "$1")/queue
	# The largest the block layer takes: max_hw_sectors_kb, unless the LU's MAXIMUM
	# TRANSFER LENGTH (max_dev_sectors, not in sysfs) is lower: halve until accepted.
	kb=$(cat $q/max_hw_sectors_kb)
	while ((kb > 128)) && ! echo $kb >$q/max_sectors_kb 2>/dev/null; do
		kb=$((kb / 2))
	done
	note "$(basename "$1"): max_sectors_kb $(cat $q/max_sectors_kb) (max_hw_sectors_kb $(cat $q/max_hw_sectors_kb)), max_segments $(cat $q/max_segments)"
}
# $1: the case, $2: add_target options. 16 MiB by dd, 32 MiB by each fio job: the point
# is the size of each request (what the initiator's options let through), not their number.
large_io() {
	logout_all
	login "$2"
	open_queue $dev0
	dd_check 1M 16
	run_fio "$1-1m" 300 --name=m1 --filename=$dev0 --rw=randwrite --bs=1M --iodepth=4 \
		--offset=64M --size=32M
	run_fio "$1-4m" 300 --name=m4 --filename=$dev0 --rw=write --bs=4M --iodepth=2 \
		--offset=128M --size=32M
	check_credits "after the large transfers"
}
case_c() { large_io c "cmd_sg_entries=255,max_sect=131072"; }
case_d() { large_io d "cmd_sg_entries=1"; }

case_e() {
	local before after
	logout_all
	# An 8 MiB request is 2048 pages: sg_tablesize must let them through, max_sect be 8 MiB
	# (the LU's MAXIMUM TRANSFER LENGTH too); rxe's fast-reg MRs cover 2 MiB each, so four
	# descriptors, of which two fit in the SRP_CMD.
	login "allow_ext_sg=1,cmd_sg_entries=2,sg_tablesize=2048,max_sect=16384"
	open_queue $dev0
	before=0
	[[ $peer == ulp ]] && before=$(stat_of ext_tables)
	dd_check 8M 32
	run_fio e-8m 300 --name=e8 --filename=$dev0 --rw=randwrite --bs=8M --iodepth=2 \
		--offset=64M --size=32M
	[[ $peer == ulp ]] || return 0
	after=$(stat_of ext_tables)
	((after > before)) || fail "8M I/O with cmd_sg_entries=2: no external descriptor table fetched (ext_tables $before -> $after)"
	note "external descriptor tables fetched: $((after - before))"
	check_credits "after the external tables"
}

# fio with verify (64K randwrite, iodepth 16, sync, as srp/014) in the background for $1 s
# on [64M, 96M) of LUN 0; sets fpid.
start_verified_io() {
	timeout -k 5 $(($1 + 120)) fio "${fio_common[@]}" --rw=randwrite --bs=64K --iodepth=16 \
		--sync=1 --loops=1000000 --time_based --runtime=$1 \
		--name=v --filename=$dev0 --offset=64M --size=32M >"$work/fio-verified.log" 2>&1 &
	fpid=$!
}
end_verified_io() {
	local rc=0
	wait "$fpid" || rc=$?
	fpid=''
	if ! fio_ok "$work/fio-verified.log" $rc; then
		tail -n 40 "$work/fio-verified.log"
		fail "fio across $1: status $rc"
	fi
	note "fio with verify across $1: ok ($(grep -hoE '(read|write): IOPS=[^,]*' "$work/fio-verified.log" | tr '\n' ' '))"
}

case_f() {
	local tmf_before tmf_after i=0 d_ok=0 d_bad=0 t rc aborts
	logout_all
	login ""
	tmf_before=0
	[[ $peer == ulp ]] && tmf_before=$(stat_of tsk_mgmts)
	aborts=$(dmesg | grep -c 'SRP abort called' || true)
	local srp_lines
	srp_lines=$(srp_dmesg | wc -l)
	start_verified_io 20
	wait_io_running $dev0 50
	local deadline=$((SECONDS + 18))
	while ((SECONDS < deadline)) && kill -0 "$fpid" 2>/dev/null; do
		sleep 1
		t=-d
		((i % 2 == 0)) || t=-b
		i=$((i + 1))
		rc=0
		timeout -k 5 60 sg_reset --no-esc $t $dev0 >>"$work/sg_reset.log" 2>&1 || rc=$?
		echo "(sg_reset $t: status $rc)" >>"$work/sg_reset.log"
		# ib_srp has no bus reset handler: -b fails without escalating (--no-esc).
		if [[ $t == -d ]]; then
			((rc == 0)) && d_ok=$((d_ok + 1)) || d_bad=$((d_bad + 1))
		fi
	done
	end_verified_io "sg_reset -d/-b"
	[[ $(scsi_state) == running ]] || fail "LUN 0's SCSI device is $(scsi_state) after the resets"
	if ((d_bad > 0)); then
		# ib_srp fails a LUN RESET at once, without sending it, while a channel's QP is in
		# error (until its reconnect, reconnect_delay later) or while it has no credit; the
		# lines it logged since the login say which, and name a failed completion's status.
		local why
		why=$(srp_dmesg | sed -n "$((srp_lines + 1)),\$p" |
			grep -E 'failed .* status|DREQ|reconnect|connection closed|tsk mgmt|Null scmnd' |
			sed -E 's/^\[ *[0-9.]+\] //' | sort | uniq -c | head -n 6 | tr -s ' ' | paste -sd ';' -)
		echo "sg_reset in order: $(grep -oE 'sg_reset -[db]: status [0-9]+' "$work/sg_reset.log" |
			sed 's/sg_reset //; s/: status /=/' | paste -sd ' ' -)"
		fail "$d_bad of $((d_ok + d_bad)) device resets failed (ib_srp: ${why:-nothing logged})"
	fi
	tmf_after=$d_ok
	[[ $peer == ulp ]] && tmf_after=$(stat_of tsk_mgmts)
	((tmf_after - tmf_before >= d_ok)) || fail "$d_ok device resets, but the target counted $((tmf_after - tmf_before)) SRP_TSK_MGMTs"
	# Commands a LUN RESET aborted on its own I_T nexus get no response (SAM-5, TAS is for
	# other nexuses); ib_srp does not finish them itself, so they time out (30 s) and are
	# aborted. Informational: how many.
	aborts=$(($(dmesg | grep -c 'SRP abort called' || true) - aborts))
	note "$d_ok device resets (LUN RESET) answered, $((i - d_ok)) bus resets tried, $aborts commands timed out and were aborted by the initiator"
	check_credits "after the resets"
}

case_g() {
	local logins_before logins_after
	ensure_login
	logins_before=0
	[[ $peer == ulp ]] && logins_before=$(stat_of logins)
	start_verified_io 20
	wait_io_running $dev0 50
	timeout -k 5 90 sg_reset --no-esc -H $dev0 >"$work/sg_reset_host.log" 2>&1 ||
		{ cat "$work/sg_reset_host.log"; fail "host reset (reconnect) failed"; }
	note "host reset: the initiator reconnected"
	end_verified_io "a host reset"
	[[ $(scsi_state) == running ]] || fail "LUN 0's SCSI device is $(scsi_state) after the host reset"
	# srp_reconnect_rport disconnects every channel before it logs in again, so the target
	# usually sees a new nexus (SINGLE onto a nexus still open is a takeover: counted too).
	if [[ $peer == ulp ]]; then
		logins_after=$(stat_of logins)
		((logins_after >= logins_before + 4)) || fail "the reconnect logged in $((logins_after - logins_before)) channels, not 4"
		note "reconnect: $((logins_after - logins_before)) channels, takeovers so far $(stat_of takeovers)"
	fi
	if [[ -e $work/baseline.done ]]; then
		baseline_jobs
		run_fio g-check 300 --verify_only "${jobs[@]}"
	fi
	check_credits "after the reconnect"
}

# ACLs (--srp-acl): a second and third ulp-targetd on other ports and target port ids. One
# that names neither the initiator's port id nor its address refuses the login (LOGIN_REJ,
# ib_srp's add_target fails); one that names the port id, and one that names the address,
# accept it and serve the LUN.
acl_daemon() { # $1: port, $2: log, the rest: --srp-acl values
	local port=$1 log=$2 a args=()
	shift 2
	for a in "$@"; do args+=(--srp-acl "$a"); done
	rm -f "$work/acl.port"
	"$targetd" --srp-portal 10.99.0.1:$port --rdma-device rxe0 --srp-id-ext 0x$port \
		--srp-ioc-guid 0xac1 "${args[@]}" --lun 0:ram:size=16M \
		--ready-fd 9 9>"$work/acl.port" 2>"$log" &
	rpid=$!
	for _ in $(seq 300); do
		[[ -s $work/acl.port ]] && return 0
		kill -0 $rpid 2>/dev/null || fail "ulp-targetd (ACLs $*) exited during start-up"
		sleep 0.1
	done
	fail "ulp-targetd (ACLs $*) not listening after 30 s"
}
acl_stop() {
	local rc=0
	kill -TERM $rpid
	wait $rpid || rc=$?
	rpid=''
	((rc == 0)) || fail "ulp-targetd (ACLs) exited with status $rc"
}
case_h() {
	local gid iport line h d rc
	[[ $peer == ulp ]] || { note "h: ulp-targetd's flags only"; return 0; }
	logout_all
	# ib_srp's initiator port id over RDMA/CM: initiator_ext (0) and the port GID's
	# interface id, as its srp_send_req builds it.
	gid=$(cat /sys/class/infiniband/rxe0/ports/1/gids/0)
	iport=0x0000000000000000$(cut -d: -f5- <<<"$gid" | tr -d :)
	line="id_ext=0000000000005556,ioc_guid=0000000000000ac1,dest=10.99.0.1:5556"
	acl_daemon 5556 "$work/acl-refuse.log" 10.99.0.9 0x00000000000000000000000000000001
	rc=0
	if ! echo "$line" 2>"$work/add_target.err" >"$add_target"; then rc=1; fi
	((rc != 0)) || fail "a login the ACLs refuse was accepted"
	grep -q 'rejected' "$work/acl-refuse.log" || fail "no 'rejected' line for the refused login"
	note "refused by ACLs: add_target: $(cat "$work/add_target.err"); target: $(grep -o 'rejected.*' "$work/acl-refuse.log" | head -n 1)"
	acl_stop
	local port
	for port in 5557 5558; do
		line="id_ext=000000000000$port,ioc_guid=0000000000000ac1,dest=10.99.0.1:$port"
		if [[ $port == 5557 ]]; then
			acl_daemon $port "$work/acl-$port.log" "$iport"
		else
			acl_daemon $port "$work/acl-$port.log" 10.99.0.1
		fi
		echo "$line" >"$add_target" || fail "login refused with the ACL $( [[ $port == 5557 ]] && echo "$iport" || echo 10.99.0.1): $(tail -n 3 "$work/acl-$port.log")"
		h=$(srp_hosts | sort -n | tail -n 1)
		for _ in $(seq 300); do
			d=$(disk_of "$h" 0) && [[ -b /dev/$d ]] && break
			sleep 0.1
		done
		[[ -n $d && -b /dev/$d ]] || fail "no disk behind the ACL'd login (port $port)"
		dd if=/dev/$d of=/dev/null bs=64k count=16 iflag=direct status=none || fail "read through the ACL'd login"
		note "accepted by the ACL $( [[ $port == 5557 ]] && echo "$iport" || echo 10.99.0.1): /dev/$d"
		logout_all_quiet
		for _ in $(seq 300); do
			[[ -z $(srp_hosts) ]] && break
			sleep 0.1
		done
		acl_stop
	done
}

# The target killed (SIGKILL) under I/O and started again: ib_srp notices, reconnects
# after reconnect_delay (10 s; SINGLE, then MULTI, to a process that has never seen it)
# before fast_io_fail_tmo (15 s) fails its I/O; the disks stay, I/O goes on, a verified
# pass works. RAM LUNs: what was written before is gone. Runs in the main shell (it
# replaces ulp-targetd, which z then stops).
case_k() {
	local logins want
	[[ $peer == ulp ]] || { note "k: ulp-targetd only"; return 0; }
	ensure_login
	start_scratch_io 4k
	wait_io_running $dev0 100
	kill -KILL $tpid
	wait $tpid 2>/dev/null || true
	# The first process's logins are never closed: its log goes aside (logout_all counts).
	echo "--- (ulp-targetd killed with SIGKILL; restarted)" >>"$tlog"
	cp "$tlog" "$work/targetd-first.log"
	: >"$tlog"
	rm -f "$work/baseline.done" # the RAM went with the process
	note "ulp-targetd killed while fio wrote"
	sleep 2
	logins=0
	start_targetd
	want=$((logins + 4))
	for _ in $(seq 600); do # bounded: 60 s
		(($(count_log 'srpt: login: ') >= want)) && break
		sleep 0.1
	done
	(($(count_log 'srpt: login: ') >= want)) || fail "ib_srp did not log in again within 60 s of the restart ($(($(count_log 'srpt: login: ') - logins)) channels)"
	note "ib_srp reconnected: $(($(count_log 'srpt: login: ') - logins)) channels"
	# I/O goes on over the new login: the background fio still writes.
	if kill -0 "$fpid" 2>/dev/null; then
		wait_io_running $dev0 100
		note "the background fio writes on after the reconnect"
	fi
	stop_bg
	[[ $(scsi_state) == running ]] || fail "LUN 0's SCSI device is $(scsi_state) after the reconnect"
	run_fio k-write 300 --name=k0 --filename=$dev0 --rw=randwrite --bs=4k --iodepth=32 \
		--offset=0 --size=8M
	check_credits "after the restart"
}

# SIGTERM while logged in: the channels are disconnected, the process exits 0 in time.
case_z() {
	local rc=0
	ensure_login
	kill -TERM $tpid
	for _ in $(seq 250); do # ulp-targetd's bound is 15 s; 25 s under TCG
		kill -0 $tpid 2>/dev/null || break
		sleep 0.1
	done
	kill -0 $tpid 2>/dev/null && fail "ulp-targetd still running 25 s after SIGTERM"
	wait $tpid || rc=$?
	tpid=''
	((rc == 0)) || fail "ulp-targetd exited with status $rc after SIGTERM"
	grep -q 'ulp-targetd: stopped' "$tlog" || fail "no 'stopped' line after SIGTERM"
	if grep -E -i 'left allocated|still in use|leak' "$tlog"; then
		fail "ulp-targetd logged a leak"
	fi
	grep 'SRP stats:' "$tlog" | tail -n 1
	logout_all_quiet
	if dmesg | grep -E 'BUG:|WARNING:|Oops|general protection|hung_task|blocked for more than'; then
		fail "the guest kernel complained"
	fi
}

# ---- run ------------------------------------------------------------------------------------

# ib_srp as blktests loads it (tests/srp/rc): requests of up to 2048 scatter entries,
# whatever cmd_sg_entries a login asks for (how many fit in the SRP_CMD).
modprobe ib_srp indirect_sg_entries=2048
modprobe sd_mod
[[ -e $add_target ]] || { echo "srp_linux: FAIL: no $add_target (ib_srp on rxe0)"; exit 1; }
if [[ $peer == lio ]]; then
	start_lio
else
	start_targetd
fi
note "$peer listening on $portal (rxe0): $login_line"

declare -A what=([a]="fio randwrite+verify (srp/001)" [b]="logout/login under I/O (srp/002, 011)"
	[c]="large transfers, cmd_sg_entries=255 (srp/005)" [d]="cmd_sg_entries=1 (srp/007)"
	[e]="external descriptor tables" [f]="sg_reset -d/-b under verified I/O (srp/014)"
	[g]="host reset (reconnect) under verified I/O"
	[h]="ACLs: refused, by port id, by address"
	[k]="the target killed under I/O and restarted: ib_srp reconnects" [z]="SIGTERM while logged in")
last=z
[[ $peer == lio ]] && last=''
for c in $cases $last; do
	[[ -n ${what[$c]:-} ]] || { echo "srp_linux: no case $c"; exit 2; }
	[[ $peer == lio ]] || { [[ -n $tpid ]] && kill -0 $tpid 2>/dev/null; } || { echo "srp_linux: FAIL $c: ${what[$c]}: ulp-targetd is gone"; failed+=("$c"); continue; }
	note "case $c: ${what[$c]}"
	# A subshell per case (its fail ends the case, not the run), with errexit on inside:
	# not under || (which would switch it off). k and z run here (their fail ends the
	# run): they replace or wait for ulp-targetd, which must stay this shell's child.
	set +e
	if [[ $c == z || $c == k ]]; then
		case_$c
	else
		(
			set -e
			case_$c
		)
	fi
	rc=$?
	set -e
	if ((rc == 0)); then
		echo "srp_linux: PASS $c: ${what[$c]}"
	else
		echo "srp_linux: FAIL $c: ${what[$c]}"
		failed+=("$c")
	fi
done
keep_logs
if ((${#failed[@]})); then
	echo "srp_linux: FAILED: ${failed[*]}"
	exit 1
fi
note "passed: $cases $last"
