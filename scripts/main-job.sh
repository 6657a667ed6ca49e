#!/usr/bin/env bash
# The main job (README): install the dependencies, build, then run the target daemon and
# the initiator client on the built-in software RDMA provider, with data verification and
# figures:
#   1. ulp-targetd with an iSER portal and an SRP portal (soft RDMA provider) and a TCP
#      portal on 127.0.0.1, LUN 0 in RAM and LUN 1 on a file (io_uring);
#   2. ulp-initiator runs, each checking every block it reads back (LBA, generation and
#      CRC32C in every block written; exit 1 on any mismatch):
#        iSER, LUN 0: 4 KiB mixed read/write, queue depth 32, then a read-back pass
#        iSER, LUN 1: 128 KiB sequential write of the whole range, then a read-back pass
#        TCP,  LUN 0: 4 KiB mixed read/write, queue depth 32, then a read-back pass
#        SRP,  LUN 0: 4 KiB mixed read/write, queue depth 32, two channels, read back
#        SRP,  LUN 1: 128 KiB sequential write of the whole range, then read back
#   3. the figures, side by side in one run (tools/iscsi-bench/run --repeat 3): ulp-targetd
#      over iSER, SRP and TCP beside tgtd over TCP, with ulp-initiator and libiscsi's
#      iscsi-perf, IOPS, MB/s, latency and CPU per I/O, and their ratios: medians of three
#      rounds with their spread.
# Options: --quick (short runs, about a minute once built), --no-install (skip
# scripts/install-deps.sh), --no-build, --installed (the programs the packages installed,
# /usr/sbin/ulp-targetd, /usr/bin/ulp-initiator and ulpctl, instead of build/'s: steps 1
# and 2, ulpctl asked for both versions and the LUNs, no figures, which need the build tree;
# scripts/package.sh --install runs it). Exit status 0 only if every step succeeded.
set -euo pipefail
cd "$(dirname "$0")/.."

quick=0 install=1 build=1 installed=0
for a in "$@"; do
	case $a in
	--quick) quick=1 ;;
	--no-install) install=0 ;;
	--no-build) build=0 ;;
	--installed) installed=1 install=0 build=0 ;;
	-h | --help)
		sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'
		exit 0
		;;
	*)
		echo "main-job.sh: unknown option '$a' (--quick, --no-install, --no-build, --installed)" >&2
		exit 2
		;;
	esac
done

if ((install)); then
	scripts/install-deps.sh
fi
if ((build)); then
	cmake -G Ninja -B build
	ninja -C build -j "$(nproc)"
fi
targetd=build/tools/ulp-targetd/ulp-targetd
initiator=build/tools/ulp-initiator/ulp-initiator
ulpctl=build/tools/ulpctl/ulpctl
if ((installed)); then
	targetd=/usr/sbin/ulp-targetd initiator=/usr/bin/ulp-initiator ulpctl=/usr/bin/ulpctl
fi
for b in "$targetd" "$initiator" "$ulpctl"; do
	[[ -x $b ]] || { echo "main-job.sh: $b is not built" >&2; exit 1; }
done

if ((quick)); then
	runtime=3 range=64M file_size=128M
else
	runtime=10 range=256M file_size=512M
fi
iqn=iqn.2026-11.org.ulp:main-job
work=$(mktemp -d /var/tmp/ulp-main-job.XXXXXX)
tpid=''
cleanup() {
	if [[ -n $tpid ]] && kill -0 "$tpid" 2>/dev/null; then
		kill -KILL "$tpid" 2>/dev/null || true
	fi
	rm -rf "$work"
}
trap cleanup EXIT
step() { printf '\n==== %s\n' "$*"; }

step "ulp-targetd: iSER, SRP and TCP portals on 127.0.0.1, LUN 0 ram, LUN 1 file ($file_size)"
mkfifo "$work/ready"
"$targetd" --portal 127.0.0.1:0 --iser-portal 127.0.0.1:0 --srp-portal 127.0.0.1:0 \
	--target "$iqn" \
	--lun "0:ram:size=1G" --lun "1:file:path=$work/lun1.img,size=$file_size" \
	--admin-socket "$work/admin.sock" --ready-fd 3 3>"$work/ready" >"$work/targetd.log" 2>&1 &
