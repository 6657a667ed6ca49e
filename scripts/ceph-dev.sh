#!/usr/bin/env bash
# A real single-node Ceph cluster (Debian 12's ceph-mon and ceph-osd, Ceph 16.2 pacific) for
# development, tests and CI: one monitor and one OSD on 127.0.0.1, no mgr, everything inside
# one directory. scripts/ceph-dev.sh --help says how. A real cluster rather than a mock: the
# rbd backstore and its tests (ctest -L ceph) meet librbd and the daemons as deployed.
set -euo pipefail

usage() {
	cat <<'EOF'
Usage: scripts/ceph-dev.sh COMMAND [OPTIONS]

A throwaway single-node Ceph cluster (one mon, one OSD, no mgr) on 127.0.0.1 for
development, tests and CI, from Debian 12's ceph-mon, ceph-osd and ceph-common (16.2;
scripts/install-deps.sh installs them). Everything lives in DIR: ceph.conf, keyrings,
mon and osd data, run dir, PID files, admin sockets and logs (DIR/log/NAME.log, the
daemons' stdout/stderr in DIR/log/NAME.out). Daemons run as root with -f, in the
background, tracked by DIR/run/mon.a.pid and DIR/run/osd.0.pid.

Commands:
  start        create a fresh cluster in DIR and start it: mon.a, osd.0, pool "rbd" (8 PGs,
               size 1, rbd pool init), keys, a rados put/get probe. About 3 s with memstore,
               5-10 s with bluestore. First wipes an earlier, stopped cluster of DIR (unless
               --keep); refuses a non-empty DIR that this script did not make. Never waits
               for HEALTH_OK. If DIR's cluster already runs: says so, exits 0 (options are
               then ignored); if only one of its daemons runs: fails (use start-osd, or
               stop). A failed start prints the error and the daemon's log tail, stops what
               it started and exits non-zero.
  stop         stop DIR's daemons, osd.0 then mon.a: SIGTERM, up to --timeout s (default 20)
               with a line per second, then SIGKILL. Only processes running with
               "-c DIR/ceph.conf" are signalled, never other ceph daemons. The data stays in
               DIR (logs to read) until the next start.
  status       whether mon.a and osd.0 run (by PID file), then `ceph -s`; exit status 0 only
               if both run.
  env          shell lines for: eval "$(scripts/ceph-dev.sh env [--dir DIR])". Exports
               ULP_CEPH_DIR, CEPH_CONF, CEPH_KEYRING (client.admin and client.ulp-gw keys),
               ULP_CEPH_CLIENT=ulp-gw, ULP_CEPH_GW_KEYRING (that client's key alone),
               ULP_CEPH_POOL=rbd, ULP_CEPH_MON_HOST (v2:127.0.0.1:PORT), ULP_CEPH_AUTH,
               ULP_CEPH_STORE. No CEPH_ARGS.
  stop-osd     stop osd.0 only (as stop does); the mon marks it down at once.
  start-osd    start osd.0 again on its data; waits (bounded) until the mon has it up.
  restart-osd  stop-osd, then start-osd: for fault tests. bluestore keeps the data across
               any restart, SIGKILL included. memstore keeps it across this clean stop
               only (the OSD saves its RAM store to DIR/osd on SIGTERM): after a SIGKILL
               it comes back "up" with the store of its last clean stop, and I/O on the
               pool can hang. Use --store bluestore for crash tests.

Options:
  --dir DIR      the cluster's directory (default: $ULP_CEPH_DIR, else /tmp/ulp-ceph).
  --store S      memstore (default; in RAM, fast; --size default 3 GiB) or bluestore (a
                 sparse file DIR/osd/block, --size default 10 GiB; not on tmpfs: bluestore
                 opens it with O_DIRECT).
  --size GIB     the OSD's capacity in GiB (start only).
  --auth A       none (default) or cephx. The keys are made either way, so that clients
                 configure alike: client.admin (DIR/keyring) and client.ulp-gw with
                 mon 'profile rbd' osd 'profile rbd' mgr 'profile rbd' (DIR/keyring and, alone,
                 DIR/client.ulp-gw.keyring). mon 'profile rbd' may list the blocklist and
                 add one address with its nonce (`ceph osd blocklist add 127.0.0.1:0/NONCE`,
                 as librbd does to break a dead client's exclusive lock); blocklisting a
                 whole address or removing an entry needs client.admin.
  --port P       the mon's msgr v2 port on 127.0.0.1 (default: $ULP_CEPH_PORT, else 13300).
                 Two clusters side by side need two DIRs and two ports. msgr v1 is off; the
                 OSD binds free ports of 6800-7300 on 127.0.0.1 itself.
  --timeout S    the bound of each wait: default 60 s for the mon and the OSD to come up
                 (start, start-osd), 20 s of SIGTERM grace before SIGKILL (stop, stop-osd).
  --keep         start: start the stopped cluster of DIR again on its data (bluestore, or
                 memstore after a clean stop) instead of a fresh one; DIR's store, auth and
                 port are kept.
  -h, --help     this text.

The caller's CEPH_ARGS and CEPH_KEYRING are ignored (DIR's own conf and keys are used).
Every ceph, rados and rbd call of this script is bounded by `timeout`.

ceph.conf: mon host = v2:127.0.0.1:PORT, public and cluster addr 127.0.0.1; pool default
size 1 (mon allow pool size one), crush chooseleaf type 0, pg autoscale off; no warnings
for no redundancy, mon disk space or insecure global_id reclaim; full ratios .99; all object
classes loadable (rbd needs cls_rbd and cls_lock); paxos propose interval 0.1 s (each mon
write otherwise waits up to 1 s: start took 7 s instead of 3); osd client watch timeout 10 s
(a dead client's watch goes after 10 s, not 30); osd beacons every 5 s and mon osd report
timeout 20 s (with one OSD no peer reports a SIGKILLed OSD: the mon marks it down after
~20 s instead of 15 min); mon osd down out interval 0 (never out); osd fast shutdown off
(SIGTERM unmounts cleanly); osd memory target 1 GiB (its minimum is 896 MiB).

No mgr runs, none is needed: rbd create/ls/info/rm/snap/trash/du/status, rados, fio
--ioengine=rbd, ceph -s, ceph df (zeros), ceph health, ceph osd ... and ceph osd blocklist
work. `ceph -s` shows no pools, objects or PGs (a mgr collects those), and mgr commands such
as `ceph pg stat`, `ceph pg dump` or `ceph osd pool stats` hang: --connect-timeout does not
bound them, wrap ceph in `timeout`.
EOF
}

die() {
	echo "ceph-dev: error: $*" >&2
	exit 1
}
say() { echo "ceph-dev: $*"; }

# Own configuration only: an eval'ed env of another cluster must not leak in.
unset CEPH_ARGS CEPH_KEYRING

cmd=
dir=${ULP_CEPH_DIR:-/tmp/ulp-ceph}
store=memstore
auth=none
port=${ULP_CEPH_PORT:-13300}
size=
timeout=
keep=0
while (($#)); do
	case $1 in
	-h | --help | help)
		usage
		exit 0
		;;
	--dir) dir=${2:?--dir needs a value}; shift ;;
	--store) store=${2:?--store needs a value}; shift ;;
	--auth) auth=${2:?--auth needs a value}; shift ;;
	--port) port=${2:?--port needs a value}; shift ;;
	--size) size=${2:?--size needs a value}; shift ;;
	--timeout) timeout=${2:?--timeout needs a value}; shift ;;
	--keep) keep=1 ;;
	-*) die "unknown option $1 (see --help)" ;;
	*)
		[[ -z $cmd ]] || die "one command at a time (got $cmd and $1)"
		cmd=$1
		;;
	esac
	shift
