# tests/cli/help_parse.sh - sourced: reads a CLI11 program's --help, for the tests that hold
# the man pages and the bash completion to what the programs really accept.
# shellcheck shell=bash

# help_long_options HELP_TEXT: the long options of its "Options:" section, one a line.
# "-h,--help", "--verify,--no-verify{false}" and "--wire TEXT:{a,b}=both" give --help,
# --verify and --no-verify, --wire.
help_long_options()
{
	awk '/^Options:/ { in_opts = 1; next }
	     in_opts && /^$/ { in_opts = 0 }
	     in_opts && /^  -/ {
		n = split($1, names, ",")
		for (i = 1; i <= n; i++) {
			sub(/[{=].*/, "", names[i])
			if (names[i] ~ /^--/) print names[i]
		}
	     }' <<<"$1"
}

# help_flags HELP_TEXT: the options (long and short) that take no value: nothing after the
# names but the description ("--read-only   ", "-q,--quiet   only warnings").
help_flags()
{
	awk '/^Options:/ { in_opts = 1; next }
	     in_opts && /^$/ { in_opts = 0 }
	     in_opts && /^  -/ {
		# A value-taking option has a type word (TEXT, UINT, INT, FLOAT, ENUM...) after
		# its names, one space away; a flag has only its names, then padding.
		if ($0 ~ /^  [^ ]+ [A-Z]/) next
		n = split($1, names, ",")
		for (i = 1; i <= n; i++) {
			sub(/[{=].*/, "", names[i])
			print names[i]
		}
	     }' <<<"$1"
}

# help_subcommands HELP_TEXT: the names of its "Subcommands:" section, one a line.
help_subcommands()
{
	awk '/^Subcommands:/ { in_subs = 1; next }
	     in_subs && /^$/ { in_subs = 0 }
	     in_subs && /^  [a-z]/ { print $1 }' <<<"$1"
}

# sorted WORDS...: the words, one a line, sorted and unique, for comparing sets.
sorted() { printf '%s\n' "$@" | sed '/^$/d' | sort -u; }
