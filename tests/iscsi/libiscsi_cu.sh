#!/usr/bin/env bash
# tests/iscsi/libiscsi_cu.sh ULP_TARGETD NAME [LUN_SPEC [TESTS [TARGETD_ARGS...]]] - libiscsi's
# conformance suite (iscsi-test-cu, package libiscsi-bin) against ulp-targetd over TCP on
# 127.0.0.1.
#
# Without TESTS, NAME is the family to run (SCSI, iSCSI), in one process (in one process
# a repeated Sanitize test spins forever and a CompareAndWrite test leaves a hook
# behind, so a family per process). With TESTS - a comma-separated list of test names
# (FAMILY.SUITE.TEST) - NAME only names the run and each test runs in a process of its own:
# the extra runs against a differently configured LUN (LUN_SPEC: a 512e LUN, a read-only
# one, a removable one) that cover tests the main LUN cannot, counted apart from the family
# runs. TARGETD_ARGS are passed on to the daemon.
#
# The daemon serves the LUN on an ephemeral port; the suite runs with --dataloss and the same
# URL twice (a second session: the MultipathIO tests need it). Results are counted per test by
# cu_results.py (CUnit's summary counts skipped tests as passed). Exit status: 0 when no test
# failed, 1 otherwise (or when the suite or the daemon could not run). The logs stay in
# $CU_LOG_DIR when set. ISCSI_TEST_CU names the suite's binary (default: iscsi-test-cu from
# PATH, bookworm's 1.19; the ctest runs libiscsi 1.20's too, built by
# scripts/libiscsi-1.20.sh) and ISCSI_TEST_CU_VERSION its version (default 1.19).
#
# libiscsi_known.txt lists the tests the client decides, with the evidence: a "skip" entry
# is not run (the family then runs one suite per process, and the skipped test's suite one
# test per process); a "fail" entry must fail ("cu: KNOWN", counted apart). Any other
# failure, or a listed failure that passed ("cu: XPASS"), fails the run.
set -u
targetd=${1:?ulp-targetd}
name=${2:?family (SCSI or iSCSI) or a name for the run}
lun=${3:-0:ram:size=128M}
tests=${4:-}
shift $(($# < 4 ? $# : 4))
here=$(cd "$(dirname "$0")" && pwd)
cu=${ISCSI_TEST_CU:-iscsi-test-cu}
version=${ISCSI_TEST_CU_VERSION:-1.19}
known=$here/libiscsi_known.txt
command -v "$cu" >/dev/null || {
	echo "libiscsi_cu: $cu missing (libiscsi-bin; 1.20: scripts/install-deps.sh BUILD_DIR)"
	exit 1
}
work=$(mktemp -d)
pid=
cleanup() {
	[[ -n $pid ]] && kill -TERM "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
	if [[ -n ${CU_LOG_DIR:-} ]]; then
		mkdir -p "$CU_LOG_DIR" && cp "$work"/*.log "$CU_LOG_DIR"/ 2>/dev/null
	fi
	rm -rf "$work"
}
trap cleanup EXIT
iqn=iqn.2026-11.org.ulp:conformance
"$targetd" --portal 127.0.0.1:0 --target $iqn --lun "$lun" "$@" --ready-fd 9 \
	9>"$work/port" 2>"$work/targetd-$name.log" &
pid=$!
for _ in $(seq 200); do [[ -s $work/port ]] && break; sleep 0.05; done
port=$(cat "$work/port")
if [[ -z $port ]]; then
	echo "libiscsi_cu: ulp-targetd did not come up"
	cat "$work/targetd-$name.log"
	exit 1
fi
url=iscsi://127.0.0.1:$port/$iqn/${lun%%:*}
log=$work/cu-$name.log
: >"$log"
run() { # run TEST-PATTERN: one iscsi-test-cu process, its output appended to the log
	timeout -k 10 "${CU_TIMEOUT:-900}" "$cu" -d -t "$1" "$url" "$url" >>"$log" 2>&1
}
t0=$(date +%s)
rc=0
mapfile -t skips < <(python3 "$here/cu_results.py" --skips "$known" "$version" tcp |
	grep "^$name\." || true)
if [[ -z $tests ]] && ((${#skips[@]} == 0)); then
	echo "libiscsi_cu: $cu -d -t $name $url (twice: multipath)"
	run "$name"
	rc=$?
elif [[ -z $tests ]]; then
	# Skipped tests: the family's suites one per process, and in a suite with a skipped test
	# each other test in a process of its own.
	echo "libiscsi_cu: $name without ${skips[*]} (libiscsi_known.txt)"
	for s in $("$cu" -l | grep -E "^$name\.[^.]+$"); do
		if printf '%s\n' "${skips[@]}" | grep -q "^$s\."; then
			for t in $("$cu" -l | grep -E "^$s\.[^.]+$"); do
				printf '%s\n' "${skips[@]}" | grep -qx "$t" && continue
				run "$t"
				r=$?
				((r > rc)) && rc=$r
			done
		else
			run "$s"
			r=$?
			((r > rc)) && rc=$r
		fi
	done
else
	echo "libiscsi_cu: $name: LUN $lun, one process per test (twice: multipath):"
	IFS=, read -ra list <<<"$tests"
	for t in "${list[@]}"; do
		echo "libiscsi_cu:   $cu -d -t $t $url"
		run "$t"
		r=$?
		((r > rc)) && rc=$r
	done
fi
echo "libiscsi_cu: suite exited $rc after $(($(date +%s) - t0)) s"
out=$(python3 "$here/cu_results.py" --known "$known" "$version" tcp "$log")
echo "$out"
if ((rc == 124 || rc == 137)); then
	echo "libiscsi_cu: the suite timed out"
	tail -20 "$log"
	exit 1
fi
grep -q "^cu: passed" <<<"$out" || { echo "libiscsi_cu: no results"; tail -20 "$log"; exit 1; }
if grep -q "^cu: FAIL\|^cu: XPASS" <<<"$out"; then
	exit 1
fi
exit 0
