#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# tools/rbd-bench/lio_tcmu_vm.sh - LIO with tcmu-runner's rbd handler beside ulp-targetd's
# rbd backstore and fio --ioengine=rbd, INSIDE the rxe VM (the build machines' kernel has
# no LIO; Debian's kernel in tools/vm has target_core_user):
#
#   tools/vm/run --mem 4G --timeout 1200 -- bash tools/rbd-bench/lio_tcmu_vm.sh \
#       --targetd B/tools/ulp-targetd/ulp-targetd --initiator B/tools/ulp-initiator/ulp-initiator
#
# In the guest: a single-node Ceph cluster (scripts/ceph-dev.sh, memstore), one image
# prefilled with fio, then the jobs of tools/rbd-bench/run on three paths, in one run:
#   fio-rbd   fio --ioengine=rbd (librbd in the client: the ceiling)
#   ulp-tcp   ulp-initiator over TCP to ulp-targetd --lun 0:rbd:...
#   lio-tcmu  ulp-initiator over TCP to LIO's iSCSI target, LUN 0 a user:rbd backstore
#             (target_core_user, served by Debian's tcmu-runner and its handler_rbd.so)
# and a table: IOPS, MB/s, p50/p99 per job and path, and each path's IOPS over fio-rbd's of
# the same run. A benchmark, not a test: no figure is judged. Exit 0 when every step ran
# and every figure is there, 1 otherwise (with the reason and the logs), 2 bad usage.
# See tools/rbd-bench/README.md, "LIO + tcmu-runner (in the VM)".
set -uo pipefail
export LC_ALL=C

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
CEPH_DEV=$REPO/scripts/ceph-dev.sh
PROG=lio-tcmu
CMDLINE=$(printf '%q ' "$0" "$@")
CMDLINE=${CMDLINE% }

usage() {
	cat <<'EOF'
Usage: tools/vm/run --mem 4G --timeout 1200 -- bash tools/rbd-bench/lio_tcmu_vm.sh [OPTIONS]

Inside the rxe VM (tools/vm/run): a Ceph cluster (scripts/ceph-dev.sh, memstore), one
image, tcmu-runner with its rbd handler behind LIO's iSCSI target (configfs by hand), and
ulp-targetd's rbd LUN; the jobs of tools/rbd-bench/run (4 KiB random read/write qd 32,
128 KiB sequential read/write qd 8) on fio-rbd, ulp-tcp and lio-tcmu; a table of IOPS,
MB/s, p50/p99 and IOPS over fio-rbd's of the same run.

Options:
  --targetd PATH     ulp-targetd (default: the repository's build/tools/ulp-targetd/ulp-targetd)
  --initiator PATH   ulp-initiator (default: build/tools/ulp-initiator/ulp-initiator)
  --runtime S        seconds per job (default 5)
  --runs N           runs of every job on every path, the paths' order rotating (default 1)
  --size MIB         image size in MiB (default 256)
  --jobs LIST        a subset of randread,randwrite,read,write
  --paths LIST       a subset of fio-rbd,ulp-tcp,lio-tcmu
  --portal IP        LIO's iSCSI portal address (default 127.0.0.1; port 3260)
  --out DIR          also copy the table, the samples (JSONL) and the logs to DIR
                     (e.g. /run/ulp-vm/lio-tcmu: the share tools/vm/run gives back)
  -h, --help         this text
EOF
}

targetd=$REPO/build/tools/ulp-targetd/ulp-targetd
initiator=$REPO/build/tools/ulp-initiator/ulp-initiator
runtime=5 runs=1 size_mib=256 jobs_sel='' paths_sel='' portal_ip=127.0.0.1 out=''
die_usage() { echo "$PROG: $*" >&2; echo "$PROG: see --help" >&2; exit 2; }
need_arg() { (($# >= 2)) || die_usage "$1 needs a value"; }
while (($#)); do
	case $1 in
	-h | --help) usage; exit 0 ;;
	--targetd) need_arg "$@"; targetd=$2; shift ;;
	--initiator) need_arg "$@"; initiator=$2; shift ;;
	--runtime) need_arg "$@"; runtime=$2; shift ;;
	--runs) need_arg "$@"; runs=$2; shift ;;
	--size) need_arg "$@"; size_mib=$2; shift ;;
	--jobs) need_arg "$@"; jobs_sel=$2; shift ;;
	--paths) need_arg "$@"; paths_sel=$2; shift ;;
	--portal) need_arg "$@"; portal_ip=$2; shift ;;
	--out) need_arg "$@"; out=$2; shift ;;
	*) die_usage "unknown option '$1'" ;;
	esac
	shift
