"""Shared helpers for the scanner tests (imported by name; pytest puts this directory on
sys.path)."""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

import yaml

from fleetmedic.scan.finding import ACTIONS, JSON_FIELDS, KINDS, VENDORS, Finding

DATA = Path(__file__).parent / "data"
PCI_FORM = re.compile(r"[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}")


@cache
def _cases() -> tuple[dict, ...]:
    return tuple(yaml.safe_load((DATA / "published_lines.yaml").read_text(encoding="utf-8")))


def published_cases() -> list[dict]:
    """The cases of data/published_lines.yaml (each with a `source`)."""
    return [dict(case) for case in _cases()]


@cache
def _lines() -> tuple[str, ...]:
    return tuple(case["line"] for case in _cases())


def published_lines() -> list[str]:
    return list(_lines())


def case_id(index: int, case: dict) -> str:
    text = re.sub(r"[^A-Za-z0-9]+", "-", case["line"])[:48].strip("-")
    return f"{index:02d}-{text}"


def assert_valid(finding: Finding) -> None:
    """The JSON contract holds for one finding."""
    data = finding.to_json()
    assert tuple(data) == JSON_FIELDS
    assert isinstance(data["line"], int) and data["line"] >= 1
    assert data["vendor"] in VENDORS
    assert data["kind"] in KINDS
    assert data["code"] is None or isinstance(data["code"], int)
    assert data["pci"] is None or PCI_FORM.fullmatch(data["pci"])
    assert data["action"] in ACTIONS
    assert data["bucket"] is None or isinstance(data["bucket"], str)
    assert isinstance(data["message"], str)
