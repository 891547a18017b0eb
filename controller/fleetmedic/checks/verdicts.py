"""Per-GPU verdicts folded into one CheckResult, the same way for every vendor.

problem beats unknown beats ok; a GPU on which the metric does not exist is
``n/a`` and counts as ok, and a check on which every GPU is ``n/a`` is ``ok``
with ``applicable: false``. The summary names the GPUs that decided it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from fleetmedic.checks import base
from fleetmedic.checks.base import Category, CheckResult, not_applicable, ok, problem, unknown

MAX_LISTED = 3  # GPUs named in a summary before "and N more"


@dataclasses.dataclass(frozen=True)
class Verdict:
    status: str  # ok | problem | unknown | n/a
    text: str = ""
    evidence: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    action: str | None = None


def fold(
    name: str,
    verdicts: Mapping[int, Verdict],
    labels: Mapping[int, str],
    ok_text: str,
    category: Category = "gpu",
    **extra: Any,
) -> CheckResult:
    evidence = {
        "gpus": {str(i): {"status": v.status, **v.evidence} for i, v in verdicts.items()},
        **extra,
    }

    def listing(status: str) -> str:
        hits = [
            f"{labels.get(i, f'GPU {i}')}: {v.text}"
            for i, v in verdicts.items()
            if v.status == status
        ]
        more = f"; and {len(hits) - MAX_LISTED} more" if len(hits) > MAX_LISTED else ""
        return "; ".join(hits[:MAX_LISTED]) + more

    statuses = [v.status for v in verdicts.values()]
    if "problem" in statuses:
        actions = [v.action for v in verdicts.values() if v.status == "problem" and v.action]
        action = max(actions, key=base.ACTIONS.index) if actions else None
        return problem(name, listing("problem"), category, action=action, **evidence)
    if "unknown" in statuses:
        return unknown(name, listing("unknown"), category, **evidence)
    if not verdicts:
        return not_applicable(name, "no GPUs to check", category, **evidence)
    if all(s == "n/a" for s in statuses):
        return not_applicable(
            name, "not supported on these GPUs (not applicable)", category, **evidence
        )
    na = statuses.count("n/a")
    note = f" ({na} GPU(s) do not support it)" if na else ""
    return ok(name, f"{ok_text} on {len(statuses) - na} GPU(s){note}", category, **evidence)


def count_result(
    name: str, visible: int, expected: int | None, what: str = "GPUs", source: str = ""
) -> CheckResult:
    """Compare a visible count with the expected one (None: at least one)."""
    ev: dict[str, Any] = {"visible": visible, "expected": expected}
    if source:
        ev["source"] = source
    if expected is None:
        if visible == 0:
            return problem(name, f"no {what} visible" + (f" to {source}" if source else ""), **ev)
        return ok(name, f"{visible} {what} visible (no expected count configured)", **ev)
    if visible < expected:
        return problem(name, f"{visible} of {expected} expected {what} visible", **ev)
    if visible > expected:
        return ok(
            name,
            f"{visible} {what} visible, more than the {expected} expected (check the label)",
            **ev,
        )
    return ok(name, f"{visible} of {expected} expected {what} visible", **ev)
