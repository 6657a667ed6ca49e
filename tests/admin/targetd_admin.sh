#!/usr/bin/env bash
# tests/admin/targetd_admin.sh ULP_TARGETD ULPCTL ULP_INITIATOR UNIT EXAMPLE - ulp-targetd's
# service integration and administration with real peers:
#   - the systemd unit is Type=notify, restarts on failure and has a stop timeout
#     (`systemd-analyze verify` and `security` are tests/admin/unit_security_test.sh's);
#   - the example configuration passes --check; a bad one names file:line:column, exit 2;
#   - the configuration the packages install (no target) starts an empty daemon that ulpctl
#     then gives a target and a LUN;
#   - READY=1 reaches $NOTIFY_SOCKET once the portals listen, STOPPING=1 at SIGTERM;
#   - libiscsi's iscsi-ls sees a LUN that `ulpctl lun create` added;
#   - an SRP session (ulp-initiator, two channels, on the soft provider) is listed by
#     `ulpctl session list` and logged out by `ulpctl session logout` (SRP_T_LOGOUT, then
#     disconnect), and the initiator hears the logout;
#   - `ulpctl stats` counts what happened; `ulpctl log set` changes the level at run time;
#   - --version of the daemon, of ulpctl (with the running daemon's) and of ulp-initiator;
#   - SIGUSR1 opens --log-file again after logrotate moved it;
#   - portals added with `ulpctl portal create` (TCP, iSER) accept logins and stop when
#     deleted; SIGTERM exits 0 in time.
set -euo pipefail
targetd=$(realpath "${1:?usage: targetd_admin.sh ULP_TARGETD ULPCTL ULP_INITIATOR UNIT EXAMPLE}")
ulpctl_bin=${2:?}
initiator=${3:?}
unit=${4:?}
example=${5:?}
packaged=${6:?}
work=$(mktemp -d)
pid='' ipid='' npid='' rpid=''
cleanup() {
	set +e
	[[ -n $npid ]] && kill -KILL "$npid" 2>/dev/null
	[[ -n $rpid ]] && kill -KILL "$rpid" 2>/dev/null
	[[ -n $ipid ]] && kill -KILL "$ipid" 2>/dev/null
	[[ -n $pid ]] && kill -KILL "$pid" 2>/dev/null
	rm -rf "$work"
	return 0
}
trap cleanup EXIT
fail() {
	echo "targetd_admin: FAIL: $*"
	for f in "$work"/*.log; do
		[[ -e $f ]] && { echo "--- $f"; tail -n 40 "$f"; }
	done
	exit 1
}
pass() { echo "targetd_admin: PASS: $*"; }
sock=$work/admin.sock
ulpctl() { timeout 60 "$ulpctl_bin" --socket "$sock" "$@"; }
iqn=iqn.2026-11.org.ulp:admin-sh

# ---- the unit file ---------------------------------------------------------------------------
grep -q '^Type=notify' "$unit" || fail "unit: not Type=notify"
grep -q '^Restart=on-failure' "$unit" || fail "unit: no Restart=on-failure"
grep -q '^TimeoutStopSec=' "$unit" || fail "unit: no TimeoutStopSec"
pass "the unit: Type=notify, Restart=on-failure, TimeoutStopSec"

# ---- configuration files --------------------------------------------------------------------
out=$("$targetd" --config "$example" --check 2>&1) || fail "example config: $out"
[[ $out == *"configuration OK"* ]] || fail "example config: $out"
printf 'workers = 2\n[[target]]\nname = "%s"\nalias = 7\n' "$iqn" >"$work/bad.toml"
rc=0
out=$("$targetd" --config "$work/bad.toml" --check 2>&1) || rc=$?
((rc == 2)) || fail "bad config: exit $rc: $out"
[[ $out == *"$work/bad.toml:4:9: target.alias: must be a string"* ]] || fail "bad config: $out"
# The RDMA pool sizes: out of range is refused with the key named.
printf '[iser]\nsend_ring = 70000\n' >"$work/bad.toml"
rc=0
out=$("$targetd" --config "$work/bad.toml" --check 2>&1) || rc=$?
((rc == 2)) && [[ $out == *"$work/bad.toml:2:13: iser.send_ring: must be 0..65536"* ]] ||
	fail "bad iser.send_ring: exit $rc: $out"
printf '[srp]\nbuffer_pool = "100K"\n' >"$work/bad.toml"
rc=0
out=$("$targetd" --config "$work/bad.toml" --lun 0:ram:size=16M --check 2>&1) || rc=$?
((rc == 2)) && [[ $out == *"srp.buffer_pool must be 1M..64G"* ]] ||
	fail "bad srp.buffer_pool: exit $rc: $out"
printf '[iser]\nsend_ring = 8\nbuffer_pool = "16M"\n[srp]\nbuffer_pool = "16M"\nsrq = true\nsrq_size = 16\n' \
	>"$work/small.toml"
out=$("$targetd" --config "$work/small.toml" --lun 0:ram:size=16M --check 2>&1) ||
	fail "small pools: $out"
pass "--check: the example loads; a bad file names file:line:column; pool sizes checked"

# ---- the packaged configuration: no target, filled at run time -------------------------------
out=$("$targetd" --config "$packaged" --check 2>&1) || fail "packaged config: $out"
# Its paths made this run's (each must be there to change: the file is what is installed).
for want in '"0.0.0.0:3260"' '"/var/lib/ulp-targetd"' '"/run/ulp-targetd/admin.sock"'; do
	grep -qF "$want" "$packaged" || fail "packaged config: no $want in it"
done
mkdir "$work/pkg-state"
sed -e 's|"0.0.0.0:3260"|"127.0.0.1:0"|' -e "s|\"/var/lib/ulp-targetd\"|\"$work/pkg-state\"|" \
	-e "s|\"/run/ulp-targetd/admin.sock\"|\"$work/pkg.sock\"|" "$packaged" >"$work/pkg.toml"
"$targetd" --config "$work/pkg.toml" --ready-fd 9 9>"$work/pkg.port" 2>"$work/pkg-targetd.log" &
pid=$!
for _ in $(seq 200); do # bounded: 10 s
	[[ -s $work/pkg.port ]] && break
	kill -0 "$pid" 2>/dev/null || fail "ulp-targetd exited starting on the packaged configuration"
	sleep 0.05
done
[[ -s $work/pkg.port ]] || fail "packaged config: no port on --ready-fd within 10 s"
pctl() { timeout 60 "$ulpctl_bin" --socket "$work/pkg.sock" "$@"; }
out=$(pctl --json call target_list) || fail "packaged config: target_list: $out"
[[ $(jq 'length' <<<"$out") == 0 ]] || fail "packaged config: targets at start: $out"
pctl target create "$iqn-pkg" >/dev/null || fail "packaged config: target create"
pctl lun create -t "$iqn-pkg" -l 0 -b ram --size 16M >/dev/null || fail "packaged config: lun create"
out=$(pctl --json call target_list) || fail "packaged config: target_list: $out"
[[ $(jq -r '.[0].name' <<<"$out") == "$iqn-pkg" ]] || fail "packaged config: after create: $out"
kill -TERM "$pid"
rc=0
wait "$pid" || rc=$?
pid=''
((rc == 0)) || fail "packaged config: exit status $rc after SIGTERM"
pass "the packaged configuration: starts with no target; ulpctl adds one"

# ---- a daemon with TCP and SRP portals and an admin socket ----------------------------------
# systemd's side of Type=notify: a datagram socket that keeps what the daemon says.
python3 - "$work/notify.sock" "$work/notify.log" <<'PY' &
import socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
s.bind(sys.argv[1])
s.settimeout(60)
with open(sys.argv[2], "a") as f:
    while True:
        try:
            m = s.recv(4096).decode()
        except socket.timeout:
            break
        f.write(m.replace("\n", " ") + "\n")
        f.flush()
        if "STOPPING=1" in m:
            break
PY
npid=$!
for _ in $(seq 100); do [[ -S $work/notify.sock ]] && break; sleep 0.05; done
NOTIFY_SOCKET=$work/notify.sock "$targetd" --portal 127.0.0.1:0 --srp-portal 127.0.0.1:0 \
	--target "$iqn" --lun 0:ram:size=16M \
	--admin-socket "$sock" --ready-fd 9 9>"$work/port" 2>"$work/targetd.log" &
pid=$!
for _ in $(seq 200); do # bounded: 10 s
	[[ $(wc -l <"$work/port" 2>/dev/null || echo 0) -ge 2 ]] && break
	kill -0 "$pid" 2>/dev/null || fail "ulp-targetd exited during start-up"
	sleep 0.05
done
port=$(head -n 1 "$work/port")
srp_port=$(sed -n 2p "$work/port" | awk '{ print $2 }')
[[ $port =~ ^[0-9]+$ && $srp_port =~ ^[0-9]+$ ]] || fail "no ports on --ready-fd"
[[ -S $sock ]] || fail "no admin socket"
for _ in $(seq 100); do grep -q READY=1 "$work/notify.log" 2>/dev/null && break; sleep 0.05; done
grep -q "^READY=1 STATUS=serving 1 targets on 2 portals" "$work/notify.log" ||
	fail "no READY=1 to \$NOTIFY_SOCKET: $(cat "$work/notify.log" 2>/dev/null)"
pass "READY=1 to \$NOTIFY_SOCKET once the portals listen"
[[ $(stat -c %a "$sock") == 600 ]] || fail "admin socket mode $(stat -c %a "$sock")"

# libiscsi sees a LUN added while the daemon runs.
url=iscsi://127.0.0.1:$port
out=$(timeout 20 iscsi-ls -s "$url" 2>&1) || fail "iscsi-ls: $out"
grep -q "Lun:1 " <<<"$out" && fail "LUN 1 before it was created: $out"
ulpctl lun create --target "$iqn" --lun 1 --backstore ram --size 32M >/dev/null ||
	fail "ulpctl lun create"
out=$(timeout 20 iscsi-ls -s "$url" 2>&1) || fail "iscsi-ls: $out"
grep -q "Lun:1 .*Size:3[12]M" <<<"$out" || fail "iscsi-ls does not show the new LUN 1: $out"
pass "libiscsi's iscsi-ls sees LUN 1 after ulpctl lun create"

# An SRP session, listed and logged out from the target side.
srp_target=$(grep -oE "id_ext=[0-9a-f]{16},ioc_guid=[0-9a-f]{16},dest=127\.0\.0\.1:$srp_port" \
	"$work/targetd.log" | head -n 1)
[[ -n $srp_target ]] || fail "no add_target line"
timeout 60 "$initiator" --transport srp --srp-target "$srp_target" -p "127.0.0.1:$srp_port" \
	--srp-channels 2 -l 0 -w randread -b 4k -q 4 -r 30 >"$work/initiator.log" 2>&1 &
ipid=$!
sid=''
for _ in $(seq 200); do # bounded: 10 s
	sid=$(ulpctl --json session list | python3 -c '
import json, sys
for s in json.load(sys.stdin):
    if s["fabric"] == "srp" and s["connections"] == 2:
        print(s["id"])' || true)
	[[ -n $sid ]] && break
	sleep 0.05
done
[[ -n $sid ]] || fail "no SRP session with two channels in ulpctl session list"
out=$(ulpctl session list) || fail "ulpctl session list"
grep -q "^$sid *srp" <<<"$out" || fail "session list table: $out"
out=$(ulpctl --json session logout "$sid" --grace-ms 5000) || fail "ulpctl session logout: $out"
grep -q '"outcome": "logged out"' <<<"$out" || fail "logout outcome: $out"
for _ in $(seq 200); do
	kill -0 "$ipid" 2>/dev/null || break
	sleep 0.05
done
kill -0 "$ipid" 2>/dev/null && fail "ulp-initiator still running after the target logged it out"
wait "$ipid" || true
ipid=''
grep -q "SRP_T_LOGOUT" "$work/initiator.log" || fail "the initiator did not hear SRP_T_LOGOUT"
grep -q "SRP_T_LOGOUT sent" "$work/targetd.log" || fail "no SRP_T_LOGOUT in the daemon's log"
[[ $(ulpctl --json session list) == "[]" ]] || fail "sessions left after the logout"
pass "SRP session $sid listed, then logged out from the target side"

# The counters say what happened; the log level changes at run time.
stats=$(ulpctl --json stats) || fail "ulpctl stats"
python3 - "$stats" <<'PY' || fail "stats: $stats"
import json, sys
s = json.loads(sys.argv[1])
assert s["srp"]["logins"] == 2, s["srp"]          # two channels
assert s["srp"]["nexuses_open"] == 0, s["srp"]
assert s["iscsi"]["logins"] == 4, s["iscsi"]      # two iscsi-ls runs: discovery + normal each
assert s["sessions"] == 0 and s["cmds_in_flight"] == 0, s
assert s["luns"] == 2, s
PY
[[ $(ulpctl log get) == info ]] || fail "log level not info"
ulpctl log set debug >/dev/null || fail "ulpctl log set"
[[ $(ulpctl log get) == debug ]] || fail "log level not changed"
grep -q "log level info -> debug" "$work/targetd.log" || fail "no log line for the level change"
pass "stats count the logins; log level set at run time"

# --version: the daemon's own, then ulpctl's and the running daemon's (version_get), the
# same version; a daemon that is not there is said, exit 3, after ulpctl's own line.
dv=$("$targetd" --version) || fail "ulp-targetd --version"
[[ $dv =~ ^ulp-targetd\ [0-9]+\.[0-9]+ ]] || fail "ulp-targetd --version: $dv"
vv=$(ulpctl --version) || fail "ulpctl --version"
[[ $(sed -n 1p <<<"$vv") =~ ^ulpctl\ [0-9]+\.[0-9]+ ]] || fail "ulpctl --version: $vv"
[[ $(sed -n 2p <<<"$vv") == "${dv}, pid $pid" ]] || fail "ulpctl --version, the daemon: $vv (want $dv, pid $pid)"
rc=0
out=$(timeout 60 "$ulpctl_bin" --socket "$work/nobody.sock" --version 2>"$work/ver.err") || rc=$?
((rc == 3)) && [[ $out =~ ^ulpctl\  ]] && grep -q "the daemon's version" "$work/ver.err" ||
	fail "ulpctl --version without a daemon: rc $rc, $out, $(cat "$work/ver.err")"
for p in "$initiator"; do
	[[ $("$p" --version) =~ ^ulp-initiator\ [0-9]+\.[0-9]+ ]] || fail "$p --version"
done
pass "--version: ulp-targetd, ulpctl with the daemon's (version_get), ulp-initiator"

# A portal added at run time accepts logins; removing it stops that.
out=$(ulpctl --json portal create 127.0.0.1:0) || fail "portal create: $out"
p2=$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["listening"].rsplit(":",1)[1])' "$out")
out=$(timeout 20 iscsi-ls "iscsi://127.0.0.1:$p2" 2>&1) || fail "iscsi-ls on the new portal: $out"
grep -q "Target:$iqn" <<<"$out" || fail "SendTargets on the new portal: $out"
ulpctl portal delete "127.0.0.1:$p2" >/dev/null || fail "portal delete"
timeout 20 iscsi-ls "iscsi://127.0.0.1:$p2" >/dev/null 2>&1 && fail "the deleted portal still accepts"
# iSER too (the soft provider's device for 127.0.0.1 is the SRP portal's): a verified run.
out=$(ulpctl --json portal create --transport iser 127.0.0.1:0) || fail "iser portal create: $out"
p3=$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["listening"].rsplit(":",1)[1])' "$out")
timeout 60 "$initiator" --transport iser -p "127.0.0.1:$p3" -t "$iqn" -l 1 -w mixed -b 4k -q 4 \
	-r 1 --quiet >"$work/iser.log" 2>&1 || fail "ulp-initiator over the new iSER portal"
ulpctl portal delete --transport iser "127.0.0.1:$p3" >/dev/null || fail "iser portal delete"
pass "portals (TCP, iSER) created and deleted at run time"

# --log-file and logrotate: the file moved, SIGUSR1, and the lines go on in a new file.
"$targetd" --portal 127.0.0.1:0 --target "$iqn:rot" --lun 0:null:size=1M \
	--log-file "$work/rot.out" --ready-fd 9 9>"$work/rot.port" 2>"$work/rot.err" &
rpid=$!
for _ in $(seq 200); do # bounded: 10 s
	[[ -s $work/rot.port ]] && break
	kill -0 "$rpid" 2>/dev/null || fail "ulp-targetd --log-file exited during start-up"
	sleep 0.05
done
mv "$work/rot.out" "$work/rot.out.1"
kill -USR1 "$rpid"
for _ in $(seq 200); do grep -qs "log file reopened" "$work/rot.out" && break; sleep 0.05; done
grep -q "log file reopened" "$work/rot.out" || fail "SIGUSR1: no new log file"
grep -q "listening" "$work/rot.out.1" || fail "the moved log lost its lines: $(cat "$work/rot.out.1")"
kill -TERM "$rpid"
rc=0
wait "$rpid" || rc=$?
rpid=''
((rc == 0)) || fail "ulp-targetd --log-file: exit status $rc after SIGTERM"
grep -q "shutting down" "$work/rot.out" || fail "the lines after SIGUSR1 did not go to the new file"
kill -USR1 "$pid"
for _ in $(seq 200); do grep -q "no --log-file to reopen" "$work/targetd.log" && break; sleep 0.05; done
grep -q "no --log-file to reopen" "$work/targetd.log" || fail "SIGUSR1 without --log-file: no line"
pass "SIGUSR1 reopens --log-file after logrotate's move; says so without one"

kill -TERM "$pid"
for _ in $(seq 200); do
	kill -0 "$pid" 2>/dev/null || break
	sleep 0.05
done
kill -0 "$pid" 2>/dev/null && fail "still running 10 s after SIGTERM"
rc=0
wait "$pid" || rc=$?
pid=''
((rc == 0)) || fail "exit status $rc after SIGTERM"
[[ -e $sock ]] && fail "the admin socket file is left behind"
for _ in $(seq 100); do grep -q STOPPING=1 "$work/notify.log" && break; sleep 0.05; done
grep -q "^STOPPING=1" "$work/notify.log" || fail "no STOPPING=1: $(cat "$work/notify.log")"
wait "$npid" || true
npid=''
echo "targetd_admin: passed"
