#!/usr/bin/env python3
# tests/iser/cu_results.py LOG - per-test results of an iscsi-test-cu run.
#
# CUnit's own summary counts a test that skipped itself as passed (iscsi-test-cu prints
# "[SKIPPED] reason" and then "passed"), so the log is read test by test: a test is
# failed if CUnit says FAILED, skipped if it printed [SKIPPED] and did not fail, passed
# otherwise. Prints one line per failed or skipped test with its reason, then the counts
# ("cu: passed P failed F skipped S of N"). Exit status 0.
import re
import sys
from collections import OrderedDict

results = OrderedDict()  # "Suite.Test" -> [state, reason]
suite = None
current = None
for line in open(sys.argv[1], errors="replace"):
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

counts = {"pass": 0, "fail": 0, "skip": 0}
for name, (state, reason) in results.items():
    counts[state] += 1
    if state != "pass":
        print(f"cu: {state.upper():4s} {name}: {reason}")
print(f"cu: passed {counts['pass']} failed {counts['fail']} skipped {counts['skip']} "
      f"of {len(results)}")
