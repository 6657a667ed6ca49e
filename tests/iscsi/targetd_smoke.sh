#!/usr/bin/env bash
# tests/iscsi/targetd_smoke.sh ULP_TARGETD - ulp-targetd against libiscsi's own tools, as
# real peers: INQUIRY, READ CAPACITY 16 and discovery (SendTargets) of a RAM LUN; a short
# iscsi-perf run; then SIGTERM, which must end the daemon cleanly and in time, with one
# log line per login and logout.
set -u
targetd=${1:?ulp-targetd}
for t in iscsi-inq iscsi-readcapacity16 iscsi-ls iscsi-perf; do
	command -v "$t" >/dev/null || { echo "targetd_smoke: $t missing (libiscsi-bin)"; exit 1; }
done
work=$(mktemp -d)
trap 'kill -KILL $pid 2>/dev/null; rm -rf "$work"' EXIT
iqn=iqn.2026-11.org.ulp:smoke

"$targetd" --portal 127.0.0.1:0 --target $iqn --lun 0:ram:size=64M --lun 3:null:size=1G \
	--ready-fd 9 9>"$work/port" 2>"$work/log" &
pid=$!
for _ in $(seq 100); do [[ -s $work/port ]] && break; sleep 0.05; done
port=$(cat "$work/port")
[[ -n $port ]] || { echo "targetd_smoke: daemon did not come up"; cat "$work/log"; exit 1; }
url=iscsi://127.0.0.1:$port/$iqn
fail() { echo "targetd_smoke: $*"; cat "$work/log"; exit 1; }

out=$(timeout 20 iscsi-inq "$url/0") || fail "iscsi-inq failed: $out"
grep -q "Vendor:ULP" <<<"$out" || fail "INQUIRY vendor: $out"
grep -q "Peripheral Device Type:DIRECT_ACCESS" <<<"$out" || fail "INQUIRY type: $out"
out=$(timeout 20 iscsi-readcapacity16 "$url/0") || fail "readcapacity16: $out"
grep -q "Total size:67108864" <<<"$out" || fail "capacity of LUN 0: $out"
out=$(timeout 20 iscsi-readcapacity16 "$url/3") || fail "readcapacity16 LUN 3: $out"
grep -q "Total size:1073741824" <<<"$out" || fail "capacity of LUN 3: $out"
out=$(timeout 20 iscsi-ls "iscsi://127.0.0.1:$port") || fail "iscsi-ls: $out"
grep -q "Target:$iqn Portal:" <<<"$out" || fail "SendTargets: $out"
out=$(timeout 30 iscsi-perf -t 2 "$url/0" 2>&1) || fail "iscsi-perf: $out"
grep -q "iops average" <<<"$out" || fail "iscsi-perf: $out"

kill -TERM $pid
for _ in $(seq 200); do kill -0 $pid 2>/dev/null || break; sleep 0.05; done
kill -0 $pid 2>/dev/null && fail "still running 10 s after SIGTERM"
wait $pid
rc=$?
((rc == 0)) || fail "exit status $rc after SIGTERM"
logins=$(grep -c "login: " "$work/log")
logouts=$(grep -c "logout: " "$work/log")
((logins == 5 && logouts == 5)) || fail "expected 5 login and 5 logout lines, got $logins/$logouts"
grep -q "stopped" "$work/log" || fail "no 'stopped' line"
echo "targetd_smoke: passed (port $port, $logins sessions)"
