#!/usr/bin/env python3
"""Fake `dcgmi diag -r N -j`: replays a published capture (tests/unit/checks/data/dcgm).

Scenario from the environment: FAKE_DCGMI_OUTPUT (file to print), FAKE_DCGMI_EXIT
(exit code, default 0), FAKE_DCGMI_HANG (seconds to sleep first: the timeout case).
On test-fleet nodes (`/usr/local/bin/dcgmi`, built into tests/fakes/build/bin by
scripts/setup.d/40-fakes.sh), where a command over SSH has no such environment, from the
node's scenario file instead: `$FLEETMEDIC_FAKE_DCGMI`, else
`/var/lib/fleetmedic-test/dcgmi.json`, `{"output": "<the capture's text>", "exit": N,
"hang": S}`. Neither: the real tool's answer when no host engine runs (exit 255).
Standard library only.
"""

import json
import os
import sys
import time

STATE = os.environ.get("FLEETMEDIC_FAKE_DCGMI", "/var/lib/fleetmedic-test/dcgmi.json")
NO_ENGINE = (
    "Error: unable to establish a connection to the specified host: localhost\n"
    "Error: Unable to connect to host engine. Host engine connection invalid/disconnected.\n"
)


def scenario() -> tuple[str | None, int, float]:
    if "FAKE_DCGMI_OUTPUT" in os.environ:
        with open(os.environ["FAKE_DCGMI_OUTPUT"], encoding="utf-8") as f:
            text = f.read()
        return (
            text,
            int(os.environ.get("FAKE_DCGMI_EXIT", "0")),
            float(os.environ.get("FAKE_DCGMI_HANG", "0")),
        )
    try:
        with open(STATE, encoding="utf-8") as f:
            data = json.load(f)
    except FileNotFoundError:
        return None, 255, 0.0
    return str(data["output"]), int(data.get("exit", 0)), float(data.get("hang", 0))


if __name__ == "__main__":
    if sys.argv[1:2] != ["diag"] or "-j" not in sys.argv:
        print("fake dcgmi: only 'diag -r N -j' is emulated", file=sys.stderr)
        sys.exit(2)
    text, code, hang = scenario()
    time.sleep(hang)
    if text is None:
        sys.stderr.write(NO_ENGINE)
    else:
        sys.stdout.write(text)
    sys.exit(code)
