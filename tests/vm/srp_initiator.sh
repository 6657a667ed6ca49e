# shellcheck shell=bash
# shellcheck disable=SC2154 # work, tlog, peer, add_target, login_line: the caller's (below)
# tests/vm/srp_initiator.sh - sourced: the Linux SRP initiator (ib_srp over RDMA/CM) and
# verified fio, as the VM cases drive them against an SRP target on rxe0 (srp_linux.sh,
# stress_linux.sh). Inside the VM only.
#
# The caller defines note MESSAGE... and fail MESSAGE... (which ends the case), and sets:
#   work        a scratch folder (fio logs, add_target errors)
#   tlog        ulp-targetd's log (its "srpt: login: " and "channel closing: " lines)
#   peer        ulp, or lio (no checks of ulp's log or credits then)
#   add_target  /sys/class/infiniband_srp/srp-rxe0-1/add_target
#   login_line  the target's add_target options (id_ext=..,ioc_guid=..,dest=IP:PORT)
#   fpid, rpid  '' (background fio, background daemon: stop_bg ends them)
# login and ensure_login set host (the SCSI host) and dev0, dev1 (LUN 0 of 256 MiB and LUN 1
# of 64 MiB); the fio helpers write their logs to $work/fio-WHAT.log (the background one
# to $work/fio-bg.log).

# Background jobs of a case, by pid (only what we started).
# fpid is a `timeout` running fio. Killing only its pid left fio writing on, an orphan
# holding credits and disks (a later check of idle credits saw its I/O), and fio's job
# processes lead process groups of their own, so timeout's group is not all of it either:
# every fio goes (the background one is the only fio running whenever this is called),
# bounded: 30 s, the kernel finishing a killed fio's in-flight I/O before it is gone.
stop_bg() {
	set +e
	if [[ -n $fpid ]]; then
		kill -KILL -- -"$fpid" 2>/dev/null || kill -KILL "$fpid" 2>/dev/null
		wait "$fpid" 2>/dev/null
		for _ in $(seq 300); do
			pgrep -x fio >/dev/null || break
			pkill -KILL -x fio
			sleep 0.1
		done
		pgrep -x fio >/dev/null && note "fio still there 30 s after SIGKILL: $(ps -o pid=,stat=,args= -C fio | tr -s ' ' | tr '\n' ';')"
	fi
	[[ -n $rpid ]] && kill -KILL "$rpid" 2>/dev/null && wait "$rpid" 2>/dev/null
	fpid='' rpid=''
	set -e
}

count_log() { grep -c -- "$1" "$tlog" || true; }

# ---- the initiator --------------------------------------------------------------------------

# shellcheck source=tests/vm/srp_sysfs.sh
source "$(dirname "${BASH_SOURCE[0]}")/srp_sysfs.sh"

