#!/usr/bin/env python3
"""Fake `rvs -r N`: replays a published capture (tests/unit/checks/data/rvs).

Scenario from the environment: FAKE_RVS_OUTPUT (file to print), FAKE_RVS_EXIT (exit
code, default 0), FAKE_RVS_HANG (seconds to sleep first: the timeout case).
On test-fleet nodes (`/usr/local/bin/rvs`, built into tests/fakes/build/bin by
scripts/setup.d/40-fakes.sh), where a command over SSH has no such environment, from the
node's scenario file instead: `$FLEETMEDIC_FAKE_RVS`, else
`/var/lib/fleetmedic-test/rvs.json`, `{"output": "<the capture's text>", "exit": N,
"hang": S}`. Neither: a line on stderr and exit 1, which carries no verdict (unknown).
Standard library only.
"""

import json
import os
import sys
import time

STATE = os.environ.get("FLEETMEDIC_FAKE_RVS", "/var/lib/fleetmedic-test/rvs.json")


def scenario() -> tuple[str | None, int, float]:
    if "FAKE_RVS_OUTPUT" in os.environ:
        with open(os.environ["FAKE_RVS_OUTPUT"], encoding="utf-8") as f:
            text = f.read()
        return (
            text,
            int(os.environ.get("FAKE_RVS_EXIT", "0")),
            float(os.environ.get("FAKE_RVS_HANG", "0")),
        )
    try:
        with open(STATE, encoding="utf-8") as f:
            data = json.load(f)
    except FileNotFoundError:
        return None, 1, 0.0
    return str(data["output"]), int(data.get("exit", 0)), float(data.get("hang", 0))


if __name__ == "__main__":
    if sys.argv[1:2] != ["-r"] or len(sys.argv) != 3:
        print("fake rvs: only '-r N' is emulated", file=sys.stderr)
        sys.exit(2)
    text, code, hang = scenario()
    time.sleep(hang)
    if text is None:
        print(f"fake rvs: no scenario file {STATE}", file=sys.stderr)
    else:
        sys.stdout.write(text)
    sys.exit(code)
