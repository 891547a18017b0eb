"""The repair ladder for one node, as three pure functions.

The controller loop, for each node it has no run in progress for (in this process)::

    action = decide(view, now, cfg)                    # what next?
    # ... all nodes' actions through budget.admit(...) ...
    upd = begin(view, action, now, cfg, run_id)        # write BEFORE acting (None: nothing)
    view = write(upd)                                  # the Node as written
    outcome = execute(action)                          # runner / drain / email
    upd = complete(view, action, outcome, now, cfg)    # write AFTER (None: stale, re-decide)

- ``WRITE``: only apply ``action.update``. ``WAIT``/``NONE``: nothing (``not_before``
  says when to look again). ``RUN``: ``action.playbook`` on the node with
  ``action.hostvars``, within ``action.timeout``. ``PROBE``: read the boot_id
  (``Outcome.boot_id``). ``DRAIN``: cordon and evict (``force`` deletes what a PDB
  still protects); ``Outcome("blocked")`` when a PDB held it past the timeout.
  ``ESCALATE``: send the email; ``Outcome("skipped")`` when no SMTP is configured (in
  the replace rung's ``notify`` phase: the notice that the node is being replaced).
  ``REPLACE``: hand the node to its cloud (delete the Node, or terminate its instance
  through the Auto Scaling group); ``Outcome("held", retry_at=...)`` when the pool's day
  of replacements is spent.
- Writes go through ``Cluster.update_node(name, upd.apply_for(vocab))``; a
  :class:`~fleetmedic.policy.actions.Stale` from it means "decide again".
- Post ``upd.events`` on the Node after a successful write.

All state lives on the Node (taints, in-flight marker, history, escalation
record; see inflight.py), so the loop can be killed anywhere and ``decide`` on
the re-read Node picks up safely: a finished reboot is never repeated, one
under way is never forgotten. Rungs and phases come from ``cfg.ladder``: by default
``reset`` -> ``reboot`` -> ``reimage`` -> ``manual`` (``ladder.order``; rungs.py says where a
state the order leaves out enters); unreachable and timeout count as failure. What each
phase does and what its outcome means is its module in the phase registry (policy/phases/);
how the attempt then moves on is advance.py and steps.py.

A step ends in a verify (a pass returns the node to service) or, when it is terminal
(``StepConfig.terminal``: the replace rung), in the hand-off to the cloud: its pass ends
the node's life. The Node then keeps its taint and a ``replaced`` record until the cloud
removes it, and is never decided on again.

A verify that passes may be held for quarantine (policy/quarantine.py): deep diagnostics
with a recommendation, in a ``quarantine`` phase after the step's own; return to service
passes the attempt, replace climbs to the pool's terminal step.
"""

from __future__ import annotations

import json
from datetime import datetime

from fleetmedic.model import keys
from fleetmedic.model.config import Config
from fleetmedic.model.nodestate import NodeView
from fleetmedic.model.vocabulary import REPAIR_STATES
from fleetmedic.policy import advance, escalation, flap, foreign, phases, rmaflow
from fleetmedic.policy.actions import HEALTHY, LOST, Action, Event, Kind, Outcome, Update
from fleetmedic.policy.history import (
    ABANDONED,
    ESCALATED,
    FLAP_DAMPED,
    RELEASED,
    SUPERSEDED,
    Attempt,
    last_episode,
    short,
    stamp,
)
from fleetmedic.policy.inflight import RUNNING, Escalated, InFlight
from fleetmedic.policy.rungs import entry_rung
from fleetmedic.policy.steps import MANUAL, NodeCtx, after_email


