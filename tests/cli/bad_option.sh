#!/usr/bin/env bash
# tests/cli/bad_option.sh PROGRAM... - every ulp program answers a command line it rejects
# with exit status 2 and a message on standard error, and --help and --version with 0 (ulpctl:
# --help; its --version asks the daemon too): a
# rejected command line is a configuration error, which ulp-targetd's unit does not
# restart on (RestartPreventExitStatus=2), not CLI11's own codes of 100 and more.
set -uo pipefail
fail=0
for prog in "$@"; do
	name=$(basename "$prog")
	err=$("$prog" --no-such-option 2>&1 >/dev/null)
	rc=$?
	if ((rc != 2)); then
		echo "FAIL: $name --no-such-option: exit $rc, not 2"
		fail=1
	elif [[ -z $err ]]; then
		echo "FAIL: $name --no-such-option: exit 2 without a message"
		fail=1
	fi
	# ulpctl --version asks the daemon too, and says 3 when there is none (ulpctl.8).
	oks=(--help --version)
	[[ $name == ulpctl ]] && oks=(--help)
	for ok in "${oks[@]}"; do
		"$prog" "$ok" >/dev/null 2>&1
		rc=$?
		if ((rc != 0)); then
			echo "FAIL: $name $ok: exit $rc, not 0"
			fail=1
		fi
	done
done
((fail == 0)) && echo "bad_option: $# programs: 2 for a rejected option, 0 for --help and --version"
exit $fail
