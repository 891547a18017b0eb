"""Drain a Slurm node before a disruptive rung: wait for its jobs to end, then requeue or hold.

On Slurm the fence already is the drain: the agent (or the controller) drained the node
with our reason, so slurmctld starts no new job there and the node goes DRAINING ->
DRAINED by itself as its jobs end. This step only waits for that and, at the timeout,
applies the profile's choice (``safety.drain.pdb_blocked``, the same key as for pods a
PodDisruptionBudget protects):

1. The node must carry our drain (DRAIN or DOWN, with a reason of ours and a rung we know).
   Anything else is refused in one line (:class:`~fleetmedic.adapters.slurm.ForeignDrain`,
   nothing written): a node drained on someone else's reason is theirs, and this step never
   adds a drain (fencing is the fence's job, with its finding in the reason). A node whose
   state slurmctld does not know yet (UNKNOWN, right after a slurmctld restart, shown
   without its reason) is a TemporaryError: try again.
2. Wait until no job is left on the node, up to ``timeout``, logging the jobs it waits
   for every ``progress_interval``. The node is read every :data:`POLL` seconds (which
   also notices a drain that changed hands: ForeignDrain, nothing requeued); the jobs are
   listed (``squeue -w``) only when the node looks drained, to confirm it (a job can still
   be COMPLETING in squeue while sinfo shows the node drained), and for the log lines.
3. At the timeout, with ``force_blocked`` (``pdb_blocked: force``), re-check that the
   drain is still ours, requeue the jobs (``scontrol requeue``: the job ends here and goes
   back to the queue) and wait for them to leave the node: a requeued job sits COMPLETING
   for a moment while its epilog runs. Without it, the jobs still running are
   ``blocked`` and the executor's policy holds, escalates or skips, as for pods.

A job that refuses requeue (submitted with ``--no-requeue``, or ``JobRequeue=0``) makes the
drain ``blocked`` naming it and Slurm's answer. :meth:`Slurm.requeue` stops at the first
refusal: the jobs after it keep running, which is what we want, since the node cannot be
freed while the refusing job runs anyway.

``cancel`` (shutdown, lost leadership) ends the wait within a second and returns a result
with ``cancelled`` set: as with a playbook run (``Executor._host_outcome``), the caller then
raises its Cancelled instead of recording an outcome; the drain is simply done again later.
Its ``status`` is then ``cancelled``, so even a caller that forgot to check ends in
``after_drain``'s retry, never in an escalation.

Polling, measured with ``sdiag`` on 22.05.8: ``sinfo --json`` is 2 RPCs (NODE_INFO,
PARTITION_INFO), ``squeue -w N`` is 3 (JOB_INFO of every job, NODE_INFO, PARTITION_INFO:
the node filter is applied by squeue, not by slurmctld), so squeue is not the cheaper
read, and it grows with the cluster's jobs. So the wait reads the node: 2 RPCs every
:data:`POLL` (5 s) per draining node, 24 a minute, plus 3 per job listing (start, each
progress line, the end). The controller's idle budget (<= 6 RPCs a minute) is for a fleet
with nothing to do; a drain is an action on one node, where a few RPCs per 5-10 s are
fine, and a job's end is seen within one poll, against drains that wait minutes.
"""

from __future__ import annotations

import dataclasses
import logging
import re
import threading
import time
from collections.abc import Callable

from fleetmedic.adapters.slurm import Slurm, SlurmNode
from fleetmedic.errors import ForeignDrain, PermanentError, TemporaryError, one_line
from fleetmedic.kinds.kubedrain import DrainResult, shown
from fleetmedic.model.config.safety import DrainConfig
from fleetmedic.model.slurmreason import parse_reason

log = logging.getLogger(__name__)
POLL = 5.0
"""Seconds between two reads of the node while a drain waits (see the module doc)."""
UNKNOWN = "unknown"  # sinfo's state of a node slurmctld has not heard from since it started
REQUEUE_WAIT = 60.0
"""How long requeued jobs get to leave the node (COMPLETING while their epilog runs)."""
_REQUEUE_REFUSAL = re.compile(r"scontrol requeue (\S+): (.*)")  # Slurm.requeue's error line


@dataclasses.dataclass(frozen=True)
class SlurmDrainResult(DrainResult):
    """A :class:`DrainResult` whose refs are Slurm job IDs: ``evicted`` the jobs requeued
    and gone, ``blocked`` the jobs still running at the timeout, ``refused`` the jobs that
    refused requeue (with Slurm's answer), ``terminating`` requeued jobs still completing."""

    finished: tuple[str, ...] = ()  # jobs that ended by themselves while the drain waited
    cancelled: bool = False

    @property
    def status(self) -> str:
        if self.cancelled and not self.complete:
            return "cancelled"
        return super().status

    @property
    def message(self) -> str:
        return drain_message(self)


def drain_message(r: SlurmDrainResult) -> str:
    """One line, what holds the drain first (the history keeps only its start)."""
    parts = []
    if r.cancelled and not r.complete:
        parts.append("drain abandoned (the controller is stopping)")
    if r.blocked:
        parts.append(f"{len(r.blocked)} Slurm job(s) still running: {shown(r.blocked)}")
    if r.refused:
        parts.append(
            f"{len(r.refused)} Slurm job(s) refused requeue: "
            + shown([f"{job} ({why})" for job, why in r.refused])
        )
    if r.terminating:
        parts.append(
            f"{len(r.terminating)} requeued Slurm job(s) still completing: {shown(r.terminating)}"
        )
    done = f"{len(r.finished)} Slurm job(s) ended"
    if r.evicted:
        done += f", {len(r.evicted)} requeued ({shown(r.evicted)})"
    parts.append(f"{done}, in {r.seconds:.0f}s")
    return "; ".join(parts)


