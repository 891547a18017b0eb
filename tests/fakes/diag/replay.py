#!/usr/bin/env python3
"""Fake vendor diagnostics that replay published captures: `dcgmi diag -r N -j`
(tests/unit/checks/data/dcgm) and `rvs -r N` (tests/unit/checks/data/rvs). Which tool it
plays is the name it runs as (`bin/dcgmi`, `bin/rvs`), or FAKE_DIAG_TOOL.

Scenario from the environment: FAKE_<TOOL>_OUTPUT (file to print), FAKE_<TOOL>_EXIT
(exit code, default 0), FAKE_<TOOL>_HANG (seconds to sleep first: the timeout case), with
<TOOL> DCGMI or RVS. On test-fleet nodes (`/usr/local/bin/<tool>`, built into
tests/fakes/build/bin by scripts/setup.d/40-fakes.sh), where a command over SSH has no
such environment, from the node's scenario file instead: `$FLEETMEDIC_FAKE_<TOOL>`, else
`/var/lib/fleetmedic-test/<tool>.json`, `{"output": "<the capture's text>", "exit": N,
"hang": S}`. Neither: dcgmi gives the real tool's answer when no host engine runs (exit
255); rvs a line on stderr and exit 1, which carries no verdict (unknown).
Every run that gets past the usage check appends its arguments as one JSON line to
`$FLEETMEDIC_FAKE_<TOOL>_LOG`, else `/var/lib/fleetmedic-test/<tool>.log` when that directory
exists (a test-fleet node), so a test can tell how often, and at which level, it ran.
Standard library only.
"""

import json
import os
import sys
import time

NO_ENGINE = (
    "Error: unable to establish a connection to the specified host: localhost\n"
    "Error: Unable to connect to host engine. Host engine connection invalid/disconnected.\n"
)
# tool: (the usage it emulates, does argv match it, (stderr, exit) with no scenario)
TOOLS = {
    "dcgmi": ("diag -r N -j", lambda a: a[:1] == ["diag"] and "-j" in a, (NO_ENGINE, 255)),
    "rvs": ("-r N", lambda a: a[:1] == ["-r"] and len(a) == 2, ("fake rvs: no scenario\n", 1)),
}


def log_call(tool: str, argv: list[str]) -> None:
    path = os.environ.get(
        f"FLEETMEDIC_FAKE_{tool.upper()}_LOG", f"/var/lib/fleetmedic-test/{tool}.log"
    )
    if os.path.isdir(os.path.dirname(path) or "."):
        with open(path, "a", encoding="utf-8") as f:
            f.write(json.dumps({"argv": argv, "at": time.time()}) + "\n")


def scenario(tool: str) -> tuple[str | None, int, float]:
    env = f"FAKE_{tool.upper()}_"
    if env + "OUTPUT" in os.environ:
        with open(os.environ[env + "OUTPUT"], encoding="utf-8") as f:
            text = f.read()
        return (
            text,
            int(os.environ.get(env + "EXIT", "0")),
            float(os.environ.get(env + "HANG", "0")),
        )
    default = f"/var/lib/fleetmedic-test/{tool}.json"
    try:
        with open(
            os.environ.get(f"FLEETMEDIC_FAKE_{tool.upper()}", default), encoding="utf-8"
        ) as f:
            data = json.load(f)
    except FileNotFoundError:
        return None, TOOLS[tool][2][1], 0.0
    return str(data["output"]), int(data.get("exit", 0)), float(data.get("hang", 0))


if __name__ == "__main__":
    tool = os.environ.get("FAKE_DIAG_TOOL") or os.path.basename(sys.argv[0])
    if tool not in TOOLS:
        print(f"fake diagnostics: run as dcgmi or rvs, not {tool!r}", file=sys.stderr)
        sys.exit(2)
    usage, accepts, (missing, _code) = TOOLS[tool]
    if not accepts(sys.argv[1:]):
        print(f"fake {tool}: only '{usage}' is emulated", file=sys.stderr)
        sys.exit(2)
    log_call(tool, sys.argv[1:])
    text, code, hang = scenario(tool)
    time.sleep(hang)
    if text is None:
        sys.stderr.write(missing)
    else:
        sys.stdout.write(text)
    sys.exit(code)
