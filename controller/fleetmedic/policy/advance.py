"""How an attempt moves on, for any phase (the registry, policy/phases/, says what each
phase's outcome means; this applies it):

- :func:`apply`: a phase's :data:`~fleetmedic.policy.phase.Verdict` as the Update to write;
- :func:`next_phase`: the step's next phase (passed over when its ``skip`` says so), or,
  after the last, the return gate's phases that are due (burn-in, quarantine), then back
  to service (or, on a terminal step, the end of the node's life);
- :func:`after_lost`: a run whose execution node was lost, resumed as after a restart.
"""

from __future__ import annotations

import dataclasses
from datetime import timedelta

from fleetmedic.model import keys
from fleetmedic.policy import phases
from fleetmedic.policy.actions import Event, Outcome, Update
from fleetmedic.policy.history import UNREACHABLE, short, stamp
from fleetmedic.policy.inflight import InFlight
from fleetmedic.policy.phase import Fail, Next, Verdict
from fleetmedic.policy.steps import NodeCtx, ended, fail_step, into, returned


def apply(n: NodeCtx, fl: InFlight, verdict: Verdict) -> Update:
    if isinstance(verdict, Fail):
        return fail_step(n, fl, verdict.result, verdict.message, verdict.run_id)
    if isinstance(verdict, Update):
        return verdict
    upd = next_phase(
        n,
        fl.with_(
            notes=fl.notes + verdict.notes,
            run_id=verdict.run_id or fl.run_id,
            boot_id=verdict.boot_id or fl.boot_id,
        ),
    )
    if verdict.annotations or verdict.events:
        upd = dataclasses.replace(
            upd,
            annotations={**upd.annotations, **verdict.annotations},
            events=(*upd.events, *verdict.events),
        )
    return upd


def next_phase(n: NodeCtx, fl: InFlight) -> Update:
    step = n.step_cfg(fl.step)
    configured = step.phases
    gate_names = [g.name for g in phases.GATES]  # (a gate phase comes after the last)
    i = len(configured) - 1 if fl.phase in gate_names else configured.index(fl.phase)
    if i + 1 < len(configured):
        nxt = configured[i + 1]
        note = phases.of(nxt).skip(n, fl.with_(phase=nxt))
        if note is not None:  # passed over without a run (the rung costs what it did)
            return next_phase(n, fl.with_(phase=nxt, notes=(*fl.notes, note)))
        return n.update(annotations={keys.ANN_IN_FLIGHT: into(n, fl, nxt).encode()})
    if step.terminal:
        return ended(n, fl)
    for gate in phases.gates_after(fl.phase):
        assert gate.gate is not None
        entered = gate.gate(n, fl)
        if entered is not None:
            return entered
    gated = phases.PHASES.get(fl.phase)
    done = "passed verify" + (gated.passed if gated else "")
    return returned(n, fl, f"{fl.step} attempt {fl.attempt} {done}")


def after_lost(n: NodeCtx, fl: InFlight, outcome: Outcome) -> Update:
    """The run's execution node was lost (killed, cut off, silent): what it did is unknown,
    as after a controller restart. So the phase is resumed as after a restart (a booting
    phase first reads the boot_id: a reboot that happened is never run again; the roles act
    once per request id), a probe interval later, until the phase's own timeout; the note
    naming the execution node goes into the attempt's history."""
    note = f"{fl.phase}: {outcome.message}"
    notes = fl.notes if note in fl.notes else (*fl.notes, note)
    if n.now - fl.since_time() >= timedelta(seconds=phases.timeout(n, fl.phase)):
        return fail_step(n, fl.with_(notes=notes), UNREACHABLE, note, outcome.run_id)
    later = n.now + timedelta(seconds=n.cfg.ladder.probe_interval)
    return n.update(
        annotations={keys.ANN_IN_FLIGHT: fl.with_(notes=notes, retry_at=stamp(later)).encode()},
        events=(Event("RepairRunLost", short(f"{note}; resuming"), "Warning"),),
    )


__all__ = ["Next", "after_lost", "apply", "next_phase"]
