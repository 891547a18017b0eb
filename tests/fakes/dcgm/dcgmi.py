#!/usr/bin/env python3
"""Fake `dcgmi diag -r N -j`: replays a published capture (tests/unit/checks/data/dcgm).

Scenario from the environment: FAKE_DCGMI_OUTPUT (file to print), FAKE_DCGMI_EXIT
(exit code, default 0), FAKE_DCGMI_HANG (seconds to sleep first: the timeout case).
Standard library only.
"""

import os
import sys
import time

if __name__ == "__main__":
    if sys.argv[1:2] != ["diag"] or "-j" not in sys.argv:
        print("fake dcgmi: only 'diag -r N -j' is emulated", file=sys.stderr)
        sys.exit(2)
    time.sleep(float(os.environ.get("FAKE_DCGMI_HANG", "0")))
    with open(os.environ["FAKE_DCGMI_OUTPUT"], encoding="utf-8") as f:
        sys.stdout.write(f.read())
    sys.exit(int(os.environ.get("FAKE_DCGMI_EXIT", "0")))
