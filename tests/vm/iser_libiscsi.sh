#!/usr/bin/env bash
# tests/vm/iser_libiscsi.sh ULP_TARGETD ISCSI_TEST_CU [--lio] PATTERN... - libiscsi's
# conformance suite (iscsi-test-cu) over iser:// against ulp-targetd on rxe0, INSIDE the rxe
# VM (ctest vm_iser_libiscsi starts it through tools/vm/run); with --lio, the same suites
# against the kernel's LIO target (ib_isert, a 128 MiB rd_mcp LUN) in the same VM run, so
# that each failure is classified by comparison. The TCP twin is tests/iscsi/libiscsi_cu.sh.
#
# ISCSI_TEST_CU is libiscsi 1.20.0's, built by scripts/libiscsi-1.20.sh (install-deps):
# bookworm's 1.19 cannot drive iSER (it sends immediate data its SEND does not carry, fails
# every command after a reconnect, and crashes at random). 1.20 still crashes (SIGSEGV) in
# the tests that make it reconnect, against LIO as much as against ulp-targetd, so each
# PATTERN that names a family (SCSI, iSCSI) runs one suite per iscsi-test-cu process; a
# PATTERN with a dot (SCSI.Write10) runs as it is. Every process gets --dataloss and the URL
# twice (the MultipathIO tests need a second session), as over TCP.
#
# Outcome per test: pass, fail or skip (tests/iscsi/cu_results.py; CUnit counts skips as
# passes); a suite whose process died or timed out marks its unfinished tests "died".
# tests/iscsi/libiscsi_known.txt lists what the client decides (version 1.20, transport
# iser), with the evidence: "skip" tests are not run (their suite then runs one test per
# process), "fail" tests must fail against ulp-targetd ("known"). The run fails when a test
# fails or dies against ulp-targetd and is not listed, or a listed one passes (XPASS). With
# --lio the table also says, for each failure, how LIO did in the same VM run: an unlisted
# failure against both targets is printed as "both" (a candidate for the list, with each
# target's reason), and still fails the run until it is listed with its evidence. It also fails on a guest kernel
# complaint, on ulp-targetd dying, not stopping within 25 s of SIGINT, or logging a leak.
# The table (per suite: ulp-targetd P/F/S, LIO P/F/S) and the logs go to
# /run/ulp-vm/iser_libiscsi/ (tools/vm/run --share DIR keeps them). CU_TIMEOUT bounds each
# process (default 300 s).
set -euo pipefail

targetd=${1:?usage: iser_libiscsi.sh ULP_TARGETD ISCSI_TEST_CU [--lio] PATTERN...}
cu=${2:?usage: iser_libiscsi.sh ULP_TARGETD ISCSI_TEST_CU [--lio] PATTERN...}
shift 2
with_lio=0
if [[ ${1:-} == --lio ]]; then
	with_lio=1
	shift
