"""The default phase: the playbook of the phase's name (``ladder.playbooks``), with the
attempt's host variables (the roles read them), judged by its outcome. Most phases are one
(phases/repair.py, verify.py, evidence.py, restore.py, diagnostics.py); the others build
on :func:`hostvars`."""

from __future__ import annotations

from fleetmedic.model import keys
from fleetmedic.model.nodestate import NodeView
from fleetmedic.policy import partition
from fleetmedic.policy.actions import Action, Kind, Outcome, Update
from fleetmedic.policy.history import FAIL
from fleetmedic.policy.inflight import InFlight
from fleetmedic.policy.phase import Fail, Next
from fleetmedic.policy.steps import (
    RESULT_OF,
    NodeCtx,
    again,
    ctx,
    fail_step,
    failure_text,
    still_rebooting,
)


def request_id(fl: InFlight) -> str:
    """Stable for one attempt, unique over the node's life (the start time is in it): the
    roles act once per request id, so a re-run after a crash never repeats their work."""
    return f"e{fl.ep}-{fl.step}{fl.attempt}-{fl.step_start.replace('-', '').replace(':', '')}"


def hostvars(view: NodeView, fl: InFlight, phases: tuple[str, ...]) -> dict:
    return {
        "fleetmedic_request_id": request_id(fl),
        "fleetmedic_step": fl.step,
        "fleetmedic_phase": fl.phase,
        "fleetmedic_attempt": fl.attempt,
        "fleetmedic_episode": fl.ep,
        "fleetmedic_vendor": view.vendor,
        # the evidence phase (phases/evidence.py) took it already
        "fleetmedic_collect_evidence": partition.RECORD_PHASE not in phases,
    }


def run_playbook(
    n: NodeCtx, fl: InFlight, resumed: bool, extra: dict | None = None, disruptive: bool = False
) -> Action:
    """The default phase's action: the playbook of the phase's name (``ladder.playbooks``),
    with the attempt's host variables; a reinstall with no vendor label fails the step."""
    view, cfg = n.view, n.cfg
    pb = cfg.ladder.playbooks.for_phase(fl.phase, view.vendor)
    if pb is None:
        msg = (
            f"no {keys.LABEL_VENDOR} label (nvidia|amd): cannot choose a driver or ROCm "
            "to reinstall"
        )
        return n.action(Kind.WRITE, msg, update=fail_step(n, fl, FAIL, msg), **ctx(fl))
    return n.action(
        Kind.RUN,
        f"{fl.step} attempt {fl.attempt}: {fl.phase}{again(resumed)}",
        playbook=str(cfg.playbook_path(pb)),
        timeout=pb.timeout or cfg.ansible.job_timeout,
        hostvars={**hostvars(view, fl, n.step_cfg(fl.step).phases), **(extra or {})},
        resumed=resumed,
        disruptive=disruptive,
        **ctx(fl),
    )


def run_verdict(
    n: NodeCtx, fl: InFlight, action: Action, outcome: Outcome, notes: tuple[str, ...] = ()
) -> Next | Fail | Update:
    """The default phase's completion: passed, on with ``notes``; a resumed run whose node
    does not answer may be mid-reboot (looked at again, within its timeout); else failed."""
    if outcome.ok:
        return Next(notes, outcome.run_id or fl.run_id)
    if action.resumed and outcome.status == "unreachable":
        waiting = still_rebooting(n, fl, action.timeout or n.cfg.ansible.job_timeout)
        if waiting:
            return waiting
    return Fail(
        RESULT_OF.get(outcome.status, FAIL), failure_text(fl.phase, outcome), outcome.run_id
    )
