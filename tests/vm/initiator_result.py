#!/usr/bin/env python3
# tests/vm/initiator_result.py TAG NAME TRANSPORT FILE - checks one ulp-initiator --json
# result of a VM test against a kernel target (iser_lio.sh, srp_lio.sh): the run succeeded,
# did I/O over TRANSPORT, had no errors or verify mismatches, and logged out. Prints one
# line with the figures (for the record: TCG figures compare stacks within one VM run);
# exit 1 with the reason otherwise.
import json
import sys

tag, name, transport, path = sys.argv[1:5]
try:
    j = json.load(open(path))
except (OSError, ValueError) as e:
    print(f"{tag}: {name}: no JSON result ({e})")
    sys.exit(1)
bad = (not j["ok"] or j["errors"] or j["verify_errors"] or j["fatal"]
       or not j["logged_out"] or j["transport"] != transport or j["ios"] == 0)
if bad:
    print(f"{tag}: {name}: ok {j['ok']} ios {j['ios']} errors {j['errors']} verify_errors "
          f"{j['verify_errors']} logged_out {j['logged_out']} transport {j['transport']} "
          f"fatal {j['fatal']!r}")
    sys.exit(1)
v = j.get("verify_pass")
extra = f", verify pass {v['ios']} reads" if v else ""
ver = f", {j['verified_blocks']} blocks verified" if j["verified_blocks"] else ""
print(f"{tag}: {name}: {j['ios']} I/Os, {j['iops']:.0f} IOPS, {j['mb_per_s']:.2f} MB/s"
      f"{ver}{extra}, 0 errors")