fi
(($#)) || { echo "iser_libiscsi: no test pattern"; exit 2; }
[[ ${ULP_IN_VM:-} == 1 ]] || { echo "iser_libiscsi: run me inside the VM (tools/vm/run)"; exit 2; }
here=$(cd "$(dirname "$0")" && pwd)
results=$here/../iscsi/cu_results.py
known=$here/../iscsi/libiscsi_known.txt
mapfile -t skips < <(python3 "$results" --skips "$known" 1.20 iser)
[[ -x $cu ]] || {
	echo "iser_libiscsi: $cu missing: scripts/install-deps.sh BUILD_DIR builds libiscsi 1.20"
	exit 1
}
# Without librdmacm libiscsi has no iser:// transport: every login would fail. (grep -c:
# -q would close the pipe early and fail the pipeline on ldd's SIGPIPE.)
ldd "$cu" 2>/dev/null | grep -c librdmacm >/dev/null ||
	{ echo "iser_libiscsi: $cu has no iSER support (no librdmacm)"; exit 1; }

ip=10.99.0.1
iqn=iqn.2026-11.org.ulp:conformance
lio_iqn=iqn.2026-11.org.ulp:lio-conformance
lun=0:ram:size=128M
cfs=/sys/kernel/config/target
work=/tmp/iser-libiscsi
logs=/run/ulp-vm/iser_libiscsi
mkdir -p "$work" "$logs"
t_start=$SECONDS
note() { printf 'iser_libiscsi [%4ds]: %s\n' $((SECONDS - t_start)) "$*"; }
tpid=''
lio_up=0
status=0

lio_teardown() {
	local t=$cfs/iscsi/$lio_iqn/tpgt_1
	[[ -d $t ]] || return 0
	echo 0 >"$t/enable" 2>/dev/null
	rm -f "$t"/lun/lun_0/rd0
	rmdir "$t"/lun/lun_0 "$t/np/$ip:3260" "$t" "$cfs/iscsi/$lio_iqn" 2>/dev/null
	rmdir "$cfs/core/rd_mcp_0/rd0" "$cfs/core/rd_mcp_0" 2>/dev/null
	lio_up=0
}
cleanup() {
	set +e # errexit applies in traps: nothing here may change the status
	[[ -n $tpid ]] && kill -KILL "$tpid" 2>/dev/null
	((lio_up)) && lio_teardown
	return 0
}
trap cleanup EXIT

# The suites of each pattern: a family is listed by the client itself.
suites=()
for p in "$@"; do
	if [[ $p == *.* ]]; then
		suites+=("$p")
	else
		mapfile -t -O ${#suites[@]} suites < <("$cu" -l | grep -E "^$p\.[^.]+$")
	fi
done
((${#suites[@]})) || { echo "iser_libiscsi: no suite matches $*"; exit 2; }

# ---- the targets ----------------------------------------------------------------------------

tlog=$logs/targetd.log
start_targetd() {
	rm -f "$work/port"
	# --allow-target-reset as in the TCP family runs (tests/iscsi/CMakeLists.txt).
	"$targetd" --iser-portal $ip:3260 --rdma-device rxe0 --target $iqn --lun "$lun" \
		--allow-target-reset --ready-fd 9 9>"$work/port" 2>>"$tlog" &
	tpid=$!
	for _ in $(seq 300); do # bounded: 30 s (TCG)
		[[ -s $work/port ]] && return 0
		kill -0 $tpid 2>/dev/null || break
		sleep 0.1
	done
	echo "iser_libiscsi: ulp-targetd did not come up"
	tail -n 40 "$tlog"
	exit 1
}
# SIGINT: exit 0 within 25 s, no leak lines.
stop_targetd() {
	if ! kill -0 $tpid 2>/dev/null; then
		echo "iser_libiscsi: ulp-targetd died during the suites"
		tail -n 40 "$tlog"
		status=1
	else
		kill -INT $tpid
		for _ in $(seq 250); do
			kill -0 $tpid 2>/dev/null || break
			sleep 0.1
		done
		if kill -0 $tpid 2>/dev/null; then
			echo "iser_libiscsi: ulp-targetd still running 25 s after SIGINT"
			status=1
		fi
		local trc=0
		wait $tpid || trc=$?
		((trc == 0)) || { echo "iser_libiscsi: ulp-targetd exited $trc"; status=1; }
	fi
	if grep -E -i 'left allocated|still in use|leak' "$tlog"; then
		echo "iser_libiscsi: ulp-targetd logged a leak"
		status=1
	fi
	tpid=''
}
start_lio() {
	for m in target_core_mod iscsi_target_mod ib_isert; do
		modprobe $m || { echo "iser_libiscsi: modprobe $m failed"; exit 1; }
	done
	lio_up=1
	local rd=$cfs/core/rd_mcp_0/rd0 tpg=$cfs/iscsi/$lio_iqn/tpgt_1
	mkdir -p "$rd"
	echo "rd_pages=32768" >"$rd/control" # 128 MiB in 4 KiB pages, as ulp-targetd's LUN
	echo 1 >"$rd/enable"
	mkdir -p "$tpg/lun/lun_0"
	ln -s "$rd" "$tpg/lun/lun_0/rd0"
	mkdir "$tpg/np/$ip:3260"
	echo 1 >"$tpg/np/$ip:3260/iser"
	# Demo mode: any initiator, no CHAP, writable.
	echo 1 >"$tpg/attrib/generate_node_acls"
	echo 1 >"$tpg/attrib/cache_dynamic_acls"
	echo 0 >"$tpg/attrib/demo_mode_write_protect"
	echo 0 >"$tpg/attrib/authentication"
	echo 1 >"$tpg/enable"
}

# run_one WHO URL PATTERN LOG: one iscsi-test-cu process; its status in $rc.
run_one() {
	rc=0
	timeout -k 10 "${CU_TIMEOUT:-300}" "$cu" -d -t "$3" "$2" "$2" >>"$4" 2>&1 || rc=$?
}
# run_suites WHO URL: every suite in its own process (a suite holding a skipped test: each
# other test in its own); per-test outcomes to $work/WHO.tsv.
run_suites() {
	local who=$1 url=$2 s t name rc cu_log t0 r
	: >"$work/$who.tsv"
	: >"$work/$who.suites"
	for s in "${suites[@]}"; do
		name=${s//[^A-Za-z0-9_.-]/_}
		cu_log=$logs/cu-$who-$name.log
		: >"$cu_log"
		t0=$SECONDS
		if printf '%s\n' "${skips[@]}" | grep -q "^$s\."; then
			r=0
			for t in $("$cu" -l | grep -E "^$s\.[^.]+$"); do
				printf '%s\n' "${skips[@]}" | grep -qx "$t" && continue
				run_one "$who" "$url" "$t" "$cu_log"
				((rc > r)) && r=$rc
			done
			rc=$r
		else
			run_one "$who" "$url" "$s" "$cu_log"
		fi
		python3 "$results" --tsv "$cu_log" >"$work/one.tsv"
		local how=ok
		if ((rc == 124 || rc == 137)); then
			how="timed out"
		elif ((rc >= 128)) && ! grep -q 'Run Summary' "$cu_log"; then
			how="died (signal $((rc - 128)))"
		fi
		if [[ $how != ok ]]; then
			# The test that was running when the process ended did not finish.
			local last
			last=$(tail -n 1 "$work/one.tsv" | cut -f1)
			if [[ -n $last ]]; then
				sed -i '$d' "$work/one.tsv"
				printf '%s\tdied\t%s\n' "$last" "$how" >>"$work/one.tsv"
			else
				printf '%s.(first test)\tdied\t%s\n' "${s#*.}" "$how" >>"$work/one.tsv"
			fi
		fi
		cat "$work/one.tsv" >>"$work/$who.tsv"
		local p f k d
		p=$(grep -c $'\tpass\t' "$work/one.tsv" || true)
		f=$(grep -c $'\tfail\t' "$work/one.tsv" || true)
		k=$(grep -c $'\tskip\t' "$work/one.tsv" || true)
		d=$(grep -c $'\tdied\t' "$work/one.tsv" || true)
		printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$s" "$p" "$f" "$k" "$d" "$how" >>"$work/$who.suites"
		note "$who: $s: passed $p failed $f skipped $k$( ((d)) && echo " died $d") ($how, $((SECONDS - t0)) s)"
	done
}

note "${#suites[@]} suites, libiscsi $("$cu" -V 2>/dev/null | head -n 1 || true)"
: >"$tlog"
start_targetd
run_suites ulp "iser://$ip/$iqn/${lun%%:*}"
stop_targetd
if ((with_lio)); then
	start_lio
	note "LIO: $lio_iqn LUN 0 = rd_mcp 128 MiB, iSER portal $ip:3260"
	run_suites lio "iser://$ip/$lio_iqn/0"
	lio_teardown
fi

# ---- the comparison -------------------------------------------------------------------------

python3 - "$work" "$with_lio" "$logs/table.txt" "$known" <<'EOF' || status=1
import sys
work, with_lio, table, known_file = sys.argv[1], sys.argv[2] == "1", sys.argv[3], sys.argv[4]
listed = {}  # "Suite.Test" -> (kind, reason): libiscsi_known.txt, 1.20 over iser
for line in open(known_file):
    f = line.rstrip("\n").split("\t")
    if line.startswith("#") or len(f) != 5:
        continue
    if "1.20" in f[1].split(",") and "iser" in f[2].split(","):
        listed[f[0].split(".", 1)[1]] = (f[3], f[4])

def load(who):
    tests, suites = {}, []
    try:
        for line in open(f"{work}/{who}.tsv"):
            name, state, reason = (line.rstrip("\n").split("\t") + ["", ""])[:3]
            tests[name] = (state, reason)
        for line in open(f"{work}/{who}.suites"):
            suites.append(line.rstrip("\n").split("\t"))
    except FileNotFoundError:
        pass
    return tests, suites

ulp, ulp_suites = load("ulp")
lio, lio_suites = load("lio")
lio_by_suite = {s[0]: s for s in lio_suites}
out = []
out.append(f"{'suite':36s} {'ulp-targetd P/F/S/died':>24s} {'LIO P/F/S/died':>18s}")
tot = {"ulp": [0, 0, 0, 0], "lio": [0, 0, 0, 0]}
for s in ulp_suites:
    u = "/".join(s[1:5])
    for i in range(4):
        tot["ulp"][i] += int(s[1 + i])
    l = "-"
    if s[0] in lio_by_suite:
        ls = lio_by_suite[s[0]]
        l = "/".join(ls[1:5])
        for i in range(4):
            tot["lio"][i] += int(ls[1 + i])
    out.append(f"{s[0]:36s} {u:>24s} {l:>18s}")
out.append(f"{'total':36s} {'/'.join(map(str, tot['ulp'])):>24s} "
           f"{'/'.join(map(str, tot['lio'])) if with_lio else '-':>18s}")
ours, both, known, xpass = [], [], [], []
for name, (state, reason) in ulp.items():
    ls, lr = lio.get(name, ("not run", ""))
    if name in listed and listed[name][0] == "fail":
        if state == "pass":
            xpass.append(f"  {name}: passed against ulp-targetd; LIO {ls}")
        elif state == "fail":
            known.append(f"  {name}: LIO {ls}: {listed[name][1]}")
            continue
    if state not in ("fail", "died"):
        continue
    if with_lio and ls in ("fail", "died"):
        both.append(f"  {name}: ulp-targetd {state} ({reason}); LIO {ls} ({lr})")
    else:
        ours.append(f"  {name}: ulp-targetd {state} ({reason}); LIO {ls}")
# Passing against ulp-targetd and not against LIO: for the record.
lio_only = [f"  {n}: LIO {s} ({r})" for n, (s, r) in lio.items()
            if s in ("fail", "died") and ulp.get(n, ("",))[0] in ("pass", "skip")]
if known:
    out.append("the client's (libiscsi_known.txt, with the evidence):")
    out += known
if xpass:
    out.append("listed in libiscsi_known.txt as the client's failure, and passed (look again):")
    out += xpass
if ours:
    out.append("failed against ulp-targetd only (ours):")
    out += ours
if both:
    out.append("failed against both targets, not in libiscsi_known.txt (list it, with evidence):")
    out += both
if lio_only:
    out.append("failed against LIO only:")
    out += lio_only
text = "\n".join(out)
open(table, "w").write(text + "\n")
print("\n".join("iser_libiscsi: " + l for l in text.split("\n")))
sys.exit(1 if ours or both or xpass else 0)
EOF
note "${#suites[@]} suites done"
if dmesg | grep -E 'BUG:|WARNING:|Oops|general protection'; then
	echo "iser_libiscsi: the guest kernel complained"
	status=1
fi
exit $status