done
[[ $runtime =~ ^[0-9]+$ ]] && ((runtime >= 1)) || die_usage "--runtime: whole seconds, at least 1"
[[ $runs =~ ^[0-9]+$ ]] && ((runs >= 1 && runs <= 20)) || die_usage "--runs: 1 to 20"
[[ $size_mib =~ ^[0-9]+$ ]] && ((size_mib >= 16)) || die_usage "--size: MiB, at least 16"
[[ $portal_ip =~ ^[0-9]+(\.[0-9]+){3}$ ]] || die_usage "--portal: an IPv4 address"

ALL_JOBS=(randread randwrite read write)
declare -A JOB_NAME=([randread]="randread 4k qd32" [randwrite]="randwrite 4k qd32"
	[read]="seqread 128k qd8" [write]="seqwrite 128k qd8")
declare -A JOB_BS=([randread]=4096 [randwrite]=4096 [read]=131072 [write]=131072)
declare -A JOB_QD=([randread]=32 [randwrite]=32 [read]=8 [write]=8)
ALL_PATHS=(fio-rbd ulp-tcp lio-tcmu)
declare -A PATH_WHAT=([fio-rbd]="fio --ioengine=rbd (librbd in fio)"
	[ulp-tcp]="ulp-initiator -> ulp-targetd's rbd LUN over TCP"
	[lio-tcmu]="ulp-initiator -> LIO iSCSI/TCP -> target_core_user -> tcmu-runner handler_rbd")
