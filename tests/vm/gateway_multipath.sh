#!/usr/bin/env bash
# tests/vm/gateway_multipath.sh ULP_TARGETD ULPCTL [TRANSPORT...] - Linux's own multipath
# (open-iscsi or ib_srp, dm-multipath, scsi_dh_alua) through two ulp-targetd gateways
# ([gateway]: one RBD image, one group of LUs with one owner) on a Ceph cluster, with their
# failover under verified writes, INSIDE the rxe VM (ctest vm_gateway_multipath starts it
# through tools/vm/run). TRANSPORT: tcp (iSCSI/TCP, the default), iser (iSCSI over RDMA on
# rxe0), srp (ib_srp over RDMA/CM on rxe0); several run one after the other.
#
# In the guest: a single-node Ceph cluster (scripts/ceph-dev.sh, memstore, under the guest's
# tmpfs), image rbd/gwimg, and two gateways gw1 and gw2 (leases of ULP_GW_LEASE s, default 10:
# see below; rtpis 10 and 20, SRP ports 15 and 25) serving it as LUN 0 of one target, each with one
# portal per transport asked for. gw1 starts first and owns the group (its ports report
# active/optimized), gw2 joins as standby. For each transport, A being the owner and B the
# other, each step bounded and checked:
#   1. a login to each, B's through its standby port: Linux sizes LUN 0's disk alike through
#      both (the standby port answers READ CAPACITY, scsi/alua.cc: sysfs, blockdev and
#      sg_readcap agree), scsi_dh_alua is attached to each, and REPORT TARGET PORT GROUPS
#      (sg_rtpg) through both gives A's group active/optimized, B's standby;
#      over tcp only (the reservations are the gateways' and RADOS', whatever the fabric),
#      reservations across gateways (SPC-4 5.13; docs/ha.md), on the sd paths before the
#      map holds them: sg_persist registers 0xa1 through A and 0xb2 through B, READ KEYS
#      through each lists both with one PRgeneration; RESERVE (Write Exclusive) through A
#      shows through B; reserved through B, a WRITE (10) through A (sg_raw) gets RESERVATION
#      CONFLICT; PREEMPT AND ABORT of 0xb2 through A: B's key gone through B, A writes
#      again; CLEAR. Then fence_scsi (fence-agents): `-o on` through A, then through B;
#      `-o off` of A's key through B (its stored key, B's, preempts-and-aborts A's);
#      through A, `-o status` of A's key is off (status 2), of B's on, A's WRITE conflicts;
#      CLEAR;
#   2. multipathd (tests/vm/dm_multipath.sh: group_by_prio, prio alua, hardware_handler
#      "1 alua", fast_io_fail_tmo 3, which it sets as iSCSI's replacement timeout) makes one
#      map of the two disks: A's path at priority 50, its checker ready, B's at 1 (standby,
#      the checker's "ghost"); fio writes 4K blocks with crc32c verify on the map, every 16
#      read back while it runs, the first mismatch fatal; the writes go through A's disk only;
#   3. a planned move under the writes (`ulpctl gateway drain` of A): B owns the group (its
#      epoch one more), nobody fenced, A standby; the map's priorities follow (B 50, A 1) and
#      the writes go on through B's disk;
#   4. SIGKILL of the owner B: A fences it (its log says so), becomes active (the owner
#      record's epoch one more) and the writes go on through A's disk; B started again joins
#      as standby and its path comes back; the map's priorities follow (A 50, B 1);
#   5. SIGSTOP of the new owner A: B takes the group over once A's lease has run out; then
#      SIGCONT: A finds itself fenced and exits with status 3 (what it could not complete
#      answered NOT READY, port unavailable, which dm-multipath retries through B); the
#      writes go on through B; A started again joins as standby, its path comes back;
#   6. fio stopped (SIGINT): no error, its verify reads passed; for the drain and each
#      failover the longest time without a completed I/O (fio's per-I/O log against the
#      drain's or the signal's time), printed; the map removed, logout. B owns the group for
#      the next transport.
# Then both gateways stopped (SIGTERM: each exits 0) and the kernel logged no
# BUG/WARNING/Oops. On any failure: the reason, then the tails of the gateways', iscsid's and
# multipathd's logs and dmesg (all logs, Ceph's too, copied to /run/ulp-vm/gateway_multipath
# when tools/vm/run --share DIR keeps them; pr.log, every sg_persist, sg_raw and fence_scsi
# of the reservations' step with its output, is copied there on a pass too).
#
# By hand, all three transports (vm_gateway_multipath_rdma has iser and srp):
#   ULP_VM_SMP=2 tools/vm/run --timeout 1800 --share /tmp/out -- bash \
#       tests/vm/gateway_multipath.sh build/tools/ulp-targetd/ulp-targetd build/tools/ulpctl/ulpctl tcp iser srp
set -euo pipefail

