#!/usr/bin/env bash
# The main job (README): install the build dependencies, build, and run ulp's main program.
# Until the target daemon (ulp-targetd) exists that program is the fabric benchmark,
# `ulp-bench fabric`; arguments are passed on to it (e.g. --quick, --json).
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install-deps.sh
cmake -G Ninja -B build
ninja -C build -j "$(nproc)"
exec build/tools/ulp-bench/ulp-bench fabric "$@"
