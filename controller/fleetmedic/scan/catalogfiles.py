"""Reading and checking the fault catalog's files: one-line errors, cited sources,
actions, regexes; the thresholds a catalog file ships. The sections' own readers are
:mod:`.catalogcodes` (Xid, SXid) and :mod:`.catalogrules` (rules, families, joins, net)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from fleetmedic.errors import ConfigError
from fleetmedic.scan.entries import Threshold, parse_threshold
from fleetmedic.scan.finding import ACTIONS

LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml when present: 10x faster start-up

TRIGGER_NVRM = "NVRM"
TRIGGER_SXID = "nvidia-nvswitch"  # the NVSwitch driver's device name, on every SXid line
TRIGGER_AMDGPU = "amdgpu"


def fail(file: str, what: str) -> ConfigError:
    return ConfigError(f"fault catalog {file}: {what}")


def cited(file: str, entry: Mapping[str, Any], known: Mapping[str, str]) -> tuple[str, ...]:
    raw = entry.get("source")
    names = (raw,) if isinstance(raw, str) else tuple(raw or ())
    if not names:
        raise fail(file, f"entry {label(entry)} has no source")
    unknown = [name for name in names if name not in known]
    if unknown:
        raise fail(file, f"entry {label(entry)} cites unknown source {unknown[0]!r}")
    return names


def label(entry: Mapping[str, Any]) -> str:
    return str(entry.get("id", entry.get("code", entry.get("xid", "?"))))


def checked_action(file: str, entry: Mapping[str, Any], value: Any) -> str:
    if value not in ACTIONS:
        raise fail(
            file, f"entry {label(entry)} has action {value!r}, not one of {', '.join(ACTIONS)}"
        )
    return str(value)


def compiled(file: str, entry: Mapping[str, Any], text: Any) -> re.Pattern[str]:
    try:
        return re.compile(str(text))
    except re.error as exc:
        raise fail(file, f"entry {label(entry)} has a bad regex: {exc}") from None


def hex_value(text: Any) -> int:
    return int(str(text), 16)


def read_catalog_file(directory: Path | None, name: str) -> dict[str, Any]:
    try:
        if directory is None:
            text = resources.files("fleetmedic.data").joinpath(name).read_text(encoding="utf-8")
        else:
            text = (directory / name).read_text(encoding="utf-8")
        data = yaml.load(text, Loader=LOADER)
    except (OSError, yaml.YAMLError) as exc:
        raise fail(name, f"cannot be read: {' '.join(str(exc).split())}") from None
    if not isinstance(data, dict) or not isinstance(data.get("sources"), dict):
        raise fail(name, "is not a mapping with a `sources` table")
    return data


def read_source_list(directory: Path | None, name: str) -> dict[str, Any]:
    """A data file without a ``sources`` table (the derived lists)."""
    try:
        if directory is None:
            text = resources.files("fleetmedic.data").joinpath(name).read_text(encoding="utf-8")
        else:
            text = (directory / name).read_text(encoding="utf-8")
        data = yaml.load(text, Loader=LOADER)
    except (OSError, yaml.YAMLError) as exc:
        raise fail(name, f"cannot be read: {' '.join(str(exc).split())}") from None
    if not isinstance(data, dict) or len(data) != 1:
        raise fail(name, "is not a mapping with one vendor key")
    return data


def shipped_thresholds(file: str, data: Mapping[str, Any]) -> dict[str, Threshold]:
    """A count the catalog ships must cite where it comes from (an operator's own counts in
    the agent config need not): a count without a published source fences healthy nodes."""
    out = {}
    for key, raw in (data.get("thresholds") or {}).items():
        entry = dict(raw) if isinstance(raw, Mapping) else raw
        if isinstance(entry, dict):
            cited(file, {"id": f"threshold {key}", **entry}, data["sources"])
            entry.pop("source", None)
        out[str(key)] = parse_threshold(f"fault catalog {file}", str(key), entry)
    return out
