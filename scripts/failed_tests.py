#!/usr/bin/env python3
"""The tests that failed, one line each, from pytest's JUnit reports (scripts/test.sh).

    failed_tests.py REPORT.xml [REPORT.xml ...]

CI keeps only the tail of a run's output, and pytest's own summary sits far above the
time table: scripts/test.sh prints these lines just before ``FAILED stages``, so the
tail names what failed. Each line: ``failed|error  TEST  first line of the message``
(cut to 200 characters). At most 40 lines, then how many more. Then the rest of the
first failure's message (at most 14 lines): what its first line had past the cut, then
its next lines. A test that timed out says there what it saw (a job's state, a daemon's
last log lines, often at the end of one long line), and a flake seen once in CI is
otherwise a name and no clue. A report that cannot be read is named; the exit status is
0 either way (the stage's own status says it failed).
"""

from __future__ import annotations

import argparse
import sys
import xml.etree.ElementTree as ET
from collections.abc import Iterator, Sequence
from pathlib import Path

SHOWN = 40
WIDTH = 200
DETAIL = 14  # lines of the first failure's message after its first


def failures(reports: Sequence[Path]) -> Iterator[tuple[str, list[str]]]:
    """Each failure's line, and the rest of its message's lines."""
    for report in reports:
        try:
            root = ET.parse(report).getroot()
        except (OSError, ET.ParseError) as e:
            yield f"unreadable report {report}: {e}", []
            continue
        for case in root.iter("testcase"):
            for kind in ("failure", "error"):
                for bad in case.findall(kind):
                    message = (bad.get("message") or "").strip().splitlines() or [""]
                    name = f"{case.get('classname')}::{case.get('name')}"
                    kind_word = "failed" if kind == "failure" else "error"
                    rest = [line.strip() for line in message[1:] if line.strip()]  # unindented
                    yield f"{kind_word:6}  {name}  {message[0]}", rest


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("reports", nargs="*", type=Path, help="pytest's --junitxml reports")
    args = ap.parse_args(argv)
    found = list(failures([r for r in args.reports if r.exists()]))
    if found:
        print(f"== failed tests ({len(found)})")
    for line, _ in found[:SHOWN]:
        print(f"   {line[:WIDTH]}")
    if len(found) > SHOWN:
        print(f"   ... and {len(found) - SHOWN} more (build/test-reports/pytest-*.xml)")
    detail: list[str] = []  # (what the heading below says: the first's)
    if found:
        first, rest = found[0]
        past_cut = first[WIDTH:]
        detail = [past_cut[i : i + WIDTH - 3] for i in range(0, len(past_cut), WIDTH - 3)]
        detail += rest
    if detail:
        print("== the first failure's message goes on")
        for line in detail[:DETAIL]:
            print(f"   {line}"[:WIDTH])
    return 0


if __name__ == "__main__":
    sys.exit(main())
