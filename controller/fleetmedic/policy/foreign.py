"""Other tools' signals (Konduktor's taint, the AWS health check's, NPD's condition): when
they start a repair, and what becomes of them after it. Pure, from the NodeView.

The loop this prevents: a tool that never clears its own taint keeps a repaired node
looking broken, so a controller that only waits a grace period repairs it again and
again until flap damping sends it to a human. Instead each signal has a lifecycle
(config ``foreign_signals[].after_repair``):

- ``clear``: after our repair passes verify (or a human releases the node), remove exactly
  that taint, nothing else, with an Event and a note in the history.
- ``wait-for-change``: record the signal's fingerprint (``fleetmedic.io/foreign-handled``);
  while the signal stands unchanged it is one we already answered. The tool setting it
  anew (a new ``timeAdded`` or value, a condition's new ``lastTransitionTime``) starts a
  new repair; the tool clearing it drops the record, so a later signal is new too.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass

from fleetmedic.model import keys
from fleetmedic.model.nodestate import NodeView, Seen
from fleetmedic.model.vocabulary import REPAIR_STATES


def handled(view: NodeView) -> dict[str, str]:
    """Signal -> fingerprint we already repaired for (an unreadable record reads as empty:
    the worst case is one more repair, never a missed one)."""
    raw = view.annotation_json(keys.ANN_FOREIGN_HANDLED, {})
    return {str(k): str(v) for k, v in raw.items()} if isinstance(raw, dict) else {}


def pending(view: NodeView) -> list[Seen]:
    """Signals that ask for a repair we have not done: set anew since, or never answered."""
    done = handled(view)
    return [s for s in view.foreign if s.enters and done.get(s.describe) != s.fingerprint]


def entry(signals: list[Seen]) -> str:
    """The rung the strongest of ``signals`` asks for."""
    return max((s.enters for s in signals if s.enters), key=REPAIR_STATES.index)


def pruned(view: NodeView) -> str | None:
    """The handled record without signals the node no longer carries (the tool cleared
    them: a later signal is new), or None when nothing changes."""
    done = handled(view)
    present = {s.describe for s in view.foreign}
    kept = {k: v for k, v in done.items() if k in present}
    if kept == done:
        return None
    return json.dumps(kept, sort_keys=True) if kept else ""


@dataclass(frozen=True)
class AfterRepair:
    """What a verified repair (or a release) does to the foreign signals on the node."""

    remove_taints: tuple[Mapping[str, str], ...]
    annotations: dict[str, str | None]
    notes: tuple[str, ...]


def after_repair(view: NodeView) -> AfterRepair:
    cleared = [s for s in view.foreign if s.after_repair == "clear" and s.taint]
    return _answered(view, cleared)


def left_in_place(view: NodeView) -> AfterRepair:
    """As :func:`after_repair`, but every signal waits for its tool (none is removed): what
    ``fleetmedic reset`` writes, since it removes only fleetmedic's own taints."""
    return _answered(view, [])


def _answered(view: NodeView, cleared: list[Seen]) -> AfterRepair:
    waited = [s for s in view.foreign if s not in cleared]
    record = {k: v for k, v in handled(view).items() if k in {s.describe for s in view.foreign}}
    record.update({s.describe: s.fingerprint for s in waited})
    notes = tuple(f"cleared {s.tool}'s {s.describe}" for s in cleared) + tuple(
        f"{s.tool}'s {s.describe} left to {s.tool} (acted on again only when set anew)"
        for s in waited
    )
    ann: dict[str, str | None] = {keys.ANN_ENTERED_BY: None}
    ann[keys.ANN_FOREIGN_HANDLED] = json.dumps(record, sort_keys=True) if record else None
    return AfterRepair(tuple(dict(s.taint) for s in cleared if s.taint), ann, notes)
