"""Reading and checking the fault catalog's files: one-line errors, cited sources,
actions, regexes; the thresholds a catalog file ships. The sections' own readers are
:mod:`.catalogcodes` (Xid, SXid) and :mod:`.catalogrules` (rules, families, joins, net)."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from fleetmedic.errors import ConfigError
from fleetmedic.scan import catalogcache, regexcache
from fleetmedic.scan.entries import Threshold, parse_threshold
from fleetmedic.scan.finding import ACTIONS

DATA_DIR = regexcache.DATA_DIR
"""The packaged catalog (``fleetmedic/data``): a directory of the installed package, as
pip installs it (found from this file, not with importlib.resources, whose import alone
costs ~3 % of ``fleetmedic scan``'s start-up)."""

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
        return programs().compile(str(text))
    except re.error as exc:
        raise fail(file, f"entry {label(entry)} has a bad regex: {exc}") from None


def programs() -> regexcache.Programs:
    """The catalog's regexes by their text (:mod:`.regexcache`: their programs are kept
    beside the packaged catalog's parse; the same text gives the same pattern whichever
    catalog directory names it)."""
    return regexcache.shared()


def hex_value(text: Any) -> int:
    return int(str(text), 16)


def read_files(directory: Path | None, names: Sequence[str]) -> dict[str, Any]:
    """Every named catalog file, parsed: from ``directory``, else the packaged
    ``fleetmedic/data``, whose parse is kept by content (:mod:`.catalogcache`)."""
    base = Path(directory) if directory is not None else DATA_DIR
    blobs: dict[str, bytes] = {}
    for name in names:
        try:
            blobs[name] = (base / name).read_bytes()
        except OSError as exc:
            raise fail(name, f"cannot be read: {' '.join(str(exc).split())}") from None
    if directory is not None:
        return parse_yaml(blobs)
    return catalogcache.cached(blobs, parse_yaml, catalogcache.location(str(base)))


def parse_yaml(blobs: Mapping[str, bytes]) -> dict[str, Any]:
    # imported here: with the parse kept, `fleetmedic scan` never needs PyYAML, whose
    # import alone was ~8 % of its start-up
    import yaml

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml when present
    parsed = {}
    for name, blob in blobs.items():
        try:
            parsed[name] = yaml.load(blob.decode("utf-8"), Loader=loader)
        except (UnicodeDecodeError, yaml.YAMLError) as exc:
            raise fail(name, f"cannot be read: {' '.join(str(exc).split())}") from None
    return parsed


def catalog_file(files: Mapping[str, Any], name: str) -> dict[str, Any]:
    """A catalog file of :func:`read_files`'s, checked: a mapping with a ``sources`` table."""
    data = files[name]
    if not isinstance(data, dict) or not isinstance(data.get("sources"), dict):
        raise fail(name, "is not a mapping with a `sources` table")
    return data


def source_list(files: Mapping[str, Any], name: str) -> dict[str, Any]:
    """A derived list (a file without a ``sources`` table) a catalog file names."""
    if name not in files:
        raise fail(name, f"is not one of the derived lists read: {', '.join(files)}")
    data = files[name]
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
