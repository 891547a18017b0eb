"""Which rung a repair state runs on, and which rung comes next: pure, from ``ladder.order``.

The vocabulary knows every repair state (``REPAIR_STATES``, mildest first); a
controller climbs only the rungs its ladder names, in that order, ending in
``manual``. A node fenced at a state the ladder leaves out (the agent fenced at
``reset``, but this pool's ladder starts at ``reboot``) enters the next rung up:
never a milder one, so a fault is never under-treated.
"""

from __future__ import annotations

from collections.abc import Sequence

from fleetmedic.model.vocabulary import REPAIR_STATES

MANUAL = "manual"


def entry_rung(order: Sequence[str], state: str) -> str:
    """The rung a node fenced at ``state`` starts on: ``state`` itself when the ladder has
    it, else the first rung of ``order`` that is not milder than ``state``."""
    if state in order:
        return state
    rank = REPAIR_STATES.index(state)
    return next((r for r in order if REPAIR_STATES.index(r) > rank), MANUAL)


def next_rung(order: Sequence[str], step: str) -> str:
    """The rung after ``step`` (``manual`` after the last; ``manual`` stays ``manual``)."""
    if step == MANUAL:
        return MANUAL
    i = list(order).index(step) if step in order else -1
    if i < 0:
        return entry_rung(order, step)
    return order[i + 1] if i + 1 < len(order) else MANUAL


def passed_over(order: Sequence[str]) -> tuple[str, ...]:
    """Repair states this ladder leaves out (nodes fenced there enter a later rung)."""
    return tuple(s for s in REPAIR_STATES if s not in order)
