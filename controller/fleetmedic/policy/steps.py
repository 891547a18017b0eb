"""How an attempt moves once something has happened: the next phase, pass, retry or
climb, and what probe, drain and email outcomes mean. Used by ladder.py."""

from __future__ import annotations

import dataclasses
import json
from datetime import datetime, timedelta

from fleetmedic.model import keys
from fleetmedic.model.config import Config, StepConfig
from fleetmedic.model.nodestate import NodeView
from fleetmedic.policy import burnin, diagnose, foreign, partition, quarantine, sweep
from fleetmedic.policy.actions import HEALTHY, Action, Event, Kind, Outcome, Update
from fleetmedic.policy.history import (
    DRAIN_BLOCKED,
    FAIL,
    PASS,
    REPLACED,
    TIMEOUT,
    UNREACHABLE,
    Attempt,
    decode,
    short,
    stamp,
)
from fleetmedic.policy.inflight import ESCALATE_PHASE, PENDING, Escalated, InFlight
from fleetmedic.policy.rungs import MANUAL, next_rung

REBOOT = "reboot"
POWER_CYCLE = "power_cycle"
RESULT_OF = {"unreachable": UNREACHABLE, "timeout": TIMEOUT}
UNKNOWN_BOOT = "unknown"
"""The boot id recorded before a power cycle of a node that did not answer (hung): the
BMC reaches what SSH cannot, and the playbook keeps its own record of the request."""


class NodeCtx:
    """What one decision needs from a NodeView, decoded once."""

    def __init__(self, view: NodeView, now: datetime, cfg: Config) -> None:
        self.view, self.now, self.cfg = view, now, cfg
        self.raw = view.annotations.get(keys.ANN_IN_FLIGHT)
        self.history = decode(view.annotations.get(keys.ANN_HISTORY))
        self.escalated = Escalated.decode(view.annotations.get(keys.ANN_ESCALATED))
        self.replaced = view.annotations.get(keys.ANN_REPLACED)

    def update(self, **kw) -> Update:
        return Update(
            node=self.view.name,
            at=stamp(self.now),
            expect_state=self.view.state,
            expect_inflight=self.raw,
            history_limit=self.cfg.ladder.history_limit,
            **kw,
        )

    def action(self, kind: Kind, reason: str, **kw) -> Action:
        return Action(kind=kind, node=self.view.name, reason=reason, **kw)

    def write(self, reason: str, **kw) -> Action:
        return self.action(Kind.WRITE, reason, update=self.update(**kw))

    def step_cfg(self, step: str) -> StepConfig:
        return self.cfg.ladder.step(step)

    def phase_timeout(self, phase: str) -> float:
        """How long ``phase`` may take (its playbook's timeout, else the job timeout)."""
        if phase == quarantine.PHASE:
            return self.cfg.ladder.quarantine.timeout
        if phase == burnin.PHASE:
            return self.cfg.ladder.burnin.timeout_for(self.view.state)
        book = self.cfg.ladder.playbooks.for_phase(phase, self.view.vendor)
        return (book.timeout if book else None) or self.cfg.ansible.job_timeout

    def first(self, ep: int, step: str, attempt: int) -> InFlight:
        phase = ESCALATE_PHASE if step == MANUAL else self.step_cfg(step).phases[0]
        now = stamp(self.now)
        return InFlight(
            ep=ep,
            step=step,
            attempt=attempt,
            phase=phase,
            status=PENDING,
            step_start=now,
            since=now,
        )

    def attempt(
        self, fl: InFlight, result: str, message: str, run_id: str | None = None
    ) -> Attempt:
        notes = "; ".join(fl.notes + ((message,) if message else ()))
        return Attempt(
            ep=fl.ep,
            step=fl.step,
            attempt=fl.attempt,
            start=fl.step_start,
            end=stamp(self.now),
            result=result,
            phase=fl.phase,
            run_id=run_id or fl.run_id,
            message=short(notes),
        )


def failure_text(phase: str, outcome: Outcome) -> str:
    task = f" in task {outcome.task!r}" if outcome.task else ""
    return f"{phase} {outcome.status}{task}: {outcome.message}".rstrip(": ")


