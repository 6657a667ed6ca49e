#!/bin/bash
# tests/vm/systemd_unit.sh: ulp-targetd's systemd unit, as installed, under a real systemd
# (PID 1 in the rxe VM: tools/vm/run --systemd), with everything its sandbox must still
# allow: an iSER and an SRP portal on rxe0 (10.99.0.1), a file LUN (/srv), a block LUN
# (brd's /dev/ram0), the admin socket with admin_group, `ulpctl save` into the
# configuration's directory, a metrics listener. Checks, one PASS/FAIL line each:
#   the unit starts (Type=notify: active once every portal listens), sandboxed as written
#   (NoNewPrivs, seccomp, the capability bounding set); journalctl -u ulp-targetd -p warning
#   has the daemon's warning and none of its info lines; ulpctl answers root and a member of
#   admin_group and refuses others; `ulpctl lun create` + `ulpctl save` (file, backup/);
#   `systemctl reload`; ulp-initiator's verified I/O over iSER and over SRP, on both LUNs;
#   nothing denied (EPERM, EACCES, seccomp) in the unit's journal; `systemctl stop` ends it
#   cleanly (Result=success, status 0) within TimeoutStopSec.
#
#   tools/vm/run --systemd --timeout 900 -- bash tests/vm/systemd_unit.sh \
#       BUILD/tools/ulp-targetd/ulp-targetd.service BUILD/tools/ulp-targetd/ulp-targetd \
#       BUILD/tools/ulpctl/ulpctl BUILD/tools/ulp-initiator/ulp-initiator
#
# The unit file is the build's configured one (cmake's paths: ExecStart's binary and the
# configuration under its sysconfdir); the binary is copied to ExecStart's path and the unit
# to /etc/systemd/system, both in the guest's RAM overlay. The unit's journal is left in
# /run/ulp-vm/ulp-targetd.journal (tools/vm/run --share DIR keeps it).
set -u
unit=$(realpath "$1") targetd=$(realpath "$2") ulpctl=$(realpath "$3") initiator=$(realpath "$4")
fails=0
pass() { echo "PASS: $*"; }
fail() {
	echo "FAIL: $*"
	fails=$((fails + 1))
}
note() { echo "  $*"; }
[[ $(cat /proc/1/comm) == systemd ]] || {
	echo "systemd_unit.sh: PID 1 is $(cat /proc/1/comm), not systemd: run it with tools/vm/run --systemd"
	exit 2
}
iqn=iqn.2026-11.org.ulp:vm-systemd
sock=/run/ulp-targetd/admin.sock

# Where the configured unit wants things.
exe=$(sed -n 's/^ExecStart=\([^ ]*\) .*/\1/p' "$unit")
conf=$(sed -n 's/^ExecStart=[^ ]* --config \([^ ]*\).*/\1/p' "$unit")
[[ -n $exe && -n $conf ]] || {
	echo "systemd_unit.sh: no ExecStart=BINARY --config FILE in $unit"
	exit 2
}
note "unit $unit: ExecStart $exe, configuration $conf"
install -D -m 0755 "$targetd" "$exe"
install -D -m 0644 "$unit" /etc/systemd/system/ulp-targetd.service

# The LUNs' storage: a file in /srv (ProtectSystem=full leaves it writable) and a block
# device (DeviceAllow=block-*).
# Small data heaps ([iser] and [srp] buffer_pool, 256M each by default): a portal creates
# its heap (memfd, mmap, ibv_reg_mr: the same calls whatever the size) when its first
# connection request arrives, on the CM thread. Under TCG, faulting in and pinning 256 MiB
# took that thread 10-17 s, past ulp-initiator's connect timeout (5 s for iSER, 10 s for an
# SRP login): the initiator gave up, and the request, handled late, failed with "create_qp:
# Invalid argument" (the IB CM id had left REQ_RCVD). 32M is ample for 4 KiB I/O at QD 16.
modprobe brd rd_nr=1 rd_size=65536 || fail "modprobe brd"
mkdir -p /srv/ulp
install -d -m 0700 "$(dirname "$conf")"
cat >"$conf" <<EOF
# tests/vm/systemd_unit.sh
admin_socket = "$sock"
admin_group = "disk"
rdma_device = "rxe0"
iser_portals = ["10.99.0.1:3260"]
srp_portals = ["10.99.0.1:5555"]
metrics_http = "10.99.0.1:9261"       # not loopback: the daemon warns (journalctl -p warning)

