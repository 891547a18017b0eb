"""Every published line in data/published_lines.yaml classifies as expected, on both scan paths."""

from __future__ import annotations

import io

import pytest
from scan_helpers import assert_valid, case_id, published_cases

from fleetmedic.scan import Scanner

CASES = published_cases()


@pytest.mark.parametrize("case", CASES, ids=[case_id(i, c) for i, c in enumerate(CASES)])
def test_published_line(case):
    assert case.get("source"), "every test line names where it was published"
    assert case.get("format")
    findings = list(Scanner(dedup=False).scan([case["line"]]))
    if case["expect"] is None:
        assert findings == []
        return
    assert len(findings) == 1
    finding = findings[0]
    assert_valid(finding)
    for field, expected in case["expect"].items():
        assert getattr(finding, field) == expected, field


@pytest.mark.parametrize("case", CASES, ids=[case_id(i, c) for i, c in enumerate(CASES)])
def test_bulk_path_agrees(case):
    line = case["line"].encode()
    by_line = list(Scanner(dedup=False).scan([case["line"]]))
    bulk = list(Scanner(dedup=False).scan_binary(io.BytesIO(line + b"\n")))
    assert bulk == by_line


def test_cases_cover_every_kind_and_format():
    kinds = {c["expect"].get("kind", "xid") for c in CASES if c["expect"]}
    assert kinds >= {"xid", "sxid", "nvrm", "amdgpu", "nccl", "cuda"}
    formats = " ".join(c["format"] for c in CASES)
    for name in (
        "dmesg -T",
        "dmesg -x",
        "journalctl (short)",
        "short-iso",
        "syslog",
        "/dev/kmsg",
        "legacy",
    ):
        assert name in formats, name
