#!/usr/bin/env bash
# Build the libFuzzer targets (clang, ASan + UBSan) and run fuzz_sock_wire for N seconds.
#
#   scripts/fuzz.sh [SECONDS [LIBFUZZER_ARGS...]]
#
# SECONDS defaults to 60. The build goes to build-fuzz-clang; the run starts from the seed
# corpus (regenerated into fuzz/corpus/sock_wire by fuzz_sock_wire_corpus) and keeps what
# it learns in build-fuzz-clang/corpus/sock_wire, so the checked-in seeds stay small.
# Crash, leak and timeout reproducers land in build-fuzz-clang/artifacts/; replay one with
#   build-fuzz-clang/fuzz/fuzz_sock_wire build-fuzz-clang/artifacts/crash-...
set -euo pipefail
cd "$(dirname "$0")/.."

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
ninja -C "$build" -j "$jobs" fuzz_sock_wire fuzz_sock_wire_corpus

mkdir -p fuzz/corpus/sock_wire "$build/corpus/sock_wire" "$build/artifacts"
"$build/fuzz/fuzz_sock_wire_corpus" fuzz/corpus/sock_wire

# detect_leaks stays on: a connection must give back everything it took.
# -timeout: one input (connect, stream, verdict, teardown) takes milliseconds; the
# harness aborts itself after kEndMs when the target never drops a connection.
export ASAN_OPTIONS=${ASAN_OPTIONS:-abort_on_error=1:detect_leaks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
exec "$build/fuzz/fuzz_sock_wire" -max_total_time="$secs" -timeout=20 -max_len=4096 \
	-artifact_prefix="$build/artifacts/" -print_final_stats=1 \
	"$@" "$build/corpus/sock_wire" fuzz/corpus/sock_wire
