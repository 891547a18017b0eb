"""The lemon rule in the ladder: after a diagnose phase, the GPUs' record, and for an RMA
candidate the case phase and ``manual`` instead of the next rung. Pure; the diagnose and
verify phases' hooks (policy/phases/evidence.py, verify.py), the case's phases
(policy/phases/rma.py) and ladder.py's entry use it.

    diagnose ──(GPUs read; the rule says no)──> the step's next phase, as before
        └────(an RMA candidate)──> rma: playbooks/rma_case.yml ──> manual (escalation,
                                         the case file, the ticket)

The ``fleetmedic.io/rma`` record (:class:`RmaRecord`) is written with the decision, so a
controller killed anywhere after it resumes the same case: the case phase runs again
under the same request id, the escalation is decided once (inflight.py), and the ticket is
sent from the record, once (controller/ticketer.py).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from typing import Any

from fleetmedic.model import keys
from fleetmedic.model.gpus import FleetHistory, Incident, NodeRecord, compact
from fleetmedic.policy import flap, lemon
from fleetmedic.policy.actions import Event, Outcome, Update
from fleetmedic.policy.history import FLAP_DAMPED, short, stamp
from fleetmedic.policy.inflight import PENDING, InFlight
from fleetmedic.policy.phase import Next, Verdict
from fleetmedic.policy.rungs import MANUAL

HISTORY_KEY = "fleetmedic_gpu_history"
"""Where the executor adds the store's incidents of the node's GPUs to a diagnose outcome."""
CASES_KEY = "fleetmedic_rma_cases"
"""Where the executor puts the case files it wrote after the case phase."""
RECORD_KEY = "fleetmedic_rma_record"
"""Where the executor puts the RMA record it judged (a node that began with the case)."""
TICKET_PENDING, TICKET_SENT, TICKET_OFF = "pending", "sent", "off"
FLAP_DEFERRED = "flap damping deferred: a GPU's diagnose first (the lemon rule)"
"""An in-flight note: this entry would have been flap-damped, but a GPU of the node may
be a lemon; the damping applies after the diagnose if the lemon rule does not."""


@dataclasses.dataclass(frozen=True)
class RmaRecord:
    """The ``fleetmedic.io/rma`` annotation: one episode's RMA case and its ticket."""

    ep: int
    at: str
    summary: str  # "RMA candidate: GPU 1652... (GPU 1, bus-loss: 3 episodes, ...)"
    gpus: tuple[Mapping[str, Any], ...]  # serial, uid, index, family, count, window, chain
    cases: tuple[str, ...] = ()  # the case files on the controller's host
    ticket: str = TICKET_PENDING  # pending | sent | off (no ticket target)
    ticket_tries: int = 0
    ticket_error: str = ""
    ticket_at: str = ""  # when it was sent, or when to try again
    ticket_id: str = ""  # what the receiver said (its issue key), when it said one

    @property
    def case_id(self) -> str:
        """Stable per node episode and GPUs: the ticket's idempotency key."""
        serials = "-".join(str(g.get("serial") or g.get("uid")) for g in self.gpus)
        return f"e{self.ep}-{self.at.replace(':', '').replace('-', '')}-{serials}"[:120]

    def encode(self) -> str:
        data = dataclasses.asdict(self)
        data["gpus"] = [dict(g) for g in self.gpus]
        return compact(
            {k: v for k, v in data.items() if v not in ("", (), [], 0)} | {"ep": self.ep}
        )

    @classmethod
    def decode(cls, raw: str | None) -> RmaRecord | None:
        if not raw:
            return None
        try:
            data = json.loads(raw)
            return cls(
                ep=int(data["ep"]),
                at=str(data["at"]),
                summary=str(data.get("summary", "")),
                gpus=tuple(dict(g) for g in data.get("gpus") or ()),
                cases=tuple(str(c) for c in data.get("cases") or ()),
                ticket=str(data.get("ticket", TICKET_PENDING)),
                ticket_tries=int(data.get("ticket_tries", 0)),
                ticket_error=str(data.get("ticket_error", "")),
                ticket_at=str(data.get("ticket_at", "")),
                ticket_id=str(data.get("ticket_id", "")),
            )
        except (ValueError, TypeError, KeyError):
            return None

    def with_(self, **changes: Any) -> RmaRecord:
        return dataclasses.replace(self, **changes)


def fleet_of(outcome: Outcome) -> FleetHistory:
    raw = outcome.data.get(HISTORY_KEY)
    found = [Incident.from_json(x) for x in raw] if isinstance(raw, list) else []
    return FleetHistory(i for i in found if i is not None)


