#!/usr/bin/env bash
# The main job (README): install the build dependencies, build, and run ulp's main program.
# Until the target daemon (ulp-targetd) exists that is the benchmark suite on the soft
# provider, each figure beside a baseline measured in the same run:
#   ulp-bench fabric   RDMA WRITE/READ/SEND bandwidth and message rate, beside memcpy
#   ulp-bench rw       rdma_rw contexts (SGE and MR paths), beside a raw verbs loop
#   ulp-bench cq       completion dispatch per poll context, beside a raw poll loop
#   ulp-bench mrpool   MR pool get/put, beside a mutex + vector
# Arguments are passed on to each (e.g. --quick, --json).
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install-deps.sh
cmake -G Ninja -B build
ninja -C build -j "$(nproc)"
for b in fabric rw cq mrpool; do
	build/tools/ulp-bench/ulp-bench "$b" "$@"
	echo
done
