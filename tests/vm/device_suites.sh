#!/usr/bin/env bash
# tests/vm/device_suites.sh - the device-agnostic suites on one verbs device, in one run.
#
#   device_suites.sh DEVICE TEST_BINARY... [-- GTEST_ARGS...]
#
# Runs every binary with ULP_TEST_DEVICE=DEVICE (tests/common/test_device.h), one after the
# other, each bounded by ULP_SUITE_TIMEOUT seconds (default 240), and prints a one-line
# result per suite. Exits 0 when every suite passed (skipped tests included), 1 otherwise.
# Used inside the rxe VM by the vm_suites_rxe ctest (tests/vm/CMakeLists.txt).
set -u
dev=${1:?device}
shift
bins=()
while (($#)) && [[ $1 != -- ]]; do
	bins+=("$1")
	shift
done
if (($#)); then shift; fi
if [[ ! -e /sys/class/infiniband/$dev ]]; then
	echo "device_suites: no $dev in /sys/class/infiniband" >&2
	exit 1
fi
status=0
summary=()
for b in "${bins[@]}"; do
	name=$(basename "$b")
	echo "=== $name on $dev"
	t0=$(date +%s)
	ULP_TEST_DEVICE=$dev timeout -k 10 "${ULP_SUITE_TIMEOUT:-240}" "$b" "$@"
	rc=$?
	t=$(($(date +%s) - t0))
	if ((rc == 0)); then
		summary+=("$name: passed (${t} s)")
	else
		summary+=("$name: FAILED, status $rc (${t} s)")
		status=1
	fi
done
echo "=== summary ($dev)"
printf '%s\n' "${summary[@]}"
exit $status
