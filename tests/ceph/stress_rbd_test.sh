#!/usr/bin/env bash
# ctest stress_rbd: ulp-stress's short profile against ulp-targetd serving an RBD LUN, over
# iSCSI/TCP, iSER and SRP (both on the soft RDMA provider): nothing acknowledged is lost.
#
#   - a single-node Ceph cluster (scripts/ceph-dev.sh, memstore, in a temporary directory on
#     a free monitor port), started by tests/ceph/cluster.sh as in the other Ceph tests;
#   - ulp-targetd with a TCP, an iSER and an SRP portal on 127.0.0.1 (ephemeral ports, read
#     from --ready-fd: "TCP\niser ISER\nsrp SRP\n", as ulp-stress starts its own daemon,
#     tools/ulp-stress/target.cc) and LUN 0 an rbd image made by create=1 (64 MiB;
#     ulp-stress writes its first 8 MiB), as client.ulp-gw (a gateway's caps: profile rbd);
#   - a warm-up storm (below), then ulp-stress --target-address 127.0.0.1 with those
#     ports, the target's name, its admin socket and pid, and the SRP add_target line the
#     daemon logs for its SRP portal: --profile short (its own counts: per transport 24
#     login/logout cycles of 4 nexuses at once, 6 kills, 6 drops, 2 exhaustion rounds,
#     8 faults, 8 CQ races) over tcp,iser,srp, scenarios login-storm, kill,
#     target-disconnect, exhaustion, faults and cq-race;
#   - it must exit 0: every check of every row passed, above all every acknowledged block
#     read back with its last generation after each scenario and at the end, and the
#     daemon's resources back at their baseline; its JSON must have each scenario on each
#     transport, with cycles and I/Os done where the scenario applies (faults and cq-race
#     are iSER and SRP only), and no failure;
#   - then librbd's side of the LUN (ulpctl stats): operations completed, no error, none in
#     flight, not fenced; SIGTERM: exit 0 within 30 s; the cluster stops, no process left.
#
# The subset: the short profile's scenario list in .ci/run but starvation. starvation
# starts a second ulp-targetd of its own, with small RDMA pools and a RAM LUN, and stresses
# that one: with --target-address it would not touch the RBD LUN (only the usual read-back
# of it afterwards), so it adds time and tests nothing here. The rest, at the short
# profile's own counts, takes about 40 s on the RBD LUN on a 2-core machine (about 50 s with
# the cluster), well inside the 2-3 minutes this test may take, so nothing is cut down.
#
# Every wait is bounded (timeout, or a counted loop). On a failure: a FAIL line with the
# failed rows' messages, the tail of ulp-stress's progress and of the daemon's log, and the
# cluster's log lines.
#
#   bash tests/ceph/stress_rbd_test.sh ULP_TARGETD ULPCTL ULP_STRESS CEPH_DEV_SH
set -euo pipefail
usage='usage: stress_rbd_test.sh ULP_TARGETD ULPCTL ULP_STRESS CEPH_DEV_SH'
targetd=${1:?$usage}
ulpctl_bin=${2:?$usage}
stress=${3:?$usage}
ceph_dev=${4:?$usage}

# What ulp-stress runs (see above), at the short profile's counts.
scenarios=login-storm,kill,target-disconnect,exhaustion,faults,cq-race
transports=tcp,iser,srp

# shellcheck source=SCRIPTDIR/cluster.sh
source "$(dirname "${BASH_SOURCE[0]}")/cluster.sh"
# cdir: the cluster's (ceph-dev.sh's own); work: the daemon's and ulp-stress's files.
cluster_init stress_rbd "$ceph_dev" ulp-stress-rbd
unset ULP_TARGETD
spid=''
# ulp-stress, with its children: the process group timeout made (run_stress).
cluster_on_cleanup() {
	if [[ -n $spid ]] && kill -0 "$spid" 2>/dev/null; then
		kill -KILL -- "-$spid" 2>/dev/null || kill -KILL "$spid" 2>/dev/null
		wait "$spid" 2>/dev/null
	fi
	return 0
}
cluster_on_failure() {
	cluster_tail 40 "ulp-stress's progress and errors" "$work"/warm-up.err "$work"/stress.err
	cluster_tail 40 "" "$work"/targetd.log "$work"/ceph-*.log
}

