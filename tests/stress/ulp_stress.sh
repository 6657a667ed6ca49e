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
#   faults:           the faults scenario: over SRP and iSER every fault kind once (over
#                     iSER a dropped send completion fails the connection cmd_timeout after
#                     the command's answer), over TCP a row that says it did not run:
#                     exit 0, each row ok with its cycles, each kind fired once per cycle,
#                     the nexus logged in again, the command timeout the row measured for
#                     its cycles named with where it came from.
#   unfaulted-timeout: the daemon stopped (SIGSTOP) past the command timeout under the I/O
#                     after a fault (--test-freeze-target): exit 1, the faults row FAILED
#                     naming a command that timed out with no fault active, with the CPU
#                     both processes' threads got and waited for meanwhile.
#   exhaustion:       the exhaustion scenario over TCP, iSER and SRP with the memory check
#                     (--memory-check: a warm-up pass first): exit 0, rows ok with both
#                     phases, the credits phase held the initiators back, the memory lines
#                     (the heap in use, judged in every build: the sanitizers' allocators
#                     count it without their quarantine; VmRSS reported beside it).
#   starvation:       the starvation scenario over TCP, iSER and SRP: a second ulp-targetd
#                     with small RDMA pools, 16 nexuses of 16 x 512 KiB commands at once:
#                     exit 0, the iSER and SRP rows ok with their round, the pools named
#                     (16 MiB of buffers, 8 send buffers, an SRQ of 16), work held back (TASK
#                     SET FULL answers over iSER; over SRP its figures), every nexus within a
#                     30th of the busiest (the row fails otherwise), the TCP row saying it
#                     did not run.
#   cq-race:          the cq-race scenario over TCP, iSER and SRP, 3 cycles: exit 0, the iSER
#                     and SRP rows ok with 3 cycles, 16 nexuses of both transports, 8 torn
#                     down per cycle (3 logouts, 3 drops, 2 kills: 24 teardown figures), the
#                     TCP row saying it did not run.
#   watchdog:         a step bound of 1 ms (--step-bound 1), which a real login and I/O
#                     exceed: the watchdog names the step, dumps, exits 1, and the daemon it
#                     started is gone.
set -euo pipefail
mode=${1:?usage: ulp_stress.sh pass|wrong-generation|leak|faults|unfaulted-timeout|exhaustion|starvation|cq-race|watchdog ULP_STRESS ULP_TARGETD}
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
	for s in login-storm kill target-disconnect faults exhaustion starvation cq-race --faults \
		--memory-check --profile --json; do
		grep -q -- "$s" "$work/help.out" || fail "--help does not mention $s"
	done
	run bad --transport rdma
	((rc == 2)) || fail "--transport rdma: exit $rc, expected 2"
	# The phase-1 scenarios; faults and exhaustion have their own modes below.
	run short --profile short --cycles 3 --sessions 2 --scenario login-storm,kill,target-disconnect
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
faults)
	all=drop-completion,delay-completion,post-send,post-recv,rkey,qp-fatal,cut,device-removal
	# $1: transport, $2: kinds, $3: cycles
	check_faults() {
		local t=$1 kinds=$2 n=$3 line cycles failures result k
		line=$(grep -E "^faults +$t " "$work/faults-$t.out") || fail "no row for faults/$t"
		read -r _ _ cycles _ failures _ _ _ result <<<"$line"
		((cycles == n)) || fail "faults/$t: $cycles cycles, expected $n: $line"
		((failures == 0)) && [[ $result == ok ]] || fail "faults/$t: $line"
		for k in ${kinds//,/ }; do
			grep -qE "^  faults/$t: $k: 1 cycles, fired 1, " "$work/faults-$t.out" ||
				fail "faults/$t: $k did not run once and fire once"
		done
		grep -qE "^  faults/$t: command timeout [0-9]+ ms: [0-9]+ x the slowest of [0-9]+ fault-free commands \([0-9]+ ms\)" \
			"$work/faults-$t.out" || fail "faults/$t: no measured command timeout"
		grep -q '^result: ok$' "$work/faults-$t.out" || fail "faults/$t: no 'result: ok'"
	}
	run faults-srp --transport srp --scenario faults --faults "$all" --cycles 8
	((rc == 0)) || fail "faults over srp: exit $rc"
	check_faults srp "$all" 8
	run faults-iser --transport iser --scenario faults --faults "$all" --cycles 8
	((rc == 0)) || fail "faults over iser: exit $rc"
	check_faults iser "$all" 8
	run faults-tcp --transport tcp --scenario faults --cycles 2
	((rc == 0)) || fail "faults over tcp: exit $rc"
	grep -qE '^faults +tcp +0 ' "$work/faults-tcp.out" || fail "faults/tcp ran cycles"
	grep -q 'faults/tcp: not run: the soft provider.s faults need an RDMA transport' \
		"$work/faults-tcp.out" || fail "faults/tcp does not say why it did not run"
	run bad-kind --scenario faults --faults no-such-fault
	((rc == 2)) || fail "--faults no-such-fault: exit $rc, expected 2"
	cat "$work/faults-srp.out" "$work/faults-iser.out"
	;;
unfaulted-timeout)
	run freeze --transport iser --scenario faults --faults delay-completion --cycles 1 \
		--test-freeze-target
	((rc == 1)) || fail "exit $rc, expected 1"
	grep -qE '^faults +iser .*FAILED$' "$work/freeze.out" || fail "the faults row did not fail"
	grep -qE 'faults/iser delay-completion: after the fault: [0-9]+ command\(s\) timed out with no fault active \(timeout [0-9]+ ms, ' \
		"$work/freeze.out" || fail "the timeout with no fault active is not named"
	# The evidence beside it, where the kernel keeps schedstat (CONFIG_SCHED_INFO).
	if [[ -r /proc/self/schedstat ]]; then
		grep -qE "no fault active .*; meanwhile ulp-stress's threads ran [0-9]+ ms and waited [0-9]+ ms for a CPU .*, ulp-targetd's threads ran [0-9]+ ms and waited [0-9]+ ms for a CPU" \
			"$work/freeze.out" || fail "no CPU figures beside the timeout"
	fi
	grep -q '^result: FAILED$' "$work/freeze.out" || fail "no 'result: FAILED'"
	;;
