#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
# tests/doc/check_doc.py - run doxygen over the library's headers (docs/Doxyfile) and fail
# on any warning in a stable header (docs/library.md, "What is stable"): an undocumented
# public class, function or member (WARN_IF_UNDOCUMENTED), or a comment Doxygen cannot
# read. Warnings in the other installed headers are counted and shown, not judged.
#
#   check_doc.py --doxygen /usr/bin/doxygen --src SOURCE_DIR --out DIR [--version 0.1]
#
# Exit status 0: clean; 1: warnings in stable headers (listed); 77: no doxygen (skip).
import argparse
import collections
import os
import shutil
import subprocess
import sys
import time

# The stable headers, as docs/library.md lists them. A header added there is added here.
STABLE = [
    "core/verbs.h",
    "core/device.h",
    "core/cm.h",
    "core/addr.h",
    "core/registry.h",
    "core/drain.h",
    "core/dma_mem.h",
    "core/mem_map.h",
    "core/buf_pool.h",
    "core/dma_heap.h",
    "providers/soft/soft.h",
    "providers/verbs/verbs.h",
    "mr_pool/mr_pool.h",
    "cq_poll/cq_poll.h",
    "rw/rw.h",
    "rw/sg_table.h",
]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--doxygen", default=shutil.which("doxygen") or "")
    ap.add_argument("--src", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--version", default="0")
    a = ap.parse_args()
    if not a.doxygen or not os.access(a.doxygen, os.X_OK):
        print("doxygen is not installed: skipped (apt-get install doxygen)")
        return 77
    src = os.path.realpath(a.src)
    for h in STABLE:
        if not os.path.exists(os.path.join(src, h)):
            print(f"{h}: listed as stable but not in the tree (update STABLE)")
            return 1
    shutil.rmtree(a.out, ignore_errors=True)
    os.makedirs(a.out)
    env = dict(os.environ, ULP_SRC_DIR=src, ULP_DOC_DIR=a.out, ULP_VERSION=a.version)
    t0 = time.monotonic()
    r = subprocess.run([a.doxygen, os.path.join(src, "docs", "Doxyfile")], cwd=src, env=env,
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    took = time.monotonic() - t0
    if r.returncode != 0:
        print(r.stdout)
        print(f"doxygen failed with status {r.returncode}")
        return 1
    log = os.path.join(a.out, "warnings.log")
    if not os.path.exists(os.path.join(a.out, "html", "index.html")):
        print("doxygen wrote no html/index.html")
        return 1
    lines = open(log, encoding="utf-8").read().splitlines() if os.path.exists(log) else []

    # A warning names its file first ("path:line: text"); a multi-line one continues on
    # lines of its own, which belong to the warning above them.
    stable, other = [], collections.Counter()
    current = None
    for line in lines:
        path = line.split(":", 1)[0]
        if path.startswith(src + "/"):
            rel = path[len(src) + 1 :]
            current = rel in STABLE
            if current:
                stable.append(line.replace(src + "/", ""))
            else:
                other[rel] += 1
        elif current:
            stable.append("    " + line)
    stable = list(dict.fromkeys(stable))  # namespace members are reported twice

    print(f"doxygen: {took:.1f} s, {len(lines)} warning lines in {log}")
    if other:
        print(f"not judged (not stable): {sum(other.values())} warnings in {len(other)} headers")
        for h, n in sorted(other.items()):
            print(f"  {h}: {n}")
    if stable:
        print(f"FAIL: {len(stable)} warnings in stable headers (docs/library.md); give each "
              "public name a comment that says what it is:")
        for s in stable:
            print("  " + s)
        return 1
    print(f"OK: the {len(STABLE)} stable headers are fully documented")
    return 0


if __name__ == "__main__":
    sys.exit(main())
