#!/usr/bin/env bash
# tests/vm/alua_multipath.sh ULP_TARGETD ULPCTL - ulp-targetd's asymmetric access (ALUA,
# SPC-4 5.15) and EXTENDED COPY (SPC-4 6.4) through Linux's own initiator and tools, INSIDE
# the rxe VM (ctest vm_alua_multipath starts it through tools/vm/run).
#
# One target, two iSCSI/TCP portals (10.99.0.1:3260 and :3261), each its own portal group
# and SCSI target port (rtpi 1, 2) in its own target port group (1: active/optimized,
# 2: active/non-optimized; TPGS both), three RAM LUNs. open-iscsi logs in through both
# portals: every LUN is two sd disks, one per port. scsi_dh_alua attaches to them.
#
# What it proves, each step bounded and checked:
#   1. both logins; LUN 0 through each port is its own disk of the right size;
#   2. sg_rtpg through either port reports both groups with their states; sg_stpg sets group
#      2 to standby through its own port (status code 01h) and back through the other port;
#      `ulpctl alua set` changes it from the target (status code 02h) and the kernel's view
#      (/sys/block/sdX/device/access_state, what scsi_dh_alua learnt from the unit
#      attention and its own RTPG) follows, both ways;
#   3. sg_xcopy (EXTENDED COPY LID1, sent to the destination) copies 1 MiB of random data
#      from LUN 1 to LUN 2 at another offset; LUN 2 reads back equal; a copy that runs past
#      LUN 2's end is refused with an error in time, and writes nothing;
#   4. multipathd (path_grouping_policy group_by_prio, prio alua, hardware_handler
#      "1 alua"; udevd without rules for its device database) makes one map of LUN 0's two
#      disks: two path groups, priorities 50 and 10, I/O on the first; fio writes with
#      crc32c verify on the map while `ulpctl alua set` makes group 1 standby and group 2
#      active/optimized: the writes move to the other disk (its /sys/block/X/stat), the map
#      shows priorities 1 and 50 with the other group active, the kernel's access_state of
#      the old path is standby and the target's group 1 stays so (the host did not take it
#      back by SET TARGET PORT GROUPS); fio reports no error and its verify reads passed;
#   5. logout of both sessions, SIGINT: ulp-targetd exits 0; the kernel logged no
#      BUG/WARNING/Oops.
# On any failure: the reason, then the tails of the target's, iscsid's and multipathd's logs
# and dmesg.
set -euo pipefail

targetd=${1:?usage: alua_multipath.sh ULP_TARGETD ULPCTL}
ulpctl=${2:?usage: alua_multipath.sh ULP_TARGETD ULPCTL}
[[ ${ULP_IN_VM:-} == 1 ]] || { echo "alua_multipath: run me inside the VM (tools/vm/run)"; exit 2; }
for t in iscsid iscsiadm fio sg_rtpg sg_stpg sg_turs sg_xcopy multipath multipathd dmsetup; do
	command -v $t >/dev/null || {
		echo "alua_multipath: $t missing (open-iscsi, fio, sg3-utils, multipath-tools, dmsetup)"
		exit 1
	}
done

iqn=iqn.2026-11.org.ulp:vm-alua
pa=10.99.0.1:3260 # portal group 1, target port group 1
pb=10.99.0.1:3261 # portal group 2, target port group 2
portal=$pa        # iscsi_initiator.sh's default
work=/tmp/alua-multipath # the guest's tmpfs overlay: gone when the VM powers off
mkdir -p "$work"
tlog=$work/targetd.log
ilog=$work/iscsid.log
mlog=$work/multipathd.log
ulog=$work/udevd.log
asock=$work/admin.sock
t_start=$SECONDS
tpid='' ipid='' mpid='' upid='' fpid=''
lun0_sectors=65536 xc_sectors=16384 # 512-byte sectors: 32 MiB; LUNs 1 and 2 8 MiB
mp=mpalua                           # the map's alias
# shellcheck source=tests/vm/iscsi_initiator.sh
source "$(dirname "${BASH_SOURCE[0]}")/iscsi_initiator.sh"
# shellcheck source=tests/vm/dm_multipath.sh
source "$(dirname "${BASH_SOURCE[0]}")/dm_multipath.sh"