def check_ours(node: SlurmNode, prefix: str) -> None:
    """ForeignDrain unless ``node`` carries our drain (see the module doc); TemporaryError
    while slurmctld does not know the node's state (UNKNOWN, no flags, no boot time:
    measured for a second or more after a slurmctld restart; the reason may be missing
    then, so nothing can be judged)."""
    if node.state == UNKNOWN:
        raise TemporaryError(
            f"Slurm node {node.name}: state unknown to slurmctld (restarted?): try again",
            delay=5,
        )
    held = node.drain or node.state == "down"
    if held and parse_reason(node.reason, prefix):
        return
    why = (
        f"its reason is not ours ({one_line(node.reason, 120)!r}, set by "
        f"{node.reason_user or 'unknown'})"
        if held and node.reason
        else f"it carries no drain of ours ({node.state}{'+' if node.flags else ''}"
        f"{'+'.join(sorted(node.flags))})"
    )
    raise ForeignDrain(f"Slurm node {node.name}: not drained by fleetmedic: {why}")


def drain(
    slurm: Slurm,
    node: str,
    settings: DrainConfig,
    *,
    timeout: float,
    force_blocked: bool,
    cancel: threading.Event | None = None,
    clock: Callable[[], float] = time.monotonic,
    poll: float = POLL,
) -> SlurmDrainResult:
    """Wait for ``node``'s jobs to end (see the module doc). Raises ForeignDrain when the
    node does not carry our drain, TemporaryError when slurmctld does not answer."""
    cancel = cancel or threading.Event()
    start = clock()
    deadline = start + timeout
    check_ours(slurm.node(node), slurm.prefix)
    jobs = slurm.jobs(node)
    seen = set(jobs)
    log.info("%s: drain: %d Slurm job(s) on the node: %s", node, len(jobs), shown(jobs) or "none")
    jobs = _wait_gone(slurm, node, jobs, deadline, settings.progress_interval, cancel, clock, poll)
    requeued: list[str] = []
    refused: list[tuple[str, str]] = []
    terminating: list[str] = []
    if jobs and force_blocked and not cancel.is_set():
        # the node's reason may have changed hands while we waited: never requeue on theirs
        check_ours(slurm.node(node), slurm.prefix)
        log.warning("%s: requeueing Slurm job(s) still running: %s", node, shown(jobs))
        try:
            requeued = slurm.requeue(node)
        except PermanentError as exc:
            refused.append(_refusal(str(exc)))
            log.warning("%s: requeue refused: %s", node, exc)
        seen.update(requeued)
        left = _wait_gone(
            slurm,
            node,
            slurm.jobs(node),
            clock() + REQUEUE_WAIT,
            settings.progress_interval,
            cancel,
            clock,
            poll,
            only=set(requeued),
        )
        terminating = [j for j in left if j in requeued]
        refused_ids = {j for j, _ in refused}
        jobs = [j for j in left if j not in requeued and j not in refused_ids]
    requeued_set = set(requeued)
    result = SlurmDrainResult(
        evicted=tuple(j for j in requeued if j not in terminating),
        blocked=tuple(jobs),
        skipped=(),
        refused=tuple(refused),
        terminating=tuple(terminating),
        finished=tuple(sorted(seen - requeued_set - set(jobs) - {j for j, _ in refused})),
        cancelled=cancel.is_set(),
        seconds=clock() - start,
    )
    (log.info if result.complete else log.warning)("%s: drain: %s", node, result.message)
    return result


def _refusal(error: str) -> tuple[str, str]:
    """(job, why) from Slurm.requeue's PermanentError (``scontrol requeue <job>: <why>``)."""
    m = _REQUEUE_REFUSAL.search(error)
    return (m.group(1), m.group(2)) if m else ("?", error)


def _wait_gone(
    slurm: Slurm,
    node: str,
    jobs: list[str],
    deadline: float,
    every: float,
    cancel: threading.Event,
    clock: Callable[[], float],
    poll: float,
    only: set[str] | None = None,
) -> list[str]:
    """Wait until no job (of ``only``, when given) is on ``node``, ``deadline`` passes or
    ``cancel`` is set; returns the jobs on the node then. Each poll reads the node (which
    also re-checks that the drain is still ours: ForeignDrain if it changed hands); the
    jobs are listed again only when the node looks drained, for the progress line, at the
    deadline, and every poll while requeued jobs complete (the node shows drained before
    squeue lets them go)."""
    next_progress = clock() + every

    def waiting() -> list[str]:
        return [j for j in jobs if only is None or j in only]

    while waiting() and not cancel.is_set():
        now = clock()
        if now >= deadline:
            break
        if now >= next_progress:
            log.info(
                "%s: drain waits (%.0fs left) for %d Slurm job(s): %s",
                node,
                deadline - now,
                len(waiting()),
                shown(waiting()),
            )
            next_progress = now + every
        if cancel.wait(max(0.0, min(poll, deadline - now, next_progress - now))):
            break
        n = slurm.node(node)
        if n.state == UNKNOWN:
            continue  # slurmctld restarted and has not heard from the node yet: ask again
        check_ours(n, slurm.prefix)
        looks_drained = n.drained and "COMPLETING" not in n.flags
        if only is not None or looks_drained or clock() >= min(deadline, next_progress):
            jobs = slurm.jobs(node)
    return jobs
