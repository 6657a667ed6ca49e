# shellcheck shell=bash
# shellcheck disable=SC2154 # work, iqn, portal, ilog, lun*_sectors: the caller's (below)
# tests/vm/iscsi_initiator.sh - sourced: the Linux iSCSI initiator (open-iscsi: iscsid,
# iscsiadm; ib_iser for iSER) as the VM cases drive it (iser_linux.sh, stress_linux.sh).
# Inside the VM only.
#
# The caller defines note MESSAGE... and fail MESSAGE... (which ends the case), and sets:
#   work          a scratch folder (iscsiadm's output)
#   ilog          iscsid's log
#   iqn           the target's name
#   portal        the default portal (IP:PORT) of iscsi_node, iscsi_login, iscsi_logout
#   lun0_sectors, lun1_sectors   the sizes iscsi_login expects (512-byte sectors)
# iscsi_login sets dev0, dev1 (LUNs 0 and 1 of the one session); iscsi_start sets ipid
# (iscsid, to be stopped with SIGTERM).

iscsi_adm() { timeout -k 5 60 iscsiadm "$@"; }
# The node record of $iqn at $2 (default $portal): iscsiadm -m node ... $1...
iscsi_node_at() {
	local p=$1
	shift
	iscsi_adm -m node -T "$iqn" -p "$p" "$@"
}
# Modules, the initiator's name, iscsid (answering on its socket: bounded, 30 s).
iscsi_start() {
	local rc
	modprobe ib_iser
	modprobe sd_mod
	mkdir -p /etc/iscsi /var/lib/iscsi /run/lock/iscsi
	echo "InitiatorName=iqn.2026-11.org.ulp:vm-init" >/etc/iscsi/initiatorname.iscsi
	# A session of its own: iscsid signals its process group on the way out (SIGTERM in
	# cleanup), which ended a script with status 143 after it had passed.
	setsid iscsid -f -n >"$ilog" 2>&1 &
	# shellcheck disable=SC2034 # the caller stops it
	ipid=$!
	for _ in $(seq 150); do # iscsiadm needs iscsid's socket
		rc=0
		iscsi_adm -m session >/dev/null 2>&1 || rc=$?
		((rc == 0 || rc == 21)) && return 0 # 21, "no active sessions": iscsid answers
		sleep 0.2
	done
	fail "iscsid does not answer after 30 s"
}
# A node record for $iqn at $2 (default $portal) through iface $1 (iser, default: TCP), with
# bounded recovery: a dropped session is retried for 30 s before its I/O fails (default
# 120); login and logout wait 15 s at most.
iscsi_node_new() {
	local iface=$1 p=${2:-$portal} kv
	iscsi_node_at "$p" -o new -I "$iface" >/dev/null || fail "iscsiadm: new node record ($p, $iface)"
	for kv in node.session.timeo.replacement_timeout=30 node.conn[0].timeo.login_timeout=15 \
		node.conn[0].timeo.logout_timeout=15 node.session.initial_login_retry_max=2; do
		iscsi_node_at "$p" -o update -n "${kv%%=*}" -v "${kv#*=}" >/dev/null ||
			fail "iscsiadm: set ${kv%%=*} ($p)"
	done
}
# The disk of LUN $1 of the one session, by its SCSI address in sysfs (no udev here).
iscsi_disk_of() {
	local d
	for d in /sys/class/iscsi_session/session*/device/target*/*:*:*:"$1"/block/*; do
		[[ -e $d ]] && { basename "$d"; return 0; }
	done
	return 1
}
# Log in to $2 (default $portal); $1 says why, for messages. Sets dev0, dev1.
iscsi_login() {
	local p=${2:-$portal} a='' b=''
	iscsi_node_at "$p" --login >"$work/login.out" 2>&1 || { cat "$work/login.out"; fail "login ($1)"; }
	for _ in $(seq 200); do # the SCSI scan is asynchronous; bounded: 20 s
		a=$(iscsi_disk_of 0) && b=$(iscsi_disk_of 1) && [[ -b /dev/$a && -b /dev/$b ]] && break
		sleep 0.1
	done
	[[ -n $a && -n $b && -b /dev/$a && -b /dev/$b ]] || fail "no disks for LUNs 0 and 1 after login ($1)"
	dev0=/dev/$a dev1=/dev/$b
	[[ $(cat /sys/block/$a/size) == "$lun0_sectors" ]] || fail "LUN 0 ($a) has $(cat /sys/block/$a/size) sectors"
	[[ $(cat /sys/block/$b/size) == "$lun1_sectors" ]] || fail "LUN 1 ($b) has $(cat /sys/block/$b/size) sectors"
	note "logged in ($1, $p): LUN 0 = $dev0, LUN 1 = $dev1"
}
# Log out of $2 (default $portal); then no session may be listed.
iscsi_logout() {
	local p=${2:-$portal} rc=0
	iscsi_node_at "$p" --logout >"$work/logout.out" 2>&1 || { cat "$work/logout.out"; fail "logout ($1)"; }
	iscsi_adm -m session >/dev/null 2>&1 || rc=$?
	((rc == 21)) || fail "a session is still listed after logout ($1; iscsiadm status $rc)"
}
