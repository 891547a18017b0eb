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
``budget.admit``. The pause ConfigMap is read only when there is something to admit
(switches.py); it also keeps the breaker's record (breakerkeeper.py).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime

from fleetmedic import logcontext
from fleetmedic.adapters import runner
from fleetmedic.adapters.cluster import Cluster
from fleetmedic.controller import sdnotify
from fleetmedic.controller.breakerkeeper import BreakerKeeper
from fleetmedic.controller.chatter import Chatter
from fleetmedic.controller.domainkeeper import DomainKeeper
from fleetmedic.controller.domainplayer import DomainPlayer
from fleetmedic.controller.execute import Executor
from fleetmedic.controller.leadership import Leadership, default_identity
from fleetmedic.controller.metrics import Metrics
from fleetmedic.controller.paperwork import Paperwork
from fleetmedic.controller.recorder import Recorder
from fleetmedic.controller.sweeper import Sweeper
from fleetmedic.controller.switches import SwitchReader
from fleetmedic.controller.ticketer import Ticketer
from fleetmedic.controller.watcher import NodeWatcher, wait_synced
from fleetmedic.controller.work import NodeWork
from fleetmedic.controller.workers import Workers
from fleetmedic.errors import ConfigError
from fleetmedic.model.config import Config
from fleetmedic.model.nodestate import NodeView, own_annotations
from fleetmedic.model.nodestate import view as view_of
from fleetmedic.policy import budget, domains
from fleetmedic.policy.actions import Action, Kind
from fleetmedic.policy.plan import Decision, Plan, actionable, decide_all, make_plan
from fleetmedic.policy.profiles import Assignment, assign

log = logging.getLogger(__name__)

IDLE_WAKE = 60.0  # look at the fleet at least this often (cheap: no API call)
HELD_WAKE = 30.0  # while actions are held (pause ConfigMap, window), look this often
PRUNE_EVERY = 600.0  # old run directories are pruned this often


Sidecar = Callable[[threading.Event, Callable[[], bool]], None]
"""A detector run beside the loop (the Loki source), on a thread of its own, as
``sidecar(stop, acting)``: until ``stop``, changing the cluster only while ``acting()``
(:meth:`Controller.acting`; cli.serve starts them)."""


def utcnow() -> datetime:
    return datetime.now(UTC)


def view_transform(cfg: Config) -> Callable[[dict], NodeView]:
    """What the informer keeps of each Node: its view, holding only the annotations the
    controller reads (its own and the configured BMC address one), not other tools'."""
    vocab, foreign = cfg.vocabulary(), cfg.foreign()
    keep = own_annotations(cfg.read_annotations())
    return lambda node: view_of(node, vocab, foreign, keep=keep)