def after_diagnose(n: Any, fl: InFlight, outcome: Outcome, passed: Next) -> Verdict:
    """The diagnose phase's hook (policy/phases/evidence.py): ``passed`` (on to the step's
    next phase) with the node's GPU record; for an RMA candidate the case phase instead,
    and the RMA record (ticket pending, or off without a target)."""
    report = lemon.report_of(outcome.data, n.view.name)
    if report is None:
        return passed
    cfg = n.cfg.ladder.lemon
    judged = lemon.judge(n.view, report, fleet_of(outcome), fl.ep, n.now, cfg)
    ann = {**passed.annotations, keys.ANN_GPUS: judged.record.encode()}
    done = RmaRecord.decode(n.view.annotations.get(keys.ANN_RMA))
    if not judged.lemons or (done is not None and done.ep == fl.ep):
        if FLAP_DEFERRED in fl.notes:
            return _flap_damped(n, fl, ann)
        return dataclasses.replace(passed, annotations=ann)
    record = record_of(judged.lemons, fl.ep, stamp(n.now), ticket=n.cfg.ticket is not None)
    into = fl.with_(
        phase=first_phase(n),
        status=PENDING,
        since=stamp(n.now),
        run_id=None,
        boot_id=None,
        retry_at=None,
        notes=(*fl.notes, *passed.notes, record.summary),
    )
    ann.update({keys.ANN_IN_FLIGHT: into.encode(), keys.ANN_RMA: record.encode()})
    return n.update(
        annotations=ann,
        events=(*passed.events, Event("RMACandidate", short(record.summary), "Warning")),
    )


def after_verify(n: Any, fl: InFlight, outcome: Outcome, passed: Next) -> Next:
    """The verify phase's hook (policy/phases/verify.py), on a pass: the episode's
    incidents back in service now (how long the repair holds counts from here), and with
    its read of the GPUs (playbooks/verify.yml) their identities now, and a fault held
    before any of them was known (a GPU off the bus at its first diagnose) named by the
    GPU back at its address."""
    report = lemon.report_of(outcome.data, n.view.name)
    if keys.ANN_GPUS not in n.view.annotations and report is None:
        return passed
    record = lemon.learn(n.view, report, n.now, fl.ep)
    return dataclasses.replace(
        passed, annotations={**passed.annotations, keys.ANN_GPUS: record.encode()}
    )


def may_be_lemon(n: Any) -> bool:
    """Could one more episode make a GPU of this node an RMA candidate (a chain one short
    of its family's count, still within its window)? Decides whether flap damping waits
    for the diagnose (ladder.py)."""
    cfg = n.cfg.ladder.lemon
    if not cfg.enabled:
        return False
    record = NodeRecord.decode(n.view.annotations.get(keys.ANN_GPUS))
    return lemon.may_be_lemon(record, n.now, cfg)


def _flap_damped(n: Any, fl: InFlight, ann: dict[str, str | None]) -> Update:
    """The damping the entry deferred: no GPU was the cause, so the node goes to manual as
    flap damping sends it (policy/flap.py)."""
    f = n.cfg.safety.flap
    why = flap.reason(f.count, f.window)
    mark = n.attempt(
        fl.with_(notes=tuple(x for x in fl.notes if x != FLAP_DEFERRED)), FLAP_DAMPED, why
    )
    ann = {**ann, keys.ANN_IN_FLIGHT: n.first(fl.ep, MANUAL, 1).encode()}
    return n.update(
        state=MANUAL,
        append=(mark,),
        annotations=ann,
        events=(Event("RepairFlapDamped", why, "Warning"),),
    )


def record_of(lemons: Sequence[lemon.Lemon], ep: int, at: str, ticket: bool) -> RmaRecord:
    gpus = tuple(
        {
            "serial": x.gpu.serial,
            "uid": x.gpu.uid,
            "index": x.gpu.index,
            "family": x.family.name,
            "count": len(x.chain),
            "window": x.family.window,
            "chain": [{"node": i.node, "ep": i.ep, "at": i.at, "why": i.why} for i in x.chain],
        }
        for x in lemons
    )
    summary = "; ".join(x.summary() for x in lemons)
    return RmaRecord(ep, at, summary, gpus, ticket=TICKET_PENDING if ticket else TICKET_OFF)


NO_DIAG = "rma: the GPU pods did not leave: no vendor diagnostics in the case"