done
[[ -n $cmd ]] || {
	usage >&2
	exit 2
}
case $store in memstore | bluestore) ;; *) die "--store is memstore or bluestore, not $store" ;; esac
case $auth in none | cephx) ;; *) die "--auth is none or cephx, not $auth" ;; esac
if [[ ! $port =~ ^[0-9]+$ ]] || ((port < 1 || port > 65535)); then die "bad --port $port"; fi
[[ -z $timeout || $timeout =~ ^[0-9]+$ ]] || die "bad --timeout $timeout"
[[ -z $size || $size =~ ^[0-9]+$ ]] || die "bad --size $size"

[[ $dir == /* ]] || dir=$PWD/$dir
dir=${dir%/}
[[ -n $dir ]] || die "--dir / is not a cluster directory"
conf=$dir/ceph.conf
state=$dir/ulp-ceph-dev.state # the marker of a DIR this script made: its parameters
export CEPH_CONF=$conf

for tool in ceph ceph-mon ceph-osd ceph-authtool monmaptool rados rbd timeout setsid flock; do
	command -v "$tool" >/dev/null || die "$tool not found: scripts/install-deps.sh installs Ceph"
done

# Bounded CLI calls. --connect-timeout bounds the ceph CLI's connect; bounded (timeout)
# the rest. $ULP_CEPH_CALL_SCALE (a whole number, default 1) multiplies each call's bound:
# in a TCG guest the Python ceph CLI takes 20-25 s a call (tools/rbd-bench/lio_tcmu_vm.sh
# sets 6); every call stays bounded, only longer. (start and start-osd run no ceph CLI: see
# mon_cmds.)
call_scale=${ULP_CEPH_CALL_SCALE:-1}
[[ $call_scale =~ ^[1-9][0-9]*$ ]] || die "bad ULP_CEPH_CALL_SCALE $call_scale (a whole number, 1 or more)"
bounded() {
	local s=$1
	shift
	timeout $((s * call_scale)) "$@"
}
rados_() { bounded 30 rados --client-mount-timeout 10 "$@"; }
rbd_() { bounded 30 rbd --client-mount-timeout 10 "$@"; }
# mon_cmds BOUND JSON...: monitor commands, in order, through one client of librados's Python
# binding (python3-rados, what the ceph CLI itself runs on; Debian's python3, not a version
# manager's): each command's output on stdout, a refused one's error on stderr and the
# status 1, nothing after it run. One process for all, and none of the CLI's work: in a TCG
# guest every ceph CLI call took 14-25 s (its start, and the table of every command it fetches
# from the mon and parses), this whole call 8-11 s. Connect and each command bounded by
# librados, the process by BOUND seconds (times ULP_CEPH_CALL_SCALE).
mon_cmds() {
	local rc try
	for try in 1 2 3; do
		mon_cmds_once "$@" && return 0
		rc=$?
		# Killed by a signal, not a timeout (124) or a refused command (1): Debian's
		# python3-rados client has aborted (SIGABRT, an uncaught std::out_of_range in
		# librados) right after an OSD stopped. Its commands only read, or are
		# idempotent (osd create by uuid, crush add of osd.0, pool create of rbd), so a
		# fresh client asks again.
		((rc > 128 && rc != 137 && try < 3)) || return "$rc"
		echo "ceph-dev: the monitor client died with signal $((rc - 128)): asking again ($try of 3)" >&2
		sleep 1
	done
}
mon_cmds_once() {
	local s=$1
	shift
	bounded "$s" /usr/bin/python3 - "$conf" "$@" <<'EOF'
import sys, rados
c = rados.Rados(conffile=sys.argv[1])
c.connect(timeout=10)
for cmd in sys.argv[2:]:
    rc, out, err = c.mon_command(cmd, b"", timeout=20)
    if rc != 0:
        print(f"ceph-dev: error: mon command {cmd}: {rc} {err}", file=sys.stderr)
        sys.exit(1)
    sys.stdout.write(out.decode())
EOF
}

now_ms() { echo $(($(date +%s%N) / 1000000)); }

# pid_of NAME: the PID of this DIR's daemon NAME (mon.a or osd.0) if it runs, else fails.
# A PID counts only if /proc says that process is ceph-mon/ceph-osd started with -c $conf,
# so a stale PID file or a reused PID never makes us signal another process.
pid_of() {
	local name=$1 pid
	[[ -r $dir/run/$name.pid ]] || return 1
	pid=$(<"$dir/run/$name.pid") || return 1
	[[ $pid =~ ^[0-9]+$ ]] || return 1
	is_ours "$pid" "${name%%.*}" || return 1
	echo "$pid"
}

# is_ours PID TYPE: PID is a live ceph-TYPE started with "-c $conf" (a zombie has no cmdline).
is_ours() {
	local pid=$1 type=$2 args i
	mapfile -d "" args 2>/dev/null <"/proc/$pid/cmdline" || return 1
	((${#args[@]} > 2)) || return 1
	[[ ${args[0]##*/} == "ceph-$type" ]] || return 1
	for ((i = 1; i + 1 < ${#args[@]}; i++)); do
		[[ ${args[i]} == -c && ${args[i + 1]} == "$conf" ]] && return 0
	done
	return 1
}

# ours_all: every live ceph-mon/ceph-osd of this DIR, PID files or not.
ours_all() {
	local p pid
	for p in /proc/[0-9]*; do
		pid=${p#/proc/}
		is_ours "$pid" mon || is_ours "$pid" osd || continue
		echo "$pid"
	done
}

log_tail() {
	local name=$1 f
	for f in "$dir/log/$name.out" "$dir/log/$name.log"; do
		[[ -s $f ]] || continue
		echo "---- tail of $f (log lines only: memstore dumps JSON on unmount)" >&2
		grep -E '^[0-9]{4}-' "$f" | tail -n 25 >&2
	done
}

# start_daemon NAME: ceph-mon -i a / ceph-osd -i 0 in the foreground (-f) as a background job
# in its own session, stdin/stdout/stderr away from the caller (a daemon holding the
# caller's pipe would hang `$(...)` and ctest), without our lock's descriptor 9.
start_daemon() {
	local name=$1 type=${1%%.*} id=${1#*.}
	setsid "ceph-$type" -c "$conf" -i "$id" -f </dev/null >>"$dir/log/$name.out" 2>&1 9>&- &
	echo $! >"$dir/run/$name.pid"
	started+=("$name")
}

# stop_daemon NAME GRACE: SIGTERM, a line per second for up to GRACE s, then SIGKILL.
stop_daemon() {
	local name=$1 grace=$2 pid t0 waited=0
	if ! pid=$(pid_of "$name"); then
		rm -f "$dir/run/$name.pid"
		say "$name not running"
		return 0
	fi
	say "stopping $name (pid $pid)"
	kill -TERM "$pid" 2>/dev/null || true
	t0=$(now_ms)
	while is_ours "$pid" "${name%%.*}"; do
		if (($(now_ms) - t0 >= grace * 1000)); then
			say "$name (pid $pid) still there after ${grace} s: SIGKILL"
			kill -KILL "$pid" 2>/dev/null || true
			for _ in {1..50}; do
				is_ours "$pid" "${name%%.*}" || break
				sleep 0.1
			done
			is_ours "$pid" "${name%%.*}" && die "$name (pid $pid) survives SIGKILL"
			break
		fi
		sleep 0.1
		if (($(now_ms) - t0 >= (waited + 1) * 1000)); then
			waited=$((waited + 1))
			say "waiting for $name (pid $pid) to exit: $waited s"
		fi
	done
	rm -f "$dir/run/$name.pid"
}

# wait_for WHAT NAME CHECK...: run CHECK until it succeeds, at most $wait_s s, a line per
# second; fails early when daemon NAME dies.
wait_for() {
	local what=$1 name=$2 t0 waited=0
	shift 2
	t0=$(now_ms)
	until "$@" >/dev/null 2>&1; do
		pid_of "$name" >/dev/null || {
			log_tail "$name"
			die "$name exited while waiting for $what"
		}
		if (($(now_ms) - t0 >= wait_s * 1000)); then
			log_tail "$name"
			die "timed out after ${wait_s} s waiting for $what"
		fi
		sleep 0.3
		if (($(now_ms) - t0 >= (waited + 1) * 1000)); then
			waited=$((waited + 1))
			say "waiting for $what: $waited s"
		fi
	done
}

# The mon answers a client (rados: C++, a fraction of the CLI's start in a TCG guest).
mon_up() { bounded 10 rados --client-mount-timeout 5 lspools; }
# osd_up: osd.0 is up and in, booted after osdmap epoch $osd_epoch (so that an instance
# the mon has not yet marked down, e.g. one just SIGKILLed, does not count).
osd_epoch=0
osd_up() {
	local dump up_from
	dump=$(mon_cmds 15 '{"prefix": "osd dump"}') || return 1
	up_from=$(sed -nE 's/^osd\.0 up +in .* up_from ([0-9]+) .*/\1/p' <<<"$dump")
	[[ -n $up_from ]] && ((up_from > osd_epoch))
}
osd_map_epoch() { mon_cmds 20 '{"prefix": "osd dump"}' | sed -n 's/^epoch //p'; }

# Started by this invocation; a failing start stops them (trap below).
started=()
cleanup_failed_start() {
	local rc=$? name
	((rc)) || return 0
	((${#started[@]})) || return "$rc"
	echo "ceph-dev: start failed: stopping what it started" >&2
	for name in osd.0 mon.a; do
		if [[ " ${started[*]} " == *" $name "* ]]; then
			stop_daemon "$name" 10 >&2 || true
		fi
	done
	return "$rc"
}

load_state() {
	[[ -r $state ]] || die "no cluster in $dir (run start first)"
	local key value
	while IFS='=' read -r key value; do
		case $key in
		port) port=$value ;;
		store) store=$value ;;
		auth) auth=$value ;;
		size) size=$value ;;
		esac
	done <"$state"
}

# One operation at a time per DIR. Descriptor 9 stays closed in the daemons.
lock() {
	mkdir -p "$dir"
	exec 9>"$dir/.lock"
	flock -w 60 9 || die "$dir is locked by another ceph-dev.sh"
}

write_conf() {
	local fsid=$1 store_conf
	if [[ $store == memstore ]]; then
		store_conf="osd objectstore = memstore
memstore device bytes = $((size << 30))"
	else
		store_conf="osd objectstore = bluestore
bluestore block create = true
bluestore block size = $((size << 30))
bluestore fsck on mount = false
bluestore fsck on mkfs = false
osd memory target = 1073741824"
	fi
	cat >"$conf" <<EOF
# Made by scripts/ceph-dev.sh start: a single-node development cluster on 127.0.0.1.
[global]
fsid = $fsid
mon host = v2:127.0.0.1:$port
public addr = 127.0.0.1
cluster addr = 127.0.0.1
ms bind msgr1 = false
auth cluster required = $auth
auth service required = $auth
auth client required = $auth
keyring = $dir/keyring
run dir = $dir/run
pid file = $dir/run/\$name.pid
admin socket = $dir/run/\$name.asok
log file = $dir/log/\$name.log
crash dir = $dir/crash
mon cluster log file = $dir/log/cluster.log
client mount timeout = 30
osd pool default size = 1
osd pool default min size = 1
osd pool default pg num = 8
osd pool default pgp num = 8
osd pool default pg autoscale mode = off
osd crush chooseleaf type = 0
osd crush update on start = false
mon allow pool size one = true
mon allow pool delete = true
mon data avail warn = 0
mon data avail crit = 0
mon warn on pool no redundancy = false
mon warn on insecure global id reclaim = false
mon warn on insecure global id reclaim allowed = false
mon warn on osd down out interval zero = false
mon osd down out interval = 0
mon osd report timeout = 20
mon osd nearfull ratio = .95
mon osd backfillfull ratio = .99
mon osd full ratio = .99
osd failsafe full ratio = .99
osd beacon report interval = 5

[mon]
mon data = $dir/mon
# each mon write (osd create, crush add, pool create, ...) waits for the next proposal:
# 1 s by default, 0.1 s here (as Ceph's own qa/standalone/ceph-helpers.sh)
paxos propose interval = 0.1

[osd]
osd data = $dir/osd
osd journal = $dir/osd/journal
keyring = $dir/osd/keyring
osd class load list = *
osd class default list = *
osd client watch timeout = 10
osd fast shutdown = false
osd fast shutdown notify mon = true
$store_conf
EOF
}

# The keys, made before the mon's mkfs, which imports them with their caps (no `ceph auth`
# round trips). Made for --auth none too, so a client configures the same either way.
make_keys() {
	local kr=$dir/keyring gw=$dir/client.ulp-gw.keyring mk=$dir/mon-mkfs.keyring
	ceph-authtool --create-keyring "$kr" --gen-key -n client.admin \
		--cap mon 'allow *' --cap osd 'allow *' --cap mgr 'allow *' >/dev/null
	ceph-authtool --create-keyring "$gw" --gen-key -n client.ulp-gw \
		--cap mon 'profile rbd' --cap osd 'profile rbd' --cap mgr 'profile rbd' >/dev/null
	ceph-authtool "$kr" --import-keyring "$gw" >/dev/null
	ceph-authtool --create-keyring "$dir/osd/keyring" --gen-key -n osd.0 \
		--cap mon 'allow profile osd' --cap osd 'allow *' --cap mgr 'allow profile osd' >/dev/null
	ceph-authtool --create-keyring "$mk" --gen-key -n mon. --cap mon 'allow *' >/dev/null
	ceph-authtool "$mk" --import-keyring "$kr" >/dev/null
	ceph-authtool "$mk" --import-keyring "$dir/osd/keyring" >/dev/null
}

cmd_start() {
	local t0 name pid running=() fsid probe
	t0=$(now_ms)
	wait_s=${timeout:-60}
	for name in mon.a osd.0; do
		pid_of "$name" >/dev/null && running+=("$name")
	done
	if ((${#running[@]} == 2)); then
		load_state
		say "already running in $dir (mon v2:127.0.0.1:$port, $store, auth $auth): nothing to do"
		return 0
	elif ((${#running[@]})); then
		die "only ${running[*]} of the cluster in $dir runs: use start-osd, or stop then start"
	fi
	# A crashed daemon without a PID file would still hold the port and the store.
	[[ -z $(ours_all) ]] ||
		die "processes of $dir run without PID files ($(ours_all | xargs)): stop first"

	if ((keep)); then load_state; fi
	if (: </dev/tcp/127.0.0.1/"$port") 2>/dev/null; then
		die "127.0.0.1:$port is in use (another cluster? choose --port and --dir)"
	fi

	trap cleanup_failed_start EXIT
	if ((keep)); then
		[[ -d $dir/mon && -d $dir/osd ]] || die "--keep: no mon/osd data in $dir"
		say "restarting the cluster kept in $dir ($store, auth $auth, port $port)"
	else
		size=${size:-$([[ $store == memstore ]] && echo 3 || echo 10)}
		if [[ $store == bluestore && $(stat -f -c %T "$dir") == tmpfs ]]; then
			die "$dir is on tmpfs: bluestore needs O_DIRECT (choose another --dir)"
		fi
		find "$dir" -mindepth 1 -maxdepth 1 ! -name .lock -exec rm -rf {} +
		mkdir -p "$dir"/{mon,osd,run,log,crash}
		printf 'port=%s\nstore=%s\nauth=%s\nsize=%s\n' "$port" "$store" "$auth" "$size" >"$state"
		fsid=$(uuidgen 2>/dev/null || cat /proc/sys/kernel/random/uuid)
		write_conf "$fsid"
		make_keys
		monmaptool --create --fsid "$fsid" --addv a "[v2:127.0.0.1:$port]" \
			"$dir/monmap" >/dev/null
		ceph-mon -c "$conf" -i a --mkfs --monmap "$dir/monmap" \
			--keyring "$dir/mon-mkfs.keyring" >"$dir/log/mon.a.mkfs" 2>&1 ||
			{ cat "$dir/log/mon.a.mkfs" >&2; die "ceph-mon --mkfs failed"; }
		rm -f "$dir/mon-mkfs.keyring" # the mon keeps its own copy in DIR/mon
		# The OSD's mkfs is local (the fsid comes from ceph.conf): --no-mon-config, or it
		# waits for a mon (client mount timeout) to fetch the central config.
		ceph-osd -c "$conf" -i 0 --mkfs --no-mon-config --osd-uuid "$(cat /proc/sys/kernel/random/uuid)" \
			>"$dir/log/osd.0.mkfs" 2>&1 ||
			{ cat "$dir/log/osd.0.mkfs" >&2; die "ceph-osd --mkfs failed"; }
	fi

	start_daemon mon.a
	wait_for "mon.a on v2:127.0.0.1:$port" mon.a mon_up
	say "mon.a up after $(($(now_ms) - t0)) ms"
	if ((!keep)); then
		# osd.0 in the map and the crush tree, and the pool, in one client (mon_cmds).
		[[ $(mon_cmds 30 "{\"prefix\": \"osd create\", \"uuid\": \"$(cat "$dir/osd/fsid")\"}" \
			'{"prefix": "osd crush add", "id": 0, "weight": 1.0, "args": ["root=default", "host=localhost"]}' \
			'{"prefix": "osd pool create", "pool": "rbd", "pg_num": 8}' | sed -n 1p) == 0 ]] ||
			die "ceph osd create did not give id 0"
		osd_epoch=0
	else
		osd_epoch=$(osd_map_epoch)
		[[ -n $osd_epoch ]] || die "cannot read the osdmap epoch"
	fi
	start_daemon osd.0
	wait_for "osd.0 up and in" osd.0 osd_up
	say "osd.0 up after $(($(now_ms) - t0)) ms"
	if ((!keep)); then
		rbd_ pool init rbd
	fi
	probe=$dir/run/probe
	echo "ulp ceph-dev probe $(date +%s%N)" >"$probe"
	rados_ -p rbd put ulp-ceph-dev-probe "$probe"
	rados_ -p rbd get ulp-ceph-dev-probe "$probe.back"
	cmp -s "$probe" "$probe.back" || die "rados probe read back different data"
	rm -f "$probe" "$probe.back"
	trap - EXIT
	say "cluster up in $dir after $(($(now_ms) - t0)) ms:" \
		"mon v2:127.0.0.1:$port, $store, auth $auth, pool rbd"
	say "use it with: eval \"\$($0 env --dir $dir)\""
}

cmd_stop() {
	local grace=${timeout:-20} pid
	stop_daemon osd.0 "$grace"
	stop_daemon mon.a "$grace"
	# Daemons of this DIR that lost their PID file (started by hand with -c DIR/ceph.conf).
	for pid in $(ours_all); do
		say "stopping a stray daemon of $dir (pid $pid)"
		kill -TERM "$pid" 2>/dev/null || true
	done
	for _ in $(seq $((grace * 10))); do
		[[ -z $(ours_all) ]] && break
		sleep 0.1
	done
	for pid in $(ours_all); do
		kill -KILL "$pid" 2>/dev/null || true
	done
	say "stopped"
}

cmd_status() {
	local name pid up=0
	if [[ -r $state ]]; then
		load_state
		say "$dir: mon v2:127.0.0.1:$port, $store, auth $auth"
	else
		say "$dir: no cluster"
	fi
	for name in mon.a osd.0; do
		if pid=$(pid_of "$name"); then
			say "$name running (pid $pid)"
			up=$((up + 1))
		else
			say "$name not running"
		fi
	done
	if pid_of mon.a >/dev/null; then
		bounded 10 ceph --connect-timeout 5 -s || say "ceph -s failed"
	fi
	((up == 2))
}

cmd_env() {
	load_state
	printf 'export ULP_CEPH_DIR=%q\n' "$dir"
	printf 'export CEPH_CONF=%q\n' "$conf"
	printf 'export CEPH_KEYRING=%q\n' "$dir/keyring"
	printf 'export ULP_CEPH_CLIENT=ulp-gw\n'
	printf 'export ULP_CEPH_GW_KEYRING=%q\n' "$dir/client.ulp-gw.keyring"
	printf 'export ULP_CEPH_POOL=rbd\n'
	printf 'export ULP_CEPH_MON_HOST=%q\n' "v2:127.0.0.1:$port"
	printf 'export ULP_CEPH_AUTH=%s\n' "$auth"
	printf 'export ULP_CEPH_STORE=%s\n' "$store"
}

cmd_start_osd() {
	local t0
	load_state
	wait_s=${timeout:-60}
	pid_of mon.a >/dev/null || die "mon.a of $dir does not run (start it with: start --keep)"
	if pid_of osd.0 >/dev/null; then
		say "osd.0 already running"
		return 0
	fi
	t0=$(now_ms)
	osd_epoch=$(osd_map_epoch)
	[[ -n $osd_epoch ]] || die "cannot read the osdmap epoch"
	trap cleanup_failed_start EXIT
	start_daemon osd.0
	wait_for "osd.0 up and in" osd.0 osd_up
	trap - EXIT
	say "osd.0 up after $(($(now_ms) - t0)) ms"
}

case $cmd in
start)
	# Checked before lock makes DIR/.lock: start only ever writes into an empty DIR or its own.
	if [[ -e $dir && ! -e $state ]] &&
		[[ -n $(find "$dir" -mindepth 1 -maxdepth 1 ! -name .lock -print -quit) ]]; then
		die "$dir is not empty and was not made by ceph-dev.sh: not wiping it (choose another --dir)"
	fi
	lock
	cmd_start
	;;
stop)
	[[ -e $state || -e $conf ]] || {
		say "no cluster in $dir"
		exit 0
	}
	lock
	cmd_stop
	;;
status) cmd_status ;;
env) cmd_env ;;
stop-osd)
	lock
	load_state
	stop_daemon osd.0 "${timeout:-20}"
	;;
start-osd)
	lock
	cmd_start_osd
	;;
restart-osd)
	lock
	load_state
	stop_daemon osd.0 "${timeout:-20}"
	cmd_start_osd
	;;
*) die "unknown command $cmd (see --help)" ;;
esac