def after_email(n: NodeCtx, outcome: Outcome) -> Update | None:
    esc = n.escalated
    if esc is None:
        return None  # released meanwhile
    if outcome.ok or outcome.status == "skipped":
        new = esc.with_(
            sent=stamp(n.now),
            tries=esc.tries + 1,
            retry_at=None,
            error="" if outcome.ok else short(outcome.message),
        )
        events: tuple[Event, ...] = ()
    else:
        retry = n.now + timedelta(seconds=n.cfg.smtp.retry_interval if n.cfg.smtp else 300)
        new = esc.with_(tries=esc.tries + 1, error=short(outcome.message), retry_at=stamp(retry))
        events = (Event("EscalationEmailFailed", short(outcome.message), "Warning"),)
    return Update(
        node=n.view.name,
        at=stamp(n.now),
        annotations={keys.ANN_ESCALATED: new.encode()},
        events=events,
    )


def after_probe(n: NodeCtx, fl: InFlight, outcome: Outcome) -> Update:
    now = n.now
    if fl.status == PENDING:
        if outcome.ok and outcome.boot_id:
            return n.update(
                annotations={
                    keys.ANN_IN_FLIGHT: fl.with_(boot_id=outcome.boot_id, since=stamp(now)).encode()
                }
            )
        if fl.phase == POWER_CYCLE and outcome.status in ("unreachable", "timeout"):
            note = f"power-cycled without a boot id: {outcome.status} before"
            unknown = fl.with_(boot_id=UNKNOWN_BOOT, since=stamp(now), notes=(*fl.notes, note))
            return n.update(annotations={keys.ANN_IN_FLIGHT: unknown.encode()})
        return fail_step(
            n,
            fl,
            RESULT_OF.get(outcome.status, FAIL),
            f"could not read boot_id before the {fl.phase}: {outcome.message}",
        )
    if outcome.ok and outcome.boot_id:
        if outcome.boot_id != fl.boot_id:
            note = f"{fl.phase} confirmed after a restart (new boot_id)"
            return next_phase(n, fl.with_(notes=(*fl.notes, note)))
        again = fl.with_(status=PENDING, since=stamp(now), run_id=None)
        return n.update(annotations={keys.ANN_IN_FLIGHT: again.encode()})
    if fl.phase == POWER_CYCLE:
        # Off, or still booting: the BMC knows which. The playbook again, with the same
        # request id, powers on a node left off, waits for one booting and never cuts the
        # power twice (its record of the request is on this host), instead of waiting
        # here for a node the killed run may have left powered off.
        note = "power_cycle interrupted by a restart: run again for the same request"
        again = fl.with_(status=PENDING, since=stamp(now), run_id=None, notes=(*fl.notes, note))
        return n.update(annotations={keys.ANN_IN_FLIGHT: again.encode()})
    held = still_rebooting(n, fl, n.phase_timeout(fl.phase))
    return held or fail_step(
        n, fl, UNREACHABLE, f"not back after the {fl.phase}: {outcome.message}"
    )


def after_lost(n: NodeCtx, fl: InFlight, outcome: Outcome) -> Update:
    """The run's execution node was lost (killed, cut off, silent): what it did is unknown,
    as after a controller restart. So the phase is resumed as after a restart (a booting
    phase first reads the boot_id: a reboot that happened is never run again; the roles act
    once per request id), a probe interval later, until the phase's own timeout; the note
    naming the execution node goes into the attempt's history."""
    note = f"{fl.phase}: {outcome.message}"
    notes = fl.notes if note in fl.notes else (*fl.notes, note)
    if n.now - fl.since_time() >= timedelta(seconds=n.phase_timeout(fl.phase)):
        return fail_step(n, fl.with_(notes=notes), UNREACHABLE, note, outcome.run_id)
    later = n.now + timedelta(seconds=n.cfg.ladder.probe_interval)
    return n.update(
        annotations={keys.ANN_IN_FLIGHT: fl.with_(notes=notes, retry_at=stamp(later)).encode()},
        events=(Event("RepairRunLost", short(f"{note}; resuming"), "Warning"),),
    )


