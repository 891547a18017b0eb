#!/usr/bin/env python3
"""Fail a pytest run that passed by not running tests (a check in scripts/test.sh).

    check_pytest_run.py REPORT.xml [--expect N]

- every skipped test in the JUnit report must match an entry of tests/allowed-skips.txt
  (its reason is a substring of pytest's skip message); each entry says why that skip is
  legitimate. An entry whose why starts with ``desk only:`` depends on the host (a real
  GPU library, the kernel's settings) and is allowed only off CI: under ``CI=true`` (or
  ``--ci``) the same skip fails the run, so CI's machine runs the test;
- no test is expected to fail (an xfail passes whether the code works or not;
  tests/conftest.py refuses the mark, this catches ``pytest.xfail()`` calls);
- with ``--expect N`` (what ``pytest --collect-only`` finds in the whole suite): the report
  must hold N tests, so nothing was deselected (``-m``, ``-k``, ``PYTEST_ADDOPTS``) or left
  out.

One line per problem on stderr, exit 1 if there is any.
"""

from __future__ import annotations

import argparse
import os
import sys
import xml.etree.ElementTree as ET
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


def check(report: Path, expect: int | None, allowed: list[str]) -> list[str]:
    cases = list(ET.parse(report).getroot().iter("testcase"))
    problems = []
    for case in cases:
        for skipped in case.findall("skipped"):
            message = f"{skipped.get('message', '')} {skipped.text or ''}"
            if skipped.get("type") == "pytest.xfail":
                problems.append(
                    f"expected to fail (xfail), which passes either way: "
                    f"{case.get('classname')}::{case.get('name')}"
                )
                continue
            if not any(reason in message for reason in allowed):
                name = f"{case.get('classname')}::{case.get('name')}"
                problems.append(
                    f"skipped, and not on tests/allowed-skips.txt: {name}: "
                    f"{' '.join(skipped.get('message', '').split())}"
                )
    if expect is not None and len(cases) < expect:
        problems.append(
            f"{len(cases)} tests in the run, but the suite holds {expect}: "
            f"{expect - len(cases)} deselected or left out"
        )
    return problems


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("report", type=Path, help="pytest's --junitxml report")
    ap.add_argument("--expect", type=int, help="tests the whole suite holds")
    ap.add_argument(
        "--ci", action="store_true", help="desk-only skips fail too (the default under CI=true)"
    )
    args = ap.parse_args()
    ci = args.ci or os.environ.get("CI") == "true"
    problems = check(args.report, args.expect, allowed_reasons(ci=ci))
    for p in problems:
        print(f"check_pytest_run: {p}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