sock=$work/admin.sock
iqn=iqn.2026-11.org.ulp:stress-rbd
ulpctl() { timeout 60 "$ulpctl_bin" --socket "$sock" --timeout 50 "$@"; }

t_all=$SECONDS
cluster_start

# ---- ulp-targetd: TCP, iSER and SRP portals, LUN 0 on RBD ------------------------------------
lun0="0:rbd:pool=rbd,image=ulp-stress,create=1,size=64M,conf=$conf,client=ulp-gw"
lun0+=",keyring=$cdir/client.ulp-gw.keyring"
# The ready lines, "TCP\niser ISER\nsrp SRP\n": bounded, 60 s (the cluster connection and
# the image's creation included).
targetd_spawn "$work/ports" "$work/targetd.log" \
	"$targetd" --portal 127.0.0.1:0 --iser-portal 127.0.0.1:0 --srp-portal 127.0.0.1:0 \
	--target "$iqn" --lun "$lun0" --admin-socket "$sock" --state-dir "$work/state"
targetd_wait_ready "" "$work/ports" iser srp
[[ -S $sock ]] || fail "ulp-targetd: no admin socket $sock"
# The add_target line logged for the SRP portal (the default port id: its device's node GUID).
srp_target=$(grep -oE "id_ext=[0-9a-f]{16},ioc_guid=[0-9a-f]{16},dest=127\.0\.0\.1:$srp_port" \
	"$work/targetd.log" | head -n 1 || true)
[[ -n $srp_target ]] || fail "ulp-targetd: no SRP add_target line for 127.0.0.1:$srp_port in its log"
say "ulp-targetd (pid $targetd_pid) on rbd/ulp-stress: TCP $tcp_port, iSER $iser_port, SRP $srp_port ($srp_target)"
t0=$SECONDS

# ---- warm-up: every event loop that may serve the LUN opens its rbd queue ------------------
# The rbd backstore gives each event loop (a TCP worker, a CQ poller of an RDMA device) a
# queue of its own with an eventfd, made on the loop's first request to the LUN and kept
# while the loop lives (scsi/bs_rbd_queue.h, RbdQueue::of_this_loop). ulp-stress takes its
# baseline after one session per transport, which reaches one of a device's pooled CQs,
# and so one poller, only; the first time a storm reaches another poller, that poller's
# queue counts as a leaked fd ("fds 43 -> 44" after login-storm/iser, for the rest of the
# run; a second run sees no growth). So first a storm without the resource checks (no admin
# socket) of 8 nexuses at once per transport, more than the pollers a soft device has
# (its 4 completion vectors, at most one per CPU); every acknowledged write is read back
# here too. Bounded: 90 s (about 4 s).
run_stress() { # NAME BOUND ARGS...: ulp-stress against our daemon, its exit status in $rc
	local name=$1 bound=$2
	shift 2
	rc=0
	# timeout runs it in a process group of its own (timeout's pid), which the clean-up
	# kills whole: the kill scenario's initiators are child processes of ulp-stress.
	timeout -k 10 "$bound" "$stress" --target-address 127.0.0.1 --tcp-port "$tcp_port" \
		--iser-port "$iser_port" --srp-port "$srp_port" --target-name "$iqn" \
		--srp-target "$srp_target" --transport "$transports" --profile short "$@" \
		>"$work/$name.out" 2>"$work/$name.err" &
	spid=$!
	wait "$spid" || rc=$?
	spid=''
	kill -0 "$targetd_pid" 2>/dev/null || fail "$name: ulp-targetd died under ulp-stress"
	((rc != 124 && rc != 137)) || fail "$name: ulp-stress did not finish within $bound s"
}
run_stress warm-up 90 --scenario login-storm --sessions 8 --cycles 16
((rc == 0)) || fail "warm-up: ulp-stress exited $rc: $(grep -E 'FAILED|^result' "$work/warm-up.out" | head -n 10)"
say "warm-up: a storm of 8 nexuses at once per transport (no resource check): ok ($((SECONDS - t0)) s)"