usage="usage: gateway_multipath.sh ULP_TARGETD ULPCTL [tcp|iser|srp]..."
targetd=${1:?$usage}
ulpctl=${2:?$usage}
shift 2
transports=("$@")
((${#transports[@]})) || transports=(tcp)
for tr in "${transports[@]}"; do
	[[ $tr == tcp || $tr == iser || $tr == srp ]] || { echo "gateway_multipath: no transport '$tr' ($usage)"; exit 2; }
done
[[ ${ULP_IN_VM:-} == 1 ]] || { echo "gateway_multipath: run me inside the VM (tools/vm/run)"; exit 2; }
for t in iscsid iscsiadm fio sg_rtpg sg_persist sg_raw multipath multipathd dmsetup rbd rados ceph-mon ceph-osd jq; do
	command -v $t >/dev/null || {
		echo "gateway_multipath: $t missing (open-iscsi, fio, sg3-utils, multipath-tools, dmsetup, ceph, jq)"
		exit 1
	}
done
[[ " ${transports[*]} " != *" tcp "* ]] || command -v fence_scsi >/dev/null || {
	echo "gateway_multipath: fence_scsi missing (fence-agents: scripts/install-deps.sh)"
	exit 1
}
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)

iqn=iqn.2026-11.org.ulp:ha
image=gwimg
# The daemon's default lease. With 5 s, on a 2-core host at load 6-10 (the guest's two vCPUs
# then get about half a core), an owner failed to renew within its lease in 4 of 9 runs
# (its "the lease ends in under 1250 ms and is not renewed yet", then "the lease is lost"):
# it fenced itself, as it must, and the other took over unasked.
lease=${ULP_GW_LEASE:-10}
hold_off=10 # after a drain, the drained gateway acquires no group for so many seconds
work=/tmp/gateway-multipath # the guest's tmpfs overlay: gone when the VM powers off
mkdir -p "$work"
ilog=$work/iscsid.log
mlog=$work/multipathd.log
ulog=$work/udevd.log
t_start=$SECONDS
ipid='' mpid='' upid='' fpid='' cpid=''
declare -A gpid=() # gateway number -> its daemon's pid
declare -A glaunch=() # gateway number -> $SECONDS at its last start
declare -A disk=() # gateway number -> its path's disk (of the transport being tested)
mp=mpgw            # the map's alias
add_target=/sys/class/infiniband_srp/srp-rxe0-1/add_target
# Each gateway's portals and relative port ids (they must differ between the gateways: the
# two are one SCSI target device's ports).
declare -A tcp_portal=([1]=10.99.0.1:3261 [2]=10.99.0.1:3262)
declare -A iser_portal=([1]=10.99.0.1:3271 [2]=10.99.0.1:3272)
declare -A srp_portal=([1]=10.99.0.1:5561 [2]=10.99.0.1:5562)
declare -A srp_id_ext=([1]=000000000000aa01 [2]=000000000000aa02)
portal=${tcp_portal[1]} # iscsi_initiator.sh's default (unused: every call names its portal)
# shellcheck source=tests/vm/iscsi_initiator.sh
source "$(dirname "${BASH_SOURCE[0]}")/iscsi_initiator.sh"
# shellcheck source=tests/vm/dm_multipath.sh
source "$(dirname "${BASH_SOURCE[0]}")/dm_multipath.sh"
# shellcheck source=tests/vm/srp_sysfs.sh
source "$(dirname "${BASH_SOURCE[0]}")/srp_sysfs.sh"

note() { printf 'gateway_multipath [%3ds]: %s\n' $((SECONDS - t_start)) "$*"; }
now_ms() { echo $((${EPOCHREALTIME/./} / 1000)); }
dump() {
	local n
	for n in 1 2; do
		echo "--- gw$n's log (tail)"
		tail -n 40 "$work/gw$n.log" 2>/dev/null || true
	done
	echo "--- iscsid log (tail)"
	tail -n 20 "$ilog" 2>/dev/null || true
	echo "--- multipathd log (tail)"
	tail -n 40 "$mlog" 2>/dev/null || true
	echo "--- dmesg (tail)"
	dmesg | tail -n 50
	if [[ -d /run/ulp-vm ]]; then # tools/vm/run --share DIR keeps them
		mkdir -p /run/ulp-vm/gateway_multipath
		cp "$work"/*.log /run/ulp-vm/gateway_multipath/ 2>/dev/null || true
		cp -r "$work/ceph/log" /run/ulp-vm/gateway_multipath/ceph-log 2>/dev/null || true
		dmesg >/run/ulp-vm/gateway_multipath/dmesg.log || true
	fi
}
fail() {
	trap - ERR
	echo "gateway_multipath: FAIL [$((SECONDS - t_start))s]: $*"
	dump
	exit 1
}
srp_ports_delete() {
	local p
	for p in /sys/class/srp_remote_ports/port-*; do
		[[ -e $p/delete ]] && echo 1 >"$p/delete"
	done
	return 0
}
cleanup() {
	# Keeps the script's status: nothing here may fail it (errexit applies in traps).
	trap - ERR
	set +e
	# Only what we started, by pid; the VM powers off after us anyway.
	[[ -n $fpid ]] && kill -KILL "$fpid" 2>/dev/null && pkill -KILL -x fio
	[[ -n $cpid ]] && kill -TERM "$cpid" 2>/dev/null
	[[ -n $mpid ]] && kill -TERM "$mpid" 2>/dev/null
	if dmsetup info $mp >/dev/null 2>&1; then
		timeout -k 2 10 dmsetup message $mp 0 fail_if_no_path >/dev/null 2>&1
		timeout -k 2 20 dmsetup remove --retry $mp >/dev/null 2>&1
	fi
	timeout -k 5 30 iscsiadm -m node --logoutall=all >/dev/null 2>&1
	srp_ports_delete
	[[ -n $ipid ]] && kill -TERM "$ipid" 2>/dev/null
	[[ -n $upid ]] && kill -TERM "$upid" 2>/dev/null
	for n in "${!gpid[@]}"; do kill -CONT "${gpid[$n]}" 2>/dev/null; kill -KILL "${gpid[$n]}" 2>/dev/null; done
	return 0
}
trap cleanup EXIT
# A command that fails the script (errexit) says where, with the logs, like any failure.
set -E
trap 'fail "line $LINENO: a command failed (status $?)"' ERR

# ---- the cluster, the image, the gateways ----------------------------------------------------

want() { [[ " ${transports[*]} " == *" $1 "* ]]; }

# ceph-dev.sh bounds each of its waits; ULP_CEPH_CALL_SCALE stretches them for TCG (where a
# client's start takes seconds). The whole start bounded: 300 s. In the background, while the
# initiator's side is set up.
note "starting a Ceph cluster (scripts/ceph-dev.sh, memstore) in $work/ceph; bounded: 300 s"
t0=$SECONDS
timeout -k 10 300 env ULP_CEPH_CALL_SCALE=6 "$repo/scripts/ceph-dev.sh" start --dir "$work/ceph" \
	--store memstore --size 1 --timeout 240 >"$work/ceph-start.log" 2>&1 &
cpid=$!

modprobe sg
modprobe scsi_dh_alua
modprobe dm_multipath
modprobe dm_round_robin
modprobe dm_service_time
iscsi_start
if want srp; then
	# A lost connection is retried every 2 s, its I/O failed after 3 s (then dm-multipath
	# sends it through the other path), the disk kept for 5 minutes.
	modprobe ib_srp reconnect_delay=2 fast_io_fail_tmo=3 dev_loss_tmo=300
	[[ -e $add_target ]] || fail "no $add_target (ib_srp on rxe0)"
fi
mp_udev_start

rc=0
wait "$cpid" || rc=$?
cpid=''
((rc == 0)) || { cat "$work/ceph-start.log"; fail "scripts/ceph-dev.sh start: status $rc (124: not up after 300 s)"; }
eval "$("$repo/scripts/ceph-dev.sh" env --dir "$work/ceph")"
note "Ceph up in $((SECONDS - t0)) s: $(grep -o 'mon v2:[^,]*' "$work/ceph-start.log" | head -n 1) ($(grep -oE '(mon.a|osd.0) up after [0-9]+ ms' "$work/ceph-start.log" | paste -sd ',' | sed 's/,/, /'))"
timeout -k 2 60 rbd create --size 64M "rbd/$image" >"$work/rbd.log" 2>&1 || { cat "$work/rbd.log"; fail "rbd create rbd/$image"; }

rdma=0
for tr in "${transports[@]}"; do [[ $tr == tcp ]] || rdma=1; done
# Gateway $1's configuration: its portals for the transports asked for, in one portal group.
gw_conf() {
	local n=$1 pg=()
	want tcp && pg+=("\"${tcp_portal[$n]}\"")
	want iser && pg+=("\"${iser_portal[$n]}\"")
	{
		echo "state_dir = \"$work/state$n\""
		echo "admin_socket = \"$work/gw$n.sock\""
		want tcp && echo "portals = [\"${tcp_portal[$n]}\"]"
		want iser && echo "iser_portals = [\"${iser_portal[$n]}\"]"
		want srp && echo "srp_portals = [\"${srp_portal[$n]}\"]"
		((rdma)) && echo 'rdma_device = "rxe0"'
		cat <<-EOF
			[gateway]
			name = "gw$n"
			pool = "rbd"
			conf = "$CEPH_CONF"
			lease = $lease
			hold_off = $hold_off
		EOF
		want srp && cat <<-EOF
			[srp]
			id_ext = "0x${srp_id_ext[$n]}"
			rtpi = ${n}5
			target = "$iqn"
		EOF
		cat <<-EOF
			[[target]]
			name = "$iqn"
			  [[target.portal_group]]
			  tag = 1
			  rtpi = ${n}0
			  portals = [$(IFS=,; echo "${pg[*]}")]
			  [[target.lun]]
			  lun = 0
			  backstore = "rbd"
			  pool = "rbd"
			  image = "$image"
			  conf = "$CEPH_CONF"
			  group = "g1"
		EOF
	} >"$work/gw$n.toml"
	mkdir -p "$work/state$n"
}
ctl() { # $1 the gateway's number, then ulpctl's arguments
	local n=$1
	shift
	timeout -k 2 20 "$ulpctl" --socket "$work/gw$n.sock" --timeout 15 "$@"
}
# Field $2 (jq) of gateway $1's `ulpctl gateway show`; empty when it does not answer.
gw_field() { ctl "$1" --json gateway show 2>/dev/null | jq -r "$2" 2>/dev/null || true; }
# Gateway $1 started in the background; gw_wait_ready waits until it listens. Niced until
# then: its start (two Ceph clients, the image opened; 10-15 s of CPU under TCG) shares the
# guest's vCPUs with the OSD, the mon and the other gateway, whose lease renewals must not
# starve meanwhile (an owner that cannot renew within its lease fences itself).
gw_launch() {
	local n=$1
	rm -f "$work/gw$n.ready"
	echo "==== start $(date +%T.%N)" >>"$work/gw$n.log"
	nice -n 10 "$targetd" --config "$work/gw$n.toml" --ready-fd 9 9>"$work/gw$n.ready" 2>>"$work/gw$n.log" &
	gpid[$n]=$!
	glaunch[$n]=$SECONDS
}
# Bounded: 60 s from its launch until it listens (it has joined the cluster and opened the
# image first).
gw_wait_ready() {
	local n=$1 st=0
	while ((SECONDS - glaunch[$n] < 60)); do
		if [[ -s $work/gw$n.ready ]]; then
			# Every thread back to the default priority (nice is per thread).
			for t in /proc/"${gpid[$n]}"/task/*; do renice -n 0 -p "${t##*/}" >/dev/null 2>&1 || true; done
			return 0
		fi
		if ! kill -0 "${gpid[$n]}" 2>/dev/null; then
			wait "${gpid[$n]}" || st=$?
			unset "gpid[$n]"
			fail "gw$n exited with status $st during its start"
		fi
		sleep 0.1
	done
	fail "gw$n not listening 60 s after its start"
}
# Until gateway $1's group is in state $2 (its owner state: active, standby...); $3 the
# bound in seconds, $4 why.
gw_wait_state() {
	local t0=$SECONDS st=''
	while ((SECONDS - t0 < $3)); do
		st=$(gw_field "$1" '.groups[0].state')
		[[ $st == "$2" ]] && return 0
		sleep 0.5 # ulpctl and jq cost CPU the gateways need (TCG)
	done
	fail "$4: gw$1's group is '${st:-no answer}', not $2, after $3 s"
}
# Until gateway $1's process has ended (bounded: $2 s); its exit status in $gw_status.
gw_wait_exit() {
	local pid=${gpid[$1]}
	for _ in $(seq $(($2 * 10))); do
		kill -0 "$pid" 2>/dev/null || break
		sleep 0.1
	done
	kill -0 "$pid" 2>/dev/null && fail "gw$1 still running $2 s after $3"
	gw_status=0
	wait "$pid" || gw_status=$?
	unset "gpid[$1]"
}
gw_summary() { # $1 the gateway's number: one line of its group's view
	gw_field "$1" '.groups[0] | "state \(.state), ports \(.ports), owner \(.owner), epoch \(.epoch)"'
}

for n in 1 2; do gw_conf $n; done
# One after the other: gw1 owns the group, then gw2 joins as standby. (Started at once, in
# one run of this case the new owner broke an exclusive lock the other's client held,
# which blocklisted it, and it exited 3 before any login.)
t0=$SECONDS
gw_launch 1
gw_wait_ready 1
gw_wait_state 1 active 60 "gw1, the first gateway"
gw_launch 2
gw_wait_ready 2
gw_wait_state 2 standby 60 "gw2, the second gateway"
own=1
note "gateways up in $((SECONDS - t0)) s (lease $lease s): gw1 $(gw_summary 1); gw2 $(gw_summary 2)"

# ---- the initiators ---------------------------------------------------------------------------

# The disk of LUN 0 of the iSCSI session whose connection goes to port $1 (sysfs: no udev).
iscsi_disk_at() {
	local s c d
	for s in /sys/class/iscsi_session/session*; do
		c=/sys/class/iscsi_connection/connection${s##*session}:0
		[[ $(cat "$c/persistent_port" 2>/dev/null) == "$1" ]] || continue
		for d in "$s"/device/target*/*:*:*:0/block/*; do
			[[ -e $d ]] && { basename "$d"; return 0; }
		done
	done
	return 1
}
# Log in to gateway $2 over transport $1; sets disk[$2] to its disk of LUN 0.
login() {
	local tr=$1 n=$2 p d='' line before host=''
	case $tr in
	tcp | iser)
		[[ $tr == tcp ]] && p=${tcp_portal[$n]} || p=${iser_portal[$n]}
		iscsi_node_new "$([[ $tr == tcp ]] && echo default || echo iser)" "$p"
		iscsi_node_at "$p" --login >"$work/login.out" 2>&1 || { cat "$work/login.out"; fail "login to gw$n ($tr, $p)"; }
		for _ in $(seq 200); do # the SCSI scan is asynchronous; bounded: 20 s
			d=$(iscsi_disk_at "${p#*:}") && [[ -b /dev/$d ]] && break
			sleep 0.1
		done
		;;
	srp)
		# The line the gateway logs for Linux's add_target (its id_ext is ours).
		line=$(grep -oE "echo id_ext=${srp_id_ext[$n]},ioc_guid=[0-9a-f]{16},dest=${srp_portal[$n]} " \
			"$work/gw$n.log" | tail -n 1 | sed 's/^echo //; s/ $//')
		[[ -n $line ]] || fail "no add_target line with id_ext ${srp_id_ext[$n]} in gw$n's log"
		before=$(srp_hosts | sort -n | tail -n 1)
		echo "$line" 2>"$work/add_target.err" >"$add_target" ||
			fail "add_target '$line' (gw$n): $(cat "$work/add_target.err")"
		host=$(srp_hosts | sort -n | tail -n 1)
		[[ -n $host && $host != "$before" ]] || fail "no new SRP remote port after add_target '$line'"
		for _ in $(seq 300); do # bounded: 30 s
			for d in /sys/class/scsi_device/"$host":0:0:0/device/block/*; do
				[[ -e $d ]] && { d=$(basename "$d"); break 2; }
			done
			d=''
			sleep 0.1
		done
		;;
	esac
	[[ -n $d && -b /dev/$d ]] || fail "no disk for LUN 0 after the login to gw$n ($tr)"
	[[ $(cat /sys/block/"$d"/size) == 131072 ]] || fail "$d (gw$n, $tr) has $(cat /sys/block/"$d"/size) sectors, not 131072"
	[[ $(cat /sys/block/"$d"/device/dh_state) == alua ]] ||
		fail "scsi_dh_alua is not attached to $d (dh_state $(cat /sys/block/"$d"/device/dh_state))"
	disk[$n]=$d
}
logout_all() { # $1 the transport
	local n p
	case $1 in
	tcp | iser)
		for n in 1 2; do
			[[ $1 == tcp ]] && p=${tcp_portal[$n]} || p=${iser_portal[$n]}
			iscsi_node_at "$p" --logout >"$work/logout.out" 2>&1 || { cat "$work/logout.out"; fail "logout from gw$n ($1)"; }
			iscsi_node_at "$p" -o delete >/dev/null 2>&1 || fail "iscsiadm: delete the node record of $p"
		done
		;;
	srp)
		srp_ports_delete
		for _ in $(seq 300); do
			[[ -z $(srp_hosts) ]] && break
			sleep 0.1
		done
		[[ -z $(srp_hosts) ]] || fail "SRP remote ports still there 30 s after their delete"
		;;
	esac
}

# rtpg_got: sg_rtpg's report through disk $1 as "GROUP:STATE ..." (hex as printed), e.g.
# "1:0 2:2".
rtpg() {
	local out line id=0
	out=$(timeout -k 2 30 sg_rtpg -d "/dev/$1" 2>&1) || { echo "$out"; fail "sg_rtpg /dev/$1"; }
	rtpg_got=''
	while read -r line; do
		if [[ $line =~ target\ port\ group\ id\ *:\ *(0x[0-9a-fA-F]+) ]]; then
			id=$((BASH_REMATCH[1]))
		elif [[ $line =~ asymmetric\ access\ state\ *:\ *(0x[0-9a-fA-F]+) ]]; then
			rtpg_got+="${rtpg_got:+ }$id:$((BASH_REMATCH[1]))"
		fi
	done <<<"$out"
}

writes_done() {
	local w
	read -r _ _ _ _ w _ <"/sys/block/$1/stat"
	echo "$w"
}
fio_alive() { kill -0 "$fpid" 2>/dev/null || { tail -n 20 "$work/fio-$tr.log"; fail "fio ended before $1"; }; }
# Until disk $1 has completed $2 more writes (bounded: $4 s, default 30); $3 says when.
wait_writes() {
	local w1 t0=$SECONDS
	w1=$(writes_done "$1")
	while (($(writes_done "$1") < w1 + $2)); do
		((SECONDS - t0 < ${4:-30})) || fail "$3: $1 did not complete $2 writes in ${4:-30} s"
		fio_alive "$3"
		sleep 0.2
	done
}
# Until path $1 is back in the map: dm uses it and its checker finds it ready, or ghost (a
# standby port: TEST UNIT READY answered NOT READY, standby); bounded: 60 s (the initiator
# logs in again, multipathd's checker reinstates it).
wait_path_back() {
	local t0=$SECONDS st=''
	while ((SECONDS - t0 < 60)); do
		st=$(mp_path_states | awk -v d="$1" '$1 == d { print $2, $3 }')
		[[ $st == "active ready" || $st == "active ghost" ]] && return 0
		sleep 0.5
	done
	mp_path_states
	fail "$2: path $1 is '$st', not 'active ready' or 'active ghost' (standby), after 60 s"
}

# ---- reservations across gateways (tcp) -------------------------------------------------------

# The two paths are one LU through two gateways: two I_T nexuses of one initiator port name,
# at different target ports (rtpis 10 and 20). Persistent reservations are the LU's (SPC-4
# 5.13), shared through RADOS (docs/ha.md, "Reservations across gateways"): what one nexus
# registers or reserves through one gateway, the other sees through the other gateway, and
# the owner's gateway enforces a reservation made through the standby's. Run on the sd
# paths before multipathd makes its map (dm would hold them; fence_scsi would then register
# through every path of the map, not the one asked for).
pr_log=$work/pr.log
# sg_persist through disk $1 (the other arguments are sg_persist's), bounded; its output in
# $pr_out, its exit status in $pr_st (6: UNIT ATTENTION, 24: RESERVATION CONFLICT). A change
# made through one nexus sets unit attentions on the others (REGISTRATIONS PREEMPTED...,
# SPC-4 5.13.11.2.4), which PERSISTENT RESERVE IN reports like any command: the command is
# sent again, as an initiator does, 4 times at most; $pr_ua counts them.
pr_ua=0
pr() {
	local d=$1
	shift
	for _ in 1 2 3 4 5; do
		pr_st=0
		pr_out=$(timeout -k 2 30 sg_persist -n "$@" "/dev/$d" 2>&1) || pr_st=$?
		printf '## sg_persist -n %s /dev/%s: status %s\n%s\n' "$*" "$d" "$pr_st" "$pr_out" >>"$pr_log"
		((pr_st == 6)) || break
		pr_ua=$((pr_ua + 1))
	done
}
# pr that must succeed; $2 says what, for the failure.
pr_ok() {
	local d=$1 why=$2
	shift 2
	pr "$d" "$@"
	((pr_st == 0)) || { echo "$pr_out"; fail "$why: sg_persist $* through $d: status $pr_st"; }
}
# Of the last PERSISTENT RESERVE IN: the keys READ KEYS listed (SPC-4 6.16.2), sorted, or
# "none"; PRgeneration; the holder's key and the type READ RESERVATION gave (6.16.3), or
# "none".
pr_keys() {
	local k
	k=$(grep -oE '^ +0x[0-9a-f]+ *$' <<<"$pr_out" | tr -d ' ' | sort | paste -sd ' ' || true)
	echo "${k:-none}"
}
pr_gen() { grep -oE 'PR generation=0x[0-9a-f]+' <<<"$pr_out" | head -n 1 | cut -d= -f2 || true; }
pr_holder() {
	local k t
	k=$(grep -oE 'Key=0x[0-9a-f]+' <<<"$pr_out" | cut -d= -f2 || true)
	t=$(grep -oE 'type: .*' <<<"$pr_out" | sed 's/^type: //; s/ *$//' || true)
	[[ -n $k ]] && echo "$k, $t" || echo none
}
# READ KEYS through disk $1 must list $2 ("0x.. 0x.." sorted, or "none"); $3 says when.
pr_want_keys() {
	pr_ok "$1" "$3" -i -k
	[[ $(pr_keys) == "$2" ]] || { echo "$pr_out"; fail "$3: READ KEYS through $1 lists '$(pr_keys)', not '$2'"; }
}
# READ RESERVATION through disk $1 must give "$2" ("KEY, TYPE" as sg_persist names it, or
# "none"); $3 says when.
pr_want_holder() {
	pr_ok "$1" "$3" -i -r
	[[ $(pr_holder) == "$2" ]] || { echo "$pr_out"; fail "$3: READ RESERVATION through $1 gives '$(pr_holder)', not '$2'"; }
}
# WRITE (10) of one block at LBA 256 through disk $1 by SG_IO (sg_raw: no page cache, no
# retries by the kernel's block layer), bounded; $2 the SCSI status it must end with, as
# sg_raw prints it ("Good", "Reservation Conflict": 18h); $3 says when. A unit attention is
# sent again, as pr's.
pr_write() {
	local d=$1 want=$2 why=$3 out st status
	for _ in 1 2 3 4 5; do
		st=0
		out=$(timeout -k 2 40 sg_raw -t 30 -s "$bsz" -i "$work/pr-block" "/dev/$d" 2a 00 00 00 01 00 00 00 01 00 2>&1) || st=$?
		printf '## WRITE (10) through /dev/%s: status %s\n%s\n' "$d" "$st" "$out" >>"$pr_log"
		((st == 6)) || break
		pr_ua=$((pr_ua + 1))
	done
	status=$(grep -m 1 -oE 'SCSI Status: .*' <<<"$out" | sed 's/^SCSI Status: //; s/ *$//' || true)
	[[ $status == "$want" ]] || { echo "$out"; fail "$why: WRITE (10) through $d: SCSI status '${status:-none}' (sg_raw status $st), not '$want'"; }
	wr_status=$status
}
# fence_scsi (fence-agents) with arguments $2..., bounded; it must exit with status $1 (0
# success; for -o status, 0 on, 2 off); its output in $fence_out.
fence() {
	local want=$1 st=0
	shift
	fence_out=$(timeout -k 5 120 fence_scsi "$@" 2>&1) || st=$?
	printf '## fence_scsi %s: status %s\n%s\n' "$*" "$st" "$fence_out" >>"$pr_log"
	((st == want)) || { echo "$fence_out"; fail "fence_scsi $*: status $st, not $want"; }
}

# $1 the owner's disk (A), $2 the standby's (B), $3 the owner's gateway, $4 the standby's.
pr_across() {
	local A=$1 B=$2 ga=$3 gb=$4 gen_a gen_b ka=a1a1a1 kb=b2b2b2
	head -c "$bsz" /dev/urandom >"$work/pr-block"
	: >"$pr_log"
	pr_ua=0
	note "tcp: reservations across gateways: A = $A (gw$ga, owner), B = $B (gw$gb, standby)"
	# A new image: nothing registered.
	pr_want_keys "$A" none "before the reservations"
	pr_want_keys "$B" none "before the reservations"

	# 1. REGISTER through each (SPC-4 6.17.2, 5.13.7; PERSISTENT RESERVE OUT is allowed
	# through a standby port, 5.15.2.4.4): each gateway lists both (PRgeneration is the
	# LU's, one counter whatever the port).
	pr_ok "$A" "REGISTER 0xa1 through A" -o -G -S a1
	pr_ok "$B" "REGISTER 0xb2 through B" -o -G -S b2
	pr_want_keys "$A" "0xa1 0xb2" "registered through both"
	gen_a=$(pr_gen)
	pr_want_keys "$B" "0xa1 0xb2" "registered through both"
	gen_b=$(pr_gen)
	[[ -n $gen_a && $gen_a == "$gen_b" ]] || fail "READ KEYS: PRgeneration $gen_a through A, $gen_b through B"
	note "tcp: REGISTER 0xa1 through A, 0xb2 through B: READ KEYS through A and B: 0xa1 0xb2, PRgeneration $gen_a through both"
	# RESERVE Write Exclusive through A: B's gateway reports it (READ RESERVATION, 6.16.3).
	pr_ok "$A" "RESERVE WE by 0xa1 through A" -o -R -K a1 -T 1
	pr_want_holder "$B" "0xa1, Write Exclusive" "reserved through A"
	pr_write "$A" Good "the holder A writes"
	note "tcp: RESERVE (Write Exclusive) by 0xa1 through A: READ RESERVATION through B: 0xa1, Write Exclusive; WRITE through A (the holder): $wr_status"
	pr_ok "$A" "RELEASE by 0xa1 through A" -o -L -K a1 -T 1
	pr_want_holder "$B" none "released through A"
	# Reserved through the standby's gateway, enforced by the owner's: a write through A (the
	# owner's port, registered but not the holder) conflicts (SBC-3 4.17 table 13: Write
	# Exclusive lets only the holder write). B's own writes are NOT READY anyway (standby).
	pr_ok "$B" "RESERVE WE by 0xb2 through B" -o -R -K b2 -T 1
	pr_want_holder "$A" "0xb2, Write Exclusive" "reserved through B"
	pr_write "$A" "Reservation Conflict" "reserved by 0xb2 through B (Write Exclusive)"
	note "tcp: RELEASE through A, RESERVE (Write Exclusive) by 0xb2 through B: READ RESERVATION through A: 0xb2, Write Exclusive; WRITE through A: $wr_status"
	# PREEMPT AND ABORT of the holder 0xb2 through A (5.13.11.2.4.3, 5.13.11.2.5): B's
	# registration goes, A holds the reservation (the type given) and writes again.
	pr_ok "$A" "PREEMPT AND ABORT of 0xb2 by 0xa1 through A" -o -A -K a1 -S b2 -T 1
	pr_want_keys "$B" 0xa1 "0xb2 preempted through A"
	pr_want_holder "$B" "0xa1, Write Exclusive" "0xb2 preempted through A"
	pr_write "$A" Good "0xb2 preempted through A: A holds the reservation"
	note "tcp: PREEMPT AND ABORT of 0xb2 by 0xa1 through A: READ KEYS through B: 0xa1; READ RESERVATION through B: 0xa1, Write Exclusive; WRITE through A: $wr_status"
	pr_ok "$A" "CLEAR by 0xa1 through A" -o -C -K a1
	pr_want_keys "$B" none "cleared through A"
	pr_want_holder "$B" none "cleared through A"
	pr_want_keys "$A" none "cleared through A"
	note "tcp: CLEAR through A: READ KEYS, READ RESERVATION through B: none"

	# 2. fence_scsi (fence-agents), as a cluster fences a node with it: each node's `-o on`
	# registers its key (REGISTER AND IGNORE EXISTING KEY) and, if nobody holds one,
	# reserves Write Exclusive - Registrants Only; `-o off -k VICTIM` preempts-and-aborts
	# VICTIM with the key of this host it stored (the last `-o on`'s, here B's, in
	# /var/run/cluster.key: its STORE_PATH "/var/run/cluster" plus ".key"). Node A through
	# gw$ga, node B through gw$gb; A fenced from B's side.
	fence 0 -o on -k $ka -d "/dev/$A"
	fence 0 -o on -k $kb -d "/dev/$B"
	local hk
	hk=$(cat /var/run/cluster.key 2>/dev/null || true)
	[[ $hk == "$kb" ]] || fail "fence_scsi: the host key it stored (/var/run/cluster.key) is '$hk', not $kb"
	pr_want_keys "$A" "0x$ka 0x$kb" "fence_scsi -o on through A and B"
	pr_want_holder "$B" "0x$ka, Write Exclusive, registrants only" "fence_scsi -o on through A and B"
	pr_write "$A" Good "fence_scsi -o on through A and B: A is registered"
	note "tcp: fence_scsi -o on -k $ka through A, -k $kb through B: status 0; READ KEYS through A: 0x$ka 0x$kb; READ RESERVATION through B: 0x$ka, WERO; WRITE through A: $wr_status"
	fence 0 -o off -k $ka -d "/dev/$B"
	local off=$fence_out st_a
	# Read through the other gateway: A's registration is gone, B holds the reservation
	# (preempting the holder moves it, 5.13.11.2.4.3), A's writes conflict (WERO: only
	# registrants write).
	pr_want_keys "$A" "0x$kb" "fenced A through B"
	pr_want_holder "$A" "0x$kb, Write Exclusive, registrants only" "fenced A through B"
	fence 2 -o status -k $ka -d "/dev/$A"
	grep -q 'Status: OFF' <<<"$fence_out" || { echo "$fence_out"; fail "fence_scsi -o status -k $ka through A: not 'Status: OFF'"; }
	st_a=$fence_out
	pr_write "$A" "Reservation Conflict" "fenced A through B (fence_scsi -o off)"
	fence 0 -o status -k $kb -d "/dev/$A"
	grep -q 'Status: ON' <<<"$fence_out" || { echo "$fence_out"; fail "fence_scsi -o status -k $kb through A: not 'Status: ON'"; }
	note "tcp: fence_scsi -o off -k $ka through B: status 0 ($(tail -n 1 <<<"$off")); through A: -o status -k $ka: status 2 ($st_a), -k $kb: status 0 ($fence_out); READ KEYS: 0x$kb; READ RESERVATION: 0x$kb, WERO; WRITE through A: $wr_status"
	pr_ok "$B" "CLEAR by 0x$kb through B" -o -C -K $kb
	pr_want_keys "$A" none "cleared through B"
	pr_want_holder "$A" none "cleared through B"
	pr_want_keys "$B" none "cleared through B"
	rm -f /var/run/cluster.key /var/run/cluster.dev
	note "tcp: CLEAR through B: READ KEYS, READ RESERVATION through A: none (unit attentions answered on the way: $pr_ua; every command's output in $pr_log)"
	if [[ -d /run/ulp-vm ]]; then # tools/vm/run --share DIR keeps it, passed or not
		mkdir -p /run/ulp-vm/gateway_multipath
		cp "$pr_log" /run/ulp-vm/gateway_multipath/ || true
	fi
}

# ---- one transport ------------------------------------------------------------------------

# A planned move: the owner $1 drained (`ulpctl gateway drain`), gateway $2 must take over
# without fencing it. Its time goes to $work/events-$tr, as a failover's signal does.
drain() {
	local o=$1 s=$2 e0 ms ep0 ep1 fenced why="drain of gw$1"
	ep0=$(gw_field "$s" '.groups[0].epoch')
	fenced=$(grep -c "did not release it: fencing it" "$work/gw$s.log" || true)
	e0=$(now_ms)
	echo "$e0 $why" >>"$work/events-$tr"
	ctl "$o" --json gateway drain >"$work/drain.out" 2>&1 || { cat "$work/drain.out"; fail "$tr: ulpctl gateway drain (gw$o)"; }
	note "$why, the owner (ulpctl gateway drain)"
	gw_wait_state "$s" active $((lease * 2 + 20)) "$tr: $why"
	ms=$(($(now_ms) - e0))
	ep1=$(gw_field "$s" '.groups[0].epoch')
	note "gw$s active $ms ms after the $why ($(gw_summary "$s"))"
	((ep1 == ep0 + 1)) || fail "$tr: $why: gw$s's epoch is $ep1, not $((ep0 + 1))"
	# The drained owner marked its record released: its successor fenced nobody.
	(($(grep -c "did not release it: fencing it" "$work/gw$s.log" || true) == fenced)) ||
		fail "$tr: $why: gw$s fenced it (its log says so), though it had released the group"
	gw_wait_state "$o" standby 30 "$tr: $why"
	wait_writes "${disk[$s]}" 20 "after the $why: the writes through gw$s" 60
	note "after the $why: gw$o standby, gw$s's path ${disk[$s]} writes"
	# The drained gateway's hold-off over before the next failover, whose stall would
	# otherwise include what is left of it.
	ms=$((e0 + hold_off * 1000 - $(now_ms)))
	((ms <= 0)) || sleep "$((ms / 1000)).$(printf %03d $((ms % 1000)))"
}

# Failover: the owner $1 signalled with $3 (KILL or STOP), gateway $2 must take over. The
# signal's time goes to $work/events-$tr (fio's log is read against it at the end).
failover() {
	local o=$1 s=$2 sig=$3 e0 ms ep0 ep1 why fenced t1 t2
	why="SIG$sig of gw$o"
	ep0=$(gw_field "$s" '.groups[0].epoch')
	fenced=$(grep -c "did not release it: fencing it" "$work/gw$s.log" || true)
	e0=$(now_ms)
	kill "-$sig" "${gpid[$o]}"
	echo "$e0 $why" >>"$work/events-$tr"
	note "$why, the owner"
	gw_wait_state "$s" active $((lease * 4 + 40)) "$why"
	ms=$(($(now_ms) - e0))
	ep1=$(gw_field "$s" '.groups[0].epoch')
	note "gw$s active $ms ms after the $why ($(gw_summary "$s"))"
	((ep1 == ep0 + 1)) || fail "$why: gw$s's epoch is $ep1, not $((ep0 + 1))"
	# It fenced the old owner first: that one never said it released the group.
	(($(grep -c "did not release it: fencing it" "$work/gw$s.log") > fenced)) ||
		fail "$why: gw$s's log says no fencing"
	if [[ $sig == STOP ]]; then
		# Awake, the old owner finds its lease lost to a fencing: it exits 3.
		kill -CONT "${gpid[$o]}"
		gw_wait_exit "$o" 30 "SIGCONT"
		((gw_status == 3)) || fail "gw$o exited with status $gw_status after SIGSTOP, SIGCONT, not 3"
		note "gw$o, woken up (SIGCONT), exited with status 3 (fenced)"
	else
		gw_wait_exit "$o" 10 "SIGKILL"
	fi
	gw_launch "$o"
	wait_writes "${disk[$s]}" 20 "after the $why: the writes through gw$s" 90
	note "after the $why: gw$s's path ${disk[$s]} writes"
	gw_wait_ready "$o"
	t1=$((SECONDS - glaunch[$o]))
	gw_wait_state "$o" standby 60 "gw$o started again"
	t2=$((SECONDS - glaunch[$o]))
	wait_path_back "${disk[$o]}" "gw$o started again"
	note "gw$o started again: listening after $t1 s, standby after $t2 s, its path ${disk[$o]} back after $((SECONDS - glaunch[$o])) s ($(mp_path_states | paste -sd ';'))"
}

# The longest time without a completed I/O of fio's in each event's span (from the drain or
# the failover's signal to the next event, or to fio's end), from fio's per-I/O log (unix ms).
# A gap counts in the span where it ends: one that began just before the next event's signal
# (the I/O in flight then) is that event's stall, not this one's too.
stalls() {
	sort -t, -k1,1n "$1" | awk -F, -v ev="$2" '
		BEGIN { while ((getline l < ev) > 0) { n++; et[n] = l + 0; sub(/^[0-9]+ /, "", l); en[n] = l } }
		{ t[++m] = $1 + 0 }
		END {
			for (i = 1; i <= n; i++) {
				lo = et[i]; hi = (i < n) ? et[i + 1] : t[m] + 1; g = 0; a = lo; b = lo
				for (j = 1; j < m; j++)
					if (t[j + 1] > lo && t[j + 1] <= hi && t[j + 1] - t[j] > g) { g = t[j + 1] - t[j]; a = t[j]; b = t[j + 1] }
				printf "%s: no I/O completed for %.1f s (%+.1f s to %+.1f s from it)\n",
					en[i], g / 1000, (a - lo) / 1000, (b - lo) / 1000
			}
		}'
}

first=1
run_transport() {
	local tr=$1 t_tr=$SECONDS a=$own b=$((3 - own)) groups rc reads dm n rc16 blocks bsz
	local -A sz=() # gateway number -> LUN 0's size through its port, bytes
	note "==== $tr: two paths, one per gateway (gw$a owns the group, gw$b standby)"
	# Both logged in to at once, gw$b's path through its standby port: the kernel's probe of
	# the new disk reads its capacity through it (a standby port answers READ CAPACITY), so
	# the disk has the same size through both, and multipathd takes both paths into the map.
	login "$tr" "$a"
	login "$tr" "$b"
	note "$tr: LUN 0 through gw$a (owner) = ${disk[$a]}, through gw$b (standby) = ${disk[$b]}"
	for n in "$a" "$b"; do
		sz[$n]=$(blockdev --getsize64 "/dev/${disk[$n]}")
	done
	((sz[$a] == 64 << 20 && sz[$b] == sz[$a])) ||
		fail "$tr: LUN 0 is ${sz[$a]} bytes through gw$a (${disk[$a]}), ${sz[$b]} through gw$b's standby port (${disk[$b]}); the image has $((64 << 20))"
	# READ CAPACITY (16) through the standby port, asked again: GOOD, the image's size.
	rc16=$(timeout -k 2 20 sg_readcap -l "/dev/${disk[$b]}" 2>&1) || { echo "$rc16"; fail "$tr: sg_readcap -l through gw$b's standby port (${disk[$b]})"; }
	blocks=$(grep -oE 'Number of logical blocks=[0-9]+' <<<"$rc16" | grep -oE '[0-9]+$' || true)
	bsz=$(grep -oE 'Logical block length=[0-9]+' <<<"$rc16" | grep -oE '[0-9]+$' || true)
	((${blocks:-0} * ${bsz:-0} == 64 << 20)) || { echo "$rc16"; fail "$tr: READ CAPACITY (16) through gw$b's standby port: ${blocks:-?} blocks of ${bsz:-?} bytes"; }
	note "$tr: sized alike through both: ${sz[$a]} bytes (blockdev --getsize64); READ CAPACITY (16) through gw$b's standby port: GOOD, $blocks blocks of $bsz bytes"
	# Both gateways report the same groups: gw$a's active/optimized (0), gw$b's standby (2).
	groups=$(printf '%s\n' "$(gw_field "$a" '.id'):0" "$(gw_field "$b" '.id'):2" | sort | paste -sd ' ')
	for d in "${disk[$a]}" "${disk[$b]}"; do
		rtpg "$d"
		[[ $rtpg_got == "$groups" ]] || fail "$tr: sg_rtpg /dev/$d reports '$rtpg_got', not '$groups' (group:state)"
	done
	note "$tr: sg_rtpg through both: $groups (group:state)"
	if [[ $tr == tcp ]]; then
		pr_across "${disk[$a]}" "${disk[$b]}" "$a" "$b"
	fi
	mp_udev_settle
	if ((first)); then
		first=0
		mp_wwid "${disk[$a]}"
		note "LUN 0's WWID (multipath, sysfs): $wwid"
		# fast_io_fail_tmo: iSCSI sessions' replacement timeout (multipathd sets it).
		mp_conf "$wwid" "fast_io_fail_tmo 3"
	fi
	mp_start "${disk[$a]}" "${disk[$b]}"
	dm=$(dmsetup info -c --noheadings -o blkdevname $mp)
	# The expected mp_paths lines: prio and path group status of gw1's path, then gw2's.
	paths_want() { printf '%s\n' "${disk[1]} $1 $2" "${disk[2]} $3 $4" | sort | paste -sd ';'; }
	# $1 the owner: its path in the active group at priority 50, the other's at 1 (standby).
	paths_owner() { if (($1 == 1)); then paths_want 50 "${2:-active}" 1 enabled; else paths_want 1 enabled 50 "${2:-active}"; fi; }
	mp_expect_paths "$(paths_owner "$a" enabled)" "$tr: map made" ll
	# One map, both paths in dm's use: gw$a's ready, gw$b's the checker's ghost (TEST UNIT
	# READY through a standby port: NOT READY, 04h/0Bh).
	local states want_states
	want_states=$(printf '%s\n' "${disk[$a]} active ready" "${disk[$b]} active ghost" | sort | paste -sd ';')
	for _ in $(seq 60); do # bounded: 30 s (the checker runs every 2 s)
		states=$(mp_path_states | paste -sd ';')
		[[ $states == "$want_states" ]] && break
		sleep 0.5
	done
	[[ $states == "$want_states" ]] || fail "$tr: map made: the paths' states are '$states', not '$want_states' (disk dm checker)"
	note "$tr: one map, $mp: ${disk[$a]} (gw$a) active ready, ${disk[$b]} (gw$b, standby) active ghost"
	if [[ $tr != srp ]]; then
		# multipathd set the sessions' replacement timeout from fast_io_fail_tmo: a lost
		# connection's I/O fails after 3 s, for dm-multipath to send it through the other path.
		for f in /sys/class/iscsi_session/session*/recovery_tmo; do
			[[ $(<"$f") == 3 ]] || fail "$tr: $f is $(<"$f"), not 3 (fast_io_fail_tmo)"
		done
	fi
	grep -q "hwhandler='1 alua'" <(multipath -ll $mp) || fail "the map has no alua hardware handler"

	# Verified writes, as alua_multipath.sh's: each 16 read back while it runs, the first
	# mismatch fatal; paced (one vCPU runs the cluster, both gateways and the initiator).
	# Every I/O's completion time in fio's log (unix ms): the stalls. SIGINT ends it.
	rm -f "$work/events-$tr" "$work/fio-${tr}_iops".*.log
	timeout -k 5 900 fio --name=gw --filename=/dev/mapper/$mp --ioengine=libaio \
		--direct=1 --rw=randwrite --bs=4k --iodepth=4 --size=32M --rate_iops=50 \
		--time_based --runtime=840 --verify=crc32c --do_verify=1 --verify_fatal=1 \
		--verify_backlog=16 --serialize_overlap=1 \
		--write_iops_log="$work/fio-$tr" --log_unix_epoch=1 >"$work/fio-$tr.log" 2>&1 &
	fpid=$!
	wait_writes "${disk[$a]}" 30 "$tr: before the drain"
	mp_expect_paths "$(paths_owner "$a")" "$tr: under I/O"
	local wb
	wb=$(writes_done "${disk[$b]}")
	sleep 1
	(($(writes_done "${disk[$b]}") == wb)) || fail "$tr: gw$b's path ${disk[$b]} (standby) writes"

	drain "$a" "$b"
	mp_expect_paths "$(paths_owner "$b")" "$tr: gw$b owns the group (planned move)" '' 60
	failover "$b" "$a" KILL
	mp_expect_paths "$(paths_owner "$a")" "$tr: gw$a owns the group" '' 60
	failover "$a" "$b" STOP
	mp_expect_paths "$(paths_owner "$b")" "$tr: gw$b owns the group again" '' 60
	wait_writes "${disk[$b]}" 20 "$tr: after both failovers"
	own=$b

	mp_fio_end "$fpid" "$work/fio-$tr.log" "$tr: across the failovers"
	fpid=''
	[[ -s $work/fio-${tr}_iops.1.log ]] || fail "$tr: fio wrote no per-I/O log"
	note "$tr: I/O stalls as fio saw them:"
	stalls "$work/fio-${tr}_iops.1.log" "$work/events-$tr" | sed "s/^/    $tr: /"
	note "$tr: writes through gw1's path ${disk[1]} $(writes_done "${disk[1]}"), gw2's ${disk[2]} $(writes_done "${disk[2]}"), the map $dm $(writes_done "$dm")"

	mp_stop
	logout_all "$tr"
	for d in "${disk[1]}" "${disk[2]}"; do
		for _ in $(seq 100); do [[ -e /sys/block/$d ]] || break; sleep 0.1; done
		[[ -e /sys/block/$d ]] && fail "$tr: $d still there 10 s after the logout"
	done
	note "==== $tr: PASS in $((SECONDS - t_tr)) s"
}

for tr in "${transports[@]}"; do run_transport "$tr"; done

# ---- the end ----------------------------------------------------------------------------------

# The standby first (the owner's stop is a drain, which it would take over).
for n in 2 1; do
	kill -TERM "${gpid[$n]}"
	gw_wait_exit "$n" 30 "SIGTERM"
	((gw_status == 0)) || fail "gw$n exited with status $gw_status on SIGTERM"
done
note "both gateways stopped (SIGTERM): status 0"
[[ -n $ipid ]] && kill -TERM "$ipid" && ipid=''
if dmesg | grep -E 'BUG|WARNING|Oops|general protection' >"$work/dmesg-bad.log"; then
	cat "$work/dmesg-bad.log"
	fail "the kernel logged a BUG/WARNING/Oops"
fi
note "PASS (${transports[*]})"
