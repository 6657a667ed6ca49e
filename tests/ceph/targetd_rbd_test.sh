#!/usr/bin/env bash
# ctest targetd_rbd: ulp-targetd serving rbd LUNs from a real single-node Ceph cluster
# (scripts/ceph-dev.sh, memstore, in a temporary directory on a free monitor port):
#   - a missing image, or pool, named in --lun: exit status 2 and the name in the message;
#   - an rbd LUN made by create=1,size=64M serves ulp-initiator over TCP, every block read
#     back checked (LBA, generation, CRC32C);
#   - a second rbd LUN (another group, as client.ulp-gw) added by `ulpctl lun create`, listed
#     by `ulpctl lun list` with its pool and image, and serving verified I/O too;
#   - a missing image at run time: a JSON-RPC error naming it, and no LUN added;
#   - `ulpctl save`, and a daemon started from that file serves both LUNs with the data the
#     first one wrote;
#   - SIGTERM: exit 0 within 30 s; then the cluster stops and no process of it is left.
# Every wait is bounded (timeout, or a counted loop). The cluster, its clean-up and the
# daemon's start and stop: tests/ceph/cluster.sh.
#
#   bash tests/ceph/targetd_rbd_test.sh ULP_TARGETD ULPCTL ULP_INITIATOR CEPH_DEV_SH
set -euo pipefail
usage='usage: targetd_rbd_test.sh ULP_TARGETD ULPCTL ULP_INITIATOR CEPH_DEV_SH'
targetd=${1:?$usage}
ulpctl_bin=${2:?$usage}
initiator=${3:?$usage}
ceph_dev=${4:?$usage}

