#!/usr/bin/env bash
# Installs every Debian 12 package that ulp's build, tests and tools need.
# Idempotent; run as root on a fresh machine. Package lists per purpose, so
# that the reason each one is here stays visible.
#
#   scripts/install-deps.sh [BUILD_DIR]
#
# With BUILD_DIR, it then builds libiscsi 1.20.0 from Debian trixie's source into
# BUILD_DIR/_deps (scripts/libiscsi-1.20.sh; once, cached): its iscsi-test-cu runs the
# conformance suites over iser:// in the VM and over TCP beside bookworm's 1.19.
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=${1:-}

build=(build-essential cmake ninja-build pkg-config git)
libs=(libgtest-dev libgmock-dev libbenchmark-dev libboost-dev libcli11-dev libspdlog-dev
	liburing-dev libssl-dev libtomlplusplus-dev nlohmann-json3-dev)
# <sys/sdt.h>: the USDT trace points perf and bpftrace attach to (core/trace.h,
# docs/tracing.md); without it they compile to nothing and their test skips. readelf, which
# that test reads the probes' notes with, comes with build-essential (binutils).
trace=(systemtap-sdt-dev)
# real peers: fio (ulp-bench scsi's reference on the same file); libiscsi's tools and its
# conformance suite iscsi-test-cu (tests/iscsi), tgt (the userspace reference target), and
# open-iscsi (Linux's iSCSI/iSER initiator, driven in the rxe VM: tests/vm); sg3-utils'
# sg_persist and fence-agents' fence_scsi, the persistent reservations' clients that
# clusters use, through two gateways in the VM (tests/vm/gateway_multipath.sh)
peers=(fio libiscsi-bin tgt open-iscsi sg3-utils fence-agents)
# systemd-analyze verify checks ulp-targetd.service (tests/admin)
service=(systemd)
# groff renders the man pages (docs/man) with every warning on, and man-db's lexgrog reads
# their NAME lines, in tests/cli
docs=(groff-base man-db)
# the Debian packages (debian/, dpkg-buildpackage -b in CI) and lintian's check of them;
# doxygen renders the library's reference from the public headers (docs/Doxyfile)
packaging=(debhelper fakeroot lintian doxygen)
# libiscsi 1.20.0 built from trixie's upstream tarball (scripts/libiscsi-1.20.sh)
libiscsi_build=(autoconf automake libtool libcunit1-dev librdmacm-dev)
# clang + its runtimes: scripts/fuzz.sh (libFuzzer, ASan, UBSan); lld: the linker every
# tree uses where it is installed (CMakeLists.txt, ULP_LLD); strace: iscsi-bench scale
# --futex counts the target's futex calls
tools=(clang libclang-rt-14-dev lld clang-format python3 strace)

# the rxe VM (tools/vm, ctest -L vm): qemu boots Debian's kernel with rdma_rxe (Soft-RoCE);
# the guest runs the host's own verbs tools and builds through a read-only 9p root; dmsetup
# (dm-multipath under fio, as blktests' srp group) and jq (the admin socket's counts, the
# bench table) for the VM cases; multipath-tools: multipathd and multipath (prio alua,
# hardware_handler "1 alua" over scsi_dh_alua) follow ulp-targetd's ALUA states in
# tests/vm/alua_multipath.sh
vm=(qemu-system-x86 busybox-static cpio kmod iproute2 xz-utils
	rdma-core ibverbs-providers ibverbs-utils rdmacm-utils perftest libibverbs-dev librdmacm-dev
	dmsetup jq multipath-tools)

# a real single-node Ceph cluster, one mon and one OSD on 127.0.0.1 (scripts/ceph-dev.sh,
# ctest -L ceph) with the ceph, rbd and rados CLIs; librbd/librados for the rbd backstore;
# tgt-rbd (tgtd's bs_rbd backstore, --bstype rbd) is the reference RBD gateway of
# tools/rbd-bench; tcmu-runner (with its rbd handler, handler_rbd.so) is LIO's userspace rbd
# backstore (target_core_user), measured in the rxe VM by tools/rbd-bench/lio_tcmu_vm.sh
ceph=(ceph-mon ceph-osd ceph-common librbd-dev librados-dev tgt-rbd tcmu-runner)

pkgs=("${build[@]}" "${libs[@]}" "${trace[@]}" "${peers[@]}" "${service[@]}" "${docs[@]}" "${packaging[@]}" "${libiscsi_build[@]}" "${tools[@]}" "${vm[@]}"
	"${ceph[@]}")

missing=()
for p in "${pkgs[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if ((${#missing[@]})); then
	if [[ $(id -u) -ne 0 ]]; then
		echo "install-deps: need root to install: ${missing[*]}" >&2
		exit 1
	fi
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -q
	apt-get install -y -q --no-install-recommends "${missing[@]}"
fi
echo "install-deps: all ${#pkgs[@]} packages present"
if [[ -n $build_dir ]]; then
	scripts/libiscsi-1.20.sh "$build_dir"
fi
