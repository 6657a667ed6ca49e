#!/usr/bin/env bash
# ctest libiscsi_rbd: libiscsi's conformance suite (iscsi-test-cu) over iSCSI/TCP against
# ulp-targetd serving an RBD LUN from a real single-node Ceph cluster (scripts/ceph-dev.sh,
# memstore, in a temporary directory on a free monitor port).
#
# The suite is run by the project's runner, tests/iscsi/libiscsi_cu.sh, as the RAM LUN's
# libiscsi_cu_* ctests run it, with the same known list (tests/iscsi/libiscsi_known.txt:
# what the client decides, with evidence) and the same verdict: any failure outside that
# list, or a listed failure that passed, fails the test. Only the LUN differs:
#   0:rbd:pool=rbd,image=ulp-cu-FAMILY,create=1,size=128M,conf=...,keyring=...
# 512-byte blocks (the LUN's default), so COMPARE AND WRITE is done in the OSD (librbd
# compares one sector); a fresh image per family. The daemon also gets --allow-target-reset
# (as the RAM runs: Reserve6.TargetWarmReset and .TargetColdReset) and its own --state-dir.
# WriteAtomic16.* run as on the RAM LUN: the rbd LUN's atomic unit (128 KiB by default, the
# alignment and longest length in its Block Limits page) holds the suite's writes of 1 to
# 256 blocks at LBA 0 and at the end of the LUN, both aligned.
#
# FAMILY...: the families to run, one runner (one daemon, one image) each; default SCSI.
# The ctest runs "SCSI iSCSI", which is ALL where ALL runs: ALL is the SCSI family but
# ReportLUNs.Simple plus the iSCSI family, and `-t ALL` in one process does not finish -
# it hangs in iSCSI.iSCSISendTargets.Invalid (a "skip" of libiscsi_known.txt: the client
# waits in poll(-1)), which the runner leaves out of the iSCSI family alone. Measured on the
# 2-core development machine, under nice 19 beside a CI run, libiscsi 1.20: SCSI 72-78 s
# (177 passed, 41 skipped), iSCSI 7 s (15 passed, 4 skipped, 1 known), 93 s in all as the
# ctest, the cluster included; `-t ALL` ran 231 tests (187 passed, none failed, 1 known) in
# 200 s and then hung until CU_TIMEOUT. Bookworm's 1.19 (iscsi-test-cu VERSION 1.19): SCSI 59 s
# (175 passed, 40 skipped), iSCSI 7 s (15 passed); not in the ctest, for time.
#
# Every wait is bounded: the cluster's start and stop (ceph-dev.sh --timeout, timeout), each
# iscsi-test-cu process (CU_TIMEOUT, default 200 s), each runner (RUNNER_TIMEOUT, default
# 240 s); the runner gives the daemon 10 s to listen (the image is made beforehand, so the
# daemon only connects and opens it). At the end the cluster stops and no process started
# with this test's ceph.conf (ceph daemons, ulp-targetd) is left (tests/ceph/cluster.sh: the
# cluster, its processes, the clean-up).
#
#   bash tests/ceph/libiscsi_rbd_test.sh ULP_TARGETD ISCSI_TEST_CU VERSION CEPH_DEV_SH [FAMILY...]
#
# ISCSI_TEST_CU: libiscsi 1.20's (ULP_LIBISCSI_120_CU) or bookworm's 1.19 (iscsi-test-cu);
# VERSION: its version, 1.20 or 1.19 (the known list's column). CU_LOG_DIR, when set,
# keeps the suite's and the daemons' logs.
set -euo pipefail
usage='usage: libiscsi_rbd_test.sh ULP_TARGETD ISCSI_TEST_CU VERSION CEPH_DEV_SH [FAMILY...]'
targetd=${1:?$usage}
cu=${2:?$usage}
version=${3:?$usage}
ceph_dev=${4:?$usage}
shift 4
families=("$@")
((${#families[@]})) || families=(SCSI)
here=$(cd "$(dirname "$0")" && pwd)
runner=$here/../iscsi/libiscsi_cu.sh

# shellcheck source=SCRIPTDIR/cluster.sh
source "$(dirname "${BASH_SOURCE[0]}")/cluster.sh"
# cdir: the cluster's (ceph-dev.sh's own); work: the daemon's state, the logs.
cluster_init libiscsi_rbd "$ceph_dev" ulp-libiscsi-rbd
cluster_on_failure() { cluster_tail 30 "" "$work"/logs/targetd-*.log; }
cluster_on_exit() {
	if [[ -n ${CU_LOG_DIR:-} ]]; then
		mkdir -p "$CU_LOG_DIR" && cp -r "$work"/logs/. "$CU_LOG_DIR"/ 2>/dev/null
	fi
	return 0
}
[[ -x $cu ]] || cu=$(command -v "$cu") || fail "$2 missing (scripts/install-deps.sh BUILD_DIR builds libiscsi 1.20)"

cluster_start

# One runner per family: its own daemon and a fresh image. The runner waits 10 s for the
# daemon to listen; the image is made here beforehand, so that the daemon's start is a
# connection and an open only (create=1 then finds it).
failed=()
for family in "${families[@]}"; do
	image=ulp-cu-$family
	cluster_rbd create --size 128M "rbd/$image" >"$work/rbd-create.log" 2>&1 ||
		fail "rbd create rbd/$image: $(cat "$work/rbd-create.log")"
	lun="0:rbd:pool=rbd,image=$image,create=1,size=128M,conf=$conf,keyring=$cdir/keyring"
	t1=$SECONDS
	rc=0
	# Bounded: each iscsi-test-cu process by CU_TIMEOUT, the whole runner by timeout (its
	# daemon, if the runner were killed, is one of ours: the cleanup finds it).
	CU_TIMEOUT=${CU_TIMEOUT:-200} CU_LOG_DIR=$work/logs ISCSI_TEST_CU=$cu \
		ISCSI_TEST_CU_VERSION=$version timeout -k 10 "${RUNNER_TIMEOUT:-240}" \
		bash "$runner" "$targetd" "$family" "$lun" "" --allow-target-reset \
		--state-dir "$work/state-$family" || rc=$?
	say "$family on rbd/$image: runner exited $rc after $((SECONDS - t1)) s"
	((rc == 0)) || failed+=("$family")
	left=$(ours | grep -v -e " -c $conf" || true)
	[[ -z $left ]] || fail "$family: ulp-targetd still running after its runner: $left"
done
((${#failed[@]} == 0)) || fail "failures outside libiscsi_known.txt (cu: FAIL / XPASS above) in: ${failed[*]}"

# ---- the cluster stops, nothing of it left --------------------------------------------------
cluster_stop
say "cluster stopped, no process of it left"
