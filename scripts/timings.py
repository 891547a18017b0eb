#!/usr/bin/env python3
"""The suite's committed timings (tests/timings.json): refreshed from a run's recorded
durations, and the schedule they give.

    timings.py refresh [RECORD.json ...] [--junit REPORT.xml ...] [--whole] [--out FILE]
    timings.py plan [--workers N]

- ``refresh`` (``make timings``): every pytest run of scripts/test.sh records each test's
  seconds under build/test-reports/durations-*.json (pytest's ``--record-timings``); this
  folds them into the committed file: each module's seconds and test count, and the tests
  of ``NAMED_SECONDS`` or more by name. A module the records hold replaces its old entry;
  a module they lack stays, unless the records are of a whole run (scripts/test.sh with no
  arguments), which drops the modules that are gone. With no RECORD, the last run's.
  ``--junit``: pytest's JUnit reports instead (their times are setup + call + teardown
  too), e.g. from a CI run or a branch that did not record; ``--whole`` says they hold
  the whole suite.
- ``plan``: the scopes as tests/conftest.py forms them, each one's estimate, and each
  worker's seconds when N workers take them longest first (tests/scheduling.py).

The file is sorted and rounded so a refresh's diff shows what changed. One line on stderr
and exit 2 when a record is missing or unreadable.
"""

from __future__ import annotations

import argparse
import glob
import json
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests import scheduling  # noqa: E402  (the tree's root on the path first)

RECORDS = ROOT / "build" / "test-reports"
RUN_KEYS = ("started", "wall_seconds", "workers", "cpus", "load_start", "load_end", "whole")
NAMED_SECONDS = 2.0  # a test this slow is kept by name; faster ones share their module's rest
ABOUT = (
    "Per-module and slow-test seconds of the runs below (make timings; scripts/timings.py; "
    "'whole': the whole suite): tests/scheduling.py orders pytest's work longest first with them."
)


def read_records(paths: list[Path]) -> tuple[dict[str, float], list[dict]]:
    seconds: dict[str, float] = {}
    runs = []
    for path in paths:
        try:
            data = json.loads(path.read_text())
            tests = {str(k): float(v) for k, v in data["tests"].items()}
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            raise SystemExit(f"timings: {path}: not a recorded run ({exc})") from None
        seconds.update(tests)
        runs.append(data.get("run", {}))
    return seconds, runs


def read_junit(paths: list[Path], whole: bool) -> tuple[dict[str, float], list[dict]]:
    """Per-test seconds from JUnit reports; a test's node id from its ``classname`` (the
    module's dotted path, then any classes) and ``name``. Each report's run: its start and
    seconds as its ``testsuite`` gives them."""
    import xml.etree.ElementTree as ET

    seconds: dict[str, float] = {}
    runs: list[dict] = []
    for path in paths:
        try:
            root = ET.parse(path).getroot()
        except (OSError, ET.ParseError) as exc:
            raise SystemExit(f"timings: {path}: not a JUnit report ({exc})") from None
        cases = list(root.iter("testcase"))
        for suite in root.iter("testsuite"):
            run: dict = {"whole": whole}
            if suite.get("timestamp"):
                run["started"] = suite.get("timestamp", "")[:19] + "Z"
            if suite.get("time"):
                run["wall_seconds"] = float(suite.get("time", 0))
            runs.append(run)
        for case in cases:
            parts = (case.get("classname") or "").split(".")
            for i in range(len(parts), 0, -1):
                module = "/".join(parts[:i]) + ".py"
                if (ROOT / module).is_file():
                    nodeid = "::".join([module, *parts[i:], case.get("name") or ""])
                    seconds[nodeid] = seconds.get(nodeid, 0.0) + float(case.get("time") or 0)
                    break
    return seconds, runs or [{"whole": whole}]


