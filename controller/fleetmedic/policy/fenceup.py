"""Fences only go up: a finding stronger than the node's fence raises it, a weaker one
never lowers it (DESIGN.md "The ladder"; issue 27 part 3).

Pure. The agent (and the Loki source) call :func:`raised` inside their conflict-safe
Node update, with the repair state the freshly read Node carries; the controller takes
the raised rung at its next step. Strength is the ladder's order
(:data:`fleetmedic.model.vocabulary.REPAIR_STATES`, mildest first): ``diagnose`` <
``reset`` < ``reboot`` < ``power_cycle`` < ``reimage`` < ``replace`` < ``manual``.
A finding fences at :func:`fleetmedic.model.actions.fence_state` of its action, so an Xid
79 (``reboot``) raises ``reset`` or ``diagnose`` to ``reboot``, and leaves a node at
``power_cycle`` or beyond where it is.
"""

from __future__ import annotations

from collections.abc import Iterable

from fleetmedic.model.actions import fence_state
from fleetmedic.model.vocabulary import REPAIR_STATES

RANK = {state: n for n, state in enumerate(REPAIR_STATES)}


def stronger(a: str | None, b: str | None) -> str | None:
    """The stronger of two repair states (``None``: no fence)."""
    if a is None:
        return b
    if b is None:
        return a
    return a if RANK.get(a, -1) >= RANK.get(b, -1) else b


def raised(current: str | None, actions: Iterable[str | None]) -> str | None:
    """The repair state to raise ``current`` to for findings asking ``actions``, or
    ``None`` to leave it (no fence yet: that is a plain fence, not a raise; or nothing
    stronger asked for)."""
    if current is None:
        return None
    best: str | None = None
    for action in actions:
        best = stronger(best, fence_state(action))
    if best is None or RANK.get(best, -1) <= RANK.get(current, len(RANK)):
        return None
    return best
