#!/usr/bin/env bash
# The test command (README): install the build dependencies, configure, build, and run the
# "fast" test label.
#
#   scripts/test.sh [--only build|tests] [BUILD_DIR [CMAKE_ARGS...]]
#
# BUILD_DIR defaults to build; CMAKE_ARGS go to the configure step, e.g.
# `scripts/test.sh build-asan -DULP_SANITIZE=ON` (what .ci/run does second). Tests run
# as many at a time as there are CPUs (CTEST_PARALLEL_LEVEL overrides it: 1 runs them one
# by one); the few that must run alone say so in their RESOURCE_LOCK or RUN_SERIAL
# property. Every test is bounded by --timeout. --only build stops after the build (install
# and compile), --only tests runs the tests of a tree built before: .ci/run builds the
# sanitized trees while it runs other tests, and tests them afterwards.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/steps.sh

only=''
if [[ ${1:-} == --only ]]; then
	only=${2:?"--only build|tests"}
	[[ $only == build || $only == tests ]] || { echo "test.sh: --only build|tests, not '$only'" >&2; exit 2; }
	shift 2
fi
build_dir=${1:-build}
if (($#)); then shift; fi

if [[ $only != tests ]]; then
	step "$build_dir: install"
	scripts/install-deps.sh "$build_dir"
	step "$build_dir: compile"
	cmake -G Ninja -B "$build_dir" "$@"
	ninja -C "$build_dir" -j "$(nproc)"
fi
if [[ $only == build ]]; then
	step_end
	exit 0
fi
step "$build_dir: tests"
# ULP_CTEST_EXCLUDE: a regular expression of test names left out (ctest -E); ULP_CTEST_ONLY:
# one of the only names run (ctest -R). .ci/run splits the fast label with one expression:
# the release tree runs the tests it matches, the ASan tree every other one.
select=()
if [[ -n ${ULP_CTEST_EXCLUDE:-} ]]; then select+=(-E "$ULP_CTEST_EXCLUDE"); fi
if [[ -n ${ULP_CTEST_ONLY:-} ]]; then select+=(-R "$ULP_CTEST_ONLY"); fi
ctest --test-dir "$build_dir" -L fast "${select[@]}" --output-on-failure --timeout 600 \
	-j "${CTEST_PARALLEL_LEVEL:-$(nproc)}"
step_end