tpid=$!
# ready-fd: "TCPPORT\n", "iser PORT\n", "srp PORT\n" once the portals listen.
exec 4<"$work/ready"
tcp_port='' iser_port='' srp_port=''
read -r -t 30 tcp_port <&4 || true
read -r -t 30 _ iser_port <&4 || true
read -r -t 30 _ srp_port <&4 || true
exec 4<&-
# The SRP target port's identifiers, from the add_target line ulp-targetd logs.
srp_target=$(grep -o 'id_ext=[0-9a-f]*,ioc_guid=[0-9a-f]*' "$work/targetd.log" | head -n 1 || true)
if [[ -z $tcp_port || -z $iser_port || -z $srp_port || -z $srp_target ]]; then
	echo "main-job.sh: ulp-targetd did not report its portals within 30 s:" >&2
	cat "$work/targetd.log" >&2
	exit 1
fi
echo "listening: TCP 127.0.0.1:$tcp_port, iSER 127.0.0.1:$iser_port, SRP 127.0.0.1:$srp_port" \
	"($srp_target; soft RDMA provider)"

run() { # NAME ARGS...: one verified ulp-initiator run, its figures on stdout
	local name=$1
	shift
	step "$name"
	if ! "$initiator" --target "$iqn" --quiet "$@"; then
		echo "main-job.sh: '$name' failed; ulp-targetd's log:" >&2
		tail -n 40 "$work/targetd.log" >&2
		exit 1
	fi
}
if ((installed)); then
	step "ulpctl ($ulpctl): its version and the daemon's, the target's LUNs"
	"$ulpctl" --socket "$work/admin.sock" --version
	"$ulpctl" --socket "$work/admin.sock" lun list --target "$iqn"
fi
run "iSER, LUN 0 (ram): 4 KiB mixed 50/50, qd 32, ${runtime}s, verified, then read back" \
	--transport iser -p "127.0.0.1:$iser_port" -l 0 --range "$range" \
	-w mixed -b 4k -q 32 -r "$runtime" --verify-only
run "iSER, LUN 1 (file): 128 KiB sequential write of $range, then read back" \
	--transport iser -p "127.0.0.1:$iser_port" -l 1 --range "$range" \
	-w write -b 128k -q 8 -r 0 -s "$range" --verify-only
run "TCP, LUN 0 (ram): 4 KiB mixed 50/50, qd 32, ${runtime}s, verified, then read back" \
	--transport tcp -p "127.0.0.1:$tcp_port" -l 0 --range "$range" \
	-w mixed -b 4k -q 32 -r "$runtime" --verify-only
run "SRP, LUN 0 (ram): 4 KiB mixed 50/50, qd 32, two channels, ${runtime}s, verified, then read back" \
	--transport srp --srp-target "$srp_target" -p "127.0.0.1:$srp_port" --srp-channels 2 \
	-l 0 --range "$range" -w mixed -b 4k -q 32 -r "$runtime" --verify-only
run "SRP, LUN 1 (file): 128 KiB sequential write of $range, then read back" \
	--transport srp --srp-target "$srp_target" -p "127.0.0.1:$srp_port" \
	-l 1 --range "$range" -w write -b 128k -q 8 -r 0 -s "$range" --verify-only

step "ulp-targetd: SIGTERM (it must exit 0, every session closed)"
kill -TERM "$tpid"
rc=0
for _ in $(seq 100); do
	kill -0 "$tpid" 2>/dev/null || break
	sleep 0.1
done
if kill -0 "$tpid" 2>/dev/null; then
	echo "main-job.sh: ulp-targetd still running 10 s after SIGTERM" >&2
	tail -n 40 "$work/targetd.log" >&2
	exit 1
fi
wait "$tpid" || rc=$?
tpid=''
if ((rc != 0)) || grep -E 'left allocated|still in use' "$work/targetd.log"; then
	echo "main-job.sh: ulp-targetd exit status $rc; its log:" >&2
	tail -n 40 "$work/targetd.log" >&2
	exit 1
fi
echo "ulp-targetd exited 0"

if ((installed)); then
	step "main job (installed programs): every run verified its data"
	exit 0
fi
step "figures: tools/iscsi-bench/run$( ((quick)) && echo ' --quick' || echo ' --repeat 3 --runtime 2')"
if ((quick)); then
	tools/iscsi-bench/run --quick
else
	# Three rounds, the paths' order rotated: medians with their min-max, each ratio by
	# round, and a note on any path whose rounds disagree (on 2 busy cores the soft
	# provider's paths can run in a slow mode for a whole round). 2 s per job keeps it to
	# about a minute and a half (the whole main job took 155 s on a 2-core host).
	tools/iscsi-bench/run --repeat 3 --runtime 2
fi
step "main job: every run verified its data; figures above"
