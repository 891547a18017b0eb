"""What ``fleetmedic gpus --json`` reports from a node: each GPU's identity, the signs of a
fault it shows now, and the facts a vendor's RMA intake asks for; plus the GPU faults the
kernel logged this boot. The node side (checks/identity.py) writes it, the controller
(policy/lemon.py) reads it; this is the one shape both agree on.

Signals are vendor-neutral names (data/lemon_rules.yaml's ``signals``):

- ``lost``: the GPU does not answer (NVML ``GPU_IS_LOST``; amd-smi lists fewer GPUs);
- ``ecc_uncorrected``: uncorrectable memory errors since the driver loaded (NVML's
  volatile count; amd-smi's uncorrectable total);
- ``row_remap_failure``: NVML's row-remapping failure flag;
- ``bad_pages_unreservable``: amd-smi's bad pages that could not be reserved.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

SIGNALS = ("lost", "ecc_uncorrected", "row_remap_failure", "bad_pages_unreservable")
MAX_FINDINGS = 20
MAX_TEXT = 160


@dataclasses.dataclass(frozen=True)
class GpuFacts:
    index: int
    pci: str = ""  # "" when the GPU does not answer (then its index is all that is known)
    serial: str = ""
    uid: str = ""
    model: str = ""
    signals: tuple[str, ...] = ()
    rma: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    """Vendor facts for the RMA case: part number, VBIOS and InfoROM versions, retired
    pages, remapped rows, RAS counts per block (whatever the tools gave)."""

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"index": self.index, "pci": self.pci, "serial": self.serial}
        out.update(uid=self.uid, model=self.model, signals=list(self.signals), rma=dict(self.rma))
        return out

    @classmethod
    def from_json(cls, data: Any) -> GpuFacts | None:
        if not isinstance(data, Mapping):
            return None
        try:
            return cls(
                index=int(data["index"]),
                pci=str(data.get("pci") or ""),
                serial=_clean(data.get("serial")),
                uid=_clean(data.get("uid")),
                model=str(data.get("model") or ""),
                signals=tuple(s for s in _strings(data.get("signals")) if s in SIGNALS),
                rma=dict(data.get("rma") or {}) if isinstance(data.get("rma"), Mapping) else {},
            )
        except (KeyError, TypeError, ValueError):
            return None


@dataclasses.dataclass(frozen=True)
class LoggedFault:
    """A GPU fault of this boot's kernel log, as the scanner's catalog named it."""

    rule: str  # xid.79, amdgpu.ras-uncorrectable, ...
    pci: str = ""
    text: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"rule": self.rule, "pci": self.pci, "text": self.text[:MAX_TEXT]}

    @classmethod
    def from_json(cls, data: Any) -> LoggedFault | None:
        if not isinstance(data, Mapping) or not data.get("rule"):
            return None
        return cls(str(data["rule"]), str(data.get("pci") or ""), str(data.get("text") or ""))


@dataclasses.dataclass(frozen=True)
class GpuReport:
    vendor: str  # nvidia | amd | none
    gpus: tuple[GpuFacts, ...] = ()
    logged: tuple[LoggedFault, ...] = ()
    problems: tuple[str, ...] = ()  # what could not be read, one line each
    node: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    """Node-wide facts for the case (driver version, host name)."""

    def to_json(self) -> dict[str, Any]:
        return {
            "vendor": self.vendor,
            "gpus": [g.to_json() for g in self.gpus],
            "logged": [f.to_json() for f in self.logged[:MAX_FINDINGS]],
            "problems": list(self.problems),
            "node": dict(self.node),
        }

    @classmethod
    def from_json(cls, data: Any) -> GpuReport | None:
        """The report, or None when ``data`` is not one (an older node, a failed run)."""
        if not isinstance(data, Mapping) or not isinstance(data.get("gpus"), list):
            return None
        gpus = [g for g in (GpuFacts.from_json(x) for x in data["gpus"]) if g is not None]
        logged = [f for f in (LoggedFault.from_json(x) for x in _list(data.get("logged"))) if f]
        node = data.get("node")
        return cls(
            vendor=str(data.get("vendor") or "unknown"),
            gpus=tuple(gpus),
            logged=tuple(logged[:MAX_FINDINGS]),
            problems=tuple(_strings(data.get("problems"))),
            node=dict(node) if isinstance(node, Mapping) else {},
        )


NOT_A_VALUE = ("", "n/a", "na", "none", "unknown", "not supported", "[n/a]")


def _clean(value: Any) -> str:
    """A tool's identity string, or "" for its ways of saying it has none."""
    text = str(value or "").strip()
    return "" if text.lower() in NOT_A_VALUE else text


def _strings(value: Any) -> list[str]:
    return (
        [str(x) for x in value]
        if isinstance(value, Sequence) and not isinstance(value, str)
        else []
    )


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []
