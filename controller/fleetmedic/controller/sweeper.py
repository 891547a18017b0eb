"""Diagnostic sweeps of idle nodes: the I/O around policy/sweep.py.

A part of the loop (controller/parts.py): after each cycle's plan it calls
:meth:`Sweeper.planned`, which ticks with the cycle's views; the policy says which nodes
to start and which orphaned maintenance taints to take off, and each becomes a job on the
sweeper's own worker pool (workers.py), so a 10-minute diagnostic never holds the loop or
a repair slot of the ladder's pool. One sweep, under the node's Lease:

    taint (maintenance, NoSchedule) -> the node's pods again (one LIST, field selector)
      -> busy now: taint off, nothing else written
      -> sweep playbook (ansible-runner: `fleetmedic diag --level N --json` on the node)
      -> pass / unknown: taint off, last-sweep recorded
      -> fail: taint off, the repair taint at the diagnostic's rung, the diagnostics as
         the node's last-finding and last-results (the ladder takes it from there)

Idle is read from the pod informer (podwatch.py), so deciding costs no API call; the
second look after the taint is the API server's own answer, since a pod bound a moment
before the taint may not be in the cache yet. A cancelled sweep (shutdown, lost
leadership) takes its taint off; a killed one leaves it, and the next controller's first
plan takes it off (an orphan) and sweeps the node again later.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime

from fleetmedic.adapters import runner
from fleetmedic.adapters.cluster import pods_of
from fleetmedic.controller.parts import Context, Look, Part
from fleetmedic.controller.podwatch import GpuPodWatcher
from fleetmedic.controller.workers import Workers
from fleetmedic.errors import FleetmedicError
from fleetmedic.model.hostvars import controller_host_vars
from fleetmedic.model.nodestate import NodeView
from fleetmedic.policy import sweep
from fleetmedic.policy.history import stamp
from fleetmedic.policy.plan import Plan
from fleetmedic.policy.profiles import Assignment

log = logging.getLogger(__name__)

ERROR_BACKOFF = 60.0


@dataclasses.dataclass(frozen=True)
class SweepJob:
    node: str
    profile: str
    release: bool = False  # only take an orphaned maintenance taint off


class Sweeper(Part):
    name = "sweep"

    def __init__(
        self,
        ctx: Context,
        *,
        paused: Callable[[], str | None] = lambda: None,
        breakers: Callable[[], Mapping[str, str | None]] = dict,
    ) -> None:
        """``paused``: reads the pause switch (an API call, made only when a sweep would
        start); ``breakers``: each profile's breaker reason."""
        self.cfg = cfg = ctx.cfg
        self.cluster, self.leadership, self.put = ctx.cluster, ctx.leadership, ctx.put
        self.metrics, self.clock, self.dry_run = ctx.metrics, ctx.clock, ctx.dry_run
        self.vocab = cfg.vocabulary()
        self.pod_api = pods_of(ctx.cluster, "sweeps")  # (the config refuses sweeps without pods)
        self.pods = GpuPodWatcher(self.pod_api, watch_timeout=ctx.watch_timeout)
        size = sum(
            c.sweep.max_concurrent
            for c in (cfg.profile(n) for n in cfg.profile_names())
            if c.sweep and c.sweep.enabled
        )
        self.workers: Workers[SweepJob] = Workers(
            self._job, max(2, size + 1), ctx.wake, cluster=cfg.cluster_name, name="fleetmedic-sweep"
        )
        self._said: str = ""
        self.paused, self.breakers = paused, breakers

    @classmethod
    def if_configured(
        cls,
        ctx: Context,
        paused: Callable[[], str | None],
        breakers: Callable[[], Mapping[str, str | None]],
    ) -> Sweeper | None:
        """The sweeper when a profile sweeps (``sweep:``), else None."""
        return cls(ctx, paused=paused, breakers=breakers) if ctx.cfg.sweeps() else None

    def start(self, stop: threading.Event) -> None:
        self.pods.start(stop)

    def busy(self) -> set[str]:
        return set(self.workers.busy())

    def working(self) -> set[str]:
        return self.busy()

    def active(self) -> bool:
        return bool(self.workers.busy())

    def cancel(self) -> None:
        self.cancel_running()

    def cancel_running(self) -> None:
        self.workers.cancel_running()

    def planned(self, look: Look, plan: Plan, skip: set[str]) -> None:
        """Start due sweeps, around the nodes the ladder works on or just admitted."""
        self.tick(
            look.views,
            look.now,
            look.assignment,
            skip=skip,
            sweeping=look.working.get(self.name, set()),
            paused=self.paused,
            breakers=self.breakers(),
        )

    def shutdown(self, grace: float) -> None:
        self.workers.shutdown(grace)

    def tick(
        self,
        views: Sequence[NodeView],
        now: datetime,
        assignment: Assignment,
        skip: set[str],
        sweeping: set[str],
        paused: Callable[[], str | None] = lambda: None,
        breakers: Mapping[str, str | None] | None = None,
    ) -> sweep.SweepPlan:
        """Plan and start sweeps (nothing until the pod cache is filled). ``sweeping``: this
        sweeper's :meth:`busy`, read *before* ``views`` (a job records its end on the view
        before it leaves the busy set, so no ended sweep looks like an orphan). ``paused``
        reads the pause switch (an API call), only when there is a sweep to start."""
        if not self.pods.synced.is_set():
            return sweep.SweepPlan()
        mine = sweeping

        def planned(why: str | None) -> sweep.SweepPlan:
            return sweep.plan(
                views,
                now,
                self.cfg,
                assignment,
                gpu_busy=self.pods.gpu_nodes(),
                sweeping=mine,
                skip=skip | set(self.workers.backed_off()),
                paused=why,
                breakers=breakers,
            )

        plan = planned(None)
        if plan.start:
            why = paused()
            if why:
                plan = planned(why)
        said = f"start {[n for n, _ in plan.start]} release {list(plan.release)} held {plan.held}"
        if plan and said != self._said:
            log.info("sweep%s: %s", " (dry run: would do)" if self.dry_run else "", said.strip())
        self._said = said
        if self.dry_run:
            return plan
        by_name = {v.name: v for v in views}
        for name in plan.release:
            prof = assignment.profile_of.get(name, "default")
            self.workers.submit(by_name[name], SweepJob(name, prof, release=True))
        for name, prof in plan.start:
            self.workers.submit(by_name[name], SweepJob(name, prof))
        return plan

    # -- one job, on a worker thread -------------------------------------------------
    def _job(self, view: NodeView, job: SweepJob, cancel: threading.Event) -> float | None:
        if cancel.is_set():
            return None
        if not self.leadership.hold(job.node):
            return self.leadership.hold_retry
        try:
            if job.release:
                if self._end(job.node, None) is not None:
                    log.info("%s: maintenance taint of an interrupted sweep taken off", job.node)
                    self.metrics.sweeps.labels(result="interrupted").inc()
                return None
            return self._sweep(view, job, cancel)
        except FleetmedicError as exc:
            log.warning("%s: sweep: %s", job.node, exc)
            self._end_quietly(job.node)
            return ERROR_BACKOFF
        except Exception:
            log.exception("%s: sweep: unexpected error", job.node)
            self._end_quietly(job.node)
            return ERROR_BACKOFF
        finally:
            self.leadership.let_go(job.node)

    def _sweep(self, view: NodeView, job: SweepJob, cancel: threading.Event) -> float | None:
        name = job.node
        cfg = self.cfg.profile(job.profile)
        assert cfg.sweep is not None
        node = self.cluster.update_node(name, lambda n: sweep.begin_edit(n, self.vocab))
        view = self.put(node)
        if view.in_repair or not view.maintenance:
            log.info("%s: not swept: fenced or cordoned meanwhile", name)
            return None
        pods, _ = self.pod_api.list_pods_on_node(name)
        taken = [p["metadata"]["name"] for p in pods if sweep.wants_gpu(p)]
        if taken:
            self._end(name, None)
            log.info("%s: not swept: %s took a GPU meanwhile; released", name, taken[0])
            self.metrics.sweeps.labels(result="busy").inc()
            return None
        if cancel.is_set():
            self._end(name, None)
            return None
        run_id = runner.new_run_id(f"{name}-sweep")
        log.info("%s: sweeping (level %d, run %s)", name, cfg.sweep.level, run_id)
        address, hostvars = controller_host_vars(view)
        ex = cfg.executor
        via_node = ex.route(view.labels)
        self.metrics.in_flight.inc()
        try:
            result = runner.run_playbook(
                cfg.ansible.playbook_dir / cfg.sweep.playbook,
                [runner.Target(name, address, hostvars)],
                cfg.ansible,
                timeout=cfg.sweep.timeout,
                run_id=run_id,
                cancel=cancel.is_set,
                extravars={"fleetmedic_node_lease": False, "sweep_level": cfg.sweep.level},
                via=runner.Via(via_node, ex.receptor) if via_node and ex.receptor else None,
            )
        finally:
            self.metrics.in_flight.dec()
        if cancel.is_set() or result.status == "canceled":
            self._end(name, None)
            log.info("%s: sweep cancelled; released", name)
            return None
        host = result.hosts.get(name) or runner.HostResult(runner.FAILED, message="no result")
        verdict = sweep.judge(host.status, host.stdout, host.message)
        node = self._end(name, verdict, cfg.sweep.level, run_id) or {"metadata": {"name": name}}
        self.metrics.sweeps.labels(result=verdict.result).inc()
        line = f"level {cfg.sweep.level} {verdict.result}: {verdict.summary}"
        if verdict.result == sweep.FAIL:
            line += f"; into the ladder at {verdict.rung}"
        log.info("%s: sweep %s (run %s)", name, line, run_id)
        self.cluster.post_event(
            node,
            "SweepFailed" if verdict.result == sweep.FAIL else "Swept",
            f"sweep {line} (run {run_id})",
            type="Warning" if verdict.result == sweep.FAIL else "Normal",
        )
        return None

    def _end(
        self, name: str, verdict: sweep.Verdict | None, level: int = 2, run_id: str = ""
    ) -> dict | None:
        """Write the end of a sweep; the Node as written, or None when nothing changed."""
        at = stamp(self.clock())
        changed = []

        def edit(node: dict) -> bool:
            changed.append(sweep.record_edit(node, self.vocab, verdict, at, level, run_id))
            return changed[-1]

        node = self.cluster.update_node(name, edit)
        self.put(node)
        return node if changed and changed[-1] else None

    def _end_quietly(self, name: str) -> None:
        try:
            self._end(name, None)
        except FleetmedicError as exc:  # the next plan finds the orphan and tries again
            log.warning("%s: maintenance taint not taken off yet: %s", name, exc)