[iser]
buffer_pool = "32M"
[srp]
buffer_pool = "32M"

[[target]]
name = "$iqn"
  [[target.lun]]
  lun = 0
  backstore = "file"
  path = "/srv/ulp/lun0.img"
  size = "64M"
  [[target.lun]]
  lun = 1
  backstore = "block"
  path = "/dev/ram0"
EOF
chmod 0600 "$conf"

systemctl daemon-reload
t0=$(date +%s)
if timeout 180 systemctl start ulp-targetd; then
	pass "systemctl start ulp-targetd ($(($(date +%s) - t0)) s)"
else
	fail "systemctl start ulp-targetd: status $?"
	systemctl status --no-pager -l ulp-targetd | tail -n 30
	journalctl -b --no-pager -u ulp-targetd | tail -n 40
	exit 1
fi
st=$(systemctl is-active ulp-targetd)
[[ $st == active ]] && pass "systemctl is-active: $st" || fail "systemctl is-active: $st"

pid=$(systemctl show -P MainPID ulp-targetd)
s=/proc/$pid/status
nnp=$(awk '/^NoNewPrivs:/ {print $2}' "$s") sec=$(awk '/^Seccomp:/ {print $2}' "$s")
capbnd=$(awk '/^CapBnd:/ {print $2}' "$s")
note "pid $pid: NoNewPrivs $nnp, Seccomp $sec, CapBnd $capbnd ($(capsh --decode="$capbnd" 2>/dev/null | cut -d= -f2))"
# CAP_CHOWN (0), CAP_DAC_OVERRIDE (1), CAP_IPC_LOCK (14): 0x4003.
if [[ $nnp == 1 && $sec == 2 && $((16#$capbnd)) == $((0x4003)) ]]; then
	pass "sandboxed: no new privileges, a seccomp filter, CAP_CHOWN CAP_DAC_OVERRIDE CAP_IPC_LOCK"
else
	fail "sandbox not as the unit says: NoNewPrivs $nnp Seccomp $sec CapBnd $capbnd"
fi

# The journal, by priority: the metrics warning, and no info line, with -p warning.
warn=$(journalctl -b --no-pager -o cat -u ulp-targetd -p warning)
all=$(journalctl -b --no-pager -o cat -u ulp-targetd)
note "journalctl -u ulp-targetd -p warning:"
sed 's/^/    /' <<<"$warn"
if grep -q 'is not on loopback' <<<"$warn" && ! grep -q 'listening' <<<"$warn" &&
	grep -q 'listening' <<<"$all"; then
	pass "journalctl -p warning: the daemon's warning alone ($(wc -l <<<"$all") lines in all)"
else
	fail "journalctl -p warning does not filter the daemon's lines by priority"
	note "all of it:"
	sed 's/^/    /' <<<"$all" | tail -n 30
fi

# The admin socket: root, a member of admin_group (disk), not others.
if out=$("$ulpctl" show 2>&1) && grep -q "$iqn" <<<"$out"; then
	pass "ulpctl show (root)"
	sed 's/^/    /' <<<"$out" | head -n 20
else
	fail "ulpctl show: $out"
fi
note "$(stat -c '%A %U:%G %n' /run/ulp-targetd "$sock")"
if setpriv --reuid=65534 --regid=65534 --groups=6 "$ulpctl" show >/dev/null 2>&1; then
	pass "ulpctl show as nobody in group disk (admin_group)"
else
	fail "ulpctl show as nobody in group disk: $(setpriv --reuid=65534 --regid=65534 --groups=6 "$ulpctl" show 2>&1 | tail -n 2)"
fi
if setpriv --reuid=65534 --regid=65534 --clear-groups "$ulpctl" show >/dev/null 2>&1; then
	fail "ulpctl show as nobody outside admin_group was answered"
else
	pass "ulpctl show as nobody outside admin_group: refused"
fi

# A LUN added at run time, saved back into the configuration's directory (ReadWritePaths).
if "$ulpctl" lun create --target "$iqn" --lun 2 --backstore ram --size 16M >/dev/null &&
	"$ulpctl" save && grep -q 'lun = 2' "$conf" && [[ -n $(ls -A "$(dirname "$conf")/backup" 2>/dev/null) ]]; then
	pass "ulpctl lun create + save: $conf has LUN 2, $(ls "$(dirname "$conf")/backup" | head -n 1) in backup/"
else
	fail "ulpctl lun create + save"
	ls -la "$(dirname "$conf")" "$(dirname "$conf")/backup" 2>&1 | sed 's/^/    /'
fi
if timeout 60 systemctl reload ulp-targetd && [[ $(systemctl is-active ulp-targetd) == active ]]; then
	pass "systemctl reload (SIGHUP: the saved file read back)"
else
	fail "systemctl reload: $(systemctl is-active ulp-targetd)"
fi

# Verified I/O through the sandboxed daemon: iSER and SRP on rxe0, the file and the block LUN.
io() { # NAME ARGS...: 3 s of verified random writes and a verify pass over 16 MiB
	local name=$1 out rc
	shift
	out=$(timeout 120 "$initiator" --rdma-device rxe0 -t "$iqn" -w randwrite -b 4k -q 16 -r 3 \
		--range 16M --verify-only --quiet "$@" 2>&1)
	rc=$?
	if ((rc == 0)); then
		pass "$name: $(tail -n 1 <<<"$out")"
	else
		fail "$name: status $rc"
		sed 's/^/    /' <<<"$out" | tail -n 15
	fi
}
io "iSER, file LUN 0" --transport iser -p 10.99.0.1:3260 -l 0
io "iSER, block LUN 1" --transport iser -p 10.99.0.1:3260 -l 1
io "SRP, file LUN 0" --transport srp -p 10.99.0.1:5555 -l 0
io "SRP, block LUN 1" --transport srp -p 10.99.0.1:5555 -l 1

# Nothing the sandbox refused, in the daemon's words or systemd's.
denied=$(journalctl -b --no-pager -o cat -u ulp-targetd |
	grep -iE 'not permitted|permission denied|EPERM|EACCES|seccomp|couldn.t stat device|refused' |
	grep -v 'admin socket: refused' || true)
if [[ -z $denied ]]; then
	pass "nothing denied in the unit's journal"
else
	fail "denied in the unit's journal:"
	sed 's/^/    /' <<<"$denied"
fi
# And no warning but the metrics listener's (e.g. "create_qp: Invalid argument").
more=$(journalctl -b --no-pager -o cat -u ulp-targetd -p warning | grep -v 'is not on loopback' || true)
if [[ -z $more ]]; then
	pass "no other warning from the daemon"
else
	fail "the daemon warned:"
	sed 's/^/    /' <<<"$more"
fi

t0=$(date +%s)
timeout 120 systemctl stop ulp-targetd
secs=$(($(date +%s) - t0))
res=$(systemctl show -P Result ulp-targetd) code=$(systemctl show -P ExecMainCode ulp-targetd)
status=$(systemctl show -P ExecMainStatus ulp-targetd) st=$(systemctl is-active ulp-targetd)
if [[ $res == success && $status == 0 && $st == inactive ]]; then
	pass "systemctl stop: ${secs} s, Result=$res, exit status $status, $st"
else
	fail "systemctl stop: ${secs} s, Result=$res, ExecMainCode=$code, status $status, $st"
fi
journalctl -b --no-pager -u ulp-targetd >/run/ulp-vm/ulp-targetd.journal 2>&1
note "the unit's journal, last lines:"
journalctl -b --no-pager -o short-monotonic -u ulp-targetd | tail -n 12 | sed 's/^/    /'
((fails == 0)) && echo "systemd_unit: all passed" || echo "systemd_unit: $fails failed"
((fails == 0))
