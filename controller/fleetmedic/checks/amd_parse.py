"""Parsers for what AMD's tools print. Pure: text in, plain data out.

- ``amd-smi <list|static|metric|bad-pages> --json``: amd-smi 25+ (ROCm 7)
  wraps per-GPU objects as ``{"gpu_data": [...]}``; amd-smi 24.x (ROCm 6)
  printed the bare list. Both are accepted. Values are numbers, ``"N/A"``, or
  ``{"value": v, "unit": u}``.
- ``rocm-smi --showrasinfo all``: a text table per GPU (rocm-smi prints no
  JSON for RAS). Columns are read by header position. Known upstream quirk:
  some rocm_smi.py versions print correctable before uncorrectable under the
  uncorrectable-first header; amd-smi is preferred for this reason.
- ``rocm-smi --json``: ``{"card0": {"PCI Bus": ..., "XGMI Error count": "0"}}``.
- ``rocminfo``: agent blocks; GPU agents have ``Device Type: GPU``.
"""

from __future__ import annotations

import json
import re
from typing import Any


class ParseError(ValueError):
    """The tool printed something we cannot read (one line)."""


def num(v: Any) -> float | int | None:
    """A number from amd-smi's value forms; None for "N/A" and friends."""
    if isinstance(v, bool):
        return int(v)
    if isinstance(v, (int, float)):
        return v
    if isinstance(v, dict) and "value" in v:
        return num(v["value"])
    if isinstance(v, str):
        m = re.match(r"\s*(-?\d+(?:\.\d+)?)", v)
        if m:
            text = m.group(1)
            return float(text) if "." in text else int(text)
    return None


def gpu_entries(text: str) -> dict[int, dict[str, Any]]:
    """amd-smi --json output -> {gpu index: entry}."""
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise ParseError(f"not JSON: {exc}") from None
    if isinstance(data, dict) and isinstance(data.get("gpu_data"), list):
        data = data["gpu_data"]
    if not isinstance(data, list):
        raise ParseError("expected a list of GPUs or {'gpu_data': [...]}")
    out: dict[int, dict[str, Any]] = {}
    for pos, entry in enumerate(data):
        if isinstance(entry, dict):
            idx = entry.get("gpu")
            out[idx if isinstance(idx, int) else pos] = entry
    return out


def page_count(v: Any) -> int | None:
    """amd-smi bad-pages fields: a list, one dict (brackets dropped), a "none" sentence, or N/A."""
    if isinstance(v, list):
        return len(v)
    if isinstance(v, dict):
        return 1
    if isinstance(v, str) and v.strip().lower().startswith("no bad pages"):
        return 0
    return None


def xgmi_errors(v: Any) -> int | None:
    """0 none, 1 one, 2 several; None when not applicable (no XGMI, or N/A)."""
    if isinstance(v, str):
        s = v.upper()
        if s.endswith("NO_ERRORS"):
            return 0
        if s.endswith("MULTIPLE_ERRORS"):
            return 2
        if s.endswith("_ERROR"):
            return 1
    n = num(v)
    return int(n) if n is not None else None


def rocm_smi_json(text: str) -> dict[int, dict[str, str]]:
    """rocm-smi --json -> {card index: fields}."""
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise ParseError(f"not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise ParseError("expected a JSON object of cards")
    out = {}
    for key, fields in data.items():
        m = re.fullmatch(r"card(\d+)", key)
        if m and isinstance(fields, dict):
            out[int(m.group(1))] = {str(k): str(v) for k, v in fields.items()}
    return out


def rocm_smi_ras(text: str) -> dict[int, dict[str, dict[str, Any]]]:
    """rocm-smi --showrasinfo all -> {gpu: {block: {"status", "uncorrectable", "correctable"}}}."""
    out: dict[int, dict[str, dict[str, Any]]] = {}
    gpu: int | None = None
    order: tuple[str, str] = ("uncorrectable", "correctable")
    for line in text.splitlines():
        m = re.match(r"\s*GPU\[(\d+)\]", line)
        if m:
            gpu = int(m.group(1))
            out.setdefault(gpu, {})
            continue
        words = line.split()
        if "Block" in words and "Status" in words:
            low = [w.lower() for w in words]
            u = next((k for k, w in enumerate(low) if w.startswith("uncorrectable")), 0)
            c = next((k for k, w in enumerate(low) if w.startswith("correctable")), 1)
            order = ("uncorrectable", "correctable") if u < c else ("correctable", "uncorrectable")
            continue
        if gpu is None or len(words) < 2 or not re.fullmatch(r"[A-Z][A-Z0-9_]*", words[0]):
            continue
        entry: dict[str, Any] = {"status": words[1]}
        counts = [num(w) for w in words[2:4]]
        if len(counts) == 2 and None not in counts:
            entry.update(dict(zip(order, counts, strict=False)))
        out[gpu][words[0]] = entry
    return out


def rocminfo_agents(text: str) -> list[dict[str, str]]:
    """rocminfo -> the agents, each {"Name", "Marketing Name", "Device Type", ...}."""
    agents: list[dict[str, str]] = []
    current: dict[str, str] | None = None
    for line in text.splitlines():
        if re.match(r"^Agent \d+\s*$", line.strip()) and not line.startswith(" "):
            current = {}
            agents.append(current)
            continue
        if current is None or not line.startswith("  ") or line.startswith("    "):
            continue  # only the agent's own two-space-indented fields
        key, sep, value = line.strip().partition(":")
        if sep and key and key not in current:
            current[key.strip()] = value.strip()
    return agents


def rocm_not_loaded(text: str) -> bool:
    return "ROCk module is NOT loaded" in text
