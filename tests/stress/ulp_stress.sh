#!/usr/bin/env bash
# tests/stress/ulp_stress.sh MODE ULP_STRESS ULP_TARGETD - ulp-stress against its own
# ulp-targetd on the soft provider.
#   pass:             the short profile, every scenario over TCP, iSER and SRP, few cycles:
#                     exit 0, a table row "ok" with cycles and I/Os for each scenario and
#                     transport, the baseline line, "result: ok"; --help names the scenarios;
#                     --json parses and says ok.
#   wrong-generation: the final verified session expects a generation no write carried
#                     (--test-wrong-generation): exit 1, the final row FAILED with the LBA.
#   leak:             a nexus held open from the first scenario on (--test-leak-session):
#                     exit 1, the resources not back at the baseline, naming the sessions.
#   watchdog:         a step bound of 1 ms (--step-bound 1), which a real login and I/O
#                     exceed: the watchdog names the step, dumps, exits 1, and the daemon it
#                     started is gone.
set -euo pipefail
mode=${1:?usage: ulp_stress.sh pass|wrong-generation|leak|watchdog ULP_STRESS ULP_TARGETD}
stress=${2:?usage: ulp_stress.sh MODE ULP_STRESS ULP_TARGETD}
export ULP_TARGETD=${3:?usage: ulp_stress.sh MODE ULP_STRESS ULP_TARGETD}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() {
	echo "ulp_stress($mode): FAIL: $*"
	for f in "$work"/*.out "$work"/*.err; do
		[[ -e $f ]] && { echo "--- $f"; tail -n 40 "$f"; }
	done
	exit 1
}
# $1: name; the rest: ulp-stress's arguments. Sets rc.
run() {
	local name=$1
	shift
	rc=0
	timeout 150 "$stress" "$@" >"$work/$name.out" 2>"$work/$name.err" || rc=$?
}

case $mode in
pass)
	run help --help
	((rc == 0)) || fail "--help: exit $rc"
	for s in login-storm kill target-disconnect --profile --json; do
		grep -q -- "$s" "$work/help.out" || fail "--help does not mention $s"
	done
	run bad --transport rdma
	((rc == 2)) || fail "--transport rdma: exit $rc, expected 2"
	run short --profile short --cycles 3 --sessions 2
	((rc == 0)) || fail "exit $rc"
	for sc in login-storm kill target-disconnect; do
		for t in tcp iser srp; do
			line=$(grep -E "^$sc +$t " "$work/short.out") || fail "no row for $sc/$t"
			read -r _ _ cycles ios failures _ _ _ result <<<"$line"
			((cycles >= 3)) || fail "$sc/$t: $cycles cycles, expected at least 3: $line"
			((ios > 0)) || fail "$sc/$t: no I/O: $line"
			((failures == 0)) && [[ $result == ok ]] || fail "$sc/$t: $line"
		done
	done
	grep -qE '^final +all ' "$work/short.out" || fail "no final row"
	grep -q '^resources at the baseline: .*sessions=' "$work/short.out" ||
		fail "no baseline resources line"
	grep -q 'fds=' "$work/short.out" || fail "no fd count in the resources"
	grep -q 'login-storm/srp: SRP takeover' "$work/short.out" || fail "no SRP takeover"
	grep -q 'login-storm/srp: SRP multichannel' "$work/short.out" || fail "no SRP multichannel"
	grep -q '^result: ok$' "$work/short.out" || fail "no 'result: ok'"
	# Progress once a second on stderr.
	grep -qE '^ulp-stress: \[ *[0-9.]+ s\] ' "$work/short.err" || fail "no progress lines"
	run json --profile short --cycles 1 --sessions 1 --transport tcp --scenario kill --json
	((rc == 0)) || fail "--json run: exit $rc"
	python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d["ok"] is True and any(r["scenario"]=="kill" and r["cycles"]>=1 for r in d["rows"]), d' \
		"$work/json.out" || fail "--json output"
	cat "$work/short.out"
	;;
wrong-generation)
	run wrong --transport tcp --scenario login-storm --cycles 2 --sessions 1 --test-wrong-generation
	((rc == 1)) || fail "exit $rc, expected 1"
	grep -qE '^final +all .*FAILED$' "$work/wrong.out" || fail "the final row did not fail"
	grep -qE 'final/all: FAILED: verify: LBA [0-9]+: (stale or wrong generation|contents differ)' \
		"$work/wrong.out" || fail "no mismatch named"
	grep -qE '^login-storm +tcp .* ok$' "$work/wrong.out" || fail "the scenario row should pass"
	grep -q '^result: FAILED$' "$work/wrong.out" || fail "no 'result: FAILED'"
	;;
leak)
	run leak --transport tcp --scenario login-storm --cycles 2 --sessions 1 --test-leak-session
	((rc == 1)) || fail "exit $rc, expected 1"
	grep -qE '^login-storm +tcp .*FAILED$' "$work/leak.out" || fail "the scenario row did not fail"
	grep -qE 'FAILED: resources not back at the baseline .*sessions 0 -> 1' "$work/leak.out" ||
		fail "the leak is not named"
	grep -q 'waiting for the daemon.s resources to return to the baseline' "$work/leak.err" ||
		fail "no line while waiting"
	;;
watchdog)
	run hang --transport tcp --scenario login-storm --cycles 2 --sessions 1 --step-bound 1
	((rc == 1)) || fail "exit $rc, expected 1"
	grep -qE "WATCHDOG: '.*' has run [0-9]+ ms, past its bound of [0-9]+ ms" "$work/hang.err" ||
		fail "no watchdog line"
	grep -q 'FAILED: a step hung (watchdog)' "$work/hang.err" || fail "no failure line"
	pid=$(sed -nE 's/.*started .* \(pid ([0-9]+)\).*/\1/p' "$work/hang.err")
	[[ -n $pid ]] || fail "no daemon pid in the log"
	! kill -0 "$pid" 2>/dev/null || fail "ulp-targetd $pid still runs after the watchdog"
	;;
*)
	fail "unknown mode $mode"
	;;
esac
echo "ulp_stress($mode): passed"
