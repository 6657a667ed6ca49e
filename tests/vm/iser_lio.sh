#!/usr/bin/env bash
# tests/vm/iser_lio.sh ULP_INITIATOR - ulp-initiator's iSER transport against the kernel's
# iSER targets, INSIDE the rxe VM (ctest vm_iser_lio starts it through tools/vm/run). Both
# ends share rxe0 and 10.99.0.1.
#
#   1. LIO (target_core + iscsi_target_mod + ib_isert), configured through configfs: a
#      64 MiB ramdisk backstore (rd_mcp) as LUN 0 of one target, demo mode (any initiator,
#      no CHAP, writable), an iSER network portal on 10.99.0.1:3260. Then ulp-initiator
#      --transport iser --rdma-device rxe0: a 4K random-write run with verification and a
#      verify pass over the range, a 128K sequential write, and a 4K random-read run
#      that checks every block the writes left. Each must exit 0 with no errors.
#   2. tgtd's iSER driver (Debian's tgt, if built with RDMA support): the same runs against
#      a 64 MiB RAM-backed LUN (tgt's "rdwr" store on a tmpfs file). Bookworm's tgt 1.0.85
#      accepts an iSER login only with an address binding and an initiator-name ACL.
#      Skipped (said so, not failed) when tgtd is missing or has no iSER.
#
# The IOPS and MB/s of each run are printed for the record (TCG and rxe: they compare
# stacks within one VM run, nothing more); they are not checked. On failure: the reason,
# the initiator's output, the target's log and dmesg tails.
set -euo pipefail

init=${1:?usage: iser_lio.sh ULP_INITIATOR}
[[ ${ULP_IN_VM:-} == 1 ]] || { echo "iser_lio: run me inside the VM (tools/vm/run)"; exit 2; }

work=/tmp/iser-lio # the guest's tmpfs overlay
mkdir -p "$work"
t_start=$SECONDS
ip=10.99.0.1
cfs=/sys/kernel/config/target
lio_iqn=iqn.2026-11.org.ulp:lio-iser
tgt_iqn=iqn.2026-11.org.ulp:tgt-iser
init_iqn=iqn.2026-11.org.ulp:vm-ulp-initiator
tgt_ctl=7913 # tgtd's control port (tgtadm -C)
tgtd_pid=''
lio_up=0