def still_rebooting(n: NodeCtx, fl: InFlight, limit: float) -> Update | None:
    """An interrupted phase's node is unreachable: it may be mid-reboot. Look again
    later, until ``limit`` seconds after the phase began; then None (it failed)."""
    if n.now - fl.since_time() >= timedelta(seconds=limit):
        return None
    later = n.now + timedelta(seconds=n.cfg.ladder.probe_interval)
    return n.update(annotations={keys.ANN_IN_FLIGHT: fl.with_(retry_at=stamp(later)).encode()})


def after_drain(n: NodeCtx, fl: InFlight, outcome: Outcome) -> Update:
    if outcome.ok:
        return next_phase(n, fl)
    mode = n.cfg.safety.drain.pdb_blocked
    if outcome.status == "blocked" and mode == "skip":
        return next_phase(n, fl.with_(notes=(*fl.notes, f"drain incomplete: {outcome.message}")))
    if (outcome.status == "blocked" and mode == "escalate") or outcome.status == "forbidden":
        # forbidden: config says force, RBAC says no; retrying cannot help, a human must
        # grant it or drain by hand, so this is the escalate mode's outcome
        reason = "DrainBlocked" if outcome.status == "blocked" else "DrainForceForbidden"
        mark = n.attempt(fl, DRAIN_BLOCKED, outcome.message)
        return n.update(
            state=MANUAL,
            append=(mark,),
            annotations={keys.ANN_IN_FLIGHT: n.first(fl.ep, MANUAL, 1).encode()},
            events=(Event(reason, short(outcome.message), "Warning"),),
        )
    later = n.now + timedelta(seconds=n.cfg.safety.drain.retry_interval)
    wait = fl.with_(status=PENDING, since=stamp(n.now), retry_at=stamp(later))
    return n.update(
        annotations={keys.ANN_IN_FLIGHT: wait.encode()},
        events=(Event("DrainBlocked", short(outcome.message), "Warning"),),
    )


def after_notify(n: NodeCtx, fl: InFlight, outcome: Outcome) -> Update:
    """The replace rung's notice went out (or no SMTP is configured): on to the hand-off.
    Held: the pool's day of replacements is spent (checked before the email, so no notice
    says "being replaced" of a node that then waits a day). A failed send is tried again
    later, never skipped: after the hand-off the Node and its evidence are gone."""
    if outcome.status == "held":
        return _held(n, fl, outcome)
    if outcome.ok or outcome.status == "skipped":
        note = () if outcome.ok else (f"notice not emailed: {outcome.message}",)
        upd = next_phase(n, fl.with_(notes=fl.notes + note))
        told = Event("RepairReplacing", f"{fl.step}: handing the node to the cloud", "Warning")
        return dataclasses.replace(upd, events=(*upd.events, told))
    retry = n.now + timedelta(seconds=n.cfg.smtp.retry_interval if n.cfg.smtp else 300)
    wait = fl.with_(status=PENDING, since=stamp(n.now), retry_at=stamp(retry))
    return n.update(
        annotations={keys.ANN_IN_FLIGHT: wait.encode()},
        events=(Event("EscalationEmailFailed", short(outcome.message), "Warning"),),
    )


def after_replace(n: NodeCtx, fl: InFlight, outcome: Outcome) -> Update:
    """The hand-off: done (the node's life ends), held by the day's limit (wait), or failed
    (climb: a human looks at a node the cloud would not take)."""
    if outcome.ok:
        said = (outcome.message,) if outcome.message else ()
        return next_phase(n, fl.with_(notes=(*fl.notes, *said)))
    if outcome.status == "held":
        return _held(n, fl, outcome)
    result = RESULT_OF.get(outcome.status, FAIL)
    return fail_step(n, fl, result, failure_text(fl.phase, outcome), outcome.run_id)


def _held(n: NodeCtx, fl: InFlight, outcome: Outcome) -> Update:
    """Wait until the day's record frees a slot (``outcome.retry_at``), the node fenced."""
    retry = outcome.retry_at or stamp(n.now + timedelta(hours=1))
    wait = fl.with_(status=PENDING, since=stamp(n.now), retry_at=retry)
    return n.update(
        annotations={keys.ANN_IN_FLIGHT: wait.encode()},
        events=(Event("ReplaceHeld", short(outcome.message), "Warning"),),
    )