class Controller:
    """``Controller(cfg, kube).run(stop)`` until ``stop`` is set (or, with ``once``, until
    a cycle admits nothing and no work is under way)."""

    def __init__(
        self,
        cfg: Config,
        kube: Cluster,
        *,
        identity: str | None = None,
        dry_run: bool = False,
        metrics: Metrics | None = None,
        clock: Callable[[], datetime] = utcnow,
        watch_timeout: int = 300,
    ) -> None:
        self.cfg, self.kube, self.clock = cfg, kube, clock
        self.dry_run = dry_run or cfg.dry_run
        self.identity = identity or cfg.leader_election.identity or default_identity()
        self.metrics = metrics or Metrics()
        self._stop = threading.Event()
        self._wake = threading.Event()
        vocab = cfg.vocabulary()
        self.watcher: NodeWatcher[NodeView] = NodeWatcher(
            kube,
            cfg.kube.label_selector,
            watch_timeout=watch_timeout,
            transform=view_transform(cfg),
        )
        self.leadership = Leadership(
            kube,
            cfg.leader_election,
            self.identity,
            on_gained=self._on_gained,
            on_lost=self._on_lost,
            on_change=lambda leading: self.metrics.leader.set(1 if leading else 0),
        )
        cluster = cfg.cluster_name or ""  # (named in emails and chat with `clusters:`)
        self.chatter = Chatter(cfg, lambda: self._stop, cluster=cluster)
        self.paperwork = Paperwork(cfg.cluster_name)
        recorder = Recorder(
            kube,
            vocab,
            self.watcher.put,
            self.metrics,
            lambda: self._stop,
            on_written=self.chatter.written,
            later=self.paperwork.post,
        )
        executor = Executor(
            cfg, kube, cluster=cluster, on_run=lambda d: self.metrics.in_flight.inc(d)
        )
        work = NodeWork(cfg, self.leadership, recorder, executor, self.metrics, clock)
        size = min(64, max(4, 2 * cfg.safety.max_concurrent + 2))
        self.workers: Workers[Action] = Workers(
            work, size, on_done=self._wake.set, cluster=cfg.cluster_name
        )
        self.ticketer = Ticketer(cfg, recorder.write, self.workers.side_job, clock)
        self.sweeper = (
            Sweeper(
                cfg,
                kube,
                self.leadership,
                self.watcher.put,
                self.metrics,
                clock,
                self._wake.set,
                dry_run=self.dry_run,
                cluster=cfg.cluster_name,
                watch_timeout=watch_timeout,
            )
            if cfg.sweeps()
            else None
        )
        self.breakers = {
            name: BreakerKeeper(
                cfg.profile(name),
                kube,
                self.metrics,
                dry_run=self.dry_run,
                send=self.workers.side_job,
                stop=lambda: self._stop,
                profile=name,
                on_trip=self.chatter.breaker,
            )
            for name in cfg.profile_names()
        }
        self.domains = DomainKeeper(
            cfg,
            kube,
            self.metrics,
            dry_run=self.dry_run,
            send=self.workers.side_job,
            stop=lambda: self._stop,
            cluster=cluster,
            player=DomainPlayer(
                cfg,
                recorder.write,
                self.leadership.hold,
                self.leadership.let_go,
                self._wake.set,
                clock,
            )
            if any(d.playbook for d in cfg.domains)
            else None,
            wake=self._wake.set,
        )
        self.switches = SwitchReader(
            kube, cfg, on_read=lambda s: self.metrics.paused.set(1 if s.paused else 0)
        )
        self._settled: dict[str, Decision] = {}  # decide_all's memo
        self._said: dict[str, str] = {}  # last decision logged per node
        self._next_prune = 0.0
        self.cycles = 0
        self.admitted_total = 0

    # -- running ----------------------------------------------------------------------
    def run(self, stop: threading.Event, *, once: bool = False, sync_timeout: float = 60) -> None:
        self._stop = stop
        self.watcher.start(stop)
        if self.sweeper:
            self.sweeper.start(stop)
        logcontext.thread(self._relay, args=(stop,), name="fleetmedic-wake").start()
        wait_synced(self.watcher, sync_timeout)
        conflict = assign(self.views(), self.cfg).error()
        if conflict:
            raise ConfigError(f"profiles: {conflict}")
        acting = not self.dry_run
        if not self.leadership.elected or not acting:
            self._restore_breakers()
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
                    quiet = not admitted and not self.busy() and not self.sweeping()
                    quiet = quiet and not (self.domains.player and self.domains.player.active())
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

    def _relay(self, stop: threading.Event) -> None:
        """Wake the main loop on every informer event."""
        while not stop.is_set():
            if self.watcher.wait_for_change(1.0):
                self._wake.set()

    def _on_lost(self) -> None:
        self.workers.cancel_running()
        if self.domains.player:
            self.domains.player.cancel()  # (its record says running: the next leader resumes)
        if self.sweeper:
            self.sweeper.cancel_running()

    def _on_gained(self) -> None:
        self._restore_breakers()

    def _restore_breakers(self) -> None:
        for keeper in self.breakers.values():
            keeper.restore()
        self.domains.restore()

    def wake(self) -> None:
        self._wake.set()

    def busy(self) -> dict[str, Action]:
        """Nodes the ladder's workers are working on (the sweeper's: :attr:`sweeper`)."""
        return self.workers.busy()

    def sweeping(self) -> set[str]:
        return self.sweeper.busy() if self.sweeper else set()

    @property
    def finished(self) -> int:
        return self.workers.finished

    def shutdown(self, grace: float = 10.0) -> None:
        """Stop: cancel running playbooks (their phases resume on the next start), wait a
        little for workers to record what they finished and for their Events to be
        posted, give the Leases up."""
        self._stop.set()
        if self.sweeper:
            self.sweeper.shutdown(grace)
        self.workers.shutdown(grace)
        if self.domains.player:
            self.domains.player.shutdown(grace)
        self.paperwork.close(grace)
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
        # Busy nodes first, then the Nodes: a worker records its outcome (watcher.put)
        # before it leaves the busy set, so a node that is not busy here is seen with its
        # record. The other order can decide a node from a view older than its outcome,
        # i.e. repeat work that just finished (at 5,000 nodes: every escalation email twice).
        busy = self.busy()
        backoff = self.workers.backed_off()
        sweeping = self.sweeping()
        views = self.views()
        assignment = assign(views, self.cfg)
        self.metrics.observe(views, now)
        self.metrics.gpus.observe(views, assignment.profile_of)
        if not self.dry_run:
            self.ticketer.observe(views, now)  # RMA cases whose escalation is decided
        incidents = self.domains.observe(views, now, busy)  # (before the breakers: none is stale)
        for name, keeper in self.breakers.items():
            members = assignment.nodes_of(name)
            keeper.observe([v for v in views if v.name in members], now)
        plan = self._plan(views, now, busy, set(backoff) | sweeping, assignment, incidents)
        wait = IDLE_WAKE
        settle = domains.next_due(incidents, now)
        if settle is not None:
            wait = min(wait, settle + 0.05)
        if backoff:
            wait = min(wait, min(backoff.values()) - mono)
        for _, a in plan.decisions:
            if a.kind == Kind.WAIT and a.not_before is not None:
                wait = min(wait, (a.not_before - now).total_seconds() + 0.05)
        if plan.admission.held:
            wait = min(wait, HELD_WAKE)
        self._say(plan)
        if self.sweeper:
            admitted = {a.node for a in plan.admission.admitted}
            skip = set(busy) | set(backoff) | admitted | set(incidents.held)  # (not mid-incident)
            self._sweep(views, now, assignment, skip, sweeping)
        if self.dry_run:
            return wait, 0
        decided_on = {v.name: v for v, _ in plan.decisions}
        for action in plan.admission.admitted:
            self.workers.submit(decided_on[action.node], action)
        self.admitted_total += len(plan.admission.admitted)
        self.metrics.admitted.inc(len(plan.admission.admitted))
        if mono >= self._next_prune:
            self._next_prune = mono + PRUNE_EVERY
            self.workers.side_job(lambda: runner.prune_runs(self.cfg.ansible))
        return wait, len(plan.admission.admitted)

    def _plan(
        self,
        views: list[NodeView],
        now: datetime,
        busy: dict[str, Action],
        backoff: set[str],
        assignment: Assignment,
        incidents: domains.Review = domains.NONE,
    ) -> Plan:
        slots = [n for n, a in busy.items() if a.new_work or a.step in budget.WORKING_STEPS]
        decisions = decide_all(
            views,
            now,
            self.cfg,
            skip=set(busy) | backoff,
            memo=self._settled,
            assignment=assignment,
        )
        paused = None
        if actionable(decisions) or any(k.open for k in self.breakers.values()):
            switches = self.switches.get()  # (an open breaker: watch for a reset)
            paused = switches.paused
            for name, keeper in self.breakers.items():
                keeper.adopt_reset(switches.breaker_of(name), now)
        return make_plan(
            views,
            decisions,
            now,
            self.cfg,
            busy_slots=slots,
            paused=paused,
            breaker_reason={name: k.reason for name, k in self.breakers.items()},
            assignment=assignment,
            holds=domains.holds(incidents),
            count_once=domains.grouped(incidents),
        )

    def _sweep(
        self,
        views: list[NodeView],
        now: datetime,
        assignment: Assignment,
        skip: set[str],
        sweeping: set[str],
    ) -> None:
        """Start due sweeps, around the nodes the ladder works on or just admitted."""
        assert self.sweeper is not None
        self.sweeper.tick(
            views,
            now,
            assignment,
            skip=skip,
            sweeping=sweeping,
            paused=lambda: self.switches.get().paused,
            breakers={name: k.reason for name, k in self.breakers.items()},
        )

    def _say(self, plan: Plan) -> None:
        """Log each node's decision when it changes (not every cycle)."""
        held = plan.held
        for _, a in plan.decisions:
            if a.kind == Kind.NONE and a.reason == "healthy":
                self._said.pop(a.node, None)
                continue
            line = a.describe() + (f" [held: {held[a.node]}]" if a.node in held else "")
            if self.dry_run and plan.admitted_for(a.node):
                line = "dry run, would do: " + line
            if self._said.get(a.node) != line:
                self._said[a.node] = line
                log.info("%s", line)
