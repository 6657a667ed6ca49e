# shellcheck shell=bash
# shellcheck disable=SC2154 # work, ulog, mlog, mp: the caller's (below)
# tests/vm/dm_multipath.sh - sourced: Linux's dm-multipath with scsi_dh_alua as the VM cases
# drive it (alua_multipath.sh, gateway_multipath.sh): udevd for multipath's device database,
# /etc/multipath.conf for one map of a ULP LU's paths grouped by their ALUA state, multipathd
# in the foreground, and the map's paths as multipathd reports them. Inside the VM only.
#
# The caller defines note MESSAGE... and fail MESSAGE... (which ends the case), and sets:
#   work   a scratch folder
#   ulog   udevd's log
#   mlog   multipathd's log
#   mp     the map's alias
# mp_udev_start sets upid, mp_start mpid: the caller stops them (SIGTERM) in its cleanup.

# multipath and multipathd see only the block devices udev has processed (its database):
# udevd, then an "add" event for each disk, as at boot. Without its rules: they run tools
# (hdparm, blkid, sg_inq...) that take minutes under TCG, and the database is all multipath
# needs. So neither do dm's rules answer libdevmapper's cookies: it makes the /dev/mapper
# nodes itself and waits for no udev cookie (DM_DISABLE_UDEV). Disks that appear later are
# processed as their kernel events arrive (mp_udev_settle waits for that).
# (Empty folders over the rules' own, in the guest only: one mount each.)
mp_udev_start() {
	local d t0
	for d in /usr/lib/udev/rules.d /etc/udev/rules.d; do
		[[ -d $d ]] && { mount -t tmpfs -o size=1m,mode=0755 none "$d" || fail "cannot hide $d"; }
	done
	export DM_DISABLE_UDEV=1
	/lib/systemd/systemd-udevd --resolve-names=never >"$ulog" 2>&1 &
	upid=$!
	t0=$SECONDS
	until udevadm control --ping >/dev/null 2>&1; do
		((SECONDS - t0 < 30)) || fail "systemd-udevd does not answer after 30 s"
		kill -0 "$upid" 2>/dev/null || fail "systemd-udevd exited"
		sleep 0.2
	done
	timeout -k 2 30 udevadm trigger --action=add --subsystem-match=block || fail "udevadm trigger"
	mp_udev_settle
	note "udevd: block devices processed ($((SECONDS - t0)) s)"
}
mp_udev_settle() {
	timeout -k 2 90 udevadm settle --timeout=80 || fail "udev's queue not empty after 80 s"
}