# The disk of LUN $2 behind SCSI host $1 (no udev: sysfs).
disk_of() {
	local d
	for d in /sys/class/scsi_device/"$1":0:0:"$2"/device/block/*; do
		[[ -e $d ]] && { basename "$d"; return 0; }
	done
	return 1
}
# Log in with the logged line + ch_count=4 + $1 (extra options); sets dev0, dev1, host.
login() {
	local opts="$login_line,ch_count=4${1:+,$1}" before a='' b=''
	before=$(count_log 'srpt: login: ')
	# ib_srp removes a deleted target port from its list only after its remote port is
	# gone (srp_remove_work): until then the same (id_ext, ioc_guid, initiator_ext) is
	# "File exists". Bounded: 20 s.
	for _ in $(seq 100); do
		echo "$opts" 2>"$work/add_target.err" >"$add_target" && break
		grep -q 'File exists' "$work/add_target.err" || break
		sleep 0.2
	done
	[[ -s $work/add_target.err ]] && fail "add_target '$opts': $(cat "$work/add_target.err")"
	host=$(srp_hosts | sort -n | tail -n 1)
	[[ -n $host ]] || fail "no SRP remote port after add_target '$opts'"
	for _ in $(seq 300); do # the SCSI scan is asynchronous; bounded: 30 s
		a=$(disk_of "$host" 0) && b=$(disk_of "$host" 1) && [[ -b /dev/$a && -b /dev/$b ]] && break
		sleep 0.1
	done
	[[ -n $a && -n $b && -b /dev/$a && -b /dev/$b ]] || fail "no disks for LUNs 0 and 1 on host$host"
	[[ $peer == lio || $(cat /sys/block/$a/device/vendor) == ULP* ]] || fail "$a is not a ULP disk"
	[[ $(cat /sys/block/$a/size) == 524288 ]] || fail "LUN 0 ($a) has $(cat /sys/block/$a/size) sectors"
	[[ $(cat /sys/block/$b/size) == 131072 ]] || fail "LUN 1 ($b) has $(cat /sys/block/$b/size) sectors"
	dev0=/dev/$a dev1=/dev/$b
	local chans=''
	[[ $peer == ulp ]] && chans=", $(($(count_log 'srpt: login: ') - before)) channels"
	note "logged in (${1:-defaults}): host$host$chans, LUN 0 = $dev0, LUN 1 = $dev1, max_sectors_kb $(cat /sys/block/$a/queue/max_sectors_kb)"
}
# A case starts from the login the last one left, or makes one: host, dev0, dev1.
ensure_login() {
	host=$(srp_hosts | sort -n | tail -n 1)
	if [[ -n $host ]] && a=$(disk_of "$host" 0) && b=$(disk_of "$host" 1); then
		dev0=/dev/$a dev1=/dev/$b
		return 0
	fi
	logout_all
	login ""
}
# Every SRP remote port deleted (ib_srp's logout: rdma_disconnect on every channel), and
# every channel the target accepted closed by it (bounded: 30 s).
logout_all() {
	local p logins closed
	for p in /sys/class/srp_remote_ports/port-*; do
		[[ -e $p/delete ]] && echo 1 >"$p/delete"
	done
	for _ in $(seq 300); do
		[[ -z $(srp_hosts) ]] && break
		sleep 0.1
	done
	[[ -z $(srp_hosts) ]] || fail "SRP remote ports still there 30 s after delete"
	[[ $peer == ulp ]] || return 0
	for _ in $(seq 300); do
		logins=$(count_log 'srpt: login: ')
		closed=$(count_log 'channel closing: ')
		((logins == closed)) && return 0
		sleep 0.1
	done
	fail "the target logged $logins channel logins but closed $closed"
}


# Verified writes (crc32c and each block's own offset, first failure fatal); libaio +
# O_DIRECT: every I/O reaches the target. --verify_only replays a job's writes (same
# seeds: randrepeat) and only reads.
fio_common=(--ioengine=libaio --direct=1 --verify=crc32c --do_verify=1 --verify_fatal=1
	--randrepeat=1)
fio_ok() { (($2 == 0)) && grep -q 'err= 0' "$1" && ! grep -qE 'err= *[1-9]' "$1"; }
# $1: what (for messages), $2: the timeout; the rest: fio's job arguments.
run_fio() {
	local what=$1 limit=$2 rc=0
	shift 2
	timeout -k 5 "$limit" fio "${fio_common[@]}" "$@" >"$work/fio-$what.log" 2>&1 || rc=$?
	if ! fio_ok "$work/fio-$what.log" $rc; then
		tail -n 40 "$work/fio-$what.log"
		((rc == 124)) && fail "fio $what: still running after $limit s"
		fail "fio $what: status $rc"
	fi
	note "fio $what: ok ($(grep -hoE '(read|write): IOPS=[^,]*, BW=[^ ]*' "$work/fio-$what.log" | tr '\n' ' '))"
}

writes_done() { awk '{ print $5 }' "/sys/block/$(basename "$1")/stat"; }
# Wait until the background fio completed $2 more writes on $1 (bounded: 30 s).
wait_io_running() {
	local dev=$1 want=$(($(writes_done "$1") + $2))
	for _ in $(seq 300); do
		(($(writes_done "$dev") >= want)) && return 0
		kill -0 "$fpid" 2>/dev/null || { tail "$work/fio-bg.log"; fail "background fio ended early"; }
		sleep 0.1
	done
	fail "background fio did not write $2 blocks to $dev in 30 s"
}

wait_fio_gone() {
	local rc=0
	for _ in $(seq 300); do # bounded: 30 s
		kill -0 "$fpid" 2>/dev/null || break
		sleep 0.1
	done
	kill -0 "$fpid" 2>/dev/null && { tail "$work/fio-bg.log"; fail "fio still running 30 s after $1"; }
	wait "$fpid" || rc=$?
	fpid=''
	note "background fio ended with status $rc after $1 (errors expected: the disks went away)"
}

scsi_state() { cat /sys/class/scsi_device/"$host":0:0:0/device/state; }
# Once I/O has stopped, every credit is back with the initiator: ib_srp's req_lim (the
# least of its channels') equals what the login granted, or credits leaked (a response
# that did not return its request's credit, an aborted command's never returned by a
# later response or an SRP_CRED_REQ). Bounded: 15 s.
check_credits() {
	local want lim='' first='' t0=$SECONDS
	[[ $peer == ulp ]] || return 0
	want=$(grep -oE 'srpt: login: .*: [0-9]+ credits' "$tlog" | tail -n 1 | grep -oE '[0-9]+ credits$' | cut -d' ' -f1)
	while ((SECONDS - t0 < 15)); do
		lim=$(</sys/class/scsi_host/host"$host"/req_lim)
		first=${first:-$lim}
		((lim == want)) && break
		sleep 0.1
	done
	((first == want)) || note "$1: ib_srp held $first credits at first, $lim after $((SECONDS - t0)) s"
	((lim == want)) || fail "$1: ib_srp holds $lim credits once idle, the login granted $want (zero_req_lim $(cat /sys/class/scsi_host/host"$host"/zero_req_lim); in flight on $dev0: $(cat /sys/block/"${dev0#/dev/}"/inflight | tr -s ' '), on $dev1: $(cat /sys/block/"${dev1#/dev/}"/inflight | tr -s ' '); fio: $(ps -o pid=,pgid=,stat=,etimes=,args= -C fio | tr -s ' ' | tr '\n' ';'))"
	note "$1: all $want credits back with the initiator (zero_req_lim $(cat /sys/class/scsi_host/host"$host"/zero_req_lim))"
}

# The initiator reconnects to nobody after the target stopped: delete its port.
logout_all_quiet() {
	local p
	for p in /sys/class/srp_remote_ports/port-*; do
		[[ -e $p/delete ]] && echo 1 >"$p/delete"
	done
	return 0
}