select_list() { # OPTION SELECTION ALL...: $selected
	local what=$1 sel=$2 x y ok
	shift 2
	selected=()
	[[ -z $sel ]] && { selected=("$@"); return 0; }
	for x in ${sel//,/ }; do
		ok=0
		for y in "$@"; do [[ $x == "$y" ]] && ok=1; done
		((ok)) || die_usage "--$what: '$x' is not one of $*"
	done
	for y in "$@"; do [[ ,$sel, == *,$y,* ]] && selected+=("$y"); done
}
select_list jobs "$jobs_sel" "${ALL_JOBS[@]}"
jobs=("${selected[@]}")
select_list paths "$paths_sel" "${ALL_PATHS[@]}"
paths=("${selected[@]}")
((${#jobs[@]} && ${#paths[@]})) || die_usage "no job or no path selected"
want_ulp=0 want_lio=0
for p in "${paths[@]}"; do
	[[ $p == ulp-tcp ]] && want_ulp=1
	[[ $p == lio-tcmu ]] && want_lio=1
done

# ---- helpers --------------------------------------------------------------------------------

T0=$EPOCHREALTIME
log() { printf '%s [%6.1fs] %s\n' "$PROG:" "$(awk -v a="$T0" -v b="$EPOCHREALTIME" 'BEGIN { print b - a }')" "$*" >&2; }
alive() { [[ -n ${1:-} ]] && kill -0 "$1" 2>/dev/null; }
port_busy() { (: </dev/tcp/"$1"/"$2") 2>/dev/null; }
failures=()
fail() { failures+=("$*"); log "FAILED: $*"; }

# wait_exit PID SECONDS WHAT: wait (a line every 5 s) for our child PID to end; its status
# in $wait_rc. 1 if it still runs after SECONDS.
wait_exit() {
	local pid=$1 bound=$2 what=$3 i
	for ((i = 1; i <= bound * 10; i++)); do
		if ! kill -0 "$pid" 2>/dev/null; then
			wait "$pid" 2>/dev/null
			wait_rc=$?
			return 0
		fi
		sleep 0.1
		((i % 50 == 0)) && log "waiting for $what (pid $pid) to exit: $((i / 10)) s of $bound"
	done
	return 1
}
# stop_pid PID WHAT [GRACE]: SIGTERM, SIGKILL after GRACE s (default 15).
stop_pid() {
	local pid=$1 what=$2 grace=${3:-15}
	alive "$pid" || { wait "$pid" 2>/dev/null; wait_rc=$?; return 0; }
	kill -TERM "$pid" 2>/dev/null
	wait_exit "$pid" "$grace" "$what" && return 0
	log "$what (pid $pid) still running ${grace} s after SIGTERM: SIGKILL"
	kill -KILL "$pid" 2>/dev/null
	wait_exit "$pid" 10 "$what" || log "$what (pid $pid) survives SIGKILL"
	wait_rc=137
	return 1
}
# run_bounded SECONDS OUT ERR ARGV...: status in $run_rc (124: timed out).
client_pid=''
run_bounded() {
	local bound=$1 o=$2 e=$3
	shift 3
	timeout -k 5 "$bound" "$@" >"$o" 2>"$e" </dev/null &
	client_pid=$!
	wait "$client_pid"
	run_rc=$?
	client_pid=''
}
# cfs_op SECONDS WHAT CMD...: a configfs operation that the kernel may hold (enabling and
# removing a target_core_user device wait for tcmu-runner's netlink reply, uninterruptibly),
# done in a child and waited for with a bound. On timeout the kernel's pending netlink
# commands are failed (target_core_user's reset_netlink) so that the child returns. 0 if
# the operation succeeded. cfs_write SECONDS FILE VALUE WHAT: the same for a write.
cfs_op() {
	local bound=$1 what=$2 pid i
	shift 2
	("$@") 2>"$work/cfs.err" &
	pid=$!
	for ((i = 1; i <= bound * 10; i++)); do
		if ! kill -0 "$pid" 2>/dev/null; then
			wait "$pid"
			local rc=$?
			((rc == 0)) || log "$what: $(tr '\n' ' ' <"$work/cfs.err")"
			return "$rc"
		fi
		sleep 0.1
		((i % 50 == 0)) && log "waiting for the kernel to finish: $what ($((i / 10)) s of $bound)"
	done
	log "$what: still blocked after $bound s; failing target_core_user's pending netlink commands (reset_netlink)"
	echo 1 >/sys/module/target_core_user/parameters/reset_netlink 2>/dev/null
	wait_exit "$pid" 10 "the blocked configfs write" || log "$what: the write is still blocked in the kernel"
	return 1
}
cfs_write() { cfs_op "$1" "$4" sh -c 'echo "$1" >"$2"' sh "$3" "$2"; }

# ---- checks -----------------------------------------------------------------------------

if [[ ${ULP_IN_VM:-} != 1 ]]; then
	echo "$PROG: run me inside the rxe VM: tools/vm/run --mem 4G --timeout 1200 -- bash $0 ..." >&2
	exit 2
fi
[[ $(id -u) -eq 0 ]] || { echo "$PROG: needs root" >&2; exit 1; }
HANDLER_DIR=$(dirname "$(dpkg -L tcmu-runner 2>/dev/null | grep -m1 '/handler_rbd\.so$')" 2>/dev/null)
missing=()
for t in fio jq rbd ceph timeout awk modprobe; do command -v "$t" >/dev/null || missing+=("$t"); done
((want_lio)) && { command -v tcmu-runner >/dev/null || missing+=("tcmu-runner"); }
((want_lio)) && [[ ! -e $HANDLER_DIR/handler_rbd.so ]] && missing+=("tcmu-runner's handler_rbd.so")
if ((${#missing[@]})); then
	echo "$PROG: missing: ${missing[*]} (scripts/install-deps.sh installs them)" >&2
	exit 1
fi
fio --enghelp 2>/dev/null | grep -qw rbd || { echo "$PROG: this fio has no rbd engine" >&2; exit 1; }
for b in "$initiator" $( ((want_ulp)) && echo "$targetd"); do
	[[ -x $b ]] || { echo "$PROG: missing $b (--targetd, --initiator)" >&2; exit 1; }
done

# ---- teardown: every step undone in reverse, each bounded ------------------------------------

work=$(mktemp -d /tmp/lio-tcmu.XXXXXX)
cluster_dir=$work/ceph
cfs=/sys/kernel/config/target
LIO_IQN=iqn.2026-11.org.ulp:lio-tcmu-rbd
ULP_IQN=iqn.2026-11.org.ulp:rbd-bench
POOL=rbd
IMAGE=lio-tcmu
CLIENT=ulp-gw
USER_HBA=$cfs/core/user_0
USER_DEV=$USER_HBA/rbd0
TPG=$cfs/iscsi/$LIO_IQN/tpgt_1
cluster_started=0 tcmu_pid='' targetd_pid='' lio_dev=0 lio_tpg=0 interrupted=0

lio_teardown() {
	# The reverse of lio_setup: the TPG off, the LUN's link, the LUN, the portal, the TPG, the
	# target; then the backstore (tcmu-runner closes the image: it must still run).
	if ((lio_tpg)); then
		lio_tpg=0
		log "LIO: removing the iSCSI target $LIO_IQN"
		[[ -e $TPG/enable ]] && { echo 0 >"$TPG/enable" || log "LIO: could not disable the TPG"; }
		rm -f "$TPG/lun/lun_0/rbd0"
		local d
		for d in "$TPG/lun/lun_0" "$TPG/np/$portal_ip:3260" "$TPG" "$cfs/iscsi/$LIO_IQN"; do
			[[ -d $d ]] || continue
			cfs_op 30 "rmdir $d" rmdir "$d" || fail "LIO teardown: rmdir $d failed"
		done
	fi
	if ((lio_dev)); then
		lio_dev=0
		log "LIO: removing the user:rbd backstore (tcmu-runner closes the image)"
		if [[ -d $USER_DEV ]]; then
			cfs_op 60 "rmdir $USER_DEV" rmdir "$USER_DEV" || fail "LIO teardown: rmdir $USER_DEV failed"
		fi
		[[ -d $USER_HBA ]] && { rmdir "$USER_HBA" 2>/dev/null || log "LIO: $USER_HBA stays (busy)"; }
	fi
}
# stop_daemon PIDVAR NAME BOUND: SIGTERM to the daemon whose pid $PIDVAR holds (once: the
# variable is emptied), which must exit 0 within BOUND seconds.
stop_daemon() {
	local -n pidvar=$1
	[[ -n $pidvar ]] || return 0
	local pid=$pidvar
	pidvar=''
	log "stopping $2 (pid $pid): SIGTERM"
	stop_pid "$pid" "$2" "$3"
	((wait_rc == 0 || interrupted)) || fail "$2 did not exit 0 on SIGTERM (status $wait_rc)"
}
stop_tcmu() { stop_daemon tcmu_pid tcmu-runner 20; }
stop_targetd() { stop_daemon targetd_pid ulp-targetd 15; }
stop_cluster() {
	((cluster_started)) || return 0
	cluster_started=0
	log "stopping the cluster in $cluster_dir"
	timeout 120 env ULP_CEPH_CALL_SCALE="$TIMEOUT_SCALE" "$CEPH_DEV" stop --dir "$cluster_dir" --timeout 30 >"$work/ceph-stop.log" 2>&1 ||
		{ cat "$work/ceph-stop.log" >&2; fail "scripts/ceph-dev.sh stop failed"; }
}
save_out() {
	[[ -n $out ]] || return 0
	mkdir -p "$out" && cp -r "$work"/*.log "$work"/*.jsonl "$work"/*.txt "$work"/tcmu-log "$out"/ 2>/dev/null
	[[ -d $cluster_dir/log ]] && cp -r "$cluster_dir/log" "$out/ceph-log" 2>/dev/null
	dmesg >"$out/dmesg.log" 2>/dev/null
	return 0
}
cleaned=0
cleanup() {
	((cleaned)) && return 0
	cleaned=1
	trap '' INT TERM HUP
	if alive "$client_pid"; then
		kill -TERM "$client_pid" 2>/dev/null
		wait_exit "$client_pid" 10 "the client" || kill -KILL "$client_pid" 2>/dev/null
	fi
	lio_teardown
	stop_tcmu
	stop_targetd
	stop_cluster
	save_out
	rm -rf "$work"
}
on_signal() { log "interrupted by SIG$1: stopping everything"; interrupted=1; cleanup; exit 130; }
trap cleanup EXIT
trap 'on_signal INT' INT
trap 'on_signal TERM' TERM
trap 'on_signal HUP' HUP

# ---- the cluster and the image ------------------------------------------------------------

echo "command: $CMDLINE"
log "guest: $(nproc) vCPUs, $(awk '/MemTotal/ { printf "%d MiB", $2 / 1024 }' /proc/meminfo), kernel $(uname -r); load $(cut -d' ' -f1-3 /proc/loadavg)"
# scripts/ceph-dev.sh bounds each of its ceph CLI calls by 10-30 s. Under TCG the ceph CLI
# (Python) takes 20-25 s a call in the guest (`ceph mon stat` measured 20-23 s on a 2-core
# host at load 8; `python3 -c pass` 3.4 s), so every one of those bounds expires and the
# start fails ("timed out after 240 s waiting for mon.a" with the mon up and in quorum).
# ceph-dev.sh's ULP_CEPH_CALL_SCALE multiplies them: every wait stays bounded, only
# longer. (The C++ clients, rbd, rados, fio's librbd, are not slowed as much.)
TIMEOUT_SCALE=${ULP_TCG_TIMEOUT_SCALE:-6}


osd_gib=$(((size_mib * 2 + 1023) / 1024 + 1))
log "starting a Ceph cluster in $cluster_dir (memstore, $osd_gib GiB; ceph-dev.sh's CLI bounds x$TIMEOUT_SCALE for TCG; at most 900 s)"
cluster_started=1
run_bounded 900 "$work/ceph-start.log" "$work/ceph-start.err" \
	env ULP_CEPH_CALL_SCALE="$TIMEOUT_SCALE" "$CEPH_DEV" start --dir "$cluster_dir" --port 13300 --store memstore --size "$osd_gib" --timeout 600
if ((run_rc != 0)); then
	cat "$work/ceph-start.log" "$work/ceph-start.err" >&2
	fail "scripts/ceph-dev.sh start failed (status $run_rc)"
	exit 1
fi
log "$(tail -n 2 "$work/ceph-start.log" | head -n 1)"

# Every client (fio, ulp-targetd, tcmu-runner) reads this conf: the cluster's, librbd's cache
# off (tcmu-runner's handler turns it off itself; ulp-targetd runs without it).
bench_conf=$work/ceph.conf
{ cat "$cluster_dir/ceph.conf"; printf '\n[client]\nrbd cache = false\n'; } >"$bench_conf"
export CEPH_CONF=$bench_conf
unset CEPH_ARGS CEPH_KEYRING
rbd_() { timeout 120 rbd --conf "$bench_conf" --id "$CLIENT" --client-mount-timeout 30 "$@"; }
# layering only: fio, ulp-targetd and tcmu-runner all have the image open at once (no
# exclusive lock to move between them; tcmu-runner warns "HA not supported" and serves it).
if ! rbd_ create --size "${size_mib}M" --image-feature layering "$POOL/$IMAGE" >"$work/rbd.log" 2>&1; then
	cat "$work/rbd.log" >&2
	fail "rbd create $POOL/$IMAGE failed"
	exit 1
fi
prefill_bound=$((120 + size_mib))
log "prefilling $POOL/$IMAGE ($size_mib MiB, fio rbd 4 MiB writes; at most $prefill_bound s)"
run_bounded "$prefill_bound" "$work/prefill.json" "$work/prefill.log" \
	fio --name=prefill --ioengine=rbd --clientname="$CLIENT" --pool="$POOL" --rbdname="$IMAGE" \
	--rw=write --bs=4M --iodepth=8 --size="${size_mib}M" --output-format=json
prefill_mbps=$(jq -r '.jobs[0].write.bw_bytes / 1e6 | floor' "$work/prefill.json" 2>/dev/null)
if ((run_rc != 0)) || [[ -z $prefill_mbps ]]; then
	tail -n 20 "$work/prefill.log" >&2
	fail "prefill failed (fio status $run_rc)"
	exit 1
fi
log "prefilled at $prefill_mbps MB/s"

# ---- ulp-targetd: TCP on 127.0.0.1, LUN 0 the image ----------------------------------------

tcp_port=''
if ((want_ulp)); then
	spec="0:rbd:pool=$POOL,image=$IMAGE,conf=$bench_conf,keyring=$cluster_dir/client.$CLIENT.keyring,client=$CLIENT"
	log "starting ulp-targetd --lun $spec (at most 120 s)"
	mkfifo "$work/targetd.ready"
	"$targetd" --portal 127.0.0.1:0 --target "$ULP_IQN" --lun "$spec" --ready-fd 3 \
		3>"$work/targetd.ready" </dev/null >"$work/targetd.log" 2>&1 &
	targetd_pid=$!
	exec 4<"$work/targetd.ready"
	read -r -t 120 tcp_port <&4 || true
	exec 4<&-
	if [[ -z $tcp_port ]] || ! alive "$targetd_pid"; then
		tail -n 20 "$work/targetd.log" >&2
		fail "ulp-targetd did not come up"
		stop_targetd
	else
		log "ulp-targetd pid $targetd_pid: iSCSI/TCP on 127.0.0.1:$tcp_port"
	fi
fi

# ---- LIO + tcmu-runner ------------------------------------------------------------------------

# tcmu-runner: the daemon behind target_core_user (its netlink and UIO devices), its log in
# $work (INFO level from /etc/tcmu/tcmu.conf: -d would log every SCSI command). It looks for
# the system D-Bus (none in the guest: it logs "name lost" at debug level and goes on
# without; D-Bus only serves its optional check-config and handler-registration service).
# Ready when the kernel logs "tcmu daemon: command reply support", which its netlink
# feature request (after every handler is loaded) prints.
start_tcmu() {
	local mod
	for mod in target_core_mod target_core_user iscsi_target_mod; do
		if ! modprobe "$mod" 2>"$work/modprobe.err"; then
			fail "modprobe $mod: $(cat "$work/modprobe.err") (LIO is not in this kernel?)"
			return 1
		fi
	done
	[[ -d $cfs/core ]] || { fail "no $cfs/core after modprobe target_core_mod (configfs?)"; return 1; }
	local n0 i
	n0=$(dmesg | grep -c 'tcmu daemon: command reply support')
	log "starting tcmu-runner (handlers from $HANDLER_DIR; at most 90 s to be ready)"
	mkdir -p "$work/tcmu-log"
	tcmu-runner --handler-path "$HANDLER_DIR" -l "$work/tcmu-log" </dev/null \
		>"$work/tcmu-runner.out.log" 2>&1 &
	tcmu_pid=$!
	for ((i = 1; i <= 900; i++)); do
		if ! alive "$tcmu_pid"; then
			wait "$tcmu_pid"
			local rc=$?
			tcmu_pid=''
			cat "$work/tcmu-runner.out.log" "$work/tcmu-log/tcmu-runner.log" 2>/dev/null | tail -n 20 >&2
			fail "tcmu-runner exited with status $rc during start-up: $(grep -E 'ERROR|CRIT' "$work/tcmu-log/tcmu-runner.log" 2>/dev/null | tail -n 1)"
			return 1
		fi
		(($(dmesg | grep -c 'tcmu daemon: command reply support') > n0)) && break
		sleep 0.1
		((i % 100 == 0)) && log "waiting for tcmu-runner to be ready: $((i / 10)) s of 90"
	done
	if ((i > 900)); then
		tail -n 20 "$work/tcmu-log/tcmu-runner.log" >&2
		fail "tcmu-runner not ready after 90 s (no 'tcmu daemon: command reply support' in dmesg)"
		return 1
	fi
	grep -q 'Handler rbd is registered' "$work/tcmu-log/tcmu-runner.log" || {
		tail -n 20 "$work/tcmu-log/tcmu-runner.log" >&2
		fail "tcmu-runner is up without its rbd handler"
		return 1
	}
	log "tcmu-runner pid $tcmu_pid ready: $(grep -o 'Handler [a-z]* is registered' "$work/tcmu-log/tcmu-runner.log" | awk '{ print $2 }' | paste -sd, -) handlers"
}

# The backstore: user_0/rbd0, dev_config "rbd/POOL/IMAGE;conf=...;id=..." (tcmu-runner's
# rbd.c: the handler's name, then pool/image, then ;-separated options osd_op_timeout=,
# conf=, id=), dev_size in bytes, 512-byte blocks (as ulp-targetd's LUN), hw_max_sectors
# 2048 (1 MiB per command: a 128 KiB I/O is one command, as on the other paths). Enabling
# it makes the kernel ask tcmu-runner (netlink) to open the image: the write returns once
# the handler has (or has failed to).
lio_setup() {
	local cfg="rbd/$POOL/$IMAGE;conf=$bench_conf;id=$CLIENT"
	log "LIO: user:rbd backstore $USER_DEV, dev_config=$cfg"
	lio_dev=1
	mkdir -p "$USER_DEV" || { fail "LIO: mkdir $USER_DEV"; return 1; }
	local kv
	for kv in "dev_config=$cfg" "dev_size=$((size_mib << 20))" hw_block_size=512 hw_max_sectors=2048; do
		echo "$kv" >"$USER_DEV/control" || { fail "LIO: writing '$kv' to $USER_DEV/control"; return 1; }
	done
	log "LIO: enabling the backstore: tcmu-runner opens $POOL/$IMAGE (at most 120 s)"
	if ! cfs_write 120 "$USER_DEV/enable" 1 "enable $USER_DEV"; then
		tail -n 20 "$work/tcmu-log/tcmu-runner.log" >&2
		dmesg | tail -n 20 >&2
		fail "LIO: tcmu-runner could not open $POOL/$IMAGE: $(grep -E 'ERROR|CRIT' "$work/tcmu-log/tcmu-runner.log" | tail -n 1)"
		return 1
	fi
	log "LIO: tcmu-runner has $POOL/$IMAGE open"
	# The iSCSI target: one TPG, LUN 0, a TCP portal, demo mode (any initiator, no CHAP,
	# writable), the session keys of ulp-targetd's defaults (256 KiB segments, 1 MiB
	# bursts, ImmediateData=Yes, InitialR2T=No), as tools/rbd-bench/run gives tgtd.
	lio_tpg=1
	mkdir -p "$TPG/lun/lun_0" || { fail "LIO: mkdir $TPG/lun/lun_0"; return 1; }
	ln -s "$USER_DEV" "$TPG/lun/lun_0/rbd0" || { fail "LIO: LUN 0 link"; return 1; }
	mkdir "$TPG/np/$portal_ip:3260" || { fail "LIO: portal $portal_ip:3260"; return 1; }
	for kv in generate_node_acls=1 cache_dynamic_acls=1 demo_mode_write_protect=0 authentication=0; do
		echo "${kv#*=}" >"$TPG/attrib/${kv%%=*}" || { fail "LIO: attrib $kv"; return 1; }
	done
	for kv in MaxRecvDataSegmentLength=262144 MaxXmitDataSegmentLength=262144 \
		MaxBurstLength=1048576 FirstBurstLength=65536 ImmediateData=Yes InitialR2T=No; do
		echo "${kv#*=}" >"$TPG/param/${kv%%=*}" || { fail "LIO: param $kv"; return 1; }
	done
	echo 1 >"$TPG/enable" || { fail "LIO: enabling the TPG"; return 1; }
	# (Each probe is a connection without a login: the kernel logs "iSCSI Login negotiation
	# failed." for it.)
	local i ok=0
	for ((i = 0; i < 100; i++)); do port_busy "$portal_ip" 3260 && { ok=1; break; }; sleep 0.1; done
	((ok)) || { fail "LIO: nothing listens on $portal_ip:3260 after 10 s"; return 1; }
	log "LIO: $LIO_IQN LUN 0 = user:rbd $POOL/$IMAGE, iSCSI/TCP on $portal_ip:3260"
	log "LIO: $(tr -s ' \n\t' ' ' <"$USER_DEV/info")"
}
lio_up=0
if ((want_lio)); then
	start_tcmu && lio_setup && lio_up=1
fi

# ---- the jobs ---------------------------------------------------------------------------------

samples=$work/samples.jsonl
: >"$samples"
record() { jq -cn --argjson run "$1" --arg job "$2" --arg path "$3" --argjson f "$4" '{run: $run, job: $job, path: $path} + $f' >>"$samples"; }
record_error() {
	record "$1" "$2" "$3" "$(jq -cn --arg e "$4" '{ok: false, error: $e}')"
	fail "run $1, ${JOB_NAME[$2]}, $3: $4"
}
measure() { # RUN JOB PATH
	local run=$1 job=$2 path=$3 bs=${JOB_BS[$2]} qd=${JOB_QD[$2]} argv=() gw=''
	local o=$work/client.out e=$work/client.err f
	case $path in
	fio-rbd)
		argv=(fio --name="$job" --ioengine=rbd --clientname="$CLIENT" --pool="$POOL"
			--rbdname="$IMAGE" --rw="$job" --bs="$bs" --iodepth="$qd" --time_based
			--runtime="${runtime}s" --norandommap --randrepeat=0 --output-format=json) ;;
	ulp-tcp)
		[[ -n $tcp_port ]] && alive "$targetd_pid" || { record_error "$run" "$job" "$path" "ulp-targetd is not running"; return; }
		gw=$targetd_pid
		argv=("$initiator" --transport tcp -p "127.0.0.1:$tcp_port" -t "$ULP_IQN" -l 0) ;;
	lio-tcmu)
		((lio_up)) && alive "$tcmu_pid" || { record_error "$run" "$job" "$path" "LIO/tcmu-runner is not up"; return; }
		gw=$tcmu_pid
		argv=("$initiator" --transport tcp -p "$portal_ip:3260" -t "$LIO_IQN" -l 0) ;;
	esac
	[[ $path != fio-rbd ]] && argv+=(-w "$job" --bs "$bs" --qd "$qd" --runtime "$runtime" --no-verify --json --quiet)
	run_bounded $((runtime + 90)) "$o" "$e" "${argv[@]}"
	if [[ $path == fio-rbd ]]; then
		f=$(jq -c --arg rw "$job" '.jobs[0] as $j
			| (if ($rw | test("read")) then $j.read else $j.write end) as $d
			| select($j.error == 0 and $d.total_ios > 0)
			| {ok: true, ios: $d.total_ios, iops: $d.iops, mb_per_s: ($d.bw_bytes / 1e6),
			   p50_us: (($d.clat_ns.percentile["50.000000"] // null) | if . then . / 1000 else null end),
			   p99_us: (($d.clat_ns.percentile["99.000000"] // null) | if . then . / 1000 else null end)}' "$o" 2>/dev/null)
	else
		f=$(jq -c 'select(.ok == true and .errors == 0 and .main.ios > 0) | .main
			| {ok: true, ios, iops, mb_per_s, p50_us, p99_us}' "$o" 2>/dev/null)
	fi
	if ((run_rc != 0)) || [[ -z $f ]]; then
		local why="exited with $run_rc"
		((run_rc == 124)) && why="still running after $((runtime + 90)) s"
		record_error "$run" "$job" "$path" "${argv[0]##*/} $why: $(tail -c 400 "$e" | tr '\n' ' ')"
		[[ $path == lio-tcmu ]] && tail -n 5 "$work/tcmu-log/tcmu-runner.log" | sed 's/^/  tcmu-runner: /' >&2
		return
	fi
	if [[ -n $gw ]] && ! alive "$gw"; then
		record_error "$run" "$job" "$path" "the gateway (pid $gw) died during the job"
		return
	fi
	record "$run" "$job" "$path" "$f"
	log "  $(jq -r '"\(.iops | floor) IOPS, \(.mb_per_s * 10 | round / 10) MB/s, p50 \(.p50_us // 0 | round) us, p99 \(.p99_us // 0 | round) us"' <<<"$f")"
}
npaths=${#paths[@]}
for ((r = 1; r <= runs; r++)); do
	for job in "${jobs[@]}"; do
		k=$(((r - 1) % npaths))
		order=("${paths[@]:k}" "${paths[@]:0:k}")
		for path in "${order[@]}"; do
			log "run $r/$runs, ${JOB_NAME[$job]}: $path (${runtime} s)"
			measure "$r" "$job" "$path"
		done
	done
done
log "load at end: $(cut -d' ' -f1-3 /proc/loadavg)"

# Torn down here (not only in the EXIT trap), so that an unclean stop counts as a failure.
lio_teardown
stop_tcmu
stop_targetd
stop_cluster

# ---- the table ----------------------------------------------------------------------------------

{
	echo
	echo "lio-tcmu: image $POOL/$IMAGE, $size_mib MiB (prefilled at $prefill_mbps MB/s), OSD on memstore;" \
		"$runtime s per job, $runs run(s), medians; TCG guest, $(nproc) vCPUs"
	echo "versions: ceph $(dpkg-query -W -f='${Version}' ceph-osd 2>/dev/null), $(fio --version 2>/dev/null)," \
		"tcmu-runner $(dpkg-query -W -f='${Version}' tcmu-runner 2>/dev/null), kernel $(uname -r)"
	printf '%-18s %-9s %10s %9s %9s %10s | %9s %11s %9s\n' job path IOPS MB/s "p50 us" "p99 us" IOPS/fio "(min-max)" p50/fio
	printf '%0.s-' {1..104}
	echo
	jq -rs --argjson jobs "$(printf '%s\n' "${jobs[@]}" | jq -Rn '[inputs]')" \
		--argjson paths "$(printf '%s\n' "${paths[@]}" | jq -Rn '[inputs]')" \
		--argjson names "$(for j in "${jobs[@]}"; do printf '%s\t%s\n' "$j" "${JOB_NAME[$j]}"; done | jq -Rn '[inputs | split("\t") | {(.[0]): .[1]}] | add')" '
		def median: map(select(. != null)) | sort | if length == 0 then null
			elif length % 2 == 1 then .[length / 2 | floor] else (.[length / 2 - 1] + .[length / 2]) / 2 end;
		def r($a; $b): if $a == null or $b == null or $b == 0 then null else $a / $b end;
		. as $s | $jobs[] as $j | $paths[] as $p
		| [$s[] | select(.job == $j and .path == $p)] as $mine
		| [$mine[] | select(.ok)] as $ok
		| [$ok[] as $x | ($s[] | select(.ok and .job == $j and .path == "fio-rbd" and .run == $x.run)) as $f
		   | {iops: r($x.iops; $f.iops), p50: r($x.p50_us; $f.p50_us)}] as $rat
		| [$names[$j], $p,
		   (if ($ok | length) == 0 then "FAILED: " + (($mine[0].error // "not run") | .[0:120]) else
		    ((($ok | map(.iops), map(.mb_per_s), map(.p50_us), map(.p99_us)), ($rat | map(.iops), map(.p50)))
		     | median // "" | tostring),
		    ($rat | map(.iops) | map(select(. != null)) | if length > 1 then (min, max | tostring) else ("", "") end) end)]
		| @tsv' "$samples" |
		awk -F'\t' '
		function n(x, d) { return x == "" ? "-" : sprintf("%." d "f", x) }
		function x(v) { return v == "" ? "-" : sprintf("%.2fx", v) }
		{ job = ($1 == last) ? "" : $1; last = $1
			if (NF == 3) { printf "%-18s %-9s %s\n", job, $2, $3; next }
			mm = $9 == "" ? "" : sprintf("%.2f-%.2f", $9, $10)
			printf "%-18s %-9s %10s %9s %9s %10s | %9s %11s %9s\n", job, $2, n($3, 0), n($4, 1), n($5, 0), n($6, 0), x($7), mm, x($8) }'
	echo "paths:"
	for p in "${paths[@]}"; do printf '  %-9s %s\n' "$p" "${PATH_WHAT[$p]}"; done
	echo "x/fio: the path's figure over fio-rbd's, same job, same run (the median over runs; with"
	echo "  more than one run, the min-max of IOPS/fio beside it). IOPS, MB/s, p50, p99: medians."
	echo "Under TCG every figure is emulated CPU: compare paths within this run only."
} | tee "$work/table.txt"

if ((${#failures[@]})); then
	log "${#failures[@]} step(s) failed:"
	for f in "${failures[@]}"; do log "  ${f:0:400}"; done
	exit 1
fi
exit 0
