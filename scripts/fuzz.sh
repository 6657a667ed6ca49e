#!/usr/bin/env bash
# Build the libFuzzer targets (clang, ASan + UBSan) and run one of them for N seconds.
#
#   scripts/fuzz.sh [TARGET] [SECONDS [LIBFUZZER_ARGS...]]
#
# TARGET is sock_wire (the default), shm_ring (the ring wire's shared memory), iscsi_pdu,
# iscsi_text, iscsi_login, iscsi_initiator
# (the initiator session fed target PDUs), iscsi_conn (one target connection with the
# SCSI core behind it), or the SRP codec's srp_login (CM private data), srp_cmd (SRP_CMD
# and task management, as the target reads them) and srp_rsp (what the initiator reads),
# or pr_state (the reservation state file reader), or stpg (SET TARGET PORT GROUPS
# parameter lists), or xcopy (the EXTENDED COPY parameter list parser), or admin_rpc
# (ulp-targetd's admin
# socket: JSON-RPC request lines), or prometheus (ulpctl's Prometheus text from the daemon's
# stats answer), or http_request (the metrics endpoint's HTTP request heads), or
# ulpctl_import (`ulpctl import`'s saveconfig.json and targets.conf readers), or
# ha_records (the cluster map's version and owner records, as another gateway wrote
# them), or alua_initiator (RTPG data, VPD 83h, sense, as a multipath initiator reads
# them); SECONDS
# defaults to 60. With no arguments, or a number
# first, it fuzzes sock_wire as it always did.
# The build goes to build-fuzz-clang; a run keeps what it learns in
# build-fuzz-clang/corpus/TARGET, so the checked-in seeds stay small. Seeds: sock_wire's
# are regenerated into fuzz/corpus/sock_wire by fuzz_sock_wire_corpus; the iSCSI and SRP
# targets and shm_ring write theirs into build-fuzz-clang/seeds/TARGET (ULP_FUZZ_SEEDS=<dir>
# fuzz_TARGET); inputs that once crashed a target are kept in fuzz/corpus/TARGET and run
# as seeds too.
# Crash, leak and timeout reproducers land in build-fuzz-clang/artifacts/; replay one with
#   build-fuzz-clang/fuzz/fuzz_TARGET build-fuzz-clang/artifacts/crash-...
set -euo pipefail
cd "$(dirname "$0")/.."

target=sock_wire
if [[ $# -gt 0 && ! $1 =~ ^[0-9]+$ ]]; then
	target=$1
	shift
fi
case $target in
sock_wire | shm_ring | iscsi_pdu | iscsi_text | iscsi_login | iscsi_initiator | iscsi_conn) ;;
srp_login | srp_cmd | srp_rsp | pr_state | xcopy | admin_rpc | prometheus | http_request) ;;
ulpctl_import | stpg | ha_records | alua_initiator) ;;
*)
	echo "fuzz.sh: unknown target '$target'" \
		"(sock_wire, shm_ring, iscsi_pdu, iscsi_text, iscsi_login, iscsi_initiator, iscsi_conn," \
		"srp_login, srp_cmd, srp_rsp, pr_state, xcopy, admin_rpc, prometheus, http_request," \
		"ulpctl_import, stpg, ha_records, alua_initiator)" >&2
	exit 2
	;;
esac
secs=${1:-60}
shift || true
build=build-fuzz-clang
jobs=${FUZZ_BUILD_JOBS:-2}

# ULP_WERROR=OFF: the tree is kept warning-free under gcc; clang finds a few more
# (-Wunused-private-field) that must not stop a fuzz run. fuzz/ itself builds -Werror.
if [[ ! -f $build/build.ninja ]]; then
	cmake -G Ninja -B "$build" -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=RelWithDebInfo \
		-DULP_FUZZ=ON -DULP_SANITIZE=ON -DULP_WERROR=OFF -DBUILD_TESTING=OFF
fi

# detect_leaks stays on: a connection must give back everything it took.
export ASAN_OPTIONS=${ASAN_OPTIONS:-abort_on_error=1:detect_leaks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
mkdir -p "$build/corpus/$target" "$build/artifacts"

if [[ $target == sock_wire ]]; then
	ninja -C "$build" -j "$jobs" fuzz_sock_wire fuzz_sock_wire_corpus
	mkdir -p fuzz/corpus/sock_wire
	"$build/fuzz/fuzz_sock_wire_corpus" fuzz/corpus/sock_wire
	# -timeout: one input (connect, stream, verdict, teardown) takes milliseconds; the
	# harness aborts itself after kEndMs when the target never drops a connection.
	exec "$build/fuzz/fuzz_sock_wire" -max_total_time="$secs" -timeout=20 -max_len=4096 \
		-artifact_prefix="$build/artifacts/" -print_final_stats=1 \
		"$@" "$build/corpus/sock_wire" fuzz/corpus/sock_wire
fi

# The iSCSI and SRP parsers: pure computation, milliseconds per input. Inputs up to 16 KiB
# reach split texts and multi-PDU streams; the login target needs room for several requests.
# iscsi_conn bounds its own teardown (6 s at most, then it aborts with a message), well
# within -timeout.
ninja -C "$build" -j "$jobs" "fuzz_$target"
seeds=$build/seeds/$target
mkdir -p "$seeds"
ULP_FUZZ_SEEDS=$seeds "$build/fuzz/fuzz_$target"
kept=()
if [[ -d fuzz/corpus/$target ]]; then
	kept=("fuzz/corpus/$target")
fi
exec "$build/fuzz/fuzz_$target" -max_total_time="$secs" -timeout=10 -max_len=16384 \
	-artifact_prefix="$build/artifacts/" -print_final_stats=1 \
	"$@" "$build/corpus/$target" "$seeds" "${kept[@]}"