def next_phase(n: NodeCtx, fl: InFlight) -> Update:
    phases = n.step_cfg(fl.step).phases
    gated = fl.phase == burnin.PHASE  # the burn-in comes after the last configured phase
    i = len(phases) - 1 if gated else phases.index(fl.phase)
    if i + 1 == len(phases) and n.step_cfg(fl.step).terminal:
        return _ended(n, fl)
    if i + 1 == len(phases) and not gated and burnin.gates(n.cfg, fl.step):
        into = fl.with_(
            phase=burnin.PHASE, status=PENDING, since=stamp(n.now), run_id=None, boot_id=None,
            retry_at=None,
        )  # fmt: skip
        return n.update(annotations={keys.ANN_IN_FLIGHT: into.encode()})
    if i + 1 == len(phases):
        held = _quarantine_due(n)
        if held:
            into = fl.with_(
                phase=quarantine.PHASE,
                status=PENDING,
                since=stamp(n.now),
                run_id=None,
                boot_id=None,
                retry_at=None,
                notes=(*fl.notes, f"quarantine: {held}"),
            )
            return n.update(
                annotations={keys.ANN_IN_FLIGHT: into.encode()},
                events=(Event("Quarantined", short(f"{fl.step} passed verify; {held}")),),
            )
        done = "passed verify" + (" and the burn-in" if gated else "")
        return returned(n, fl, f"{fl.step} attempt {fl.attempt} {done}")
    step = phases[i + 1]
    if step == partition.PHASE and not partition.needs_restore(n.view, fl.ep):
        # nothing to put back: passed over without a run (the rung costs what it did)
        return next_phase(
            n, fl.with_(phase=step, notes=(*fl.notes, partition.skip_note(n.view, fl.ep)))
        )
    nxt = fl.with_(
        phase=step,
        status=PENDING,
        since=stamp(n.now),
        run_id=None,
        boot_id=None,
        retry_at=None,
    )
    return n.update(annotations={keys.ANN_IN_FLIGHT: nxt.encode()})


def returned(n: NodeCtx, fl: InFlight, said: str, extra: dict | None = None) -> Update:
    """The attempt passed: back to service. The pass names the fault it cured, so the next
    repair of the same fault can be counted (policy/quarantine.py)."""
    theirs = foreign.after_repair(n.view)
    done = n.attempt(fl.with_(notes=fl.notes + theirs.notes), PASS, "")
    done = dataclasses.replace(done, fault=quarantine.fault_of(n.view))
    return n.update(
        state=HEALTHY,
        append=(done,),
        uncordon=True,
        annotations={
            keys.ANN_IN_FLIGHT: None,
            keys.ANN_ESCALATED: None,
            keys.ANN_RESET_GPUS: None,  # (this episode's: the next one names its own)
            **theirs.annotations,
            **(extra or {}),
        },
        remove_taints=theirs.remove_taints,
        events=(Event("Repaired", said), *_cleared_events(theirs)),
    )


def _quarantine_due(n: NodeCtx) -> str | None:
    """Why this return to service is held for quarantine (None: it is not)."""
    who = quarantine.requested(n.view)
    if who is not None:
        return f"requested by {who}"
    q = n.cfg.ladder.quarantine
    fault = quarantine.fault_of(n.view)
    if q.enabled and quarantine.due(n.history, fault, n.now, q.count, q.window):
        return quarantine.reason(fault, q.count, q.window)
    return None


def after_quarantine(n: NodeCtx, fl: InFlight, outcome: Outcome) -> Update:
    """The quarantine's recommendation, kept in its annotation (the request is answered):
    return to service passes the repair; replace climbs to the pool's terminal step
    (``replace`` where the ladder has it, else ``manual``, whose email carries the
    diagnostics); unknown stays fenced for a human."""
    q = n.cfg.ladder.quarantine
    result = quarantine.judge(outcome.status, outcome.stdout, outcome.message)
    why = next((x[len("quarantine: ") :] for x in fl.notes if x.startswith("quarantine: ")), "")
    note = quarantine.record(result, q.level, stamp(n.now), outcome.run_id or "", why)
    ann: dict[str, str | None] = {keys.ANN_QUARANTINE: note, keys.ANN_QUARANTINE_REQUEST: None}
    said = f"quarantine level {q.level}: {result.recommendation}: {result.summary}"
    if result.recommendation == quarantine.RETURN:
        return returned(n, fl, short(f"{fl.step} attempt {fl.attempt} passed; {said}"), ann)
    nxt = "replace" if result.recommendation == quarantine.REPLACE else MANUAL
    if nxt not in n.cfg.ladder.order:
        nxt = MANUAL
    mark = n.attempt(fl, FAIL, said, outcome.run_id)
    return n.update(
        state=nxt,
        append=(mark,),
        annotations={**ann, keys.ANN_IN_FLIGHT: n.first(fl.ep, nxt, 1).encode()},
        events=(Event("QuarantineFailed", short(f"{said}; next: {nxt}"), "Warning"),),
    )