def decide(view: NodeView, now: datetime, cfg: Config) -> Action:
    """The next action for this node, from the Node alone (plus the clock and config).

    A NONE never depends on the clock: the controller reuses it until the Node changes
    (test_a_none_decision_never_changes_with_the_clock_alone). Anything that must happen
    later returns WAIT with ``not_before`` instead.
    """
    n = NodeCtx(view, now, cfg)
    if view.annotations.get(keys.ANN_PAUSE) == "true":
        return n.action(Kind.NONE, f"paused by the {keys.ANN_PAUSE} annotation on the node")
    if keys.ANN_HOLD in view.annotations:  # (policy/handoff.py: its request withdrawn)
        held = view.annotation_json(keys.ANN_HOLD)
        why = held.get("why") if isinstance(held, dict) else None
        return n.action(Kind.NONE, f"held for a human: {why or view.annotations[keys.ANN_HOLD]}")
    try:
        fl = InFlight.decode(n.raw)
    except ValueError as exc:
        return _unreadable(n, str(exc))
    if view.state == HEALTHY:
        return _healthy(n, fl)
    if n.replaced is not None:
        return n.action(
            Kind.NONE, f"handed to the cloud ({n.replaced}): waiting for it to remove the Node"
        )
    if fl is None:
        return _entered(n)
    if fl.step != view.state:
        return _fence_moved(n, fl)
    if fl.step == MANUAL and fl.phase not in phases.PHASES:  # (else: the RMA case first)
        why = escalation.headline(view, fl.ep, "the ladder ran out")
        return n.action(Kind.ESCALATE, why, step=MANUAL, ep=fl.ep)
    return _continue(n, fl)


def _fence_moved(n: NodeCtx, fl: InFlight) -> Action:
    """The taint names another state than the one being worked (the agent, a human or a
    foreign signal fenced the node again meanwhile). Fences only go up:

    - a stronger state (``diagnose`` -> any rung, ``reset`` -> ``reboot`` ...) supersedes
      the attempt at this step: the rung it enters (the next one up where this ladder
      skips it) starts afresh, in the same episode, and the weaker taint comes off. A
      write that would have ended the old attempt (its verify's pass clearing the fence)
      was made for the old state and is refused as stale (``Update.expect_state``);
    - a weaker one (someone put a milder taint in place of ours) never lowers the node:
      the taint of the step under way is put back and the attempt goes on.
    """
    view, order = n.view, n.cfg.ladder.order
    if REPAIR_STATES.index(view.state) < REPAIR_STATES.index(fl.step):
        why = f"taint lowered to {view.state} while {fl.step} is under way: fences only go up"
        return n.write(
            why, state=fl.step, events=(Event("RepairFenceKept", f"{why}; kept", "Warning"),)
        )
    rung = MANUAL if view.state == MANUAL else entry_rung(order, view.state)
    note = n.attempt(fl, SUPERSEDED, f"moved to {view.state} by someone else")
    new = n.first(fl.ep, rung, 1)
    said = view.state if rung == view.state else f"{view.state} (this ladder: {rung})"
    return n.write(
        f"taint says {said}, not {fl.step}: the stronger fence wins",
        state=rung,
        annotations={keys.ANN_IN_FLIGHT: new.encode()},
        append=(note,),
        events=(Event("RepairRaised", f"{fl.step} -> {rung}: fenced higher meanwhile"),),
    )


def _unreadable(n: NodeCtx, why: str) -> Action:
    if n.view.state == HEALTHY:
        return n.write(why, annotations={keys.ANN_IN_FLIGHT: None})
    ep = last_episode(n.history) or 1
    new = n.first(ep, MANUAL, 1)
    said = f"{why}: cannot tell what was under way, so a human decides"
    at = stamp(n.now)
    mark = Attempt(ep, n.view.state, 1, at, at, ABANDONED, message=short(said))
    return n.write(
        said,
        state=MANUAL,
        append=(mark,),
        annotations={keys.ANN_IN_FLIGHT: new.encode()},
        events=(Event("RepairRecordUnreadable", why, "Warning"),),
    )