note() { printf 'iser_lio [%3ds]: %s\n' $((SECONDS - t_start)) "$*"; }
fail() {
	echo "iser_lio: FAIL [$((SECONDS - t_start))s]: $*"
	if [[ -s $work/tgtd.log ]]; then
		echo "--- tgtd log (tail)"
		tail -n 30 "$work/tgtd.log"
	fi
	echo "--- dmesg (tail)"
	dmesg | tail -n 40
	if [[ -d /run/ulp-vm ]]; then
		mkdir -p /run/ulp-vm/iser_lio
		cp "$work"/*.log "$work"/*.json /run/ulp-vm/iser_lio/ 2>/dev/null || true
		dmesg >/run/ulp-vm/iser_lio/dmesg.log || true
	fi
	exit 1
}
cleanup() {
	set +e # errexit applies in traps: nothing here may change the status
	if [[ -n $tgtd_pid ]]; then
		timeout 10 tgtadm -C $tgt_ctl --lld iser --op delete --mode target --tid 1 --force
		timeout 10 tgtadm -C $tgt_ctl --lld iser --op delete --mode system
		kill -TERM "$tgtd_pid" 2>/dev/null
	fi
	((lio_up)) && lio_teardown
	return 0
}
trap cleanup EXIT

# ---- ulp-initiator runs --------------------------------------------------------------------

# run NAME TARGET PORT ARGS...: one ulp-initiator run over iSER (bounded: 90 s), JSON kept.
# Exit 0 and "errors": 0 required; prints the figures.
run() {
	local name=$1 iqn=$2 port=$3
	shift 3
	local rc=0
	timeout -k 5 90 "$init" -p "$ip:$port" --transport iser --rdma-device rxe0 --src-ip $ip \
		-t "$iqn" --initiator-name $init_iqn --quiet --json "$@" \
		>"$work/$name.json" 2>"$work/$name.log" || rc=$?
	if ((rc != 0)); then
		cat "$work/$name.json" "$work/$name.log" 2>/dev/null | tail -n 30
		((rc == 124)) && fail "$name: ulp-initiator still running after 90 s"
		fail "$name: ulp-initiator exited $rc"
	fi
	python3 "$(dirname "${BASH_SOURCE[0]}")/initiator_result.py" iser_lio "$name" iser \
		"$work/$name.json" || fail "$name: bad result"
}
# The same four runs against each target: 4K random writes verified (and a verify pass
# over their range), 128K sequential writes, 4K random reads of what the writes left
# (every block carries its header: each read is checked).
# The rest of the arguments (e.g. -l LUN) go to every run.
workloads() {
	local who=$1 iqn=$2 port=$3
	shift 3
	run "$who-randwrite-4k" "$iqn" "$port" "$@" -w randwrite -b 4k -q 16 -r 3 --range 16M \
		--verify-only --seed 1
	run "$who-write-128k" "$iqn" "$port" "$@" -w write -b 128k -q 4 --offset 16M --range 16M \
		-r 0 -s 16M
	run "$who-randread-4k" "$iqn" "$port" "$@" -w randread -b 4k -q 16 -r 3 --range 32M
}

# ---- 1: LIO with ib_isert --------------------------------------------------------------------

lio_teardown() {
	local t=$cfs/iscsi/$lio_iqn/tpgt_1
	[[ -d $t ]] || return 0
	echo 0 >"$t/enable" 2>/dev/null
	rm -f "$t"/lun/lun_0/rd0
	rmdir "$t"/lun/lun_0 "$t/np/$ip:3260" "$t" "$cfs/iscsi/$lio_iqn" 2>/dev/null
	rmdir "$cfs/core/rd_mcp_0/rd0" "$cfs/core/rd_mcp_0" 2>/dev/null
	lio_up=0
}
for m in target_core_mod iscsi_target_mod ib_isert; do
	modprobe $m || fail "modprobe $m (the kernel's LIO iSER target)"
done
[[ -d $cfs ]] || fail "no $cfs after loading target_core_mod (configfs not mounted?)"
lio_up=1
rd=$cfs/core/rd_mcp_0/rd0
mkdir -p "$rd"
echo "rd_pages=16384" >"$rd/control" # 64 MiB in 4 KiB pages
echo 1 >"$rd/enable" || fail "LIO: enabling the ramdisk backstore"
tpg=$cfs/iscsi/$lio_iqn/tpgt_1
mkdir -p "$tpg/lun/lun_0"
ln -s "$rd" "$tpg/lun/lun_0/rd0"
mkdir "$tpg/np/$ip:3260"
# The portal speaks iSER from here (ib_isert listens on RDMA/CM at the same address).
echo 1 >"$tpg/np/$ip:3260/iser" || fail "LIO: iser on $ip:3260"
# Demo mode: any initiator, its ACL generated, no CHAP, writable.
echo 1 >"$tpg/attrib/generate_node_acls"
echo 1 >"$tpg/attrib/cache_dynamic_acls"
echo 0 >"$tpg/attrib/demo_mode_write_protect"
echo 0 >"$tpg/attrib/authentication"
echo 1 >"$tpg/enable" || fail "LIO: enabling the TPG"
note "LIO: $lio_iqn LUN 0 = rd_mcp 64 MiB, iSER portal $ip:3260"
workloads lio "$lio_iqn" 3260
lio_teardown
[[ ! -e $cfs/iscsi/$lio_iqn ]] || fail "LIO: the target is still in configfs after teardown"
note "LIO: passed"

# ---- 2: tgtd --iser --------------------------------------------------------------------------

if ! command -v tgtd >/dev/null || ! command -v tgtadm >/dev/null; then
	note "tgtd: not installed (package tgt): skipped"
elif ! ldd "$(command -v tgtd)" 2>/dev/null | grep -c librdmacm >/dev/null; then
	# (grep -c, not -q: -q would close the pipe early, and ldd's SIGPIPE fails pipefail)
	note "tgtd: built without iSER (no librdmacm): skipped"
else
	mkdir -p /run/tgtd /var/run/tgtd
	truncate -s 64M "$work/tgt-lun.img"
	# tgt's iSER driver registers a 1 GiB buffer pool from SysV shared memory in huge
	# pages; without them (the guest has none by default) rdma_create_qp fails with
	# EINVAL on every connection and tgtd crashes. 520 x 2 MiB of the guest's 3 GiB.
	echo 520 >/proc/sys/vm/nr_hugepages
	# tgt's iSER listener takes RDMA/CM port 3260 (LIO's is gone: checked above). Not
	# "--iser port=N": 1.0.85's parser tests a stale errno and refuses any port. Its TCP
	# portal on another port: LIO's TCP listener on 3260 may linger a moment.
	tgtd -f -C $tgt_ctl --iscsi portal=$ip:3264 >"$work/tgtd.log" 2>&1 &
	tgtd_pid=$!
	tadm() { timeout 10 tgtadm -C $tgt_ctl --lld iser "$@" >>"$work/tgtadm.log" 2>&1; }
	for _ in $(seq 100); do # bounded: 10 s
		tadm --op show --mode target && break
		kill -0 $tgtd_pid 2>/dev/null || fail "tgtd exited during start-up"
		sleep 0.1
	done
	tadm --op show --mode target || fail "tgtd: no answer on control port $tgt_ctl"
	tadm --op new --mode target --tid 1 -T $tgt_iqn || fail "tgtadm: new target"
	tadm --op new --mode logicalunit --tid 1 --lun 1 -b "$work/tgt-lun.img" ||
		fail "tgtadm: new LUN"
	# Bookworm's tgt: an address and an initiator-name ACL, or the iSER login fails.
	tadm --op bind --mode target --tid 1 -I $ip || fail "tgtadm: bind address"
	tadm --op bind --mode target --tid 1 -Q $init_iqn || fail "tgtadm: bind initiator name"
	note "tgtd: $tgt_iqn LUN 1 = 64 MiB file on tmpfs, iSER portal $ip:3260"
	# tgt's LUN 0 is its controller: the data LUN is 1.
	workloads tgt "$tgt_iqn" 3260 -l 1
	note "tgtd: passed"
fi
note "passed"
