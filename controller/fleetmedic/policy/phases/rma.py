"""``rma_drain`` and ``rma``: an RMA candidate's case (policy/lemon.py, policy/rmaflow.py),
entered from a diagnose that named a lemon (in whatever step the attempt is in), or first
thing at ``manual`` for a fault its vendor replaces at once (``rmaflow.case_first``).

- ``rma_drain``: the pods that use the GPUs leave before the case's vendor diagnostics
  (DCGM level 3 loads every GPU); a drain that does not end still gets its case, without
  those diagnostics (the email says so);
- ``rma``: playbooks/rma_case.yml (serials, InfoROM/VBIOS, retired pages and row
  remaps, the diagnostics, the BMC's SEL, the bug report); whatever its outcome the node
  goes to ``manual``, the attempt recorded as an RMA candidate with the case files.
"""

from __future__ import annotations

from fleetmedic.model import keys
from fleetmedic.policy import lemon, rmaflow
from fleetmedic.policy.actions import Action, Kind, Outcome
from fleetmedic.policy.inflight import InFlight
from fleetmedic.policy.phase import Phase, Verdict
from fleetmedic.policy.phases.playbook import hostvars
from fleetmedic.policy.rungs import MANUAL
from fleetmedic.policy.steps import NodeCtx, again, ctx


def _said(n: NodeCtx, fl: InFlight) -> tuple[rmaflow.RmaRecord | None, str]:
    record = rmaflow.RmaRecord.decode(n.view.annotations.get(keys.ANN_RMA))
    return record, record.summary if record and record.ep == fl.ep else "RMA case"


def drain(n: NodeCtx, fl: InFlight, resumed: bool) -> Action:
    d = n.cfg.safety.drain
    return n.action(
        Kind.DRAIN,
        f"{_said(n, fl)[1]}: the GPU pods leave before the case's diagnostics{again(resumed)}",
        timeout=d.timeout,
        force=d.pdb_blocked == "force",
        gpu_only=True,
        disruptive=True,
        **ctx(fl),
    )


def case(n: NodeCtx, fl: InFlight, resumed: bool) -> Action:
    rma = n.cfg.ladder.lemon.rma
    record, said = _said(n, fl)
    step_phases = () if fl.step == MANUAL else n.step_cfg(fl.step).phases
    return n.action(
        Kind.RUN,
        f"{fl.step}: {said}: assemble the RMA case{again(resumed)}",
        playbook=str(n.cfg.ansible.playbook_dir / rma.playbook),
        timeout=rma.timeout,
        hostvars={**hostvars(n.view, fl, step_phases), **rmaflow.hostvars(n, record, fl)},
        resumed=resumed,
        **ctx(fl),
    )


def after_drain(n: NodeCtx, fl: InFlight, action: Action, outcome: Outcome) -> Verdict:
    return rmaflow.after_drain(n, fl, outcome)


def after_case(n: NodeCtx, fl: InFlight, action: Action, outcome: Outcome) -> Verdict:
    return rmaflow.after_rma(n, fl, outcome)


PHASES = (
    Phase(
        lemon.DRAIN_PHASE,
        drain,
        after_drain,
        timeout=lambda n: n.cfg.safety.drain.timeout,
        status="RMA CASE",
        any_step=True,
    ),
    Phase(
        lemon.PHASE,
        case,
        after_case,
        timeout=lambda n: n.cfg.ladder.lemon.rma.timeout,
        status="RMA CASE",
        any_step=True,
    ),
)
