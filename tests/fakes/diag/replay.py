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

Every run is logged, so a test can assert what the tool was asked for, not only what
fleetmedic recorded: one JSON line appended to ``$FAKE_DIAG_LOG``, else (on a test-fleet
node, where that directory exists) ``/var/lib/fleetmedic-test/diag-calls.jsonl``, the host
side being ``node.state_dir / "diag-calls.jsonl"``:
``{"tool": "dcgmi", "argv": ["diag", "-r", "2", "-j"], "level": 2}`` (``level`` null
when the arguments were refused). One log, both tools: :func:`calls` reads it.
Arguments are checked as the real tools check them: dcgmi diag's level is 1-4, rvs's 1-5.
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
# tool: (the usage it emulates, its level from argv or None, (stderr, exit) with no scenario)
LOG = "/var/lib/fleetmedic-test/diag-calls.jsonl"


def _level(a: list[str], i: int, top: int) -> int | None:
    n = a[i] if len(a) > i else ""
    return int(n) if n.isdigit() and 1 <= int(n) <= top else None


TOOLS = {
    "dcgmi": (
        "diag -r N -j (N 1-4)",
        lambda a: _level(a, 2, 4) if a[:2] == ["diag", "-r"] and a[3:] == ["-j"] else None,
        (NO_ENGINE, 255),
    ),
    "rvs": (
        "-r N (N 1-5)",
        lambda a: _level(a, 1, 5) if a[:1] == ["-r"] and len(a) == 2 else None,
        ("fake rvs: no scenario\n", 1),
    ),
}


def log_call(tool: str, argv: list[str], level: int | None) -> None:
    """Append this run to the invocation log (see the module's docstring)."""
    path = os.environ.get("FAKE_DIAG_LOG") or (LOG if os.path.isdir(os.path.dirname(LOG)) else "")
    if path:
        with open(path, "a", encoding="utf-8") as f:
            f.write(json.dumps({"tool": tool, "argv": argv, "level": level}) + "\n")


def calls(path: str | os.PathLike[str]) -> list[dict]:
    """The runs logged in ``path``, oldest first ([] when none was)."""
    try:
        with open(path, encoding="utf-8") as f:
            return [json.loads(line) for line in f if line.strip()]
    except FileNotFoundError:
        return []


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
    usage, level_of, (missing, _code) = TOOLS[tool]
    level = level_of(sys.argv[1:])
    log_call(tool, sys.argv[1:], level)
    if level is None:
        print(f"fake {tool}: only '{usage}' is emulated, not {sys.argv[1:]}", file=sys.stderr)
        sys.exit(2)
    text, code, hang = scenario(tool)
    time.sleep(hang)
    if text is None:
        sys.stderr.write(missing)
    else:
        sys.stdout.write(text)
    sys.exit(code)
