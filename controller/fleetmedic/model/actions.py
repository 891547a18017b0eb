"""What a finding asks for, and the ladder state it fences the node at: one place.

A catalog entry or a check names an *action* (:data:`ACTIONS`, mildest first).
``none`` and ``monitor`` never fence; every other action enters the repair ladder
at the state :data:`FENCE_AT` gives, and nowhere else is that mapping made.

``diagnose`` (NVIDIA's WORKFLOW_XID_13/31: faults that repeat at one GPC/TPC or on one
GPU, which may be hardware or may be the job; many unclassified driver errors) fences at
the ``diagnose`` state: the controller runs the vendor diagnostics while the node is fenced
and returns it untouched when they pass (policy/diagnose.py). It is the mildest fence.

``reset`` (a GPU reset cures it: NVIDIA's ``RESET_GPU`` bucket, Xid 154 "GPU
Reset Required", an amdgpu MES/KIQ hang) fences at the ``reset`` rung; a controller
whose ladder leaves that rung out starts such a node at its next rung up
(policy/rungs.py), so the agent never needs to know the pool's ladder.
"""

from __future__ import annotations

from fleetmedic.model.vocabulary import REPAIR_STATES

ACTIONS: tuple[str, ...] = (
    "none",
    "monitor",
    "diagnose",
    "reset",
    "reboot",
    "reimage",
    "manual",
)
"""Every action a catalog entry or check may carry, mildest first."""

ACTION_RANK: dict[str, int] = {name: rank for rank, name in enumerate(ACTIONS)}
"""Severity order: the worst finding wins, and an escalation passes dedup."""

FENCE_AT: dict[str, str] = {
    "diagnose": "diagnose",
    "reset": "reset",
    "reboot": "reboot",
    "reimage": "reimage",
    "manual": "manual",
}
"""Action -> the repair state (taint) it fences the node at."""

FENCING_ACTIONS: tuple[str, ...] = tuple(a for a in ACTIONS if a in FENCE_AT)
"""Actions that fence at once (``diagnose`` and stronger)."""

assert set(FENCE_AT.values()) <= set(REPAIR_STATES), "FENCE_AT names a state the ladder lacks"


def fence_state(action: str | None) -> str | None:
    """The repair state ``action`` fences at, or ``None`` for ``none``/``monitor``."""
    return FENCE_AT.get(action or "")
