#!/usr/bin/env bash
# tests/cli/man_options.sh PROGRAM PAGE - the man page documents what the program accepts:
#   - every long option the program's --help prints has an entry (a .TP/.TQ tag naming
#     it) under OPTIONS;
#   - every command its --help lists (and each command's own commands, as ulpctl's NOUN
#     VERB) has a subsection .SS "NOUN VERB" under COMMANDS, with an entry for every
#     long option that command's --help prints (--help aside, which OPTIONS has);
#   - and the other way round: every option a tag there names is one the program (or
#     that command) accepts, so that an option renamed or removed leaves no stale entry.
# A new option or command without its entry fails here, naming it.
set -euo pipefail
prog=${1:?usage: man_options.sh PROGRAM PAGE}
page=${2:?usage: man_options.sh PROGRAM PAGE}
# shellcheck source=tests/cli/help_parse.sh
source "$(dirname "$0")/help_parse.sh"

failures=0
fail()
{
	echo "FAIL: $(basename "$page"): $*" >&2
	failures=$((failures + 1))
}

# The long options named in the tags of one part of the page: the section .SH OPTIONS
# (SECTION "") or the subsection .SS "SECTION", up to the next .SH or .SS. Roff's \- and
# font changes are taken out first, so "\fB\-\-size\fR" reads as --size.
page_tag_options()
{
	awk -v want="$1" '
	function plain(s) { gsub(/\\-/, "-", s); gsub(/\\f[BIRP]/, "", s); gsub(/"/, "", s); return s }
	/^\.SH / { in_part = (want == "" && plain($0) == ".SH OPTIONS"); next }
	/^\.SS / { s = plain($0); sub(/^\.SS +/, "", s); in_part = (want != "" && s == want); next }
	!in_part { next }
	/^\.(TP|TQ)/ { tag = 1; next }
	tag {
		tag = 0
		s = plain($0)
		while (match(s, /--[a-z0-9][a-z0-9-]*/)) {
			print substr(s, RSTART, RLENGTH)
			s = substr(s, RSTART + RLENGTH)
		}
	}' "$page" | sort -u
}

page_has_subsection()
{
	awk -v want="$1" '
	/^\.SS / { s = $0; gsub(/\\-/, "-", s); gsub(/"/, "", s); sub(/^\.SS +/, "", s)
	           if (s == want) found = 1 }
	END { exit !found }' "$page"
}

# check PART WORDS...: the options of `PROGRAM WORDS... --help` against PART of the page,
# then each of its commands in turn.
check()
{
	local part=$1 help want have sub subs
	shift
	help=$("$prog" "$@" --help)
	want=$(help_long_options "$help")
	subs=$(help_subcommands "$help")
	[[ -n $part ]] && want=$(grep -vx -- --help <<<"$want" || true)
	if [[ -n $part ]] && ! page_has_subsection "$part"; then
		# A command that is only a group of commands (ulpctl's nouns) needs no subsection
		# of its own unless it has options.
		if [[ -z $subs || -n $want ]]; then
			fail "no subsection .SS \"$part\" for \`$(basename "$prog") $*\`"
		fi
	else
		have=$(page_tag_options "$part")
		for o in $want; do
			grep -qx -- "$o" <<<"$have" ||
				fail "${part:-OPTIONS}: $o (from \`$(basename "$prog")${*:+ $*} --help\`) has no entry"
		done
		for o in $have; do
			grep -qx -- "$o" <<<"$want" ||
				fail "${part:-OPTIONS}: the entry for $o names an option \`$(basename "$prog")${*:+ $*} --help\` does not print"
		done
	fi
	for sub in $subs; do
		check "${part:+$part }$sub" "$@" "$sub"
	done
}

check ""
if ((failures)); then
	echo "$failures failures: $page does not match $(basename "$prog") --help" >&2
	exit 1
fi
echo "PASS: $(basename "$page") documents every option and command of $(basename "$prog")"