def after_burnin(n: NodeCtx, fl: InFlight, outcome: Outcome) -> Update:
    """The burn-in (policy/burnin.py): passed, on to the return (or quarantine), its line in
    the history; anything else (too slow, a diagnostic failed, unknown, timed out) fails the
    attempt with the role's line, measured against expected, and the ladder climbs."""
    said = burnin.summary(outcome)
    if outcome.ok:
        return next_phase(n, fl.with_(notes=(*fl.notes, said), run_id=outcome.run_id or fl.run_id))
    return fail_step(n, fl, RESULT_OF.get(outcome.status, FAIL), said, outcome.run_id)


def after_diagnostics(n: NodeCtx, fl: InFlight, outcome: Outcome) -> Update:
    """The diagnose state's diagnostics (policy/diagnose.py): passed, on to verify (whose
    pass returns the node untouched); failed or unknown, into the ladder at the rung
    diagnose.rung_after gives, the attempt failed with what the tools said."""
    v = diagnose.verdict(outcome)
    said = diagnose.summary(n.cfg, v)
    if v.result == sweep.PASS:
        return next_phase(n, fl.with_(notes=(*fl.notes, said), run_id=outcome.run_id or fl.run_id))
    rung = diagnose.rung_after(n.cfg, v)
    mark = n.attempt(fl, FAIL, said, outcome.run_id)
    reason = "DiagnosticsFailed" if v.result == sweep.FAIL else "DiagnosticsUnknown"
    return n.update(
        state=rung,
        append=(mark,),
        annotations={keys.ANN_IN_FLIGHT: n.first(fl.ep, rung, 1).encode()},
        events=(Event(reason, short(f"{said}; next: {rung}"), "Warning"),),
    )


def _ended(n: NodeCtx, fl: InFlight) -> Update:
    """The last phase of a terminal step passed: the node was handed to its cloud. Its
    state stays (fenced, cordoned: nothing may land on it until the cloud removes the
    Node), its work ends, and the record says it is not to be repaired again."""
    done = n.attempt(fl, REPLACED, "")
    record = json.dumps({"ep": fl.ep, "at": stamp(n.now)}, separators=(",", ":"))
    return n.update(
        append=(done,),
        annotations={keys.ANN_IN_FLIGHT: None, keys.ANN_REPLACED: record},
        events=(Event("Replaced", short(f"{fl.step} attempt {fl.attempt}: {done.message}")),),
    )


def _cleared_events(theirs: foreign.AfterRepair) -> tuple[Event, ...]:
    return tuple(
        Event("ForeignSignalCleared", note) for note in theirs.notes if note.startswith("cleared")
    )


def fail_step(
    n: NodeCtx, fl: InFlight, result: str, message: str, run_id: str | None = None
) -> Update:
    mark = n.attempt(fl, result, message, run_id)
    if fl.attempt <= n.step_cfg(fl.step).retries:
        again = n.first(fl.ep, fl.step, fl.attempt + 1)
        return n.update(
            annotations={keys.ANN_IN_FLIGHT: again.encode()},
            append=(mark,),
            events=(Event("RepairRetry", short(message), "Warning"),),
        )
    nxt = next_rung(n.cfg.ladder.order, fl.step)
    return n.update(
        state=nxt,
        append=(mark,),
        annotations={keys.ANN_IN_FLIGHT: n.first(fl.ep, nxt, 1).encode()},
        events=(
            Event("RepairFailed", f"{fl.step} failed, next: {nxt}: {short(message)}", "Warning"),
        ),
    )
