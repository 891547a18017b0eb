#!/usr/bin/env python3
"""Fail a pytest run that passed by not running tests (a check in scripts/test.sh).

    check_pytest_run.py REPORT.xml [REPORT.xml ...] [--expect N]

- every skipped test in the JUnit report must match an entry of tests/allowed-skips.txt
  (its reason is a substring of pytest's skip message); each entry says why that skip is
  legitimate. An entry whose why starts with ``desk only:`` depends on the host (a real
  GPU library, the kernel's settings) and is allowed only off CI: under ``CI=true`` (or
  ``--ci``) the same skip fails the run, so CI's machine runs the test;
- no test is expected to fail (an xfail passes whether the code works or not;
  tests/conftest.py refuses the mark, this catches ``pytest.xfail()`` calls);
- with ``--expect N`` (what ``pytest --collect-only`` finds in the whole suite): the reports
  together must hold N tests, so nothing was deselected (``-m``, ``-k``, ``PYTEST_ADDOPTS``)
  or left out. scripts/test.sh runs the suite in lanes (unit tests beside the builds,
  integration tests after them), a report each; a test in two reports counts once and is
  named, since the lanes are meant not to overlap.

One line per problem on stderr, exit 1 if there is any.
"""

from __future__ import annotations

import argparse
import os
import sys
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ALLOWED = ROOT / "tests" / "allowed-skips.txt"


DESK_ONLY = "desk only:"


def allowed_reasons(path: Path = ALLOWED, ci: bool = False) -> list[str]:
    """The entries' reasons (under ``ci``, without the ``desk only:`` ones)."""
    reasons = []
    for n, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        reason, sep, why = line.partition("#")
        if not sep or not why.strip() or not reason.strip():
            raise SystemExit(f"{path}:{n}: an entry is 'REASON  # why it is allowed'")
        if not (ci and why.strip().startswith(DESK_ONLY)):
            reasons.append(reason.strip())
    return reasons


def check(reports: Path | Sequence[Path], expect: int | None, allowed: list[str]) -> list[str]:
    if isinstance(reports, Path):
        reports = [reports]
    problems = []
    seen: dict[str, Path] = {}
    for report in reports:
        for case in ET.parse(report).getroot().iter("testcase"):
            name = f"{case.get('classname')}::{case.get('name')}"
            if name in seen:
                problems.append(f"in two reports ({seen[name].name}, {report.name}): {name}")
                continue
            seen[name] = report
            problems += skip_problems(case, name, allowed)
    if expect is not None and len(seen) < expect:
        problems.append(
            f"{len(seen)} tests in the run, but the suite holds {expect}: "
            f"{expect - len(seen)} deselected or left out"
        )
    return problems


def skip_problems(case: ET.Element, name: str, allowed: list[str]) -> list[str]:
    problems = []
    for skipped in case.findall("skipped"):
        message = f"{skipped.get('message', '')} {skipped.text or ''}"
        if skipped.get("type") == "pytest.xfail":
            problems.append(f"expected to fail (xfail), which passes either way: {name}")
            continue
        if not any(reason in message for reason in allowed):
            problems.append(
                f"skipped, and not on tests/allowed-skips.txt: {name}: "
                f"{' '.join(skipped.get('message', '').split())}"
            )
    return problems


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("reports", nargs="+", type=Path, help="pytest's --junitxml reports")
    ap.add_argument("--expect", type=int, help="tests the whole suite holds")
    ap.add_argument(
        "--ci", action="store_true", help="desk-only skips fail too (the default under CI=true)"
    )
    args = ap.parse_args()
    ci = args.ci or os.environ.get("CI") == "true"
    problems = check(args.reports, args.expect, allowed_reasons(ci=ci))
    for p in problems:
        print(f"check_pytest_run: {p}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
