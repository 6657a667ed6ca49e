#!/usr/bin/env bash
# tests/vm/srp_lio.sh ULP_INITIATOR - ulp-initiator's SRP transport against the kernel's
# LIO ib_srpt, INSIDE the rxe VM (ctest vm_srp_lio starts it through tools/vm/run). Both
# ends share rxe0 and 10.99.0.1.
#
# ib_srpt is set up as blktests does (tests/vm/lio_srpt.sh: RDMA/CM port 5555, target port
# named by the node GUID, ACL by address, LUN 0 of 256 MiB and LUN 1 of 64 MiB, RAM). Then
# ulp-initiator --transport srp --rdma-device rxe0, each run verified (every block it
# reads carries its LBA, generation and CRC32C) and required to exit 0 with no errors:
#   1. 4K random writes on 4 channels (channel 0 SINGLE, the rest MULTI, as Linux logs
#      in), then a verify pass over the range;
#   2. the same target found without --srp-target (ib_srpt names its port by the node
#      GUID of rxe0, which is ours): 4K random reads over what run 1 left, every block
#      that carries a header checked intact;
#   3. 1 MiB sequential writes on LUN 1 (per-command REG_MR, direct descriptors; ib_srpt
#      takes no external table), read back;
#   4. a mixed 4K run at queue depth 160 on one channel: more commands than ib_srpt's
#      credits (its req_lim_delta is min(128, max_qp_wr) at login), so the initiator is
#      held by req_lim (it keeps one credit for task management, as Linux does);
#   5. a second login while the first is logged in is a second I_T nexus, both verified.
# The IOPS and MB/s of each run are printed for the record, not checked.
set -euo pipefail

init=${1:?usage: srp_lio.sh ULP_INITIATOR}
[[ ${ULP_IN_VM:-} == 1 ]] || { echo "srp_lio: run me inside the VM (tools/vm/run)"; exit 2; }
here=$(dirname "${BASH_SOURCE[0]}")
# shellcheck source=tests/vm/lio_srpt.sh
source "$here/lio_srpt.sh"

work=/tmp/srp-lio # the guest's tmpfs overlay
mkdir -p "$work"
t_start=$SECONDS
ip=10.99.0.1

note() { printf 'srp_lio [%3ds]: %s\n' $((SECONDS - t_start)) "$*"; }
fail() {
	echo "srp_lio: FAIL [$((SECONDS - t_start))s]: $*"
	echo "--- dmesg (tail)"
	dmesg | tail -n 40
	if [[ -d /run/ulp-vm ]]; then
		mkdir -p /run/ulp-vm/srp_lio
		cp "$work"/*.log "$work"/*.json /run/ulp-vm/srp_lio/ 2>/dev/null || true
		dmesg >/run/ulp-vm/srp_lio/dmesg.log || true
	fi
	exit 1
}

# run NAME ARGS...: one ulp-initiator run over SRP on rxe0 (bounded: 120 s), JSON kept and
# checked (tests/vm/initiator_result.py).
run() {
	local name=$1 rc=0
	shift
	timeout -k 5 120 "$init" --transport srp --rdma-device rxe0 --src-ip $ip -p $ip:5555 \
		--quiet --json "$@" >"$work/$name.json" 2>"$work/$name.log" || rc=$?
	if ((rc != 0)); then
		cat "$work/$name.json" "$work/$name.log" 2>/dev/null | tail -n 30
		((rc == 124)) && fail "$name: ulp-initiator still running after 120 s"
		fail "$name: ulp-initiator exited $rc"
	fi
	python3 "$here/initiator_result.py" srp_lio "$name" srp "$work/$name.json" ||
		fail "$name: bad result"
}
# A figure of the "srp" object of a run's JSON.
srp_stat() { python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['srp'][sys.argv[2]])" "$work/$1.json" "$2"; }

lio_srpt_start || fail "LIO ib_srpt set-up failed"
note "LIO ib_srpt: $lio_srpt_login (LUN 0 256 MiB, LUN 1 64 MiB, RAM)"

run randwrite-4k-ch4 --srp-target "$lio_srpt_login" --srp-channels 4 -l 0 -w randwrite -b 4k \
	-q 16 -r 3 --range 32M --verify-only --seed 1
ch=$(srp_stat randwrite-4k-ch4 channels)
((ch == 4)) || fail "randwrite-4k-ch4: $ch channels logged in, not 4"

# No --srp-target: the port id is rxe0's node GUID, which is ib_srpt's srpt_service_guid.
# The same range: every block run 1 wrote carries its header, checked intact.
run randread-4k-noids -l 0 -w randread -b 4k -q 16 -r 3 --range 32M
grep -q "$(cut -d, -f1 <<<"$lio_srpt_login" | cut -d= -f2)" "$work/randread-4k-noids.json" ||
	fail "randread-4k-noids: not logged in to ib_srpt's port id"

run write-1m --srp-target "$lio_srpt_login" -l 1 -w write -b 1m -q 4 -r 0 -s 48M --verify-only

run mixed-4k-qd160 --srp-target "$lio_srpt_login" -l 0 -w mixed -b 4k -q 160 -r 3 \
	--offset 64M --range 32M
note "mixed-4k-qd160: $(srp_stat mixed-4k-qd160 zero_req_lim) waits for a credit"

# Two nexuses at once (different initiator port ids): each verifies its own range.
rc1=0 rc2=0
timeout -k 5 120 "$init" --transport srp --rdma-device rxe0 --src-ip $ip -p $ip:5555 \
	--srp-target "$lio_srpt_login" --srp-initiator-ext 2 -l 0 -w randwrite -b 4k -q 8 -r 3 \
	--offset 128M --range 16M --verify-only --quiet --json >"$work/nexus-a.json" \
	2>"$work/nexus-a.log" &
pa=$!
timeout -k 5 120 "$init" --transport srp --rdma-device rxe0 --src-ip $ip -p $ip:5555 \
	--srp-target "$lio_srpt_login" --srp-initiator-ext 3 -l 0 -w randwrite -b 4k -q 8 -r 3 \
	--offset 160M --range 16M --verify-only --quiet --json >"$work/nexus-b.json" \
	2>"$work/nexus-b.log" &
pb=$!
wait $pa || rc1=$?
wait $pb || rc2=$?
((rc1 == 0 && rc2 == 0)) || { tail -n 20 "$work"/nexus-*.log; fail "two nexuses: exit $rc1 and $rc2"; }
python3 "$here/initiator_result.py" srp_lio nexus-a srp "$work/nexus-a.json" || fail "nexus-a"
python3 "$here/initiator_result.py" srp_lio nexus-b srp "$work/nexus-b.json" || fail "nexus-b"

if dmesg | grep -E 'BUG:|WARNING:|Oops|general protection|hung_task|blocked for more than'; then
	fail "the guest kernel complained"
fi
note "passed"
