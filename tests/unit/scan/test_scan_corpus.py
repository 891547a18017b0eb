"""The development corpus (tests/data/corpus) classifies as expected, line by line and
report by report, and the issue's four figures meet their targets."""

from __future__ import annotations

import io

import pytest
from corpus import TARGETS, figures, lines, reports, scan_line, scan_report
from scan_helpers import assert_valid

from fleetmedic.scan import Scanner

CASES = lines()


def _id(case: dict) -> str:
    return f"{case['family']}:{case['line'][:60]}"


def test_every_case_names_its_source_and_family():
    for case in CASES:
        assert case["source"] and case["family"] and case["vendor"] in ("nvidia", "amd")
        assert "expect" in case


@pytest.mark.parametrize("case", CASES, ids=[_id(c) for c in CASES])
def test_corpus_line(case):
    found = scan_line(case["line"])
    if case["expect"] is None:
        assert found == []
        return
    assert len(found) == 1
    assert_valid(found[0])
    for field, value in case["expect"].items():
        assert getattr(found[0], field) == value, field


@pytest.mark.parametrize("report", reports(), ids=[r["name"] for r in reports()])
def test_multi_line_report_is_one_finding(report):
    got = scan_report(report)
    assert [(f.line, f.pci, f.action) for f in got] == [
        (f["line"], f["pci"], f["action"]) for f in report["findings"]
    ]
    for found, want in zip(got, report["findings"], strict=True):
        if "code" in want:
            assert found.code == want["code"]
    # The bulk path (pre-filter over a byte stream) agrees with the line path.
    data = ("\n".join(report["lines"]) + "\n").encode()
    assert list(Scanner(dedup=False).scan_binary(io.BytesIO(data))) == got


def test_figures_meet_the_issue_targets():
    figs = figures()
    assert figs["code_pci"].ratio >= TARGETS["code_pci"], figs["code_pci"].misses
    assert figs["bucket"].ratio >= TARGETS["bucket"], figs["bucket"].misses
    assert figs["benign"].hits <= TARGETS["benign"]
    assert figs["amd"].ratio >= TARGETS["amd"], figs["amd"].misses
    assert figs["reports"].hits == figs["reports"].total, figs["reports"].misses
