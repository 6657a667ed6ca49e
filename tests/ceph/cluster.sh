# shellcheck shell=bash
# tests/ceph/cluster.sh: the plumbing the Ceph test scripts share (ceph_dev_test.sh,
# targetd_rbd_test.sh, stress_rbd_test.sh, libiscsi_rbd_test.sh): a single-node cluster of
# scripts/ceph-dev.sh in a temporary directory on a free monitor port, the processes of that
# cluster, the clean-up, bounded client calls, and ulp-targetd's start and SIGTERM stop.
# Sourced, not run:
#
#   set -euo pipefail
#   source "$(dirname "${BASH_SOURCE[0]}")/cluster.sh"
#   cluster_init TAG CEPH_DEV_SH TMPNAME
#
# Contract: the script runs under `set -euo pipefail` and calls cluster_init before anything
# that may fail. From then on the EXIT trap is cluster_cleanup's and TERM and INT exit 143
# through it (the daemons live in sessions of their own and would outlive the script): the
# script sets no trap of its own, it defines the hooks below instead. The globals below are
# the helper's: the script reads them, and sets them only through these functions. Every
# wait is bounded (timeout, or a counted loop).
#
# Globals:
#   cdir, conf   the cluster's directory (ceph-dev.sh --dir; mktemp -d /tmp/TMPNAME-ceph.XXXXXX)
#                and its ceph.conf
#   work         the test's own files: logs, the daemon's state (mktemp -d /tmp/TMPNAME.XXXXXX)
#   port         the monitor's port, once cluster_free_port (or cluster_start) chose it
#   failure      the message of the last fail, repeated in the FAILED line
#   targetd_pid  the ulp-targetd of targetd_spawn, '' when none runs
#   tcp_port, iser_port, srp_port
#                its ports, as targetd_wait_ready read them from --ready-fd
#
# Functions:
#   say MSG...     "TAG: MSG" on stdout.
#   fail MSG...    "TAG: FAIL: MSG" on stderr and exit 1, through the clean-up.
#   cluster_init TAG CEPH_DEV_SH TMPNAME
#                  TAG prefixes every line; CEPH_DEV_SH is scripts/ceph-dev.sh (run directly
#                  when executable, by bash otherwise); unsets CEPH_ARGS, CEPH_KEYRING and
#                  CEPH_CONF (the cluster is named explicitly, or by `ceph-dev.sh env`); sets
#                  the traps; makes cdir and work.
#   ceph_dev ARGS...
#                  ceph-dev.sh ARGS --dir $cdir, bounded: 120 s (ceph-dev.sh's own --timeout
#                  bounds its waits within that).
#   cluster_free_port
#                  port: the first of 100 candidates in 20000-29999 (spread by $$) that no
#                  one listens on at 127.0.0.1, so that the test runs beside a developer's
#                  default cluster; none: fail "no free port found for the monitor".
#   cluster_start  cluster_free_port, then `ceph-dev.sh start --port $port --timeout 60`, its
#                  output in $work/ceph-start.log (its last 20 lines in the FAIL line);
#                  says "cluster up on 127.0.0.1:PORT in N s".
#   cluster_stop   `ceph-dev.sh stop --timeout 20` (its output in $work/ceph-stop.log, in the
#                  FAIL line), then fails when any process of the cluster is left (ours).
#   ours           a line "PID ARGV..." per live process started for this cluster: an
#                  argument pair `-c $conf` or `--conf $conf` (the daemons, the clients), or an
#                  argument with the key `conf=$conf` (ulp-targetd's --lun); never the script
#                  itself; a zombie has no cmdline and is not listed. Always exits 0.
#   ceph_cli TOOL ARGS...
#                  a Ceph client (rbd, rados) bounded: 30 s, --client-mount-timeout 10; the
#                  cluster from the environment (CEPH_CONF, CEPH_KEYRING) or ARGS.
#   cluster_rbd ARGS...
#                  ceph_cli rbd on this cluster as client.admin (-c $conf, --keyring).
#   targetd_spawn READY LOG COMMAND...
#                  COMMAND (ulp-targetd and its arguments) in the background with
#                  `--ready-fd 3` to the file READY (removed first) and stderr to LOG; its pid
#                  in targetd_pid, which the clean-up kills (SIGKILL) if it still runs.
#   targetd_wait_ready WHAT READY [iser] [srp]
#                  waits, 60 s at most, for the ready lines in READY: the TCP port on the first
#                  line and, for each of iser and srp named, a line "iser PORT" / "srp PORT";
#                  sets tcp_port (iser_port, srp_port). Fails "WHAT: ulp-targetd exited during
#                  start-up", or "WHAT: ulp-targetd: no TCP[, iSER and SRP] port(s) on
#                  --ready-fd after 60 s: 'READY's lines'" (no "WHAT: " when WHAT is '').
#   targetd_stop WHAT
#                  SIGTERM to targetd_pid; fails "WHAT: ulp-targetd still running 30 s after
#                  SIGTERM", or, when it exits other than 0, "WHAT: ulp-targetd exited RC after
#                  SIGTERM"; targetd_pid is '' once it has been reaped.
#   cluster_tail N NOTE FILE...
#                  on stderr, for each non-empty FILE: "---- tail of FILE (NOTE)" (no
#                  parentheses when NOTE is '') and its last N lines.
#   cluster_cleanup
#                  the EXIT trap, not called by the script. In order: the hook
#                  cluster_on_cleanup; ulp-targetd killed; the cluster stopped (ceph-dev.sh
#                  stop --timeout 10) if it was made; then any process of it left (ours) is
#                  a failure: "TAG: FAIL: processes of CDIR left after stop:", their lines,
#                  and they are killed by PID (SIGKILL; ours alone). On a failure (the exit
#                  status, or processes left): the hook cluster_on_failure, the last 30 log
#                  lines of each daemon's DIR/log/*.out, mon.a.log and osd.0.log, and
#                  "TAG: FAILED (rc RC): MESSAGE"; otherwise "TAG: PASS". Then the hook
#                  cluster_on_exit, cdir and work removed, and exit with that status. TERM and
#                  INT do not cut it short.
#
# Hooks (no-ops here; a script redefines them after sourcing this file; they must not fail,
# nor call fail):
#   cluster_on_cleanup  the script's own processes, killed before ulp-targetd and the cluster
#   cluster_on_failure  the script's own logs' tails (cluster_tail)
#   cluster_on_exit     anything to keep from work before it is removed

