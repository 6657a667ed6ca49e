#!/bin/bash
# SPDX-License-Identifier: MIT
# examples/run-installed.sh - build the examples against the installed library, both ways a
# developer would (CMake's find_package(ulp), and the Makefile on pkg-config alone), into a
# temporary directory, and run every example. Any failure stops the script with a message
# and a non-zero status.
#
#   examples/run-installed.sh              # libulp-dev installed under /usr
#   examples/run-installed.sh /opt/ulp     # `cmake --install build --prefix /opt/ulp`
#
# For a prefix other than /usr, CMake is pointed at it with CMAKE_PREFIX_PATH, and
# pkg-config with PKG_CONFIG_PATH alone: the .pc files find their prefix from where they
# lie (${pcfiledir}), so an install moved or made under any prefix works.
# ULP_EXAMPLES_KEEP=1 keeps the build directory. Needs cmake, make, pkgconf and a C++20
# compiler; ninja is used when installed.
set -euo pipefail

prefix=${1:-/usr}
here=$(cd "$(dirname "$0")" && pwd)
t0=$EPOCHREALTIME

fail() {
	echo "run-installed: FAIL: $*" >&2
	exit 1
}
elapsed() {
	awk -v a="$1" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }'
}

[ -d "$prefix" ] || fail "no such prefix: $prefix"
cfg=$(find "$prefix/lib" "$prefix/lib64" -path '*/cmake/ulp/ulpConfig.cmake' -print -quit \
	2>/dev/null || true)
[ -n "$cfg" ] || fail "no ulpConfig.cmake under $prefix/lib: is libulp-dev installed?"
pcdir=$(dirname "$(find "$prefix/lib" "$prefix/lib64" -name ulp-rw.pc -print -quit \
	2>/dev/null || true)")
[ -f "$pcdir/ulp-rw.pc" ] || fail "no ulp-rw.pc under $prefix/lib"

work=$(mktemp -d "${TMPDIR:-/tmp}/ulp-examples.XXXXXX")
if [ "${ULP_EXAMPLES_KEEP:-0}" = 1 ]; then
	echo "run-installed: keeping $work"
else
	trap 'rm -rf "$work"' EXIT
fi
echo "run-installed: ulp in $prefix ($cfg), building in $work"

# Run one example; its output is shown, and a non-zero status or a timeout fails the run.
run() {
	local how=$1 bin=$2 t
	t=$EPOCHREALTIME
	echo "--- $how: $(basename "$bin")"
	if ! timeout 120 "$bin"; then
		fail "$how: $(basename "$bin") failed (status $?)"
	fi
	echo "--- $how: $(basename "$bin") passed in $(elapsed "$t") s"
}

# 1. CMake: the examples' own project, find_package(ulp 0.1).
t=$EPOCHREALTIME
gen=()
command -v ninja >/dev/null && gen=(-G Ninja)
cmake_args=(-S "$here" -B "$work/cmake" "${gen[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo)
[ "$prefix" = /usr ] || cmake_args+=(-DCMAKE_PREFIX_PATH="$prefix")
cmake "${cmake_args[@]}" >"$work/cmake.log" 2>&1 ||
	{ cat "$work/cmake.log"; fail "cmake configure against $prefix"; }
grep -- '-- ulp ' "$work/cmake.log" || true
cmake --build "$work/cmake" -j2 >>"$work/cmake.log" 2>&1 ||
	{ cat "$work/cmake.log"; fail "cmake build"; }
echo "run-installed: cmake build: $(elapsed "$t") s"
for ex in rw_transfer echo; do
	run cmake "$work/cmake/$ex"
done

# 2. pkg-config: the Makefile, every flag from the installed ulp-*.pc files.
t=$EPOCHREALTIME
pc=(pkg-config)
if [ "$prefix" != /usr ]; then
	export PKG_CONFIG_PATH="$pcdir${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
fi
mkdir -p "$work/make"
echo "run-installed: ${pc[*]} --libs ulp-rw ulp-cq_poll ulp-providers:" \
	"$("${pc[@]}" --libs ulp-rw ulp-cq_poll ulp-providers)"
make -C "$here" O="$work/make" PKG_CONFIG="${pc[*]}" CXXFLAGS="-O2 -g1" all \
	>"$work/make.log" 2>&1 || { cat "$work/make.log"; fail "make (pkg-config)"; }
echo "run-installed: make build: $(elapsed "$t") s"
for ex in rw_transfer echo; do
	run pkg-config "$work/make/$ex"
done

echo "run-installed: OK: every example built both ways and passed ($(elapsed "$t0") s)"
