#!/usr/bin/env python3
# tests/iscsi/cu_results.py - per-test results of iscsi-test-cu runs.
#
#   cu_results.py [--known FILE VERSION TRANSPORT] LOG...   the summary
#   cu_results.py --tsv LOG                                 every test: NAME<TAB>STATE<TAB>REASON
#   cu_results.py --skips FILE VERSION TRANSPORT            the tests FILE says not to run
#
# CUnit's own summary counts a test that skipped itself as passed (iscsi-test-cu prints
# "[SKIPPED] reason" and then "passed"), so each log is read test by test: a test is failed
# if CUnit says FAILED, skipped if it printed [SKIPPED] and did not fail, passed otherwise.
#
# The summary prints one line per failed or skipped test with its reason, then the counts
# ("cu: passed P failed F skipped S of N"). With --known, the tests FILE
# (tests/iscsi/libiscsi_known.txt) lists as failing for this client VERSION (1.19, 1.20)
# and TRANSPORT (tcp, iser) are printed as "cu: KNOWN" with the file's reason and counted
# apart ("known K"); one of them that passed is "cu: XPASS" (the entry must be looked at
# again). Callers fail the run on any "cu: FAIL" or "cu: XPASS" line. Exit status 0.
import re
import sys
from collections import OrderedDict


def parse(path):
    results = OrderedDict()  # "Suite.Test" -> [state, reason]
    suite = None
    current = None
    for line in open(path, errors="replace"):
        m = re.match(r"^Suite: (\S+)", line)
        if m:
            suite = m.group(1)
            current = None
            continue
        m = re.match(r"^\s+Test: (\S+) \.\.\.(.*)$", line)
        if m:
            current = f"{suite}.{m.group(1)}"
            results[current] = ["pass", ""]
            line = m.group(2)
        if current is None:
            continue
        text = line.strip()
        state = results[current]
        if "[SKIPPED]" in text and state[0] == "pass":
            state[0] = "skip"
            state[1] = text[text.index("[SKIPPED]"):]
        # CUnit marks a failed test with a line (or line end) "FAILED"; iscsi-test-cu's own
        # "[FAILED] ..." messages are details, kept as the reason.
        if text.startswith("[FAILED]") and not state[1].startswith("[FAILED]"):
            state[1] = text
        if text == "FAILED" or text.endswith("...FAILED") or re.match(r"^\d+\. \S+:\d+", text):
            state[0] = "fail"
    return results


def known(path, version, transport):
    """FILE's entries for this client and transport: {"Suite.Test": (kind, reason)}, the
    family prefix dropped (the logs name tests Suite.Test)."""
    out = {}
    for line in open(path):
        if not line.strip() or line.startswith("#"):
            continue
        f = line.rstrip("\n").split("\t")
        if len(f) != 5:
            sys.exit(f"cu_results: {path}: bad line: {line.strip()}")
        test, versions, transports, kind, reason = f
        if kind not in ("skip", "fail"):
            sys.exit(f"cu_results: {path}: bad kind {kind!r}")
        if version in versions.split(",") and transport in transports.split(","):
            out[test] = (kind, reason)
    return out


def main(argv):
    if argv[0] == "--tsv":
        for name, (state, reason) in parse(argv[1]).items():
            print(f"{name}\t{state}\t{reason}")
        return
    if argv[0] == "--skips":
        for test, (kind, _) in known(argv[1], argv[2], argv[3]).items():
            if kind == "skip":
                print(test)
        return
    expected = {}
    if argv[0] == "--known":
        k = known(argv[1], argv[2], argv[3])
        expected = {t.split(".", 1)[1]: r for t, (kind, r) in k.items() if kind == "fail"}
        argv = argv[4:]
    results = OrderedDict()
    for path in argv:
        results.update(parse(path))
    counts = {"pass": 0, "fail": 0, "skip": 0, "known": 0, "xpass": 0}
    for name, (state, reason) in results.items():
        if name in expected and state == "fail":
            counts["known"] += 1
            print(f"cu: KNOWN {name}: {reason} (libiscsi_known.txt: {expected[name]})")
            continue
        if name in expected and state == "pass":
            counts["xpass"] += 1
            print(f"cu: XPASS {name}: listed as the client's failure, and passed: "
                  f"look at libiscsi_known.txt again")
            continue
        counts[state] += 1
        if state != "pass":
            print(f"cu: {state.upper():4s} {name}: {reason}")
    extra = f" known {counts['known']}" if expected else ""
    print(f"cu: passed {counts['pass']} failed {counts['fail']} skipped {counts['skip']}"
          f"{extra} of {len(results)}")


main(sys.argv[1:])