exhaustion)
	run exhaust --scenario exhaustion --cycles 1 --memory-check
	((rc == 0)) || fail "exit $rc"
	for t in tcp iser srp; do
		for sc in "exhaustion (warm-up)" exhaustion; do
			re=${sc//(/\\(}
			re=${re//)/\\)}
			line=$(grep -E "^$re +$t " "$work/exhaust.out") || fail "no row for $sc/$t"
			read -r -a f <<<"${line#"$sc"}"
			((f[1] == 2 && f[2] > 0 && f[3] == 0)) && [[ ${f[-1]} == ok ]] ||
				fail "$sc/$t: expected 2 cycles, I/O, no failure: $line"
		done
		held=$(sed -nE "s/^  exhaustion\/$t: credits: .* held back ([0-9]+) times.*/\1/p" \
			"$work/exhaust.out")
		[[ -n $held ]] && ((held > 0)) || fail "exhaustion/$t: the credits phase held nothing back"
		grep -qE "^  exhaustion/$t: large: 8 nexuses x 8 commands of 65536 bytes" \
			"$work/exhaust.out" || fail "exhaustion/$t: no large phase"
	done
	# Judged: the allocator's count of the heap in use (glibc's, or the sanitizer's under
	# ASan/TSan, its quarantine left out); VmRSS is reported beside it.
	grep -qE '^memory: heap in use \((glibc|asan|tsan)\) [0-9]+ kB at the baseline, [0-9]+ kB after the warm-up pass, [0-9]+ kB at the end \(\+-?[0-9]+ kB after the warm-up, allowed [0-9]+ kB\)$' \
		"$work/exhaust.out" || fail "no heap line"
	grep -qE '^memory: VmRSS [0-9]+ kB at the baseline, [0-9]+ kB after the warm-up pass, [0-9]+ kB at the end \(\+-?[0-9]+ kB after the warm-up, reported: the arenas keep what was freed\)$' \
		"$work/exhaust.out" || fail "no VmRSS line"
	! grep -q '^memory: not judged' "$work/exhaust.out" || fail "memory not judged"
	grep -q '^result: ok$' "$work/exhaust.out" || fail "no 'result: ok'"
	cat "$work/exhaust.out"
	;;
starvation)
	run starve --scenario starvation --cycles 1
	((rc == 0)) || fail "exit $rc"
	for t in iser srp; do
		line=$(grep -E "^starvation +$t " "$work/starve.out") || fail "no row for starvation/$t"
		read -r _ _ cycles ios failures _ _ _ result <<<"$line"
		((cycles == 1 && ios > 0 && failures == 0)) && [[ $result == ok ]] ||
			fail "starvation/$t: expected 1 round, I/O, no failure: $line"
		grep -qE "^  starvation/$t: 16 nexuses x 16 commands of 524288 bytes wanted from a 16 MiB buffer pool" \
			"$work/starve.out" || fail "starvation/$t: the pools are not named"
	done
	grep -qE '^  starvation/iser: .*, 8 send buffers per connection; TASK SET FULL answers [1-9]' \
		"$work/starve.out" || fail "starvation/iser: no TASK SET FULL: the buffer pool held nothing back"
	grep -qE '^  starvation/srp: .*an SRQ of 16 receives, 32 credits per channel; TASK SET FULL answers [0-9]+, held back [0-9]+ times, RNR NAKs [0-9]+' \
		"$work/starve.out" || fail "starvation/srp: no SRQ figures"
	grep -qE '^starvation +tcp +0 ' "$work/starve.out" || fail "starvation/tcp ran"
	grep -q 'starvation/tcp: not run' "$work/starve.out" || fail "starvation/tcp does not say why"
	grep -q '^result: ok$' "$work/starve.out" || fail "no 'result: ok'"
	cat "$work/starve.out"
	;;
cq-race)
	run cqrace --scenario cq-race --cycles 3
	((rc == 0)) || fail "exit $rc"
	for t in iser srp; do
		line=$(grep -E "^cq-race +$t " "$work/cqrace.out") || fail "no row for cq-race/$t"
		read -r _ _ cycles ios failures _ _ _ result <<<"$line"
		((cycles == 3 && ios > 0 && failures == 0)) && [[ $result == ok ]] ||
			fail "cq-race/$t: expected 3 cycles, I/O, no failure: $line"
		grep -qE "^  cq-race/$t: 16 nexuses \(iSER and SRP alternately\), 8 torn down at once per cycle: 3 logouts, 3 session_drops, 2 SIGKILLs" \
			"$work/cqrace.out" || fail "cq-race/$t: no mixed nexuses"
	done
	grep -qE '^cq-race +tcp +0 ' "$work/cqrace.out" || fail "cq-race/tcp ran"
	grep -q '^result: ok$' "$work/cqrace.out" || fail "no 'result: ok'"
	cat "$work/cqrace.out"
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
