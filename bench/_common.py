"""What every benchmark in bench/ shares: its command line's ``--smoke`` and its verdict.

The convention (bench/README.md):

- every ``bench/<name>.py`` is a benchmark, run as ``.venv/bin/python bench/<name>.py``;
  shared code lives in ``bench/_*.py`` and is not run;
- each prints its figure as a ratio against a baseline measured in the same run;
- each takes ``--smoke``: tiny sizes, one trial, so CI (scripts/test.sh, stage "bench
  smoke") proves it still runs; targets are printed but not enforced then;
- run in full, each exits 1 when it misses a target (and 0 when it meets them all).
"""

from __future__ import annotations

import argparse
from collections.abc import Iterable


def parser(doc: str) -> argparse.ArgumentParser:
    """An argument parser with the shared ``--smoke`` flag; the description is the
    docstring's first paragraph."""
    ap = argparse.ArgumentParser(
        description=doc.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--smoke",
        action="store_true",
        help="tiny sizes and one trial, to prove the bench runs (CI); targets are not enforced",
    )
    return ap


def verdict(targets: Iterable[tuple[str, bool]], smoke: bool) -> int:
    """Print each target as met or MISSED; the exit status: 1 if one is missed in a full run."""
    missed = []
    for what, met in targets:
        print(f"  target {what}: {'met' if met else 'MISSED'}")
        if not met:
            missed.append(what)
    if smoke:
        print("  smoke run: tiny sizes, targets not enforced")
        return 0
    return 1 if missed else 0
