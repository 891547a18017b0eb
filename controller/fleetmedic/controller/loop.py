"""The controller: the composition root that closes the loop.

    watch Nodes (informer) -> views -> plan (ladder.decide per node, budget.admit)
      -> per admitted action, on a worker thread (work.py):
           node Lease -> ladder.begin -> write -> execute -> ladder.complete -> write
      -> Events on the Node, metrics
      -> with `sweep:`, diagnostic sweeps of idle nodes (sweeper.py, its own workers)

- **All state is on the Node.** The controller keeps only caches (the informer's views,
  which nodes its workers are busy with, per-node back-off, the breaker's memory). Kill
  it anywhere (``kill -9``) and the next start decides from the Nodes.
- **Never block the watch.** The informer runs on its own thread; this loop only plans
  and admits; playbooks, drains and emails run on the worker pool (workers.py). A node
  with work under way in this process is not decided again until it ends.
- **One controller acts** (leadership.py): with ``leader_election.enabled`` only the
  holder of the leader Lease plans; a per-node Lease is held while a node is worked on.
- ``dry_run``: plan and log what would happen, change nothing.

Maintenance windows, the pause switch and the circuit breaker are honoured through
``budget.admit`` (planner.py). The pause ConfigMap (switches.py) also keeps the breaker's
record, the domain incidents and the letters still to deliver (outbox.py).

This module wires the parts and runs the cycle, nothing else. The parts share one
lifecycle and are made from one :class:`~fleetmedic.controller.parts.Context` (parts.py);
the loop holds them in a list (a new part is one line there).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime

from fleetmedic.adapters import runner
from fleetmedic.adapters.cluster import Cluster
from fleetmedic.controller import sdnotify
from fleetmedic.controller.breakerkeeper import Breakers
from fleetmedic.controller.channels import CHANNELS
from fleetmedic.controller.chatter import Chatter
from fleetmedic.controller.domainkeeper import DomainKeeper
from fleetmedic.controller.execute import Executor
from fleetmedic.controller.gpumetrics import GpuGauges
from fleetmedic.controller.handoff import Responder
from fleetmedic.controller.leadership import Leadership, default_identity
from fleetmedic.controller.metrics import Metrics
from fleetmedic.controller.outbox import Outbox
from fleetmedic.controller.paperwork import Paperwork
from fleetmedic.controller.parts import Context, Look, Part
from fleetmedic.controller.planner import DecisionLog, Planner, next_look
from fleetmedic.controller.recorder import Recorder
from fleetmedic.controller.sweeper import Sweeper
from fleetmedic.controller.switches import SwitchReader, pause_configmap
from fleetmedic.controller.ticketer import Ticketer
from fleetmedic.controller.watcher import NodeFeed, NodeWatcher, view_transform, wait_synced
from fleetmedic.controller.work import NodeWork
from fleetmedic.controller.workers import Workers
from fleetmedic.errors import ConfigError
from fleetmedic.model.config import Config
from fleetmedic.model.nodestate import NodeView
from fleetmedic.policy.actions import Action, Update
from fleetmedic.policy.profiles import assign

log = logging.getLogger(__name__)

PRUNE_EVERY = 600.0  # old run directories are pruned this often


def utcnow() -> datetime:
    return datetime.now(UTC)


class Controller:
    """``Controller(cfg, cluster).run(stop)`` until ``stop`` is set (or, with ``once``, until
    a cycle admits nothing and no work is under way)."""

    def __init__(
        self,
        cfg: Config,
        cluster: Cluster,
        *,
        identity: str | None = None,
        dry_run: bool = False,
        metrics: Metrics | None = None,
        clock: Callable[[], datetime] = utcnow,
        watch_timeout: int = 300,
        observe_leases: bool = False,
        leader_guard: Callable[[], None] | None = None,
    ) -> None:
        """``observe_leases`` and ``leader_guard``: the Leadership options a cluster kind
        asks for (a Slurm cluster's controllers on several bastions: kinds/slurmha.py)."""
        self.cfg, self.cluster, self.clock = cfg, cluster, clock
        self.dry_run = dry = dry_run or cfg.dry_run
        self.identity = identity or cfg.leader_election.identity or default_identity()
        self.metrics = m = metrics or Metrics()
        self._stop, self._wake = threading.Event(), threading.Event()
        stopped, wake = (lambda: self._stop), self._wake.set  # (run() replaces the event)
        self.watcher: NodeWatcher[NodeView] = NodeWatcher(
            cluster, cfg.kube.label_selector, watch_timeout, transform=view_transform(cfg)
        )
        self.leadership = lead = Leadership(
            cluster,
            cfg.leader_election,
            self.identity,
            on_gained=self.restore,
            on_lost=self._on_lost,
            on_change=lambda leading: m.leader.set(1 if leading else 0),
            observe=observe_leases,
            guard=leader_guard,
        )
        store = None if dry else cluster
        self.outbox = Outbox(
            cfg, CHANNELS, stop=stopped, store=store, ref=pause_configmap(cfg), acting=self.acting
        )
        self.chatter = Chatter(cfg, stopped, cluster=cfg.cluster_name or "", outbox=self.outbox)
        self.paperwork = Paperwork(cfg.cluster_name)
        recorder = Recorder(
            cluster,
            cfg.vocabulary(),
            self.watcher.put,
            m,
            stopped,
            on_written=self._written,
            later=self.paperwork.post,
        )
        executor = Executor(
            cfg, cluster, cluster_name=cfg.cluster_name or "", on_run=lambda d: m.in_flight.inc(d)
        )
        work = NodeWork(cfg, lead, recorder, executor, m, clock)
        size = min(64, max(4, 2 * cfg.safety.max_concurrent + 2))
        self.workers: Workers[Action] = Workers(work, size, wake, cluster=cfg.cluster_name)
        self.switches = SwitchReader(
            cluster, cfg, on_read=lambda s: m.paused.set(int(bool(s.paused)))
        )
        ctx = Context(
            cfg=cfg,
            cluster=cluster,
            metrics=m,
            clock=clock,
            dry_run=dry,
            watch_timeout=watch_timeout,
            leadership=lead,
            outbox=self.outbox,
            views=self.watcher.snapshot,
            put=self.watcher.put,
            write=recorder.write,
            side_job=self.workers.side_job,
            acting=self.acting,
            wake=wake,
        )
        self.breakers = Breakers(ctx, on_trip=self.chatter.breaker)
        self.planner = Planner(cfg, self.switches, self.breakers)
        self.domains = DomainKeeper(ctx)
        self.handoff = Responder.if_configured(ctx)  # NVSentinel's (handoff.py)
        self.sweeper = Sweeper.if_configured(
            ctx, paused=lambda: self.switches.get().paused, breakers=self.breakers.reasons
        )
        self.ticketer = Ticketer(cfg, ctx.write, ctx.side_job, ctx.outbox, clock, ctx.acting, wake)
        # the order is the order of every hook: domains are reviewed before the breakers
        # (so no incident is stale), and sweeps and the ladder stop before the paperwork
        parts: list[Part | None] = [
            NodeFeed(self.watcher, wake),
            self.sweeper,
            self.workers,
            self.chatter,  # (hears what is written before NVSentinel's responder does)
            self.handoff,
            self.domains,
            self.breakers,
            self.outbox,
            self.ticketer,
            GpuGauges(m.gpus),
            self.paperwork,
        ]
        self.parts: list[Part] = [p for p in parts if p is not None]
        self.decisions = DecisionLog(log, self.dry_run)
        self._next_prune = 0.0
        self.cycles = 0

    # -- running ----------------------------------------------------------------------
    def run(self, stop: threading.Event, *, once: bool = False, sync_timeout: float = 60) -> None:
        self._stop = stop
        for part in self.parts:
            part.start(stop)
        wait_synced(self.watcher, sync_timeout)
        conflict = assign(self.views(), self.cfg).error()
        if conflict:
            raise ConfigError(f"profiles: {conflict}")
        acting = not self.dry_run
        if not self.leadership.elected or not acting:
            self.restore()
        if once and self.leadership.elected and acting:
            self.leadership.lead_within(self.cfg.leader_election.lease_duration + 2)
        sdnotify.notify("READY=1")
        log.info(
            "controller %s watching %d nodes%s",
            self.identity,
            len(self.watcher.snapshot()),
            " (dry run: changing nothing)" if self.dry_run else "",
        )
        dog = sdnotify.watchdog_interval()
        try:
            while not stop.is_set():
                if dog:
                    sdnotify.notify("WATCHDOG=1")
                if self.dry_run or self.leadership.leading():
                    finished = self.workers.finished
                    wait, admitted = self.cycle()
                    # quiet: nothing admitted, nothing under way, and no work ended while
                    # this cycle looked (its view of that node may predate the record)
                    quiet = not admitted and not any(p.active() for p in self.parts)
                    if once and quiet and finished == self.workers.finished:
                        break
                else:
                    wait = self.cfg.leader_election.retry_period
                if acting:
                    wait = min(wait, self.leadership.next_due())
                if dog:
                    wait = min(wait, dog)
                self._wake.wait(max(0.05, wait))
                self._wake.clear()
        finally:
            self.shutdown()

    def acting(self) -> bool:
        """True while this controller may change the cluster: it leads, not a dry run."""
        return not self.dry_run and self.leadership.is_leading

    def _written(self, upd: Update, view: NodeView) -> None:
        """What the Recorder wrote goes to every part (chat and NVSentinel report it)."""
        for part in self.parts:
            part.written(upd, view)

    def restore(self) -> None:
        """Every part takes its records (at start; on becoming the leader)."""
        for part in self.parts:
            part.restore()

    def _on_lost(self) -> None:
        for part in self.parts:
            part.cancel()

    def wake(self) -> None:
        self._wake.set()

    def shutdown(self, grace: float = 10.0) -> None:
        """Stop: cancel running playbooks (their phases resume on the next start), wait a
        little for workers to record what they finished and for their Events to be
        posted, give the Leases up."""
        self._stop.set()
        for part in self.parts:
            part.shutdown(grace)
        if not self.dry_run:
            self.leadership.resign()
        self.metrics.leader.set(0)
        sdnotify.notify("STOPPING=1")

    # -- one cycle --------------------------------------------------------------------
    def views(self) -> list[NodeView]:
        views = self.watcher.snapshot()
        return [views[name] for name in sorted(views)]

    def cycle(self) -> tuple[float, int]:
        """Plan and start work. Returns (seconds until it is worth looking again,
        actions admitted)."""
        self.cycles += 1
        self.metrics.cycles.inc()
        now, mono = self.clock(), time.monotonic()
        # Work under way first, then the Nodes: a worker records its outcome (watcher.put)
        # before it leaves the busy set, so a node that is not busy here is seen with its
        # record. The other order can decide a node from a view older than its outcome,
        # i.e. repeat work that just finished (at 5,000 nodes: every escalation email twice).
        busy = self.workers.busy()
        backoff = self.workers.backed_off()
        working = {p.name: p.working() for p in self.parts}
        views = self.views()
        look = Look(now, views, assign(views, self.cfg), busy, working)
        self.metrics.observe(views, now)
        for part in self.parts:
            part.observe(look)
        incidents = self.domains.last
        elsewhere = set().union(*working.values())
        plan = self.planner.plan(look, set(busy) | set(backoff) | elsewhere, incidents)
        wait = next_look(plan, incidents, backoff, now, mono)
        self.decisions.said(plan)
        admitted = {a.node for a in plan.admission.admitted}
        skip = set(busy) | set(backoff) | admitted | set(incidents.held)  # (not mid-incident)
        for part in self.parts:
            part.planned(look, plan, skip)
        if self.dry_run:
            return wait, 0
        decided_on = {v.name: v for v, _ in plan.decisions}
        for action in plan.admission.admitted:
            self.workers.submit(decided_on[action.node], action)
        self.metrics.admitted.inc(len(plan.admission.admitted))
        if mono >= self._next_prune:
            self._next_prune = mono + PRUNE_EVERY
            self.workers.side_job(lambda: runner.prune_runs(self.cfg.ansible))
        return wait, len(plan.admission.admitted)
