#!/usr/bin/env bash
# The test command (README): install the build dependencies, configure, build, and run the
# "fast" test label.
#
#   scripts/test.sh [BUILD_DIR [CMAKE_ARGS...]]
#
# BUILD_DIR defaults to build; CMAKE_ARGS go to the configure step, e.g.
# `scripts/test.sh build-asan -DULP_SANITIZE=ON` (what .ci/run does second). ctest honours
# CTEST_PARALLEL_LEVEL from the environment; every test is bounded by --timeout.
set -euo pipefail
cd "$(dirname "$0")/.."

build_dir=${1:-build}
if (($#)); then shift; fi

scripts/install-deps.sh "$build_dir"
cmake -G Ninja -B "$build_dir" "$@"
ninja -C "$build_dir" -j "$(nproc)"
ctest --test-dir "$build_dir" -L fast --output-on-failure --timeout 600