def _healthy(n: NodeCtx, fl: InFlight | None) -> Action:
    view, cfg = n.view, n.cfg
    if fl and fl.phase in phases.PHASES and phases.of(fl.phase).returned(n, fl):
        why = (
            f"back in service without our fence during {fl.step}/{fl.phase}, which the "
            "scheduler does by itself after its reboot: fenced again, to verify before it "
            "returns (only a person's release ends the repair now)"
        )
        return n.write(
            why, state=fl.step, events=(Event("RepairFenceKept", short(why), "Warning"),)
        )
    if fl or n.escalated or n.replaced or view.annotations.get(keys.ANN_CORDONED) == "true":
        ended: tuple[Attempt, ...] = ()
        if fl:
            ended = (n.attempt(fl, RELEASED, "repair taint removed by someone else"),)
        return n.write(
            "our repair taint was removed: forget the repair, undo our cordon",
            annotations={
                keys.ANN_IN_FLIGHT: None,
                keys.ANN_ESCALATED: None,
                keys.ANN_REPLACED: None,
            },
            append=ended,
            uncordon=True,
        )
    if not view.foreign:
        if keys.ANN_FOREIGN_HANDLED in view.annotations:  # every tool cleared its signal
            return n.write(
                "other tools cleared their signals", annotations={keys.ANN_FOREIGN_HANDLED: None}
            )
        return n.action(Kind.NONE, "healthy")
    record = foreign.pruned(view)
    tidy = {} if record is None else {keys.ANN_FOREIGN_HANDLED: record or None}
    asking = foreign.pending(view)
    if not asking:
        if tidy:
            return n.write("a tool cleared its signal: forget our answer to it", annotations=tidy)
        return n.action(
            Kind.NONE,
            f"foreign signal ({', '.join(view.foreign_signals)}) already answered by a repair, "
            "or asks for nothing; acting again when the tool sets it anew",
        )
    why = "foreign signal: " + ", ".join(f"{s.describe} ({s.tool})" for s in asking)
    state = entry_rung(cfg.ladder.order, foreign.entry(asking))
    said = "; ".join(f"{s.tool}: {s.evidence}" for s in asking if s.evidence)
    ann: dict[str, str | None] = {
        **tidy,
        keys.ANN_ENTERED_BY: ",".join(sorted({s.tool for s in asking})),
    }
    if said:  # the tool's own findings become the node's evidence (status, email)
        ann[keys.ANN_LAST_FINDING] = json.dumps({"summary": short(said)})
    message = why + (f"; {said}" if said else "")
    return n.write(
        message,
        state=state,
        annotations=ann,
        events=(Event("RepairEntered", short(message), "Warning"),),
    )


def _entered(n: NodeCtx) -> Action:
    """In repair with no in-flight marker: a new episode, or a manual node."""
    state, now = n.view.state, n.now
    if state == MANUAL:
        esc = n.escalated
        if esc is None and n.cfg.ladder.replace_manual:
            why = "fenced for manual repair: this pool replaces instead (ladder.replace_manual)"
            return n.write(why, state="replace", events=(Event("RepairEntered", why),))
        if esc is None and rmaflow.case_first(n):
            return rmaflow.case_before_escalation(n, last_episode(n.history) + 1)
        if esc is None:
            ep = last_episode(n.history) + 1
            why = escalation.headline(n.view, ep, "fenced for manual repair")
            return n.action(Kind.ESCALATE, why, step=MANUAL, ep=ep)
        if esc.sent:
            return n.action(Kind.NONE, f"escalated at {esc.sent}; waiting for `fleetmedic release`")
        retry = esc.retry_time()
        if retry and now < retry:
            return n.action(
                Kind.WAIT, f"escalation email failed ({esc.error}); retrying", not_before=retry
            )
        return n.action(
            Kind.ESCALATE,
            f"escalation email not sent yet (tries: {esc.tries})",
            step=MANUAL,
            ep=esc.ep,
        )
    if n.escalated is not None and n.escalated.decided:
        # escalated at manual and not released (`fleetmedic release` and a return to
        # service clear the record): someone put a milder taint in place of manual
        why = f"taint lowered to {state} after the escalation: fences only go up"
        return n.write(
            why, state=MANUAL, events=(Event("RepairFenceKept", f"{why}; kept", "Warning"),)
        )
    rung = entry_rung(n.cfg.ladder.order, state)
    if rung != state:
        why = f"fenced at {state}, which this ladder skips: starting at {rung}"
        return n.write(why, state=rung, events=(Event("RepairEntered", why),))
    ep = last_episode(n.history) + 1
    fl_cfg = n.cfg.safety.flap
    damped = flap.damped(n.history, now, fl_cfg.count, fl_cfg.window)
    # a GPU of this node may be the cause: its diagnose names it first (the RMA case), and
    # the damping follows it if it does not (rmaflow.after_diagnose)
    notes = (rmaflow.FLAP_DEFERRED,) if damped and rmaflow.may_be_lemon(n) else ()
    if damped and not notes:
        why = flap.reason(fl_cfg.count, fl_cfg.window)
        stamp_now = stamp(now)
        mark = Attempt(
            ep=ep,
            step=state,
            attempt=1,
            start=stamp_now,
            end=stamp_now,
            result=FLAP_DAMPED,
            message=why,
        )
        return n.write(
            why,
            state=MANUAL,
            append=(mark,),
            annotations={
                keys.ANN_IN_FLIGHT: n.first(ep, MANUAL, 1).encode(),
                keys.ANN_ESCALATED: None,
            },
            events=(Event("RepairFlapDamped", why, "Warning"),),
        )
    return n.action(
        Kind.WRITE,
        f"start {state} (episode {ep})",
        step=state,
        ep=ep,
        new_work=True,
        update=n.update(
            annotations={
                keys.ANN_IN_FLIGHT: n.first(ep, state, 1).with_(notes=notes).encode(),
                keys.ANN_ESCALATED: None,
            },
            events=(Event("RepairStarted", f"{state}, episode {ep}"),),
        ),
    )


