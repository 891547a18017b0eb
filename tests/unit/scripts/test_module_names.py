"""pytest imports test files by basename (rootdir-relative, no packages), so two test files
with one name anywhere under tests/ stop the whole run at collection ("import file
mismatch"). Caught here, in the unit stage, with the names."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

TESTS = Path(__file__).resolve().parents[2]


def test_every_test_module_has_a_name_of_its_own():
    names = Counter(p.name for p in TESTS.rglob("test_*.py") if "build" not in p.parts)
    assert [n for n, c in names.items() if c > 1] == []
