#!/usr/bin/env bash
# tests/vm/iser_libiscsi.sh ULP_TARGETD PATTERN... - libiscsi's conformance suite
# (iscsi-test-cu, package libiscsi-bin, built with iSER: it links librdmacm) over iSER
# against ulp-targetd on rxe0, INSIDE the rxe VM (ctest vm_iser_libiscsi_* start it
# through tools/vm/run). The TCP twin is tests/iser/libiscsi_cu.sh.
#
# Each PATTERN (iscsi-test-cu's -t: FAMILY[.SUITE[.TEST]], fnmatch globs) runs in its own
# iscsi-test-cu process against a fresh ulp-targetd (LAB.md: one family per process, a
# Sanitize test can spin forever and a CompareAndWrite test leaves a hook behind), with
# --dataloss and the same URL twice (a second session: the MultipathIO tests need it).
# Results are counted per test by tests/iser/cu_results.py (CUnit counts skipped tests as
# passed). Exit status: 0 when every pattern ran and no test failed, 1 otherwise. Logs (the
# suite's, the daemon's) go to /run/ulp-vm/iser_libiscsi/ (tools/vm/run --share DIR keeps
# them). CU_TIMEOUT bounds each pattern (default 1200 s).
set -euo pipefail

targetd=${1:?usage: iser_libiscsi.sh ULP_TARGETD PATTERN...}
shift
(($#)) || { echo "iser_libiscsi: no test pattern"; exit 2; }
[[ ${ULP_IN_VM:-} == 1 ]] || { echo "iser_libiscsi: run me inside the VM (tools/vm/run)"; exit 2; }
here=$(cd "$(dirname "$0")" && pwd)
results=$here/../iser/cu_results.py
command -v iscsi-test-cu >/dev/null || { echo "iser_libiscsi: iscsi-test-cu missing (libiscsi-bin)"; exit 1; }
# Without librdmacm libiscsi has no iser:// transport: every login would fail.
ldd "$(command -v iscsi-test-cu)" | grep -q librdmacm ||
	{ echo "iser_libiscsi: this iscsi-test-cu has no iSER support (no librdmacm)"; exit 1; }

iqn=iqn.2026-11.org.ulp:conformance
lun=0:ram:size=128M
work=/tmp/iser-libiscsi
logs=/run/ulp-vm/iser_libiscsi
mkdir -p "$work" "$logs"
tpid=''
cleanup() {
	set +e # errexit applies in traps: nothing here may change the status
	[[ -n $tpid ]] && kill -KILL "$tpid" 2>/dev/null
	return 0
}
trap cleanup EXIT

status=0
summary=()
for pattern in "$@"; do
	name=${pattern//[^A-Za-z0-9_.-]/_}
	tlog=$logs/targetd-$name.log
	cu_log=$logs/cu-$name.log
	rm -f "$work/port"
	"$targetd" --iser-portal 10.99.0.1:3260 --rdma-device rxe0 --target $iqn --lun "$lun" \
		--ready-fd 9 9>"$work/port" 2>"$tlog" &
	tpid=$!
	for _ in $(seq 300); do # bounded: 30 s (TCG)
		[[ -s $work/port ]] && break
		sleep 0.1
	done
	if [[ ! -s $work/port ]]; then
		echo "iser_libiscsi: ulp-targetd did not come up"
		cat "$tlog"
		exit 1
	fi
	url=iser://10.99.0.1/$iqn/${lun%%:*}
	echo "iser_libiscsi: iscsi-test-cu -d -t $pattern $url (twice: multipath)"
	t0=$SECONDS
	rc=0
	timeout -k 10 "${CU_TIMEOUT:-1200}" iscsi-test-cu -d -t "$pattern" "$url" "$url" \
		>"$cu_log" 2>&1 || rc=$?
	secs=$((SECONDS - t0))
	echo "iser_libiscsi: $pattern: suite exited $rc after $secs s"
	out=$(python3 "$results" "$cu_log")
	echo "$out"
	# The daemon must still be there, and stop cleanly (bounded: 25 s, TCG).
	if ! kill -0 $tpid 2>/dev/null; then
		echo "iser_libiscsi: $pattern: ulp-targetd died during the suite"
		tail -n 40 "$tlog"
		status=1
	else
		kill -INT $tpid
		for _ in $(seq 250); do
			kill -0 $tpid 2>/dev/null || break
			sleep 0.1
		done
		if kill -0 $tpid 2>/dev/null; then
			echo "iser_libiscsi: $pattern: ulp-targetd still running 25 s after SIGINT"
			status=1
		fi
		trc=0
		wait $tpid || trc=$?
		((trc == 0)) || { echo "iser_libiscsi: $pattern: ulp-targetd exited $trc"; status=1; }
		if grep -E -i 'left allocated|still in use|leak' "$tlog"; then
			echo "iser_libiscsi: $pattern: ulp-targetd logged a leak"
			status=1
		fi
	fi
	tpid=''
	if ((rc == 124 || rc == 137)); then
		echo "iser_libiscsi: $pattern: the suite timed out"
		tail -n 20 "$cu_log"
		status=1
	fi
	if ! grep -q "^cu: passed" <<<"$out"; then
		echo "iser_libiscsi: $pattern: no results"
		tail -n 20 "$cu_log"
		status=1
	elif grep -q "^cu: FAIL" <<<"$out"; then
		status=1
	fi
	summary+=("$pattern: $(tail -n 1 <<<"$out") in $secs s")
done
printf 'iser_libiscsi: %s\n' "${summary[@]}"
if dmesg | grep -E 'BUG:|WARNING:|Oops|general protection'; then
	echo "iser_libiscsi: the guest kernel complained"
	status=1
fi
exit $status