def _continue(n: NodeCtx, fl: InFlight) -> Action:
    """The attempt's phase goes on: its action, from the phase registry (policy/phases/)."""
    now = n.now
    phase = phases.PHASES.get(fl.phase)
    ctx = dict(step=fl.step, phase=fl.phase, ep=fl.ep)
    if phase is not None and phase.gate is not None:
        why = phase.dropped(n, fl)
        if why is not None:  # a return-gate phase that no longer applies: on without it
            return n.action(Kind.WRITE, why, update=advance.next_phase(n, fl), **ctx)
    elif phase is None or (not phase.any_step and fl.phase not in n.step_cfg(fl.step).phases):
        new = n.first(fl.ep, fl.step, fl.attempt)
        return n.write(
            f"phase {fl.phase} is no longer in {fl.step}: restart the attempt",
            annotations={keys.ANN_IN_FLIGHT: new.encode()},
        )
    retry = fl.retry_time()
    if retry and now < retry:
        return n.action(Kind.WAIT, f"{fl.step}/{fl.phase}: back off", not_before=retry, **ctx)
    note = phase.skip(n, fl)
    if note is not None:  # nothing for it to do: passed over without a run
        upd = advance.next_phase(n, fl.with_(notes=(*fl.notes, note)))
        return n.action(Kind.WRITE, note, update=upd, **ctx)
    return phase.act(n, fl, fl.status == RUNNING)


def notice(action: Action) -> bool:
    """An email of a phase's (the replace rung's notice), not the manual escalation."""
    return action.kind == Kind.ESCALATE and action.phase is not None


def begin(
    view: NodeView, action: Action, now: datetime, cfg: Config, run_id: str | None = None
) -> Update | None:
    """What to write before executing ``action`` (None: nothing)."""
    n = NodeCtx(view, now, cfg)
    if action.kind in (Kind.RUN, Kind.DRAIN, Kind.REPLACE) or notice(action):
        fl = InFlight.decode(n.raw)
        if fl is None:
            return None
        # a resumed phase keeps its start: its timeout runs from when it first began
        since = fl.since if fl.status == RUNNING else stamp(now)
        started = fl.with_(status=RUNNING, since=since, run_id=run_id, retry_at=None)
        return n.update(annotations={keys.ANN_IN_FLIGHT: started.encode()})
    if action.kind == Kind.ESCALATE and n.escalated is None:
        at = stamp(now)
        record = Escalated(ep=action.ep, decided=at)
        mark = Attempt(
            ep=action.ep,
            step=MANUAL,
            attempt=1,
            start=at,
            end=at,
            result=ESCALATED,
            message=short(action.reason),
        )
        return n.update(
            annotations={keys.ANN_ESCALATED: record.encode(), keys.ANN_IN_FLIGHT: None},
            append=(mark,),
            events=(Event("RepairEscalated", action.reason, "Warning"),),
        )
    return None


def complete(
    view: NodeView, action: Action, outcome: Outcome, now: datetime, cfg: Config
) -> Update | None:
    """What to write after ``action`` ended with ``outcome``; None if the Node moved on."""
    n = NodeCtx(view, now, cfg)
    if action.kind == Kind.ESCALATE and not notice(action):
        return after_email(n, outcome)
    fl = InFlight.decode(n.raw)
    if fl is None or (fl.step, fl.phase) != (action.step, action.phase):
        return None
    if outcome.status == LOST:
        return advance.after_lost(n, fl, outcome)
    return advance.apply(n, fl, phases.of(fl.phase).complete(n, fl, action, outcome))
