"""What a human's ``fleetmedic release NODE`` and ``fleetmedic reset`` write.

Both remove only fleetmedic's own taints (exact key, value and effect), undo
only a cordon fleetmedic made, and end any repair under way in the history, so
the next episode starts clean and the flap count still sees this one.
"""

from __future__ import annotations

import dataclasses
from datetime import datetime

from fleetmedic.model import keys
from fleetmedic.model.config import Config
from fleetmedic.model.nodestate import NodeView
from fleetmedic.policy import foreign, handoff
from fleetmedic.policy.actions import HEALTHY, Event, Update
from fleetmedic.policy.history import RELEASED, Attempt, decode, last_episode, stamp
from fleetmedic.policy.inflight import InFlight


def _ended(view: NodeView, now: datetime, who: str) -> tuple[Attempt, ...]:
    at = stamp(now)
    fl = InFlight.read(view.annotations)
    if fl is not None:
        return (
            Attempt(
                ep=fl.ep,
                step=fl.step,
                attempt=fl.attempt,
                start=fl.step_start,
                end=at,
                result=RELEASED,
                phase=fl.phase,
                run_id=fl.run_id,
                message=who,
            ),
        )
    if view.state == HEALTHY:
        return ()
    ep = last_episode(decode(view.annotations.get(keys.ANN_HISTORY))) or 1
    return (
        Attempt(ep=ep, step=view.state, attempt=1, start=at, end=at, result=RELEASED, message=who),
    )


def release(view: NodeView, now: datetime, cfg: Config, by: str = "a human") -> Update:
    """Return a node to service: clear our repair taint and records, undo our cordon."""
    # the human vouches for the node: other tools' signals get the same lifecycle as after
    # a verified repair, or a signal that started this episode would start the next at once
    return _returned(view, now, cfg, by, foreign.after_repair(view))


def reset(view: NodeView, now: datetime, cfg: Config, by: str = "a human") -> Update:
    """Like :func:`release`, and also remove our slow-network taint, but only our own taints:
    a reset stops fleetmedic, it does not vouch for the node, so other tools' signals stay,
    recorded as answered (they start the ladder again only when their tool sets them anew)."""
    upd = _returned(view, now, cfg, by, foreign.left_in_place(view))
    ann = dict(upd.annotations)
    claim = handoff.Claim.of(view)
    if claim is not None:  # NVSentinel is told the repair stopped, not that it passed
        ann[keys.ANN_HANDOFF] = dataclasses.replace(claim, stopped=by).encode()
    return dataclasses.replace(
        upd,
        annotations=ann,
        remove_slow_network=True,
        events=(Event("RepairReset", f"all fleetmedic taints removed by {by}"),),
    )


def _returned(
    view: NodeView, now: datetime, cfg: Config, by: str, theirs: foreign.AfterRepair
) -> Update:
    who = f"released by {by}"
    ended = tuple(
        dataclasses.replace(a, message="; ".join((a.message, *theirs.notes)))
        for a in _ended(view, now, who)
    )
    return Update(
        node=view.name,
        at=stamp(now),
        state=HEALTHY,
        uncordon=True,
        annotations={
            keys.ANN_IN_FLIGHT: None,
            keys.ANN_ESCALATED: None,
            # a human decided: an open request for a quarantine is answered by that too,
            # and a hold for a human (policy/handoff.py) is lifted
            keys.ANN_QUARANTINE_REQUEST: None,
            keys.ANN_HOLD: None,
            **theirs.annotations,
        },
        remove_taints=theirs.remove_taints,
        append=ended,
        history_limit=cfg.ladder.history_limit,
        events=(Event("RepairReleased", f"{view.state} -> healthy, {who}"),),
    )
