"""The repair verbs: ``reset`` (the GPUs), ``reboot``, ``power_cycle`` (through the BMC) and
``reinstall`` (the vendor's driver or ROCm). Each runs the playbook of its name
(``ladder.playbooks``), disturbs the node's work (a maintenance window holds it), and the
ones that boot the node read its boot id first (phases/probe.py). A reset is for the GPUs
the episode names (``fleetmedic.io/reset-gpus``, e.g. from NVSentinel's request,
policy/handoff.py), else for every GPU. A reboot through Slurm may end with Slurm's own
return to service: not a release (:func:`returned_by_scheduler`)."""

from __future__ import annotations

from fleetmedic.model import keys
from fleetmedic.model.config.ladder import BOOTING_PHASES
from fleetmedic.model.nodestate import NodeView
from fleetmedic.policy.actions import Action, Kind, Outcome
from fleetmedic.policy.inflight import RUNNING, InFlight
from fleetmedic.policy.phase import Phase, Verdict
from fleetmedic.policy.phases import probe
from fleetmedic.policy.phases.playbook import run_playbook, run_verdict
from fleetmedic.policy.steps import NodeCtx


def act(n: NodeCtx, fl: InFlight, resumed: bool) -> Action:
    if fl.phase in BOOTING_PHASES and probe.wanted(fl, resumed):
        return probe.act(n, fl, resumed)
    extra = reset_targets(n.view) if fl.phase == "reset" else {}
    return run_playbook(n, fl, resumed, extra, disruptive=True)


def reset_targets(view: NodeView) -> dict:
    """The GPUs this episode's reset is for (UUIDs or PCI bus ids); none named: every GPU."""
    gpus = view.annotation_json(keys.ANN_RESET_GPUS)
    if not isinstance(gpus, list) or not gpus:
        return {}
    return {"fleetmedic_reset_gpu_ids": [str(g) for g in gpus]}


def complete(n: NodeCtx, fl: InFlight, action: Action, outcome: Outcome) -> Verdict:
    if action.kind == Kind.PROBE:
        return probe.complete(n, fl, outcome)
    return run_verdict(n, fl, action, outcome)


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


PHASES = tuple(
    Phase(name, act, complete, returned=returned_by_scheduler)
    for name in ("reset", "reboot", "power_cycle", "reinstall")
)