# ---- ulp-stress's short profile, every check --------------------------------------------------
# Bounded: 240 s (about 40 s here; its watchdog bounds each step at 30 s).
t0=$SECONDS
run_stress stress 240 --scenario "$scenarios" --admin-socket "$sock" --target-pid "$targetd_pid" --json
# Every row: cycles and I/Os done, no failure; every scenario on every transport; ok overall.
out=$(python3 - "$work/stress.out" "$scenarios" "$transports" 2>&1 <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
want = {(s, t) for s in sys.argv[2].split(",") for t in sys.argv[3].split(",")}
rdma_only = ("faults", "starvation", "cq-race")  # their TCP rows do nothing
bad = []
for row in r["rows"]:
    key = (row["scenario"], row["transport"])
    want.discard(key)
    if row["failures"] or not row["ok"]:
        bad.append(f"{key[0]}/{key[1]}: {row['failures']} failures: {row['messages']}")
    elif key[0] in ("warm-up", "final") or (key[1] == "tcp" and key[0] in rdma_only):
        pass
    elif row["cycles"] <= 0 or row["ios"] <= 0:
        bad.append(f"{key[0]}/{key[1]}: {row['cycles']} cycles, {row['ios']} I/Os")
if want:
    bad.append(f"no row for {sorted(want)}")
if not r["ok"]:
    bad.append("not ok")
if bad:
    sys.exit("; ".join(bad))
for row in r["rows"]:
    print(f"  {row['scenario']:<18} {row['transport']:<5} {row['cycles']:>4} cycles "
          f"{row['ios']:>7} I/Os  teardown p50 {row['teardown_ms']['p50']:.1f} ms "
          f"max {row['teardown_ms']['max']:.1f} ms")
PY
) || fail "ulp-stress (exit $rc): $out"
((rc == 0)) || fail "ulp-stress exited $rc"
echo "$out"
say "PASS: ulp-stress's short profile ($scenarios) over $transports on the RBD LUN: nothing lost, every check passed ($((SECONDS - t0)) s)"

# ---- librbd's side: the commands went to the cluster, none failed or left in flight --------
ulpctl --json stats >"$work/stats.json" 2>&1 || fail "ulpctl --json stats: $(head -c 2000 "$work/stats.json")"
python3 - "$work/stats.json" <<'PY' || fail "rbd statistics: $(head -c 2000 "$work/stats.json")"
import json, sys
st = json.load(open(sys.argv[1]))
rbd = [l["rbd"] for t in st["io"] for l in t["luns"] if l["lun"] == 0 and l.get("rbd")]
if not rbd:
    sys.exit("LUN 0: no rbd statistics")
for r in rbd:
    if r["completed"] <= 0 or r["errors"] != 0 or r["inflight"] != 0 or r["fenced"]:
        sys.exit(f"LUN 0: {r}")
print(f"  librbd: {rbd[0]['completed']} operations completed, average {rbd[0]['avg_us']} us")
PY
say "PASS: librbd completed the LUN's commands, no error, none in flight, not fenced"

# ---- SIGTERM: exit 0 within 30 s ------------------------------------------------------------
targetd_stop ""
say "PASS: SIGTERM: exit 0"

# ---- the cluster stops, nothing of it left --------------------------------------------------
cluster_stop
say "PASS: cluster stopped, no process of it left ($((SECONDS - t_all)) s in all)"