def refresh(old: dict, seconds: dict[str, float], runs: list[dict]) -> dict:
    """The new committed document from the old one and a run's per-test seconds."""
    whole = bool(runs) and all(r.get("whole") for r in runs)
    modules: dict[str, list[float]] = defaultdict(lambda: [0.0, 0])
    for nodeid, s in seconds.items():
        m = modules[scheduling.module_of(nodeid)]
        m[0] += s
        m[1] += 1
    old_modules = {} if whole else dict(old.get("modules", {}))
    old_tests = {} if whole else dict(old.get("tests", {}))
    for module in modules:  # what this run saw replaces what was kept
        old_modules.pop(module, None)
        for nodeid in [t for t in old_tests if scheduling.module_of(t) == module]:
            del old_tests[nodeid]
    for module, (s, n) in modules.items():
        old_modules[module] = {"seconds": round(s, 1), "tests": int(n)}
    for nodeid, s in seconds.items():
        if s >= NAMED_SECONDS:
            old_tests[nodeid] = round(s, 1)
    return {
        "about": ABOUT,
        "runs": [{k: r[k] for k in RUN_KEYS if k in r} for r in runs] or old.get("runs", []),
        "modules": dict(sorted(old_modules.items())),
        "tests": dict(sorted(old_tests.items())),
    }


def dump(doc: dict) -> str:
    """One module or test a line, so a refresh's diff reads line by line."""
    lines = ["{", f'"about": {json.dumps(doc["about"])},', f'"runs": {json.dumps(doc["runs"])},']
    for key in ("modules", "tests"):
        entries = [f"{json.dumps(k)}: {json.dumps(v)}" for k, v in doc[key].items()]
        body = ",\n".join(entries)
        lines.append(f'"{key}": {{\n{body}\n}}' + ("," if key == "modules" else ""))
    lines.append("}")
    return "\n".join(lines) + "\n"


def cmd_refresh(args: argparse.Namespace) -> int:
    paths = args.records or [Path(p) for p in sorted(glob.glob(str(RECORDS / "durations-*.json")))]
    if not paths and not args.junit:
        print(f"timings: no recorded run under {RECORDS} (run make test first)", file=sys.stderr)
        return 2
    try:
        if args.junit:
            seconds, runs = read_junit(args.junit, args.whole)
        else:
            seconds, runs = read_records(paths)
    except SystemExit as exc:
        print(exc, file=sys.stderr)
        return 2
    try:
        old = json.loads(args.out.read_text())
    except (OSError, ValueError):
        old = {}
    doc = refresh(old, seconds, runs)
    args.out.write_text(dump(doc))
    whole = ", a whole run" if all(r.get("whole") for r in runs) else ""
    print(
        f"timings: {args.out}: {len(doc['modules'])} modules, {len(doc['tests'])} tests of"
        f" {NAMED_SECONDS:g} s or more (from {len(seconds)} tests{whole})"
    )
    return 0


def cmd_plan(args: argparse.Namespace) -> int:
    from tests import conftest

    timings = scheduling.Timings.load(args.timings)
    per_scope: dict[str, float] = defaultdict(float)
    for module, (seconds, _) in timings.modules.items():
        per_scope[conftest.xdist_scope(module)] += seconds
    loads = scheduling.simulate(per_scope, args.workers)
    top = sorted(per_scope.items(), key=lambda kv: -kv[1])
    print(f"{len(per_scope)} scopes, {sum(per_scope.values()):.0f} s in all; longest first:")
    for scope, s in top[: args.top]:
        print(f"  {s:8.1f} s  {scope}")
    print(f"{args.workers} workers, longest first: " + ", ".join(f"{x:.0f} s" for x in loads))
    print(f"makespan {max(loads):.0f} s")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("refresh", help="fold recorded durations into the committed file")
    r.add_argument(
        "records", nargs="*", type=Path, help="durations-*.json (default: the last run's)"
    )
    r.add_argument("--junit", nargs="+", type=Path, help="JUnit reports instead of records")
    r.add_argument("--whole", action="store_true", help="the JUnit reports hold the whole suite")
    r.add_argument("--out", type=Path, default=scheduling.TIMINGS)
    p = sub.add_parser("plan", help="the schedule the committed timings give")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--top", type=int, default=25, help="scopes to list")
    p.add_argument("--timings", type=Path, default=scheduling.TIMINGS)
    args = ap.parse_args()
    return cmd_refresh(args) if args.cmd == "refresh" else cmd_plan(args)


if __name__ == "__main__":
    sys.exit(main())
