#!/usr/bin/env bash
# tests/cli/man_lint.sh PAGE... - each man page is well formed and complete:
#   - groff renders it (man macros, UTF-8) with every warning on (-ww) and prints nothing:
#     any warning fails, since man(1) would show the reader the same mistake;
#   - .TH names the file (ulpctl.8 is ULPCTL, section 8);
#   - lexgrog (man-db) reads its NAME line, which whatis and apropos index;
#   - it has the sections a reader looks for: NAME, SYNOPSIS, DESCRIPTION, EXAMPLES,
#     SEE ALSO; a command's page (sections 1 and 8) OPTIONS and EXIT STATUS too; section
#     8 pages FILES, with the packaged paths; the daemon's SIGNALS, with the three it
#     handles; a file format's page (section 5) FILES, with the file's path.
set -euo pipefail
(($#)) || {
	echo "usage: man_lint.sh PAGE..." >&2
	exit 2
}
command -v groff >/dev/null || {
	echo "FAIL: no groff (scripts/install-deps.sh installs groff-base)" >&2
	exit 1
}

failures=0
fail()
{
	echo "FAIL: $*" >&2
	failures=$((failures + 1))
}

# The section headings, \- and quotes taken out: "EXIT STATUS", "SEE ALSO".
sections() { sed -n 's/^\.SH *//p' "$1" | sed 's/\\-/-/g; s/"//g'; }

for page in "$@"; do
	name=$(basename "$page")
	out=$(LC_ALL=C.UTF-8 groff -man -Tutf8 -ww -z "$page" 2>&1) || fail "$name: groff failed"
	[[ -z $out ]] || fail "$name: groff warns:"$'\n'"$out"

	th=$(sed -n 's/^\.TH *//p' "$page" | sed 's/\\-/-/g')
	want_title=$(tr '[:lower:]' '[:upper:]' <<<"${name%.*}")
	[[ $th == "$want_title ${name##*.} "* ]] ||
		fail "$name: .TH is \"$th\", not $want_title ${name##*.}"

	if command -v lexgrog >/dev/null; then
		lexgrog "$page" >/dev/null 2>&1 || fail "$name: lexgrog cannot read its NAME line"
	fi

	want=(NAME SYNOPSIS DESCRIPTION EXAMPLES "SEE ALSO")
	[[ $name == *.[18] ]] && want+=(OPTIONS "EXIT STATUS")
	[[ $name == *.[58] ]] && want+=(FILES)
	[[ $name == ulp-targetd.8 ]] && want+=(SIGNALS)
	for s in "${want[@]}"; do
		sections "$page" | grep -qx "$s" || fail "$name: no section $s"
	done

	plain=$(sed 's/\\-/-/g' "$page")
	if [[ $name == *.8 ]]; then
		for f in /etc/ulp-targetd/ulp-targetd.toml /run/ulp-targetd/admin.sock \
			/var/lib/ulp-targetd; do
			grep -qF -- "$f" <<<"$plain" || fail "$name: FILES does not name $f"
		done
	fi
	if [[ $name == ulp-targetd.toml.5 ]]; then
		grep -qF -- /etc/ulp-targetd/ulp-targetd.toml <<<"$plain" ||
			fail "$name: FILES does not name /etc/ulp-targetd/ulp-targetd.toml"
	fi
	if [[ $name == ulp-targetd.8 ]]; then
		for sig in SIGTERM SIGHUP SIGUSR1; do
			awk '/^\.SH SIGNALS/ { s = 1; next } /^\.SH / { s = 0 } s' "$page" |
				grep -q "$sig" || fail "$name: SIGNALS does not describe $sig"
		done
	fi
done
if ((failures)); then
	echo "$failures failures" >&2
	exit 1
fi
echo "PASS: $# man pages render without warnings and have their sections"
