#!/usr/bin/env bash
# tests/cli/completion.sh COMPLETION ULPCTL ULP_TARGETD - the bash completion
# (tools/ulpctl/ulpctl.bash-completion):
#   - completes what an administrator types: `ulpctl lu<TAB>` is lun, `ulpctl lun <TAB>`
#     its verbs, `ulpctl lun create --<TAB>` that command's options, `-b <TAB>` the
#     backstores, global options (with their values) skipped on the way, ulp-targetd's
#     options and their values;
#   - its tables are what the programs accept: ulpctl's commands, each command's verbs and
#     options, the options that take no value, and ulp-targetd's options, each equal to what
#     the built program's --help prints. A command or option added to a program without
#     its completion fails here.
# Bash's programmable completion is driven as bash itself does: COMP_WORDS and COMP_CWORD
# set, the registered function called, COMPREPLY read.
set -uo pipefail
completion=${1:?usage: completion.sh COMPLETION ULPCTL ULP_TARGETD}
ulpctl=${2:?}
targetd=${3:?}
here=$(dirname "$0")
# shellcheck source=tests/cli/help_parse.sh
source "$here/help_parse.sh"
# shellcheck source=tools/ulpctl/ulpctl.bash-completion
source "$completion"

failures=0
fail()
{
	echo "FAIL: $*" >&2
	failures=$((failures + 1))
}

# complete WORD...: what TAB offers after these words (the last one is the word being
# completed, '' for a new one), as bash would split the line; sorted, one a line.
complete_words()
{
	local fn
	fn=$(complete -p "$1" 2>/dev/null | sed -n 's/.*-F \([^ ]*\) .*/\1/p')
	[[ -n $fn ]] || {
		echo "<no completion registered for $1>"
		return
	}
	COMP_WORDS=("$@")
	COMP_CWORD=$(($# - 1))
	COMP_LINE="$*"
	COMP_POINT=${#COMP_LINE}
	COMPREPLY=()
	"$fn" "$1" "${COMP_WORDS[COMP_CWORD]}" "${COMP_WORDS[COMP_CWORD - 1]}"
	sorted "${COMPREPLY[@]}"
}

# expect "WANT WORDS" WORD...: TAB after WORD... offers exactly WANT.
expect()
{
	local want=$1 got
	shift
	got=$(complete_words "$@")
	# shellcheck disable=SC2086 # the words of WANT, each a line
	[[ $got == "$(sorted $want)" ]] ||
		fail "'$*<TAB>': got [$(tr '\n' ' ' <<<"$got")], want [$want]"
}

# ---- What TAB offers --------------------------------------------------------------------
expect "lun" ulpctl lu
expect "show stats save session srp-acl" ulpctl s
expect "list create delete resize rescan" ulpctl lun ''
expect "create" ulpctl lun cr
expect "--backstore" ulpctl lun create --back
expect "ram file block rbd null" ulpctl lun create -t iqn.x -l 1 -b ''
expect "ram rbd" ulpctl lun create --backstore r
expect "tcp iser srp" ulpctl portal create --transport ''
expect "trace debug info warning error critical off" ulpctl log set ''
expect "--prometheus" ulpctl stats --p
expect "import" ulpctl im
expect "--from --force" ulpctl import --f
expect "targetcli tgt" ulpctl import --from ''
expect "--help --socket --json --timeout --version" ulpctl --
# Global options and their values before the command are skipped, also a tcp: socket
# (which bash splits at its colons) and --opt=value.
expect "list logout drop" ulpctl -s /run/x.sock --json session ''
expect "list logout drop" ulpctl -s tcp : 127.0.0.1 : 5261 session ''
expect "list logout drop" ulpctl --socket = /run/x.sock --timeout 5 session ''
expect "session" ulpctl --json --timeout 5 se
# Values nothing can guess are left alone: no options offered as a LUN number.
expect "" ulpctl lun create --lun ''
expect "" ulpctl session drop iscsi : ''
# ulp-targetd's options and values.
expect "--log-level --log-file" ulp-targetd --log
expect "trace debug info warning error critical off" ulp-targetd --log-level ''
expect "none crc32c both" ulp-targetd --quiet --digests ''
expect "yes no" ulp-targetd --immediate-data=''
expect "yes no" ulp-targetd --initial-r2t = ''
expect "" ulp-targetd --workers ''

# ---- The tables against the programs ----------------------------------------------------
check_set()
{
	local what=$1 want got
	# shellcheck disable=SC2086 # word lists, a word a line after
	want=$(sorted $2)
	# shellcheck disable=SC2086

	got=$(sorted $3)
	[[ $want == "$got" ]] || fail "$what: the program has [$(tr '\n' ' ' <<<"$want")]," \
		"the completion [$(tr '\n' ' ' <<<"$got")]"
}

help=$("$ulpctl" --help)
check_set "ulpctl's options" "$(help_long_options "$help")" "$(_ulpctl_global_options)"
all_flags=$(help_flags "$help")
check_set "ulpctl's commands" "$(help_subcommands "$help")" "$(_ulpctl_nouns)"
for noun in $(help_subcommands "$help"); do
	nh=$("$ulpctl" "$noun" --help)
	check_set "ulpctl $noun's verbs" "$(help_subcommands "$nh")" "$(_ulpctl_verbs "$noun")"
	cmds=$(help_subcommands "$nh")
	[[ -n $cmds ]] || cmds=.
	for verb in $cmds; do
		[[ $verb == . ]] && cmd=$noun || cmd="$noun $verb"
		# shellcheck disable=SC2086 # the command's words
		vh=$("$ulpctl" $cmd --help)
		check_set "ulpctl $cmd's options" "$(help_long_options "$vh" | grep -vx -- --help)" \
			"$(_ulpctl_options "$cmd")"
		all_flags+=$'\n'$(help_flags "$vh")
	done
done
check_set "ulpctl's options that take no value" "$all_flags" "$(_ulpctl_flags)"

help=$("$targetd" --help)
check_set "ulp-targetd's options" "$(help_long_options "$help")" "$(_ulp_targetd_options)"
check_set "ulp-targetd's options that take no value" "$(help_flags "$help")" \
	"$(_ulp_targetd_flags)"

if ((failures)); then
	echo "$failures failures" >&2
	exit 1
fi
echo "PASS: the completion offers what ulpctl and ulp-targetd accept"
