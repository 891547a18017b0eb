"""How an attempt moves once something has happened, whatever the phase: the node's
context for a decision (:class:`NodeCtx`), the default playbook phase's action and
completion (the phases of policy/phases/ build on them), pass (back to service), retry or
climb (:func:`fail_step`), the escalation email's outcome, the hand-off's end. Used by
ladder.py, advance.py and the phases."""

from __future__ import annotations

import dataclasses
import json
from datetime import datetime, timedelta

from fleetmedic.model import keys
from fleetmedic.model.config import Config, StepConfig
from fleetmedic.model.config.ladder import BOOTING_PHASES
from fleetmedic.model.nodestate import NodeView
from fleetmedic.policy import foreign, quarantine
from fleetmedic.policy.actions import HEALTHY, Action, Event, Kind, Outcome, Update
from fleetmedic.policy.history import (
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

    def playbook_timeout(self, phase: str) -> float:
        """How long ``phase``'s playbook may take (its timeout, else the job timeout)."""
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


def still_rebooting(n: NodeCtx, fl: InFlight, limit: float) -> Update | None:
    """An interrupted phase's node is unreachable: it may be mid-reboot. Look again
    later, until ``limit`` seconds after the phase began; then None (it failed)."""
    if n.now - fl.since_time() >= timedelta(seconds=limit):
        return None
    later = n.now + timedelta(seconds=n.cfg.ladder.probe_interval)
    return n.update(annotations={keys.ANN_IN_FLIGHT: fl.with_(retry_at=stamp(later)).encode()})


def held(n: NodeCtx, fl: InFlight, outcome: Outcome) -> Update:
    """Wait until the day's record frees a slot (``outcome.retry_at``), the node fenced."""
    retry = outcome.retry_at or stamp(n.now + timedelta(hours=1))
    wait = fl.with_(status=PENDING, since=stamp(n.now), retry_at=retry)
    return n.update(
        annotations={keys.ANN_IN_FLIGHT: wait.encode()},
        events=(Event("ReplaceHeld", short(outcome.message), "Warning"),),
    )


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


def ended(n: NodeCtx, fl: InFlight) -> Update:
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
    # (at manual, only the RMA case's phases can fail: no retries, the escalation next)
    retries = 0 if fl.step == MANUAL else n.step_cfg(fl.step).retries
    if fl.attempt <= retries:
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


# -- what the phases share (policy/phases/) ---------------------------------------------
def into(n: NodeCtx, fl: InFlight, phase: str, notes: tuple[str, ...] | None = None) -> InFlight:
    """``fl`` moved into ``phase``, pending, from now (its own run id to come). The boot id
    the attempt's diagnose phase read stays until the step's booting phase has run, which
    then needs no probe of its own (phases/probe.py); otherwise it is dropped."""
    return fl.with_(
        phase=phase,
        status=PENDING,
        since=stamp(n.now),
        run_id=None,
        boot_id=fl.boot_id if boots_later(n, fl, phase) else None,
        retry_at=None,
        notes=fl.notes if notes is None else notes,
    )


def boots_later(n: NodeCtx, fl: InFlight, phase: str) -> bool:
    """Whether ``phase`` or one after it in the attempt's step boots the node, and the phase
    ``fl`` is leaving did not (a boot id read before a boot says nothing after it)."""
    if fl.phase in BOOTING_PHASES or fl.step == MANUAL:
        return False
    phases = n.step_cfg(fl.step).phases
    return phase in phases and any(p in BOOTING_PHASES for p in phases[phases.index(phase) :])


def again(resumed: bool) -> str:
    return " (again: interrupted by a restart)" if resumed else ""


def ctx(fl: InFlight) -> dict:
    """The attempt's coordinates for an Action."""
    return dict(step=fl.step, phase=fl.phase, ep=fl.ep)
