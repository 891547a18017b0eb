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
- Writes go through ``Kube.update_node(name, upd.apply_for(vocab))``; a
  :class:`~fleetmedic.policy.actions.Stale` from it means "decide again".
- Post ``upd.events`` on the Node after a successful write.

All state lives on the Node (taints, in-flight marker, history, escalation
record; see inflight.py), so the loop can be killed anywhere and ``decide`` on
the re-read Node picks up safely: a finished reboot is never repeated, one
under way is never forgotten. Rungs and phases come from ``cfg.ladder``: by default
``reset`` -> ``reboot`` -> ``reimage`` -> ``manual`` (``ladder.order``; rungs.py says where a
state the order leaves out enters); unreachable and timeout count as failure. How
outcomes move an attempt is in steps.py.

A step ends in a verify (a pass returns the node to service) or, when it is terminal
(``StepConfig.terminal``: the replace rung), in the hand-off to the cloud: its pass ends
the node's life. The Node then keeps its taint and a ``replaced`` record until the cloud
removes it, and is never decided on again.

A verify that passes may be held for quarantine (policy/quarantine.py): deep diagnostics
with a recommendation, in a ``quarantine`` phase after the step's own; return to service
passes the attempt, replace climbs to the pool's terminal step.
"""

from __future__ import annotations

import dataclasses
import json
from datetime import datetime

from fleetmedic.model import keys
from fleetmedic.model.config import Config
from fleetmedic.model.config.ladder import BOOTING_PHASES
from fleetmedic.model.nodestate import NodeView
from fleetmedic.model.vocabulary import REPAIR_STATES
from fleetmedic.policy import burnin, diagnose, flap, foreign, partition, quarantine
from fleetmedic.policy.actions import HEALTHY, LOST, Action, Event, Kind, Outcome, Update
from fleetmedic.policy.history import (
    ESCALATED,
    FAIL,
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
from fleetmedic.policy.steps import (
    MANUAL,
    RESULT_OF,
    NodeCtx,
    after_burnin,
    after_diagnostics,
    after_drain,
    after_email,
    after_lost,
    after_notify,
    after_probe,
    after_quarantine,
    after_replace,
    fail_step,
    failure_text,
    next_phase,
    still_rebooting,
)

DISRUPTIVE_PHASES = ("reset", "reboot", "power_cycle", "reinstall")
OUT_OF_BAND = ("power_cycle", "replace")  # rungs whose action does not need the node's SSH


def decide(view: NodeView, now: datetime, cfg: Config) -> Action:
    """The next action for this node, from the Node alone (plus the clock and config).

    A NONE never depends on the clock: the controller reuses it until the Node changes
    (test_a_none_decision_never_changes_with_the_clock_alone). Anything that must happen
    later returns WAIT with ``not_before`` instead.
    """
    n = NodeCtx(view, now, cfg)
    if view.annotations.get(keys.ANN_PAUSE) == "true":
        return n.action(Kind.NONE, f"paused by the {keys.ANN_PAUSE} annotation on the node")
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
    if fl.step == MANUAL:
        return n.action(
            Kind.ESCALATE, "the ladder ran out: escalate to a human", step=MANUAL, ep=fl.ep
        )
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


def returned_by_scheduler(n: NodeCtx, fl: InFlight) -> bool:
    """Our fence is gone while a repair is in flight: a person's resume (the repair is
    released), or the scheduler's own return to service (the fence is put back)?

    On Slurm both clear the reason, its user and its time the same way (22.05 to 25.05:
    ``update_node`` for ``state=resume`` and ``validate_node_specs`` for ReturnToService
    both end in ``clusteracct_storage_g_node_up``, which frees them), and slurmctld's log,
    where they differ, is not ours to read. What differs is when Slurm can do it at all:
    only to a node DOWN without DRAIN, and our fence keeps DRAIN set except after a reboot
    through Slurm (``nextstate=down`` clears it on the node's return, and so does Slurm's
    own ``reboot timed out``); and only with ``ReturnToService=2`` (``=1`` returns only a
    node whose reason is Slurm's ``Not responding``, ``=0`` never). So the scheduler's
    return is the only explanation we take while our reboot through the scheduler is
    running (asked, or about to be) on a node whose scheduler returns nodes by itself
    (:data:`~fleetmedic.model.keys.LABEL_SCHEDULER_RETURNS`); everywhere else our fence's
    end is a person's doing. A person who resumes a node in that one phase has it fenced
    again, and releases it with ``fleetmedic release``."""
    return (
        fl.phase == "reboot"
        and fl.status == RUNNING
        and n.cfg.ladder.reboot_via == "slurm"
        and n.view.labels.get(keys.LABEL_SCHEDULER_RETURNS) == "true"
    )


def _unreadable(n: NodeCtx, why: str) -> Action:
    if n.view.state == HEALTHY:
        return n.write(why, annotations={keys.ANN_IN_FLIGHT: None})
    ep = last_episode(n.history) or 1
    new = n.first(ep, MANUAL, 1)
    return n.write(
        f"{why}: cannot tell what was under way, so a human decides",
        state=MANUAL,
        annotations={keys.ANN_IN_FLIGHT: new.encode()},
        events=(Event("RepairRecordUnreadable", why, "Warning"),),
    )


def _healthy(n: NodeCtx, fl: InFlight | None) -> Action:
    view, cfg = n.view, n.cfg
    if fl and returned_by_scheduler(n, fl):
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
        if esc is None:
            return n.action(
                Kind.ESCALATE,
                "fenced for manual repair: escalate to a human",
                step=MANUAL,
                ep=last_episode(n.history) + 1,
            )
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
    if flap.damped(n.history, now, fl_cfg.count, fl_cfg.window):
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
                keys.ANN_IN_FLIGHT: n.first(ep, state, 1).encode(),
                keys.ANN_ESCALATED: None,
            },
            events=(Event("RepairStarted", f"{state}, episode {ep}"),),
        ),
    )


def _continue(n: NodeCtx, fl: InFlight) -> Action:
    view, cfg, now = n.view, n.cfg, n.now
    phases = n.step_cfg(fl.step).phases
    if fl.phase == burnin.PHASE and not burnin.gates(cfg, fl.step):
        why = f"{fl.step}: the burn-in was turned off meanwhile; verify passed"
        return n.action(Kind.WRITE, why, update=next_phase(n, fl), step=fl.step, phase=fl.phase)
    if fl.phase not in phases and fl.phase not in (quarantine.PHASE, burnin.PHASE):
        new = n.first(fl.ep, fl.step, fl.attempt)
        return n.write(
            f"phase {fl.phase} is no longer in {fl.step}: restart the attempt",
            annotations={keys.ANN_IN_FLIGHT: new.encode()},
        )
    retry = fl.retry_time()
    if retry and now < retry:
        return n.action(
            Kind.WAIT,
            f"{fl.step}/{fl.phase}: back off",
            step=fl.step,
            phase=fl.phase,
            ep=fl.ep,
            not_before=retry,
        )
    resumed = fl.status == RUNNING
    ctx = dict(step=fl.step, phase=fl.phase, ep=fl.ep)
    if fl.phase in BOOTING_PHASES and (resumed or not fl.boot_id):
        why = (
            f"a {fl.phase} was under way before a restart: did it happen?"
            if resumed
            else f"read boot_id so the {fl.phase} can be confirmed after any restart"
        )
        return n.action(Kind.PROBE, why, timeout=cfg.ladder.probe_timeout, **ctx)
    again = " (again: interrupted by a restart)" if resumed else ""
    if fl.phase in ("drain", "drain_gpu"):
        drain = cfg.safety.drain
        gpu_only = fl.phase == "drain_gpu"
        return n.action(
            Kind.DRAIN,
            f"drain{' the GPU pods' if gpu_only else ''} before {fl.step}{again}",
            timeout=drain.timeout,
            force=drain.pdb_blocked == "force",
            gpu_only=gpu_only,
            disruptive=True,
            **ctx,
        )
    if fl.phase == "notify":
        return n.action(
            Kind.ESCALATE,
            f"{fl.step}: tell the team the node is being replaced{again}",
            resumed=resumed,
            **ctx,
        )
    if fl.phase == "replace":
        return n.action(
            Kind.REPLACE,
            f"{fl.step} attempt {fl.attempt}: hand the node to the cloud{again}",
            playbook=str(cfg.playbook_path(cfg.ladder.playbooks.replace)),
            timeout=n.phase_timeout("replace"),
            hostvars=_hostvars(view, fl, phases),
            resumed=resumed,
            disruptive=True,
            **ctx,
        )
    if fl.phase == quarantine.PHASE:
        q = cfg.ladder.quarantine
        return n.action(
            Kind.RUN,
            f"{fl.step} passed verify: quarantine, level {q.level} diagnostics and the "
            f"fabric checks{again}",
            playbook=str(cfg.ansible.playbook_dir / q.playbook),
            timeout=q.timeout,
            hostvars={**_hostvars(view, fl, phases), "quarantine_level": q.level},
            resumed=resumed,
            **ctx,
        )
    if fl.phase == burnin.PHASE:
        b = cfg.ladder.burnin
        return n.action(
            Kind.RUN,
            f"{fl.step} passed verify: burn-in, level {b.diag_level} diagnostics and the "
            f"collective test{again}",
            playbook=str(cfg.ansible.playbook_dir / b.playbook),
            timeout=b.timeout_for(fl.step),
            hostvars={**_hostvars(view, fl, phases), **burnin.hostvars(cfg, view)},
            resumed=resumed,
            **ctx,
        )
    if fl.phase == partition.PHASE and not partition.needs_restore(view, fl.ep):
        note = partition.skip_note(view, fl.ep)
        return n.action(
            Kind.WRITE, note, update=next_phase(n, fl.with_(notes=(*fl.notes, note))), **ctx
        )
    pb = cfg.ladder.playbooks.for_phase(fl.phase, view.vendor)
    if pb is None:
        msg = (
            f"no {keys.LABEL_VENDOR} label (nvidia|amd): cannot choose a driver or ROCm "
            "to reinstall"
        )
        return n.action(Kind.WRITE, msg, update=fail_step(n, fl, FAIL, msg), **ctx)
    extra = diagnose.hostvars(cfg) if fl.phase == diagnose.PHASE else {}
    if fl.phase == partition.PHASE:
        extra = partition.hostvars(view, fl.ep)
    return n.action(
        Kind.RUN,
        f"{fl.step} attempt {fl.attempt}: {fl.phase}{again}",
        playbook=str(cfg.playbook_path(pb)),
        timeout=pb.timeout or cfg.ansible.job_timeout,
        hostvars={**_hostvars(view, fl, phases), **extra},
        resumed=resumed,
        disruptive=fl.phase in DISRUPTIVE_PHASES,
        **ctx,
    )


def _notice(action: Action) -> bool:
    """The replace rung's email (a phase of its own), not the manual escalation."""
    return action.kind == Kind.ESCALATE and action.phase == "notify"


def request_id(fl: InFlight) -> str:
    """Stable for one attempt, unique over the node's life (the start time is in it): the
    roles act once per request id, so a re-run after a crash never repeats their work."""
    return f"e{fl.ep}-{fl.step}{fl.attempt}-{fl.step_start.replace('-', '').replace(':', '')}"


def _hostvars(view: NodeView, fl: InFlight, phases: tuple[str, ...]) -> dict:
    return {
        "fleetmedic_request_id": request_id(fl),
        "fleetmedic_step": fl.step,
        "fleetmedic_phase": fl.phase,
        "fleetmedic_attempt": fl.attempt,
        "fleetmedic_episode": fl.ep,
        "fleetmedic_vendor": view.vendor,
        # the diagnose phase took the evidence already
        "fleetmedic_collect_evidence": "diagnose" not in phases,
    }


def begin(
    view: NodeView, action: Action, now: datetime, cfg: Config, run_id: str | None = None
) -> Update | None:
    """What to write before executing ``action`` (None: nothing)."""
    n = NodeCtx(view, now, cfg)
    if action.kind in (Kind.RUN, Kind.DRAIN, Kind.REPLACE) or _notice(action):
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
    if action.kind == Kind.ESCALATE and not _notice(action):
        return after_email(n, outcome)
    fl = InFlight.decode(n.raw)
    if fl is None or (fl.step, fl.phase) != (action.step, action.phase):
        return None
    if outcome.status == LOST:
        return after_lost(n, fl, outcome)
    if action.kind == Kind.ESCALATE:
        return after_notify(n, fl, outcome)
    if action.kind == Kind.REPLACE:
        return after_replace(n, fl, outcome)
    if action.kind == Kind.PROBE:
        return after_probe(n, fl, outcome)
    if action.kind == Kind.DRAIN:
        return after_drain(n, fl, outcome)
    if fl.phase == quarantine.PHASE:
        return after_quarantine(n, fl, outcome)
    if fl.phase == burnin.PHASE:
        return after_burnin(n, fl, outcome)
    if fl.phase == diagnose.PHASE:
        return after_diagnostics(n, fl, outcome)
    # Evidence capture is best effort: a failed diagnose must not block the repair. A node
    # that does not answer fails the rungs that need SSH at once (the ladder climbs), but
    # not those that act around the node: power_cycle's BMC reaches a hung node (and keeps
    # the event log as evidence), and replace's cloud takes a dead instance as it is.
    hung_ok = fl.step in OUT_OF_BAND and outcome.status in ("unreachable", "timeout")
    if outcome.ok or (fl.phase == "diagnose" and (outcome.status == "failed" or hung_ok)):
        note = () if outcome.ok else (f"diagnose {outcome.status}: {outcome.message}",)
        if outcome.ok and fl.phase == partition.PHASE:
            note = (partition.restored_note(outcome.stdout),)
        upd = next_phase(n, fl.with_(notes=fl.notes + note, run_id=outcome.run_id or fl.run_id))
        if fl.phase == partition.RECORD_PHASE:
            # the layout before the repair, kept on the Node for the restore phase
            rec = partition.record_from(n.view, fl.ep, outcome.stdout, stamp(now))
            upd = dataclasses.replace(upd, annotations={**upd.annotations, **rec})
        return upd
    if action.resumed and outcome.status == "unreachable":
        held = still_rebooting(n, fl, action.timeout or cfg.ansible.job_timeout)
        if held:
            return held
    return fail_step(
        n, fl, RESULT_OF.get(outcome.status, FAIL), failure_text(fl.phase, outcome), outcome.run_id
    )
