#!/bin/bash
# tests/admin/unit_security_test.sh UNIT ULP_TARGETD [THRESHOLD]
#
# ulp-targetd's configured unit (BUILD/tools/ulp-targetd/ulp-targetd.service) against
# systemd's own review, offline (no systemd running needed):
#   1. `systemd-analyze security --offline=true --threshold=N`: the overall exposure, 0.0
#      to 10.0, must be at most N tenths (default 40: 4.0, "OK"); systemd-analyze exits
#      non-zero above it. The review is printed on failure: its ✗ lines say what a change
#      gave up.
#   2. `systemd-analyze verify`: the unit parses, every key known, its dependencies
#      load. Verify wants the Exec binaries to exist, so it checks a copy whose Exec lines
#      run ULP_TARGETD (the build's binary) instead of the install path.
# Exit 77 (skipped) only without systemd-analyze.
set -u
unit=$1 bin=$2 threshold=${3:-40}
sa=$(command -v systemd-analyze) || {
	echo "unit_security_test: SKIP: no systemd-analyze"
	exit 77
}
[[ -f $unit ]] || {
	echo "unit_security_test: FAIL: no unit $unit"
	exit 1
}
fails=0
tmp=$(mktemp -d "${TMPDIR:-/tmp}/ulp-unit.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

out=$("$sa" security --offline=true --threshold="$threshold" "$unit" 2>&1)
rc=$?
score=$(grep -o 'Overall exposure level for [^:]*: [0-9.]*' <<<"$out" | awk '{print $NF}')
if ((rc == 0)) && [[ -n $score ]]; then
	echo "PASS: systemd-analyze security: exposure $score, at most $((threshold / 10)).$((threshold % 10))"
else
	echo "FAIL: systemd-analyze security: exposure ${score:-?} (status $rc), above $((threshold / 10)).$((threshold % 10)):"
	grep -E '✗|Overall|rror' <<<"$out"
	fails=$((fails + 1))
fi

# The same unit with the build's binary, for verify.
name=$(basename "$unit")
sed -E "s#^(Exec[A-Za-z]*=[-+!@:]*)/[^ ]*/ulp-targetd( |$)#\1$bin\2#" "$unit" >"$tmp/$name"
grep -q "^ExecStart=$bin " "$tmp/$name" || {
	echo "FAIL: no ExecStart=.../ulp-targetd in $unit to point at $bin"
	exit 1
}
# --man=no: verify runs man(1) on each Documentation=man: entry, and a build tree has no
# installed pages; instead each must be a page of docs/man (which tests/cli lints).
man_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")/../../docs/man" && pwd)
for m in $(grep -oE 'man:[a-z0-9.-]+\([0-9]\)' "$unit"); do
	page=${m#man:}
	sec=${page##*(}
	page="${page%(*}.${sec%)}"
	if [[ -f $man_dir/$page ]]; then
		echo "PASS: Documentation=$m is docs/man/$page"
	else
		echo "FAIL: Documentation=$m: no docs/man/$page"
		fails=$((fails + 1))
	fi
done
out=$(cd "$tmp" && "$sa" verify --man=no --recursive-errors=no "$tmp/$name" 2>&1)
rc=$?
# Lines about our unit only: verify also loads what it is ordered against.
ours=$(grep -F "$name" <<<"$out")
if ((rc == 0)) && [[ -z $ours ]]; then
	echo "PASS: systemd-analyze verify"
else
	echo "FAIL: systemd-analyze verify (status $rc):"
	echo "$out"
	fails=$((fails + 1))
fi
((fails == 0))