cluster_tag=ceph
cluster_dev_cmd=()
cdir='' conf='' work='' port='' failure=''
targetd_pid='' tcp_port='' iser_port='' srp_port=''

cluster_on_cleanup() { :; }
cluster_on_failure() { :; }
cluster_on_exit() { :; }

say() { echo "$cluster_tag: $*"; }

fail() {
	failure=$*
	echo "$cluster_tag: FAIL: $*" >&2
	exit 1
}

cluster_init() {
	local usage='usage: cluster_init TAG CEPH_DEV_SH TMPNAME'
	cluster_tag=${1:?$usage}
	local dev=${2:?$usage} name=${3:?$usage}
	if [[ -x $dev ]]; then
		cluster_dev_cmd=("$dev")
	else
		cluster_dev_cmd=(bash "$dev")
	fi
	unset CEPH_ARGS CEPH_KEYRING CEPH_CONF
	trap cluster_cleanup EXIT
	trap 'exit 143' TERM INT
	cdir=$(mktemp -d "/tmp/$name-ceph.XXXXXX")
	conf=$cdir/ceph.conf
	work=$(mktemp -d "/tmp/$name.XXXXXX")
}

ceph_dev() { timeout 120 "${cluster_dev_cmd[@]}" "$@" --dir "$cdir"; }

cluster_free_port() {
	local i p
	port=
	for ((i = 0; i < 100; i++)); do
		p=$((20000 + ($$ * 7 + i * 13) % 10000))
		if ! (: </dev/tcp/127.0.0.1/"$p") 2>/dev/null; then
			port=$p
			return 0
		fi
	done
	fail "no free port found for the monitor"
}

cluster_start() {
	local t0=$SECONDS
	cluster_free_port
	ceph_dev start --port "$port" --timeout 60 >"$work/ceph-start.log" 2>&1 ||
		fail "scripts/ceph-dev.sh start: $(tail -n 20 "$work/ceph-start.log")"
	say "cluster up on 127.0.0.1:$port in $((SECONDS - t0)) s"
}

cluster_stop() {
	local left
	ceph_dev stop --timeout 20 >"$work/ceph-stop.log" 2>&1 ||
		fail "ceph-dev.sh stop: $(cat "$work/ceph-stop.log")"
	left=$(ours)
	[[ -z $left ]] || fail "processes of $cdir left after stop: $left"
}

