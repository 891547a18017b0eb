#!/usr/bin/env python3
"""Fake `rvs -r N`: replays a published capture (tests/unit/checks/data/rvs).

Scenario from the environment: FAKE_RVS_OUTPUT (file to print), FAKE_RVS_EXIT (exit
code, default 0), FAKE_RVS_HANG (seconds to sleep first: the timeout case).
Standard library only.
"""

import os
import sys
import time

if __name__ == "__main__":
    if sys.argv[1:2] != ["-r"] or len(sys.argv) != 3:
        print("fake rvs: only '-r N' is emulated", file=sys.stderr)
        sys.exit(2)
    time.sleep(float(os.environ.get("FAKE_RVS_HANG", "0")))
    with open(os.environ["FAKE_RVS_OUTPUT"], encoding="utf-8") as f:
        sys.stdout.write(f.read())
    sys.exit(int(os.environ.get("FAKE_RVS_EXIT", "0")))
