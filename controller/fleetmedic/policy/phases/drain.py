"""``drain`` and ``drain_gpu``: the node's work off it before a repair, as its kind drains
(the cluster's drain verb: pods PDB-aware on Kubernetes, jobs on Slurm); ``drain_gpu`` only
the pods that use a GPU (a GPU reset does not disturb the rest). What a drain the node's
work still holds means is ``safety.drain.pdb_blocked``: skip on, escalate to a human, or
wait and try again."""

from __future__ import annotations

from datetime import timedelta

from fleetmedic.model import keys
from fleetmedic.policy.actions import Action, Event, Kind, Outcome
from fleetmedic.policy.history import DRAIN_BLOCKED, short, stamp
from fleetmedic.policy.inflight import PENDING, InFlight
from fleetmedic.policy.phase import Next, Phase, Verdict
from fleetmedic.policy.rungs import MANUAL
from fleetmedic.policy.steps import NodeCtx, again, ctx

GPU_ONLY = "drain_gpu"


def act(n: NodeCtx, fl: InFlight, resumed: bool) -> Action:
    drain = n.cfg.safety.drain
    gpu_only = fl.phase == GPU_ONLY
    return n.action(
        Kind.DRAIN,
        f"drain{' the GPU pods' if gpu_only else ''} before {fl.step}{again(resumed)}",
        timeout=drain.timeout,
        force=drain.pdb_blocked == "force",
        gpu_only=gpu_only,
        disruptive=True,
        **ctx(fl),
    )


def complete(n: NodeCtx, fl: InFlight, action: Action, outcome: Outcome) -> Verdict:
    if outcome.ok:
        return Next()
    mode = n.cfg.safety.drain.pdb_blocked
    if outcome.status == "blocked" and mode == "skip":
        return Next((f"drain incomplete: {outcome.message}",))
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


PHASES = tuple(Phase(name, act, complete) for name in ("drain", GPU_ONLY))