# shellcheck source=SCRIPTDIR/cluster.sh
source "$(dirname "${BASH_SOURCE[0]}")/cluster.sh"
# cdir: the cluster's (ceph-dev.sh's own); work: the daemon's files.
cluster_init targetd_rbd "$ceph_dev" ulp-targetd-rbd
cluster_on_failure() { cluster_tail 30 "" "$work"/*.log; }

sock=$work/admin.sock
iqn=iqn.2026-11.org.ulp:rbd-test
ulpctl() { timeout 60 "$ulpctl_bin" --socket "$sock" --timeout 50 "$@"; }

cluster_start

# start NAME ARGS...: ulp-targetd in the background (targetd_pid), its TCP port in tcp_port
# once it listens (bounded: 60 s, a cluster connection included); its log in $work/NAME.log.
start() {
	local name=$1
	shift
	targetd_spawn "$work/$name.port" "$work/$name.log" \
		"$targetd" --portal 127.0.0.1:0 --admin-socket "$sock" --state-dir "$work/state" "$@"
	targetd_wait_ready "$name" "$work/$name.port"
}

# verify LUN ARGS...: one ulp-initiator run over TCP, checking every block it reads back.
verify() {
	local lun=$1
	shift
	timeout 120 "$initiator" --transport tcp -p "127.0.0.1:$tcp_port" -t "$iqn" -l "$lun" \
		--quiet --cmd-timeout 60 "$@" >"$work/initiator.out" 2>>"$work/initiator.log" ||
		fail "ulp-initiator on LUN $lun ($*): $(tail -n 5 "$work/initiator.out" "$work/initiator.log")"
}

lun0="0:rbd:pool=rbd,image=ulp-lun0,conf=$conf,keyring=$cdir/keyring"

# ---- a missing image or pool: exit 2, named ------------------------------------------------------
# NAME|KEYS|WHAT: the --lun keys, and the name and the words the message must have.
for bad in "no-such-image-at-start|pool=rbd,image=no-such-image-at-start|no such image" \
	"no-such-pool|pool=no-such-pool,image=ulp-lun0|no such pool"; do
	IFS='|' read -r name keys what <<<"$bad"
	rc=0
	timeout 90 "$targetd" --portal 127.0.0.1:0 --target "$iqn" --state-dir "$work/state" \
		--lun "0:rbd:$keys,conf=$conf,keyring=$cdir/keyring" >"$work/bad.out" 2>&1 || rc=$?
	((rc == 2)) || fail "--lun 0:rbd:$keys: exit status $rc, expected 2: $(tail -n 3 "$work/bad.out")"
	grep -q "^ulp-targetd: .*$name.*$what" "$work/bad.out" ||
		fail "--lun 0:rbd:$keys: '$name' and '$what' not in: $(tail -n 3 "$work/bad.out")"
done
rc=0
"$targetd" --lun 0:rbd:pool=rbd --check >"$work/bad.out" 2>&1 || rc=$?
if ((rc != 2)) || ! grep -q "needs an image" "$work/bad.out"; then
	fail "--check of an rbd LUN without image: exit $rc: $(cat "$work/bad.out")"
fi
say "PASS: a missing image or pool stops the start with exit status 2 and its name"

# ---- LUN 0 created at start, verified I/O ------------------------------------------------------
start first --target "$iqn" --lun "$lun0,create=1,size=64M"
cluster_rbd info rbd/ulp-lun0 >"$work/info.out" 2>&1 || fail "rbd info: $(cat "$work/info.out")"
grep -q "size 64 MiB" "$work/info.out" || fail "rbd image ulp-lun0 is not 64 MiB: $(cat "$work/info.out")"
verify 0 -w mixed -b 4k -q 16 -r 3 --range 32M --verify-only
verify 0 -w write -b 128k -q 8 -r 0 -s 16M --offset 32M --range 16M --verify-only
say "PASS: rbd LUN 0 (create=1, size=64M) serves verified I/O over TCP"

# ---- LUN 1 added at run time, in its own group as client.ulp-gw --------------------------------
out=$(ulpctl lun create -t "$iqn" -l 1 -b rbd --pool rbd --image ulp-lun1 --create \
	--size 32M --conf "$conf" --client ulp-gw --keyring "$cdir/client.ulp-gw.keyring" \
	--group gw --rbd-timeout 20 2>&1) || fail "ulpctl lun create (rbd): $out"
out=$(ulpctl lun list -t "$iqn" 2>&1) || fail "ulpctl lun list: $out"
grep -Eq "^$iqn +1 +rbd +rbd/ulp-lun1 +32M +512( |$)" <<<"$out" ||
	fail "ulpctl lun list does not show LUN 1 as rbd/ulp-lun1, 32M: $out"
grep -Eq "^$iqn +0 +rbd +rbd/ulp-lun0 +64M " <<<"$out" || fail "ulpctl lun list lost LUN 0: $out"
ulpctl --json lun list -t "$iqn" >"$work/luns.json" 2>&1 || fail "ulpctl --json lun list"
python3 - "$work/luns.json" <<'PY' || fail "lun list JSON: $(cat "$work/luns.json")"
import json, sys
luns = {l["lun"]: l for l in json.load(open(sys.argv[1]))}
l = luns[1]
want = {"backstore": "rbd", "pool": "rbd", "image": "ulp-lun1", "client": "ulp-gw",
        "group": "gw", "create": True, "timeout": 20, "size": 32 << 20}
bad = {k: l.get(k) for k, v in want.items() if l.get(k) != v}
bad.update({k: l[k] for k in ("path", "direct", "write_cache") if k in l})
if bad:
    sys.exit(f"LUN 1: {bad}")
PY
verify 1 -w mixed -b 4k -q 16 -r 2 --verify-only
say "PASS: rbd LUN 1 added by ulpctl (client.ulp-gw, group gw), listed, verified I/O"

# ---- statistics: librbd's side of each rbd LUN ----------------------------------------------
ulpctl --json stats >"$work/stats.json" 2>&1 || fail "ulpctl --json stats: $(cat "$work/stats.json")"
python3 - "$work/stats.json" <<'PY' || fail "stats JSON: $(head -c 2000 "$work/stats.json")"
import json, sys
st = json.load(open(sys.argv[1]))
luns = {l["lun"]: l for t in st["io"] if t["fabric"] == "iscsi" for l in t["luns"]}
for n in (0, 1):
    r = luns[n].get("rbd")
    if not r:
        sys.exit(f"LUN {n}: no rbd statistics")
    if r["completed"] <= 0 or r["errors"] != 0 or r["inflight"] != 0 or r["fenced"]:
        sys.exit(f"LUN {n}: {r}")
    if r["avg_us"] <= 0 or "127.0.0.1" not in r["client_addr"]:
        sys.exit(f"LUN {n}: {r}")
if luns[0]["rbd"]["client_addr"] == luns[1]["rbd"]["client_addr"]:
    sys.exit("LUNs 0 and 1 are in two groups but share a client")
PY
out=$(ulpctl stats 2>&1) || fail "ulpctl stats: $out"
grep -q "RBD_LUN" <<<"$out" || fail "ulpctl stats has no rbd table: $out"
out=$(ulpctl stats --prometheus 2>&1) || fail "ulpctl stats --prometheus: $out"
grep -Eq '^ulp_rbd_requests_total\{target="[^"]+",lun="0"\} [1-9][0-9]*$' <<<"$out" ||
	fail "no ulp_rbd_requests_total for LUN 0 in: $(grep ulp_rbd <<<"$out")"
grep -Eq '^ulp_rbd_fenced\{target="[^"]+",lun="1"\} 0$' <<<"$out" ||
	fail "no ulp_rbd_fenced 0 for LUN 1 in: $(grep ulp_rbd <<<"$out")"
say "PASS: ulpctl stats (text, JSON, Prometheus) shows librbd's side of both LUNs (a client per group)"

# ---- a missing image at run time: a JSON-RPC error naming it -------------------------------------
rc=0
out=$(ulpctl lun create -t "$iqn" -l 2 -b rbd --pool rbd --image no-such-image-at-run-time \
	--conf "$conf" --keyring "$cdir/keyring" 2>&1) || rc=$?
((rc == 1)) || fail "ulpctl lun create of a missing image: exit $rc, expected 1: $out"
grep -q "lun_create: .*no-such-image-at-run-time.*no such image.*(-2)" <<<"$out" ||
	fail "lun_create of a missing image: the error does not name it: $out"
out=$(ulpctl --json call lun_create \
	"{\"target\":\"$iqn\",\"lun\":2,\"backstore\":\"rbd\",\"pool\":\"rbd\",\"image\":\"i\",\"path\":\"/x\"}" 2>&1) &&
	fail "lun_create of an rbd LUN with a path was accepted: $out"
grep -q "path is a file and block key" <<<"$out" || fail "rbd with a path: $out"
out=$(ulpctl lun list -t "$iqn" 2>&1) || fail "ulpctl lun list: $out"
grep -Eq "^$iqn +2 " <<<"$out" && fail "LUN 2 listed after its creation failed: $out"
say "PASS: a missing image at run time is a JSON-RPC error naming it; nothing added"

# ---- save, stop, and start again from the saved file ---------------------------------------------
out=$(ulpctl save "$work/saved.toml" 2>&1) || fail "ulpctl save: $out"
grep -Eq "^ *image = [\"']ulp-lun1[\"']" "$work/saved.toml" ||
	fail "saved file has no image ulp-lun1: $(cat "$work/saved.toml")"
targetd_stop first
say "PASS: SIGTERM: exit 0"
out=$("$targetd" --config "$work/saved.toml" --check 2>&1) || fail "--check of the saved file: $out"
# Its own portal (the saved one was the first daemon's ephemeral port).
sed -i 's/^portals = .*/portals = []/' "$work/saved.toml"
start second --config "$work/saved.toml"
out=$(ulpctl lun list -t "$iqn" 2>&1) || fail "ulpctl lun list (second): $out"
grep -Eq "^$iqn +1 +rbd +rbd/ulp-lun1 +32M" <<<"$out" || fail "second daemon: no LUN 1: $out"
# Every block the first daemon wrote there is read back with its header intact: 16 MiB of
# 512-byte blocks, all checked (a block without a header would not count).
verify 0 -w read -b 128k -q 8 -r 0 -s 16M --offset 32M --range 16M --verify -j
python3 - "$work/initiator.out" <<'PY' || fail "LUN 0 after the restart: $(tail -n 20 "$work/initiator.out")"
import json, sys
r = json.loads(open(sys.argv[1]).read())
if not r["ok"] or r["verify_errors"] or r["verified_blocks"] != (16 << 20) // 512:
    sys.exit(f"verified_blocks {r['verified_blocks']}, verify_errors {r['verify_errors']}")
PY
verify 1 -w randwrite -b 4k -q 8 -r 1 --verify-only
targetd_stop second
say "PASS: a daemon from the saved file serves both rbd LUNs, the data intact; exit 0"

# ---- the cluster stops, nothing of it left --------------------------------------------------------
cluster_stop
say "PASS: cluster stopped, no process of it left"