# /etc/multipath.conf for one map, $mp, of the paths of WWID $1 ("" none yet: every path
# blacklisted), every other WWID blacklisted. ULP's LUs: group_by_prio, prio alua,
# hardware_handler "1 alua", TEST UNIT READY as the checker, failback immediate, I/O queued
# without a path for no_path_retry checks. $2...: more lines for the device section.
mp_no_path_retry=30
mp_conf() {
	local w=${1:-none} extra=''
	shift $(($# ? 1 : 0))
	(($#)) && extra=$(printf '\t\t%s\n' "$@")
	cat >/etc/multipath.conf <<-EOF
		defaults {
			user_friendly_names no
			find_multipaths no
			# the WWID from VPD 83h through sysfs (udevd runs without rules)
			uid_attribute ""
			polling_interval 2
			max_polling_interval 2
			# the "change" event of a new map is one dm's udev rules would describe: reloads
			# (a new grouping after a priority change) are not held back 30 s for it
			missing_uev_wait_timeout 1
		}
		blacklist {
			wwid ".*"
		}
		blacklist_exceptions {
			wwid "^$w\$"
		}
		devices {
			device {
				vendor "ULP"
				product ".*"
				path_grouping_policy group_by_prio
				prio alua
				detect_prio no
				hardware_handler "1 alua"
				path_checker tur
				failback immediate
				no_path_retry $mp_no_path_retry
		$extra
			}
		}
		multipaths {
			multipath {
				wwid "$w"
				alias $mp
			}
		}
	EOF
}

# wwid: the WWID multipath reads for disk $1 (a dry run that blacklists every path, after
# saying what it read).
mp_wwid() {
	mkdir -p /etc/multipath
	mp_conf ""
	timeout -k 2 60 multipath -d -v3 >"$work/multipath-dry.log" 2>&1 || true
	wwid=$(grep -m1 -oE "(^| )$1: uid = [^ ]+" "$work/multipath-dry.log" | awk '{ print $NF }')
	[[ -n $wwid ]] || fail "multipath -d -v3 reads no WWID for $1"
}

# multipathd in the foreground (its log: $mlog); bounded: 60 s until the map has every disk
# of $@ as a path.
mp_start() {
	local t0=$SECONDS d missing
	multipathd -d -s -v3 >>"$mlog" 2>&1 &
	mpid=$!
	while ((SECONDS - t0 < 60)); do
		missing=''
		for d in "$@"; do
			mp_paths | grep -q "^$d " || missing+=" $d"
		done
		[[ -b /dev/mapper/$mp && -z $missing ]] && return 0
		kill -0 "$mpid" 2>/dev/null || fail "multipathd exited"
		sleep 0.5
	done
	mp_topology
	fail "no /dev/mapper/$mp with the paths$missing 60 s after multipathd started"
}
# multipathd stopped (SIGTERM, bounded: 10 s), the map removed (bounded: 20 s).
mp_stop() {
	if [[ -n ${mpid:-} ]]; then
		kill -TERM "$mpid"
		for _ in $(seq 100); do kill -0 "$mpid" 2>/dev/null || break; sleep 0.1; done
		kill -0 "$mpid" 2>/dev/null && fail "multipathd still running 10 s after SIGTERM"
		mpid=''
	fi
	if dmsetup info "$mp" >/dev/null 2>&1; then
		timeout -k 2 20 dmsetup remove --retry "$mp" || fail "dmsetup remove $mp"
	fi
}

# "DISK PRIO STATUS" per path, from the map's topology (multipath -ll's layout): a path
# group's line, then its paths. Polled from multipathd (show map ... topology): under TCG a
# multipath -ll, which probes every path itself, takes seconds.
mp_topology() { timeout -k 2 20 multipathd show map "$mp" topology 2>/dev/null; }
mp_paths() {
	mp_topology |
		awk 'match($0, /prio=[0-9]+/) { p = substr($0, RSTART + 5, RLENGTH - 5)
		       match($0, /status=[a-z]+/); s = substr($0, RSTART + 7, RLENGTH - 7); next }
		     / [0-9]+:[0-9]+:[0-9]+:[0-9]+ sd/ { for (i = 1; i <= NF; i++) if ($i ~ /^sd/) print $i, p, s }' |
		sort
}
# Until the map's paths are $1 (mp_paths' lines, sorted, ";" between); $2 says why; bounded:
# $4 seconds (default 30: multipathd's checker runs every 1-2 s, the prios and groups follow).
# $3 "ll": print multipath -ll's own view too (the command as an administrator types it).
mp_expect_paths() {
	local got='' t0=$SECONDS
	while ((SECONDS - t0 < ${4:-30})); do
		got=$(mp_paths | paste -sd ';')
		[[ $got == "$1" ]] && break
		sleep 0.5
	done
	[[ $got == "$1" ]] || { mp_topology; fail "$2: the map's paths: '$got', not '$1'"; }
	note "$2: multipathd show map $mp topology:"
	mp_topology | sed 's/^/    /'
	if [[ ${3:-} == ll ]]; then
		note "$2: multipath -ll $mp:"
		timeout -k 2 60 multipath -ll "$mp" | sed 's/^/    /'
	fi
}
# "DISK DM_STATE CHECKER_STATE" of each path multipathd has, e.g. "sdb active ready" or "sdc
# failed faulty": whether dm uses the path and what its checker last found.
mp_path_states() {
	timeout -k 2 20 multipathd show paths format "%d %t %T" 2>/dev/null | awk '$1 ~ /^sd/ { print $1, $2, $3 }' | sort
}

# mp_fio_end PID LOG WHAT: the end of fio's verified run on the map (fio started by the
# caller with --verify, its output in LOG): SIGINT, which fio answers by stopping,
# reporting and exiting 128, bounded to 30 s; then the case fails unless fio ended so, with
# no error (err= 0) and verify reads done. WHAT names the run in the messages. The caller
# forgets PID afterwards (its cleanup kills what it still holds).
mp_fio_end() {
	local pid=$1 log=$2 what=$3 rc=0 t0=$SECONDS reads
	kill -INT "$pid"
	while ((SECONDS - t0 < 30)); do # bounded: 30 s
		kill -0 "$pid" 2>/dev/null || break
		sleep 0.2
	done
	kill -0 "$pid" 2>/dev/null && { tail -n 20 "$log"; fail "$what: fio still running 30 s after SIGINT"; }
	wait "$pid" || rc=$?
	# fio counts its verify reads as issued reads ("issued rwts: total=R,W,...").
	reads=$(grep -oE 'issued rwts: total=[0-9]+' "$log" | grep -oE '[0-9]+$' || echo 0)
	if ((rc != 128 || reads == 0)) || ! grep -q 'terminating on signal 2' "$log" ||
		! grep -q 'err= 0' "$log" || grep -qE 'err= *[1-9]' "$log"; then
		tail -n 40 "$log"
		fail "$what: fio with verify on /dev/mapper/$mp: status $rc, $reads blocks read back"
	fi
	note "$what: fio on /dev/mapper/$mp: ok, err=0, $reads blocks read back and verified"
	grep -E 'err=|^ *(read|write):|issued rwts|^ *(sd[a-z]|dm-[0-9]+):' "$log" | sed 's/^/    /'
}
