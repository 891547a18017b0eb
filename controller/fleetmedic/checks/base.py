"""What a check returns, and how results combine.

A check answers one question about this node (is any GPU's ECC counter
non-zero? is the link fast enough?) with one :class:`CheckResult`:

- ``ok``: we looked and it is healthy, or the metric does not apply to this
  hardware (NVML ``NotSupported``); then ``evidence["applicable"]`` is False.
- ``problem``: we looked and it is broken. ``action`` is set only when the
  finding is definitive and names its own repair (a failed row remap needs
  hands: ``manual``); otherwise the agent counts strikes.
- ``unknown``: we could not tell: a timeout, a hung driver call, a tool that
  crashed, a peer that was not there. Never read as healthy.

Results are plain data (``to_dict``/``from_dict``) so the agent can keep the
last ones in a Node annotation and the verify playbook can read ``--json``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any, Literal

from fleetmedic.model.actions import FENCING_ACTIONS

Status = Literal["ok", "problem", "unknown"]
Category = Literal["gpu", "network", "kernel"]
STATUSES: tuple[str, ...] = ("ok", "problem", "unknown")
CATEGORIES: tuple[Category, ...] = ("gpu", "network", "kernel")
ACTIONS: tuple[str, ...] = FENCING_ACTIONS  # reset | reboot | reimage | manual

# NPD custom-plugin exit codes: 0 OK, 1 problem, 2 unknown.
EXIT_CODES = {"ok": 0, "problem": 1, "unknown": 2}


@dataclasses.dataclass(frozen=True)
class CheckResult:
    name: str  # dotted, stable: "nvidia.ecc", "amd.xgmi", "network.throughput"
    status: Status
    summary: str  # one line for an operator
    evidence: Mapping[str, Any] = dataclasses.field(default_factory=dict)  # JSON-safe
    category: Category = "gpu"
    action: str | None = None  # definitive repair: reset | reboot | reimage | manual
    duration: float = 0.0  # seconds spent collecting (shared by a probe's checks)

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"status must be one of {STATUSES}, got {self.status!r}")
        if self.category not in CATEGORIES:
            raise ValueError(f"category must be one of {CATEGORIES}, got {self.category!r}")
        if self.action is not None and self.action not in ACTIONS:
            raise ValueError(f"action must be one of {ACTIONS} or None, got {self.action!r}")
        # one line, always: summaries end up in annotations, events and tables
        object.__setattr__(self, "summary", " ".join(str(self.summary).split()))

    @property
    def applicable(self) -> bool:
        return bool(self.evidence.get("applicable", True))

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "name": self.name,
            "status": self.status,
            "summary": self.summary,
            "category": self.category,
            "evidence": dict(self.evidence),
            "duration": round(self.duration, 3),
        }
        if self.action:
            out["action"] = self.action
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> CheckResult:
        return cls(
            name=str(data["name"]),
            status=data["status"],
            summary=str(data.get("summary", "")),
            evidence=dict(data.get("evidence") or {}),
            category=data.get("category", "gpu"),
            action=data.get("action"),
            duration=float(data.get("duration", 0.0)),
        )


def ok(name: str, summary: str, category: Category = "gpu", **evidence: Any) -> CheckResult:
    return CheckResult(name, "ok", summary, evidence, category)


def not_applicable(
    name: str, summary: str, category: Category = "gpu", **evidence: Any
) -> CheckResult:
    return CheckResult(name, "ok", summary, {"applicable": False, **evidence}, category)


def problem(
    name: str, summary: str, category: Category = "gpu", action: str | None = None, **evidence: Any
) -> CheckResult:
    return CheckResult(name, "problem", summary, evidence, category, action)


def unknown(name: str, summary: str, category: Category = "gpu", **evidence: Any) -> CheckResult:
    return CheckResult(name, "unknown", summary, evidence, category)


def worst(statuses: Iterable[str]) -> Status:
    """problem beats unknown beats ok: one broken GPU is a problem even if another timed out."""
    seen = set(statuses)
    if "problem" in seen:
        return "problem"
    if "unknown" in seen:
        return "unknown"
    return "ok"


def overall(results: Iterable[CheckResult]) -> Status:
    return worst(r.status for r in results)


def exit_code(results: Iterable[CheckResult]) -> int:
    """0 healthy, 1 problem, 2 unknown (node-problem-detector plugin convention)."""
    return EXIT_CODES[overall(results)]


def by_category(results: Iterable[CheckResult]) -> dict[str, Status]:
    out: dict[str, list[str]] = {}
    for r in results:
        out.setdefault(r.category, []).append(r.status)
    return {cat: worst(sts) for cat, sts in out.items()}


def with_duration(results: Iterable[CheckResult], seconds: float) -> list[CheckResult]:
    return [dataclasses.replace(r, duration=seconds) for r in results]