note() { printf 'alua_multipath [%3ds]: %s\n' $((SECONDS - t_start)) "$*"; }
dump() {
	echo "--- ulp-targetd log (tail)"
	tail -n 40 "$tlog" 2>/dev/null || true
	echo "--- iscsid log (tail)"
	tail -n 20 "$ilog" 2>/dev/null || true
	echo "--- multipathd log (tail)"
	tail -n 40 "$mlog" 2>/dev/null || true
	echo "--- dmesg (tail)"
	dmesg | tail -n 50
	if [[ -d /run/ulp-vm ]]; then # tools/vm/run --share DIR keeps them
		mkdir -p /run/ulp-vm/alua_multipath
		cp "$work"/*.log /run/ulp-vm/alua_multipath/ 2>/dev/null || true
		dmesg >/run/ulp-vm/alua_multipath/dmesg.log || true
	fi
}
fail() {
	echo "alua_multipath: FAIL [$((SECONDS - t_start))s]: $*"
	dump
	exit 1
}
cleanup() {
	# Keeps the script's status: nothing here may fail it (errexit applies in traps).
	set +e
	# Only what we started, by pid; the VM powers off after us anyway.
	[[ -n $fpid ]] && kill -KILL "$fpid" 2>/dev/null && pkill -KILL -x fio
	[[ -n $mpid ]] && kill -TERM "$mpid" 2>/dev/null
	if dmsetup info $mp >/dev/null 2>&1; then
		timeout -k 2 10 dmsetup message $mp 0 fail_if_no_path >/dev/null 2>&1
		timeout -k 2 20 dmsetup remove --retry $mp >/dev/null 2>&1
	fi
	timeout -k 5 30 iscsiadm -m node --logoutall=all >/dev/null 2>&1
	[[ -n $ipid ]] && kill -TERM "$ipid" 2>/dev/null
	[[ -n $upid ]] && kill -TERM "$upid" 2>/dev/null
	[[ -n $tpid ]] && kill -KILL "$tpid" 2>/dev/null
	return 0
}
trap cleanup EXIT

# ---- the target -----------------------------------------------------------------------------

cat >"$work/ulp-targetd.toml" <<EOF
state_dir = "$work/state"
admin_socket = "$asock"
portals = ["$pa", "$pb"]

[[target]]
name = "$iqn"
  [[target.lun]]
  lun = 0
  backstore = "ram"
  size = "32M"
  [[target.lun]]
  lun = 1
  backstore = "ram"
  size = "8M"
  [[target.lun]]
  lun = 2
  backstore = "ram"
  size = "8M"
  [[target.portal_group]]
  tag = 1
  portals = ["$pa"]
  [[target.portal_group]]
  tag = 2
  portals = ["$pb"]
  [target.alua]
  tpgs = "both"
    [[target.alua.group]]
    id = 1
    state = "active-optimized"
    portal_groups = [1]
    [[target.alua.group]]
    id = 2
    state = "active-non-optimized"
    portal_groups = [2]
EOF
mkdir -p "$work/state"
"$targetd" --config "$work/ulp-targetd.toml" --ready-fd 9 9>"$work/port" 2>>"$tlog" &
tpid=$!
for _ in $(seq 300); do # bounded: 30 s (TCG)
	[[ -s $work/port ]] && break
	kill -0 $tpid 2>/dev/null || fail "ulp-targetd exited during start-up"
	sleep 0.1
done
[[ $(head -n 1 "$work/port" 2>/dev/null) == 3260 ]] || fail "ulp-targetd not listening after 30 s"
note "ulp-targetd listening on $pa (group 1) and $pb (group 2)"
ctl() { timeout -k 2 10 "$ulpctl" --socket "$asock" "$@"; }
alua_set() { # $1 group, $2 state
	ctl alua set $iqn "$1" "$2" >"$work/ulpctl.out" 2>&1 || {
		cat "$work/ulpctl.out"
		fail "ulpctl alua set $iqn $1 $2"
	}
	note "ulpctl alua set $iqn $1 $2"
}

# ---- 1: two logins, one per portal group ----------------------------------------------------

modprobe sg
# optimize_stpg: when dm-multipath fails over to an active/non-optimized group it uses it as
# it is (TPGS has implicit) instead of SET TARGET PORT GROUPS to make it active/optimized:
# the states stay the target's to change (step 4).
modprobe scsi_dh_alua optimize_stpg=1
modprobe dm_multipath
modprobe dm_round_robin
modprobe dm_service_time
iscsi_start
iscsi_node_new default "$pa"
iscsi_node_new default "$pb"
# The disk of LUN $2 of the session whose connection goes to port $1 (sysfs: no udev).
disk_of() {
	local s c d
	for s in /sys/class/iscsi_session/session*; do
		c=/sys/class/iscsi_connection/connection${s##*session}:0
		[[ $(cat "$c/persistent_port" 2>/dev/null) == "$1" ]] || continue
		for d in "$s"/device/target*/*:*:*:"$2"/block/*; do
			[[ -e $d ]] && { basename "$d"; return 0; }
		done
	done
	return 1
}
login_portal() { # $1 portal; sets d0 d1 d2 (LUNs 0-2 through it)
	local p=$1 l
	iscsi_node_at "$p" --login >"$work/login.out" 2>&1 || { cat "$work/login.out"; fail "login ($p)"; }
	for _ in $(seq 200); do # the SCSI scan is asynchronous; bounded: 20 s
		d0=$(disk_of "${p#*:}" 0) && d1=$(disk_of "${p#*:}" 1) && d2=$(disk_of "${p#*:}" 2) &&
			[[ -b /dev/$d0 && -b /dev/$d1 && -b /dev/$d2 ]] && break
		sleep 0.1
	done
	[[ -b /dev/${d0:-none} && -b /dev/${d1:-none} && -b /dev/${d2:-none} ]] ||
		fail "no disks for LUNs 0-2 after the login to $p"
	[[ $(cat /sys/block/"$d0"/size) == "$lun0_sectors" ]] || fail "LUN 0 ($d0) has $(cat /sys/block/"$d0"/size) sectors"
	for l in "$d1" "$d2"; do
		[[ $(cat /sys/block/"$l"/size) == "$xc_sectors" ]] || fail "$l has $(cat /sys/block/"$l"/size) sectors"
	done
	[[ $(cat /sys/block/"$d0"/device/dh_state) == alua ]] ||
		fail "scsi_dh_alua is not attached to $d0 (dh_state $(cat /sys/block/"$d0"/device/dh_state))"
}
login_portal $pa
a0=$d0 a1=$d1 a2=$d2
login_portal $pb
b0=$d0
note "logged in through $pa: LUN 0 = $a0, 1 = $a1, 2 = $a2; through $pb: LUN 0 = $b0"

# ---- 2: REPORT / SET TARGET PORT GROUPS, and the kernel's view -------------------------------

# sg_rtpg's decoded report as "GROUP:STATE:STATUS ..." (hex as printed), e.g. "1:0:0 2:1:0".
rtpg() {
	local out
	out=$(timeout -k 2 20 sg_rtpg -d "/dev/$1" 2>&1) || { echo "$out"; fail "sg_rtpg /dev/$1"; }
	echo "$out" >>"$work/rtpg.log"
	local line id=0 st=0 res=''
	while read -r line; do
		if [[ $line =~ target\ port\ group\ id\ *:\ *(0x[0-9a-fA-F]+) ]]; then
			id=$((BASH_REMATCH[1]))
		elif [[ $line =~ asymmetric\ access\ state\ *:\ *(0x[0-9a-fA-F]+) ]]; then
			st=$((BASH_REMATCH[1]))
		elif [[ $line =~ ^status\ code\ *:\ *(0x[0-9a-fA-F]+) ]]; then
			res+="${res:+ }$id:$st:$((BASH_REMATCH[1]))"
		fi
	done <<<"$out"
	echo "$res"
}
expect_rtpg() { # $1 disk, $2 the expected "GROUP:STATE:STATUS ...", $3 why
	local got
	got=$(rtpg "$1")
	[[ $got == "$2" ]] || { tail -n 30 "$work/rtpg.log"; fail "$3: sg_rtpg /dev/$1 reports '$got', not '$2'"; }
	note "$3: sg_rtpg /dev/$1: $got (group:state:status)"
}
# What scsi_dh_alua knows of the disk's own group: it learns a change from the unit
# attention ASYMMETRIC ACCESS STATE CHANGED on the next command through that port (a TEST
# UNIT READY here: standby lets it through, SPC-4 5.15.2.4.4), then its own RTPG.
expect_access_state() { # $1 disk, $2 state as sysfs spells it
	local got='' t0=$SECONDS
	while ((SECONDS - t0 < 10)); do # bounded: 10 s
		timeout -k 2 10 sg_turs "/dev/$1" >/dev/null 2>&1 || true
		got=$(cat /sys/block/"$1"/device/access_state)
		[[ $got == "$2" ]] && break
		sleep 0.1
	done
	[[ $got == "$2" ]] || fail "/sys/block/$1/device/access_state is '$got', not '$2', after 10 s"
	note "/sys/block/$1/device/access_state: $got"
}
expect_rtpg "$a0" "1:0:0 2:1:0" "start"
timeout -k 2 20 sg_rtpg -d "/dev/$a0" | sed 's/^/    /' # for the record
expect_rtpg "$b0" "1:0:0 2:1:0" "start"
expect_access_state "$a0" active/optimized
expect_access_state "$b0" active/non-optimized
# Explicit (SPC-4 5.15.2.2): through port 2 for its own group (sg_stpg finds it in VPD 83h),
# then through port 1 naming group 2.
timeout -k 2 20 sg_stpg --standby "/dev/$b0" >>"$work/stpg.log" 2>&1 || fail "sg_stpg --standby /dev/$b0"
expect_rtpg "$a0" "1:0:0 2:2:1" "sg_stpg --standby /dev/$b0"
timeout -k 2 20 sg_stpg --tp=2 --state=an "/dev/$a0" >>"$work/stpg.log" 2>&1 || fail "sg_stpg --tp=2 --state=an /dev/$a0"
expect_rtpg "$b0" "1:0:0 2:1:1" "sg_stpg --tp=2 --state=an /dev/$a0"
# Implicit, from the target's side (SPC-4 5.15.2.3).
alua_set 2 standby
expect_rtpg "$a0" "1:0:0 2:2:2" "group 2 standby"
expect_access_state "$b0" standby
alua_set 2 active-non-optimized
expect_access_state "$b0" active/non-optimized
expect_rtpg "$b0" "1:0:0 2:1:2" "group 2 active/non-optimized"

# ---- 3: EXTENDED COPY between two LUs ---------------------------------------------------------

sg_of() { basename /sys/block/"$1"/device/scsi_generic/sg*; }
sa1=/dev/$(sg_of "$a1") sa2=/dev/$(sg_of "$a2")
head -c 1M /dev/urandom >"$work/xc.src"
dd if="$work/xc.src" of="/dev/$a1" bs=64k oflag=direct status=none || fail "dd to /dev/$a1"
# LUN 1's blocks [0, 2048) to LUN 2's [4096, 6144), the command sent to LUN 2 (sg_xcopy's
# default): it reads both designators from VPD 83h and the limits from RECEIVE COPY RESULTS.
xc_rc=0
timeout -k 2 60 sg_xcopy if="$sa1" of="$sa2" bs=512 count=2048 seek=4096 verbose=1 \
	>"$work/xcopy.log" 2>&1 || xc_rc=$?
((xc_rc == 0)) || { cat "$work/xcopy.log"; fail "sg_xcopy $sa1 -> $sa2: status $xc_rc"; }
dd if="/dev/$a2" of="$work/xc.dst" bs=64k skip=32 count=16 iflag=direct status=none ||
	fail "dd from /dev/$a2"
cmp "$work/xc.src" "$work/xc.dst" || fail "LUN 2 [4096, 6144) differs from what was written to LUN 1"
note "sg_xcopy $sa1 -> $sa2 (2048 blocks to block 4096): ok, the data read back equal"
# Past LUN 2's end (16384 blocks): refused before anything moves, the blocks before its end
# untouched.
dd if=/dev/zero of="/dev/$a2" bs=64k seek=120 count=8 oflag=direct status=none || fail "dd zeros to /dev/$a2"
xc_rc=0
timeout -k 2 60 sg_xcopy if="$sa1" of="$sa2" bs=512 count=2048 seek=15360 verbose=2 \
	>"$work/xcopy-bad.log" 2>&1 || xc_rc=$?
# sg3_utils' status 10: COPY ABORTED (SPC-4 6.4.1: a segment that cannot be processed).
((xc_rc == 10)) || { cat "$work/xcopy-bad.log"; fail "sg_xcopy past LUN 2's end: status $xc_rc, not 10"; }
cmp -n 524288 <(dd if="/dev/$a2" bs=64k skip=120 count=8 iflag=direct status=none) /dev/zero ||
	fail "a refused copy wrote to LUN 2"
note "sg_xcopy past LUN 2's end: status $xc_rc (COPY ABORTED), nothing written"
grep -iE 'sense key|additional sense|Copy aborted' "$work/xcopy-bad.log" | sed 's/^/    /' || true

# ---- 4: dm-multipath over both ports ---------------------------------------------------------

mp_udev_start
mp_wwid "$a0"
mp_conf "$wwid"
note "LUN 0's WWID (multipath, sysfs): $wwid"
mp_start "$a0" "$b0"
# The expected lines for a0's and b0's prio and status, sorted as mp_paths sorts.
paths_want() { printf '%s\n' "$a0 $1 $2" "$b0 $3 $4" | sort | paste -sd ';'; }
# Before any I/O dm has chosen no group yet: both "enabled".
mp_expect_paths "$(paths_want 50 enabled 10 enabled)" "map made" ll
grep -q "hwhandler='1 alua'" <(multipath -ll $mp) || fail "the map has no alua hardware handler"

writes_done() { awk '{ print $5 }' "/sys/block/$1/stat"; }
# Verified writes: every block carries a crc32c and its offset; each 16 written are read
# back and checked while it runs (verify_backlog), the first mismatch is fatal. Paced (50
# IOPS: one vCPU runs fio, the daemon, both sessions and multipathd, and the steps below
# must get their turn). It runs until the failover is over, then SIGINT ends it (a time
# bound would have to allow for the slowest host: minutes of VM time on a quiet one).
mp_runtime=240
timeout -k 5 $((mp_runtime + 60)) fio --name=mp --filename=/dev/mapper/$mp --ioengine=libaio \
	--direct=1 --rw=randwrite --bs=4k --iodepth=4 --size=24M --rate_iops=50 \
	--time_based --runtime=$mp_runtime --verify=crc32c --do_verify=1 --verify_fatal=1 \
	--verify_backlog=16 --serialize_overlap=1 >"$work/fio-mp.log" 2>&1 &
fpid=$!
# Wait until $1 has completed $2 more writes, and $3 none meanwhile (bounded: 30 s).
wait_moved() { # $1 disk that must write, $2 count, $3 disk that must not, $4 why
	local w1 w3 t0=$SECONDS
	w1=$(writes_done "$1") w3=$(writes_done "$3")
	while (($(writes_done "$1") < w1 + $2)); do
		((SECONDS - t0 < 30)) || fail "$4: $1 did not complete $2 writes in 30 s"
		kill -0 "$fpid" 2>/dev/null || { tail -n 20 "$work/fio-mp.log"; fail "fio ended before $4"; }
		sleep 0.1
	done
	(($(writes_done "$3") == w3)) || fail "$4: $3 still wrote ($w3 -> $(writes_done "$3"))"
	note "$4: $1 wrote $(($(writes_done "$1") - w1)) blocks, $3 none"
}
# Until $1's completed writes stand still for half a second (bounded: 30 s).
wait_quiet() {
	local w t0=$SECONDS
	while ((SECONDS - t0 < 30)); do
		w=$(writes_done "$1")
		sleep 0.5
		((w == $(writes_done "$1"))) && return 0
	done
	fail "$1 still writes 30 s after its group left active/optimized"
}
# Writes go to the active group's path only: a0 (group 1, active/optimized).
wait_moved "$a0" 50 "$b0" "before the change"
mp_expect_paths "$(paths_want 50 active 10 enabled)" "under I/O"
# The failover as a cluster manager makes it: the old group steps down first, and the new
# one steps up once the host has seen that. Not the other way round, nor both at once:
# while both are active/optimized multipathd puts both paths in one path group (a path it
# has failed keeps its last priority until it is back), and once port 1 is in standby its
# checker (TEST UNIT READY, which standby lets through, SPC-4 5.15.2.4.4) reinstates the
# path there, in the group dm is using, which makes scsi_dh_alua activate it: with explicit
# ALUA a SET TARGET PORT GROUPS that takes group 1 back to active/optimized.
alua_set 1 standby
# Port 1's I/O fails (NOT READY, LOGICAL UNIT NOT ACCESSIBLE, TARGET PORT IN STANDBY
# STATE); dm fails over to group 2's path group (active/non-optimized) and the writes go on
# there; multipathd's checker finds port 1 in standby: priority 1.
wait_quiet "$a0"
wait_moved "$b0" 50 "$a0" "group 1 standby"
mp_expect_paths "$(paths_want 1 enabled 10 active)" "group 1 standby"
alua_set 2 active-optimized
wait_moved "$b0" 50 "$a0" "group 1 standby, group 2 active/optimized"
mp_expect_paths "$(paths_want 1 enabled 50 active)" "group 1 standby, group 2 active/optimized"
expect_access_state "$a0" standby
# Both states as ulpctl set them (status code 02h, implicit): the host changed none.
expect_rtpg "$b0" "1:2:2 2:0:2" "after the failover"
timeout -k 2 20 sg_rtpg -d "/dev/$b0" | sed 's/^/    /'
wait_moved "$b0" 20 "$a0" "after the failover"
# The end of fio's run (timeout passes the SIGINT on).
mp_fio_end "$fpid" "$work/fio-mp.log" "across the ALUA changes"
fpid=''
note "the paths' writes (sysfs): $a0 $(writes_done "$a0"), $b0 $(writes_done "$b0")"
note "after: multipath -ll $mp:"
timeout -k 2 60 multipath -ll $mp | sed 's/^/    /'

# ---- 5: tear down -------------------------------------------------------------------------------

mp_stop
iscsi_adm -m node --logoutall=all >"$work/logout.out" 2>&1 || { cat "$work/logout.out"; fail "logout"; }
kill -INT $tpid
rc=0
for _ in $(seq 200); do kill -0 $tpid 2>/dev/null || break; sleep 0.1; done # bounded: 20 s
kill -0 $tpid 2>/dev/null && fail "ulp-targetd still running 20 s after SIGINT"
wait $tpid || rc=$?
tpid=''
((rc == 0)) || fail "ulp-targetd exited with status $rc"
if dmesg | grep -E 'BUG|WARNING|Oops|general protection' >"$work/dmesg-bad.log"; then
	cat "$work/dmesg-bad.log"
	fail "the kernel logged a BUG/WARNING/Oops"
fi
note "PASS"
