# shellcheck shell=bash
# tests/vm/srp_sysfs.sh - sourced: what the Linux SRP initiator (ib_srp) shows in sysfs, for
# the VM cases that log in with it (srp_initiator.sh, gateway_multipath.sh). Inside the VM
# only.

# The SCSI host numbers of ib_srp's remote ports, one per line (none: nothing, status 0).
# A remote port is named port-HOST:N, so the newest
# login is the largest host number: callers take `srp_hosts | sort -n | tail -n 1`.
srp_hosts() {
	local p
	for p in /sys/class/srp_remote_ports/port-*; do
		[[ -e $p ]] && { p=${p##*/port-}; echo "${p%%:*}"; }
	done
	return 0
}