ours() {
	local p args i a
	[[ -n $conf ]] || return 0
	for p in /proc/[0-9]*; do
		[[ ${p#/proc/} == "$$" || ${p#/proc/} == "$BASHPID" ]] && continue
		mapfile -d '' args 2>/dev/null <"$p/cmdline" || continue
		for ((i = 1; i < ${#args[@]}; i++)); do
			a=${args[i]}
			if [[ ($a == -c || $a == --conf) && ${args[i + 1]-} == "$conf" ]] ||
				[[ $a == *conf="$conf" || $a == *conf="$conf",* ]]; then
				echo "${p#/proc/} ${args[*]}"
				break
			fi
		done
	done
	return 0
}

ceph_cli() {
	local tool=$1
	shift
	timeout 30 "$tool" --client-mount-timeout 10 "$@"
}

cluster_rbd() { ceph_cli rbd -c "$conf" --keyring "$cdir/keyring" "$@"; }

targetd_spawn() {
	local ready=$1 log=$2
	shift 2
	rm -f "$ready"
	"$@" --ready-fd 3 3>"$ready" 2>"$log" &
	targetd_pid=$!
}

# targetd_read_ports READY [iser] [srp]: 0 once READY has every port asked for (see
# targetd_wait_ready), which it then holds in tcp_port (iser_port, srp_port).
targetd_read_ports() {
	local ready=$1 kind p
	shift
	tcp_port=$(sed -n 1p "$ready" 2>/dev/null || true)
	[[ $tcp_port =~ ^[0-9]+$ ]] || return 1
	for kind; do
		p=$(awk -v kind="$kind" '$1 == kind { print $2; exit }' "$ready" 2>/dev/null || true)
		[[ $p =~ ^[0-9]+$ ]] || return 1
		case $kind in
		iser) iser_port=$p ;;
		srp) srp_port=$p ;;
		esac
	done
}

targetd_wait_ready() {
	local what=${1:+$1: } ready=$2 i kind ports=TCP
	shift 2
	for kind; do
		case $kind in
		iser | srp) ;;
		*) fail "targetd_wait_ready: no ready line of kind '$kind'" ;;
		esac
	done
	# shellcheck disable=SC2034 # the script reads them
	tcp_port='' iser_port='' srp_port=''
	for ((i = 0; i < 600; i++)); do
		targetd_read_ports "$ready" "$@" && return 0
		kill -0 "$targetd_pid" 2>/dev/null || fail "${what}ulp-targetd exited during start-up"
		sleep 0.1
	done
	targetd_read_ports "$ready" "$@" && return 0
	case $* in
	'') ports="TCP port" ;;
	iser) ports="TCP and iSER ports" ;;
	srp) ports="TCP and SRP ports" ;;
	*) ports="TCP, iSER and SRP ports" ;;
	esac
	fail "${what}ulp-targetd: no $ports on --ready-fd after 60 s: '$(tr '\n' ' ' <"$ready")'"
}

targetd_stop() {
	local what=${1:+$1: } rc=0 i
	kill -TERM "$targetd_pid"
	for ((i = 0; i < 300; i++)); do
		kill -0 "$targetd_pid" 2>/dev/null || break
		sleep 0.1
	done
	kill -0 "$targetd_pid" 2>/dev/null && fail "${what}ulp-targetd still running 30 s after SIGTERM"
	wait "$targetd_pid" || rc=$?
	targetd_pid=''
	((rc == 0)) || fail "${what}ulp-targetd exited $rc after SIGTERM"
}

cluster_tail() {
	local n=$1 note=$2 f
	shift 2
	for f; do
		[[ -s $f ]] || continue
		echo "---- tail of $f${note:+ ($note)}" >&2
		tail -n "$n" "$f" >&2
	done
}

cluster_cleanup() {
	local rc=$? left f
	trap - EXIT
	# A no-op, not '': an ignored signal would stay ignored in the commands run here, and
	# timeout could not stop them.
	trap : TERM INT
	set +e
	cluster_on_cleanup
	if [[ -n $targetd_pid ]] && kill -0 "$targetd_pid" 2>/dev/null; then
		kill -KILL "$targetd_pid" 2>/dev/null
		wait "$targetd_pid" 2>/dev/null
	fi
	[[ -n $conf && -e $conf ]] && ceph_dev stop --timeout 10 >/dev/null 2>&1
	left=$(ours)
	if [[ -n $left ]]; then
		echo "$cluster_tag: FAIL: processes of $cdir left after stop:" >&2
		echo "$left" >&2
		# ours alone, by PID: they run with this test's own $conf
		# shellcheck disable=SC2046
		kill -KILL $(awk '{print $1}' <<<"$left") 2>/dev/null
		rc=1
	fi
	if ((rc)); then
		cluster_on_failure
		for f in "$cdir"/log/*.out "$cdir"/log/mon.a.log "$cdir"/log/osd.0.log; do
			[[ -n $cdir && -s $f ]] || continue
			echo "---- tail of $f (log lines only: memstore dumps JSON on unmount)" >&2
			grep -E '^[0-9]{4}-' "$f" | tail -n 30 >&2
		done
		echo "$cluster_tag: FAILED (rc $rc)${failure:+: $failure}" >&2
	else
		say "PASS"
	fi
	cluster_on_exit
	rm -rf "$work" "$cdir"
	exit "$rc"
}