def first_phase(n: Any) -> str:
    """The case's first phase: the GPU pods' drain when its diagnostics load the GPUs."""
    return lemon.DRAIN_PHASE if n.cfg.ladder.lemon.rma.diag_level > 0 else lemon.PHASE


def after_drain(n: Any, fl: InFlight, outcome: Outcome) -> Update:
    """The GPU pods' drain before the case ended: on to the case; a drain that did not end
    (a PodDisruptionBudget, no grant) still gets its case, without the diagnostics that
    would load GPUs still in use (the email says so)."""
    notes = (
        fl.notes if outcome.ok else (*fl.notes, f"{NO_DIAG} ({outcome.status}: {outcome.message})")
    )
    into = fl.with_(phase=lemon.PHASE, status=PENDING, since=stamp(n.now), run_id=None, notes=notes)
    return n.update(annotations={keys.ANN_IN_FLIGHT: into.encode()})


def hostvars(n: Any, record: RmaRecord | None, fl: InFlight | None = None) -> dict[str, Any]:
    """The case playbook's variables (playbooks/rma_case.yml)."""
    rma = n.cfg.ladder.lemon.rma
    no_diag = fl is not None and any(x.startswith(NO_DIAG) for x in fl.notes)
    return {
        "rma_case_diag_level": 0 if no_diag else rma.diag_level,
        "rma_case_bug_report": rma.bug_report,
        "rma_case_max_file_mb": rma.max_file_mb,
        "rma_case_gpus": [dict(g) for g in (record.gpus if record else ())],
    }


def case_first(n: Any) -> bool:
    """A node fenced straight at ``manual`` (no escalation yet) for a finding whose family
    is a candidate at once (``count: 1``: the vendor's own RMA criterion, e.g. Xid 64's
    row-remap failure): the case phase runs before the escalation, so the email carries it."""
    cfg = n.cfg.ladder.lemon
    mark = n.view.annotation_json(keys.ANN_LAST_FINDING)
    if not cfg.enabled or not isinstance(mark, dict) or not mark.get("rule"):
        return False
    family = cfg.family(lemon.family_of(cfg.all(), rule=str(mark["rule"])))
    return family is not None and family.count == 1


def case_before_escalation(n: Any, ep: int) -> Any:
    """The write that starts a :func:`case_first` node's case (an Action: ladder.py)."""
    why = "fenced for hands by a fault its vendor replaces: the RMA case first"
    fl = n.first(ep, MANUAL, 1).with_(phase=first_phase(n))
    return n.write(
        why,
        annotations={keys.ANN_IN_FLIGHT: fl.encode()},
        events=(Event("RepairEntered", why),),
    )


def after_rma(n: Any, fl: InFlight, outcome: Outcome) -> Update:
    """The case phase ended (whatever its outcome: a case without the diagnostics is
    still the case, and says why): the node goes to ``manual``, the attempt recorded as an
    RMA candidate with the case files. A node fenced for hands that began with the case
    (:func:`case_first`) is judged here, from the report the case phase read."""
    record = RmaRecord.decode(n.view.annotations.get(keys.ANN_RMA))
    ann: dict[str, str | None] = {keys.ANN_IN_FLIGHT: n.first(fl.ep, MANUAL, 1).encode()}
    report = lemon.report_of(outcome.data, n.view.name)
    if (record is None or record.ep != fl.ep) and report is not None:
        judged = lemon.judge(n.view, report, fleet_of(outcome), fl.ep, n.now, n.cfg.ladder.lemon)
        ann[keys.ANN_GPUS] = judged.record.encode()
        given = outcome.data.get(RECORD_KEY)
        if isinstance(given, str):  # the executor's (its case files name it)
            record = RmaRecord.decode(given)
        elif judged.lemons:
            record = record_of(judged.lemons, fl.ep, stamp(n.now), ticket=n.cfg.ticket is not None)
    cases = outcome.data.get(CASES_KEY)
    said = record.summary if record and record.ep == fl.ep else "no GPU named for an RMA"
    if not outcome.ok:
        said += f"; case phase {outcome.status}: {outcome.message}".rstrip(": ")
    mark = n.attempt(fl, lemon.RESULT, said, outcome.run_id)
    if record is not None and record.ep == fl.ep:
        files = tuple(str(c) for c in cases) if isinstance(cases, list) else record.cases
        ann[keys.ANN_RMA] = record.with_(cases=files).encode()
    return n.update(
        state=MANUAL,
        append=(mark,),
        annotations=ann,
        events=(Event("RepairLemon", short(f"{said}; next: manual"), "Warning"),),
    )
