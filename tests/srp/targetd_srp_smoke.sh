#!/usr/bin/env bash
# tests/srp/targetd_srp_smoke.sh ULP_TARGETD ULP_INITIATOR - ulp-targetd's SRP flags on the
# soft provider (no VM): an SRP portal starts and logs the add_target line a Linux initiator
# needs, with the configured or the device's identifiers; SIGTERM ends it in time with
# status 0; the same from a TOML file; bad values exit 2 with a clear message. ulp-initiator
# finds a target on its own address without being told its identifiers when they are the
# default (the device's node GUID), and says what to give when they are not. Logins in
# depth are the VM test's (tests/vm/srp_linux.sh) and the tests/srp suites'.
set -euo pipefail
targetd=${1:?usage: targetd_srp_smoke.sh ULP_TARGETD ULP_INITIATOR}
initiator=${2:?usage: targetd_srp_smoke.sh ULP_TARGETD ULP_INITIATOR}
work=$(mktemp -d)
pid=''
cleanup() {
	set +e
	[[ -n $pid ]] && kill -KILL "$pid" 2>/dev/null
	rm -rf "$work"
	return 0
}
trap cleanup EXIT
fail() {
	echo "targetd_srp_smoke: FAIL: $*"
	for f in "$work"/*.log; do
		[[ -e $f ]] && { echo "--- $f"; tail -n 30 "$f"; }
	done
	exit 1
}
pass() { echo "targetd_srp_smoke: PASS: $*"; }

# $1: a name for the logs; the rest: ulp-targetd's arguments. Sets pid and port.
start() {
	local name=$1
	shift
	rm -f "$work/port"
	"$targetd" "$@" --ready-fd 9 9>"$work/port" 2>"$work/$name.log" &
	pid=$!
	for _ in $(seq 200); do # bounded: 10 s
		[[ -s $work/port ]] && break
		kill -0 "$pid" 2>/dev/null || fail "$name: ulp-targetd exited during start-up"
		sleep 0.05
	done
	port=$(head -n 1 "$work/port")
	[[ $port =~ ^[0-9]+$ && $port != 0 ]] || fail "$name: no port on --ready-fd ('$port')"
}
# SIGTERM: exit 0 within 10 s, with its "stopped" line.
stop() {
	local name=$1 rc=0
	kill -TERM "$pid"
	for _ in $(seq 200); do
		kill -0 "$pid" 2>/dev/null || break
		sleep 0.05
	done
	kill -0 "$pid" 2>/dev/null && fail "$name: still running 10 s after SIGTERM"
	wait "$pid" || rc=$?
	pid=''
	((rc == 0)) || fail "$name: exit status $rc after SIGTERM"
	grep -q 'ulp-targetd: stopped' "$work/$name.log" || fail "$name: no 'stopped' line"
}
# The add_target line logged for 127.0.0.1:$port, at the default level (info).
add_target_of() {
	grep -oE "echo id_ext=[0-9a-f]{16},ioc_guid=[0-9a-f]{16},dest=127\.0\.0\.1:$port " \
		"$work/$1.log" | head -n 1 | sed 's/^echo //; s/ $//'
}

# ---- flags: the device's node GUID for both halves ------------------------------------------
start flags --srp-portal 127.0.0.1:0 --lun 0:ram:size=16M --lun 1:null:size=1G
line=$(add_target_of flags)
[[ -n $line ]] || fail "flags: no add_target line for 127.0.0.1:$port in the log"
ide=$(sed -E 's/^id_ext=([0-9a-f]+),.*/\1/' <<<"$line")
ioc=$(sed -E 's/.*ioc_guid=([0-9a-f]+),.*/\1/' <<<"$line")
[[ $ide == "$ioc" && $ide != 0000000000000000 ]] ||
	fail "flags: id_ext and ioc_guid should both be the node GUID: $line"
grep -q 'SRP target port exports .* luns 0 1 (open)' "$work/flags.log" ||
	fail "flags: no 'SRP target port exports ... luns 0 1' line"
# No identifiers given: the target listens on the initiator's own (soft) device address,
# so its default port id, the node GUID, is known to the initiator.
rc=0
timeout 60 "$initiator" --transport srp -p "127.0.0.1:$port" -w randwrite -b 4k -q 4 -r 0 \
	-s 1M --verify-only --quiet >"$work/init-default.log" 2>&1 || rc=$?
((rc == 0)) || fail "ulp-initiator without --srp-target: exit $rc: $(tail -n 5 "$work/init-default.log")"
grep -q "SRP target $ide:$ioc at 127.0.0.1:$port" "$work/init-default.log" ||
	fail "ulp-initiator without --srp-target did not log in to $ide:$ioc: $(head -n 3 "$work/init-default.log")"
stop flags
pass "--srp-portal: listens on port $port, logs '$line', ulp-initiator finds it without ids, SIGTERM ends it"

# ---- flags: given identifiers, an SRQ, ACLs --------------------------------------------------
start ids --srp-portal 127.0.0.1:0 --srp-id-ext 0x0123456789ABCDEF --srp-ioc-guid fedcba98 \
	--srp-srq --srp-acl 0xFE800000000000000002C90300A1B2C3 --srp-acl 10.99.0.1 \
	--lun 0:ram:size=16M
line=$(add_target_of ids)
[[ $line == "id_ext=0123456789abcdef,ioc_guid=00000000fedcba98,dest=127.0.0.1:$port" ]] ||
	fail "ids: add_target line '$line'"
grep -q 'acls 2 srq' "$work/ids.log" || fail "ids: ACLs or SRQ not in the start-up line"
# Identifiers other than the node GUID: a login without them is refused, and the message
# says what to give.
rc=0
timeout 60 "$initiator" --transport srp -p "127.0.0.1:$port" -w read -b 4k -q 1 -r 0 -s 4k \
	--quiet >"$work/init-ids.log" 2>&1 || rc=$?
((rc == 1)) || fail "ulp-initiator without ids against other ids: exit $rc, expected 1"
grep -q 'unable to associate.*give --srp-target' "$work/init-ids.log" ||
	fail "ulp-initiator's refusal does not say what to give: $(tail -n 3 "$work/init-ids.log")"
# Not on our address: nothing to derive from.
rc=0
timeout 60 "$initiator" --transport srp -p "127.0.0.1:$port" --src-ip 127.0.0.2 -w read -b 4k \
	-q 1 -r 0 -s 4k --quiet >"$work/init-other.log" 2>&1 || rc=$?
((rc == 2)) || fail "ulp-initiator without ids, other address: exit $rc, expected 2"
grep -q 'SRP needs the target port id' "$work/init-other.log" ||
	fail "ulp-initiator without ids, other address: $(tail -n 3 "$work/init-other.log")"
stop ids
pass "--srp-id-ext, --srp-ioc-guid, --srp-srq, --srp-acl: '$line'"

# ---- TOML: srp_portals and [srp] ------------------------------------------------------------
cat >"$work/t.toml" <<TOML
srp_portals = ["127.0.0.1:0"]
[srp]
id_ext = "0x1122334455667788"
ioc_guid = "99aabbccddeeff00"
acls = ["127.0.0.1"]
target = "iqn.2026-11.org.ulp:second"
rq_size = 32
sq_size = 512
max_it_iu_len = 16384
immediate_data = false
max_channels = 2
[[target]]
name = "iqn.2026-11.org.ulp:first"
  [[target.lun]]
  lun = 0
  backstore = "ram"
  size = "8M"
[[target]]
name = "iqn.2026-11.org.ulp:second"
  [[target.lun]]
  lun = 3
  backstore = "ram"
  size = "8M"
TOML
start toml --config "$work/t.toml"
line=$(add_target_of toml)
[[ $line == "id_ext=1122334455667788,ioc_guid=99aabbccddeeff00,dest=127.0.0.1:$port" ]] ||
	fail "toml: add_target line '$line'"
grep -q 'SRP target port exports iqn.2026-11.org.ulp:second luns 3 acls 1' "$work/toml.log" ||
	fail "toml: the SRP target port should export the second target's LUN 3"
# The sizes reach the logins: 32 credits, no immediate data, and at most two channels (a
# third login of the nexus is refused with LOGIN_REJ, said in the target's log).
rc=0
timeout 60 "$initiator" --transport srp -p "127.0.0.1:$port" --srp-target "$line" --srp-channels 2 -l 3 \
	-w randwrite -b 4k -q 8 -r 0 -s 1M --verify-only --quiet >"$work/init-toml.log" 2>&1 || rc=$?
((rc == 0)) || fail "toml: ulp-initiator: exit $rc: $(tail -n 5 "$work/init-toml.log")"
grep -qE 'srpt: login: .*: 32 credits, it_iu_len [0-9]+, immediate data no$' "$work/toml.log" ||
	fail "toml: [srp] rq_size 32 / immediate_data false not in the login: $(grep 'srpt: login' "$work/toml.log" | head -n 2)"
rc=0
timeout 60 "$initiator" --transport srp -p "127.0.0.1:$port" --srp-target "$line" --srp-channels 3 -l 3 \
	-w read -b 4k -q 1 -r 0 -s 4k --quiet >"$work/init-toml3.log" 2>&1 || rc=$?
((rc != 0)) || fail "toml: a third channel was accepted past [srp] max_channels = 2"
grep -q 'rejected .*has 2 channels already' "$work/toml.log" ||
	fail "toml: no 'has 2 channels already' refusal for the third channel: $(grep rejected "$work/toml.log" | tail -n 2)"
stop toml
pass "TOML srp_portals + [srp] with its sizes: '$line'"

# ---- [[srp.acl]]: one initiator's own LUN map ------------------------------------------------
# The initiator (admitted by its address) sees LUN 7, which is the target's LUN 3 and
# read-only for it, and nothing else: not the target's LUN 3 under its own number, not LUN 0.
cat >"$work/map.toml" <<TOML
srp_portals = ["127.0.0.1:0"]
[srp]
target = "iqn.2026-11.org.ulp:mapped"
[[srp.acl]]
initiator = "127.0.0.1"
luns = [{ lun = 7, target_lun = 3, read_only = true }]
[[target]]
name = "iqn.2026-11.org.ulp:mapped"
  [[target.lun]]
  lun = 0
  backstore = "ram"
  size = "8M"
  [[target.lun]]
  lun = 3
  backstore = "ram"
  size = "16M"
TOML
start map --config "$work/map.toml"
line=$(add_target_of map)
srp_run() { # $1: log name, the rest: ulp-initiator's arguments; its exit status
	local name=$1 rc=0
	shift
	timeout 60 "$initiator" --transport srp -p "127.0.0.1:$port" --srp-target "$line" "$@" \
		--quiet >"$work/$name" 2>&1 || rc=$?
	return $rc
}
srp_run map-read -l 7 -w randread -b 4k -q 4 -r 0 -s 256k --no-verify ||
	fail "map: a read of the mapped LUN 7: $(tail -n 3 "$work/map-read")"
grep -q "16777216\|32768 blocks" "$work/map-read" ||
	fail "map: LUN 7 is not the target's 16M LUN 3: $(head -n 2 "$work/map-read")"
srp_run map-write -l 7 -w write -b 4k -q 1 -r 0 -s 4k && fail "map: a write to the read-only mapping succeeded"
grep -qi "07/27\|data protect\|write protect" "$work/map-write" ||
	fail "map: the write was not refused as write-protected: $(tail -n 3 "$work/map-write")"
for l in 0 3; do
	srp_run "map-unmapped-$l" -l $l -w read -b 4k -q 1 -r 0 -s 4k &&
		fail "map: LUN $l, not in the initiator's map, answered"
done
stop map
pass "[[srp.acl]] LUN map: LUN 7 is the target's 3, read-only; LUNs 0 and 3 not seen"

# ---- bad values: exit 2 and a message naming the problem -------------------------------------
# $1: what the message must contain; the rest: the arguments.
bad() {
	local want=$1 rc=0
	shift
	timeout 10 "$targetd" --lun 0:ram:size=1M "$@" >"$work/bad.out" 2>&1 || rc=$?
	((rc == 2)) || fail "'$*': exit status $rc, expected 2: $(cat "$work/bad.out")"
	grep -q -- "$want" "$work/bad.out" || fail "'$*': no '$want' in: $(cat "$work/bad.out")"
}
bad '--srp-id-ext zz' --srp-portal 127.0.0.1:0 --srp-id-ext zz
bad '--srp-id-ext 0x' --srp-portal 127.0.0.1:0 --srp-id-ext 0x11223344556677889
bad '--srp-ioc-guid' --srp-portal 127.0.0.1:0 --srp-ioc-guid 12g4
bad '--srp-acl' --srp-portal 127.0.0.1:0 --srp-acl 0x1234
bad '--srp-acl' --srp-portal 127.0.0.1:0 --srp-acl iqn.2026-11.org.ulp:x
bad 'give a port' --srp-portal 127.0.0.1
bad 'bad port' --srp-portal 127.0.0.1:99999
printf '[srp]\nid_ext = 5\n' >"$work/bad.toml"
bad 'srp.id_ext' --config "$work/bad.toml"
printf '[srp]\ntarget = "iqn.2026-11.org.ulp:nope"\n' >"$work/bad2.toml"
bad 'srp.target' --config "$work/bad2.toml"
printf '[srp]\nrq_size = 1\n' >"$work/bad3.toml"
bad 'srp.rq_size' --config "$work/bad3.toml"
pass "bad SRP values exit 2 with a message"
echo "targetd_srp_smoke: passed"
