"""The controller: the composition root that closes the loop.

    watch Nodes (informer) -> views -> ladder.decide per node -> budget.admit
      -> per admitted action, on a worker thread:
           node Lease -> ladder.begin -> write -> execute -> ladder.complete -> write
      -> Events on the Node, metrics

- **All state is on the Node.** The controller keeps only caches: the informer's Node
  copies, which nodes a worker of this process is busy with, per-node back-off after an
  error, and the circuit breaker's memory. Kill it anywhere (``kill -9``) and the next
  start decides from the Nodes: the in-flight marker is written *before* a phase starts
  and updated *after* it ends, a reboot is confirmed by boot_id (see policy/inflight.py).
- **Never block the watch.** The informer runs on its own thread; the main loop only
  decides and admits; playbooks, drains and emails run on a thread pool sized from the
  budget. A node with work under way in this process is not decided again until it ends.
- **A failed write or a Stale re-decides.** ``Update.apply`` checks the state and the
  in-flight marker on the fresh Node; if either moved (a human, another tool) the
  action is dropped and the node decided again from what the Node now says. A
  TemporaryError backs the node off for its ``delay``; the recording of an outcome is
  retried for up to two minutes first, because a lost outcome means re-running the phase.
- **One controller acts.** With ``leader_election.enabled`` only the holder of the leader
  Lease decides; a leader that cannot renew within ``renew_deadline`` cancels its running
  playbooks (their phases stay ``running`` on the Node, so the next leader resumes them)
  and stops acting. A per-node Lease is held while a playbook, probe or drain runs on a
  node, so an ad-hoc run holding it makes the controller wait.
- ``dry_run``: decide and admit, log what would happen, change nothing.

Maintenance windows, the pause switch and the circuit breaker are honoured through
``budget.admit``. The pause ConfigMap is read only when there is something to admit (at
most every 5 s), so an idle fleet costs no API calls; it also keeps the breaker's record,
so an open breaker survives a restart and ``fleetmedic breaker reset`` closes it.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime

from fleetmedic.adapters import runner
from fleetmedic.adapters.kube import Kube
from fleetmedic.adapters.lease import Lease, node_lease_name
from fleetmedic.controller import sdnotify
from fleetmedic.controller.breakerkeeper import BreakerKeeper
from fleetmedic.controller.execute import Cancelled, Executor
from fleetmedic.controller.metrics import Metrics
from fleetmedic.controller.switches import Switches, read_switches
from fleetmedic.controller.watcher import NodeWatcher, wait_synced
from fleetmedic.errors import FleetmedicError, PermanentError, TemporaryError
from fleetmedic.model import keys
from fleetmedic.model.config import Config
from fleetmedic.model.nodestate import NodeView
from fleetmedic.model.nodestate import view as view_of
from fleetmedic.policy import budget, ladder
from fleetmedic.policy.actions import Action, Kind, Stale, Update
from fleetmedic.policy.history import parse_time

log = logging.getLogger(__name__)

IDLE_WAKE = 60.0  # look at the fleet at least this often (cheap: no API call)
HELD_WAKE = 30.0  # while actions are held (pause ConfigMap, window), look this often
PAUSE_CACHE = 5.0  # the pause switch is read at most this often
RECORD_RETRY = 120.0  # keep trying to record an outcome this long before giving up
ERROR_BACKOFF = 60.0  # after an unexpected error, leave the node alone this long
PRUNE_EVERY = 600.0
LEASED_KINDS = (Kind.RUN, Kind.PROBE, Kind.DRAIN)  # actions that touch the node itself


def utcnow() -> datetime:
    return datetime.now(UTC)


@dataclass(frozen=True)
class Plan:
    """One cycle's decisions: every node's next action and what the budget admits."""

    decisions: tuple[tuple[NodeView, Action], ...]
    admission: budget.Admission
    fleet: budget.Fleet

    def admitted_for(self, name: str) -> Action | None:
        return next((a for a in self.admission.admitted if a.node == name), None)


def decide_all(
    views: Sequence[NodeView],
    now: datetime,
    cfg: Config,
    skip: Iterable[str] = (),
    memo: dict[str, tuple[NodeView, Action]] | None = None,
) -> list[tuple[NodeView, Action]]:
    """Every node's next action (nodes in ``skip`` left out).

    ``memo`` keeps Kind.NONE decisions across cycles: a Kind.NONE depends on the Node alone, never
    on the clock (ladder.decide says so and a property test holds it to that), so it
    stands while the node's view is the same object, i.e. the Node has not changed.
    A fleet of thousands of healthy nodes then costs a dict lookup per node per cycle.
    """
    skip = set(skip)
    decisions = []
    for v in views:
        if v.name in skip:
            continue
        if memo is not None:
            known = memo.get(v.name)
            if known is not None and known[0] is v:
                decisions.append(known)
                continue
        try:
            decision = (v, ladder.decide(v, now, cfg))
        except Exception:  # one odd Node must never stop the fleet's loop
            log.exception("%s: cannot decide; leaving it alone this cycle", v.name)
            continue
        decisions.append(decision)
        if memo is not None:
            if decision[1].kind == Kind.NONE:
                memo[v.name] = decision
            else:
                memo.pop(v.name, None)
    if memo is not None and len(memo) > len(views):
        present = {v.name for v in views}
        for gone in [name for name in memo if name not in present]:
            del memo[gone]
    return decisions


def actionable(decisions: Iterable[tuple[NodeView, Action]]) -> bool:
    return any(a.kind not in (Kind.NONE, Kind.WAIT) for _, a in decisions)


def make_plan(
    views: Sequence[NodeView],
    decisions: Sequence[tuple[NodeView, Action]],
    now: datetime,
    cfg: Config,
    *,
    busy_slots: Iterable[str] = (),
    paused: str | None = None,
    breaker_reason: str | None = None,
) -> Plan:
    """Pass the decisions through the budget (``views``: the whole pool).

    ``busy_slots``: nodes this process is working on that hold a repair slot even if
    their Node does not show it yet. New work is offered longest-waiting first.
    """
    fleet = budget.fleet_of(views)
    fleet = budget.Fleet(fleet.size, fleet.healthy, fleet.active | frozenset(busy_slots))
    pending = [
        (v, a) for v, a in decisions if a.kind not in (Kind.NONE, Kind.WAIT)
    ]  # admit skips the rest
    since = {v.name: v.annotations.get(keys.ANN_STATE_SINCE) or "" for v, _ in pending}
    actions = sorted(
        (a for _, a in pending),
        key=lambda a: (not a.new_work, since[a.node] if a.new_work else "", a.node),
    )
    admission = budget.admit(actions, fleet, cfg.safety, now, paused=paused, breaker=breaker_reason)
    return Plan(tuple(decisions), admission, fleet)


def default_identity() -> str:
    return f"{socket.gethostname()}-{os.getpid()}"


class Controller:
    """``Controller(cfg, kube).run(stop)`` until ``stop`` is set (or, with ``once``, until
    a cycle admits nothing and no work is under way)."""

    def __init__(
        self,
        cfg: Config,
        kube: Kube,
        *,
        identity: str | None = None,
        dry_run: bool = False,
        metrics: Metrics | None = None,
        clock: Callable[[], datetime] = utcnow,
        watch_timeout: int = 300,
    ) -> None:
        self.cfg, self.kube, self.clock = cfg, kube, clock
        self.vocab, self.foreign = cfg.vocabulary(), cfg.foreign()
        self.dry_run = dry_run or cfg.dry_run
        le = cfg.leader_election
        self.identity = identity or le.identity or default_identity()
        self.metrics = metrics or Metrics()
        self.watcher: NodeWatcher[NodeView] = NodeWatcher(
            kube,
            cfg.kube.label_selector,
            watch_timeout=watch_timeout,
            transform=lambda node: view_of(node, self.vocab, self.foreign),
        )
        self._settled: dict[str, tuple[NodeView, Action]] = {}  # decide_all's memo
        self.executor = Executor(cfg, kube, on_run=lambda d: self.metrics.in_flight.inc(d))
        workers = min(64, max(4, 2 * cfg.safety.max_concurrent + 2))
        self.pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="fleetmedic-work")
        self.leader_lease = (
            Lease(kube, le.namespace, le.lease_name, self.identity, max(1, int(le.lease_duration)))
            if le.enabled
            else None
        )
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._cancel = threading.Event()  # replaced after each cancellation
        self._busy: dict[str, Action] = {}
        self._node_leases: dict[str, tuple[Lease, threading.Lock]] = {}
        self._backoff: dict[str, float] = {}  # node -> monotonic time to leave it alone until
        self._said: dict[str, str] = {}  # last decision logged per node
        self.breaker = BreakerKeeper(
            cfg,
            kube,
            self.metrics,
            dry_run=self.dry_run,
            send=lambda job: self.pool.submit(job),
            stop=lambda: self._stop,
        )
        self._is_leader = le.enabled is False
        self._renewed = 0.0
        self._next_renew = 0.0
        self._next_node_renew = 0.0
        self._next_prune = 0.0
        self._switches_read: tuple[float, Switches] = (0.0, Switches())  # (monotonic time, what)
        self.cycles = 0
        self.admitted_total = 0
        self.finished = 0  # work items ended (for --once)
        self._futures: dict[str, Future] = {}

    # -- running ----------------------------------------------------------------
    def run(self, stop: threading.Event, *, once: bool = False, sync_timeout: float = 60) -> None:
        self._stop = stop
        self.watcher.start(stop)
        threading.Thread(
            target=self._relay, args=(stop,), name="fleetmedic-wake", daemon=True
        ).start()
        wait_synced(self.watcher, sync_timeout)
        if self.leader_lease is None or self.dry_run:
            self.breaker.restore()
        if once and self.leader_lease is not None and not self.dry_run:
            self._lead_within(self.cfg.leader_election.lease_duration + 2)
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
                wait = IDLE_WAKE
                if self.dry_run or self._lead():
                    finished = self.finished
                    wait, admitted = self.cycle()
                    # quiet: nothing admitted, nothing under way, and no work ended while
                    # this cycle looked (its view of that node may predate the record)
                    if once and not admitted and not self.busy() and finished == self.finished:
                        break
                else:
                    wait = self.cfg.leader_election.retry_period
                if self.leader_lease is not None and not self.dry_run:
                    wait = min(wait, self.cfg.leader_election.retry_period)
                if dog:
                    wait = min(wait, dog)
                self._wake.wait(max(0.05, wait))
                self._wake.clear()
        finally:
            self.shutdown()

    def _relay(self, stop: threading.Event) -> None:
        """Wake the main loop on every informer event."""
        while not stop.is_set():
            if self.watcher.wait_for_change(1.0):
                self._wake.set()

    def wake(self) -> None:
        self._wake.set()

    def busy(self) -> dict[str, Action]:
        with self._lock:
            return dict(self._busy)

    def shutdown(self, grace: float = 10.0) -> None:
        """Stop: cancel running playbooks (their phases resume on the next start), wait a
        little for workers to record what they finished, give the Leases up."""
        self._stop.set()
        self._cancel.set()
        self.pool.shutdown(wait=False, cancel_futures=True)
        with self._lock:
            for name, future in list(self._futures.items()):
                if future.cancelled():  # queued, never started
                    self._busy.pop(name, None)
        deadline = time.monotonic() + grace
        while self.busy() and time.monotonic() < deadline:
            time.sleep(0.1)
        if self.busy():
            log.warning(
                "stopping with work under way on %s; the next start resumes it",
                ", ".join(sorted(self.busy())),
            )
        if self.leader_lease is not None and self._is_leader and not self.dry_run:
            try:
                self.leader_lease.release()
            except FleetmedicError as exc:
                log.warning("could not release the leader Lease: %s", exc)
        self.metrics.leader.set(0)
        sdnotify.notify("STOPPING=1")

    # -- leadership ---------------------------------------------------------------
    def _lead(self) -> bool:
        """Take or renew the leader Lease when due; True while this controller leads."""
        if self.leader_lease is None:
            self.metrics.leader.set(1)
            return True
        le, now = self.cfg.leader_election, time.monotonic()
        if now >= self._next_renew:
            self._next_renew = now + le.retry_period
            try:
                ok = self.leader_lease.try_acquire()
            except FleetmedicError as exc:
                log.warning("leader Lease: %s", exc)
                ok = False
            if ok:
                self._renewed = now
                if not self._is_leader:
                    log.info(
                        "leading as %s (Lease %s/%s)", self.identity, le.namespace, le.lease_name
                    )
                    sdnotify.notify(f"STATUS=leading as {self.identity}")
                    self.breaker.restore()
                self._is_leader = True
            elif self._is_leader and now - self._renewed > le.renew_deadline:
                self._lose_leadership()
            elif not self._is_leader:
                sdnotify.notify("STATUS=standing by: another controller holds the leader Lease")
        if self._is_leader:
            self._renew_node_leases(now)
        self.metrics.leader.set(1 if self._is_leader else 0)
        return self._is_leader

    def _lead_within(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while not self._lead():
            if time.monotonic() > deadline:
                holder = self.leader_lease.current_holder() if self.leader_lease else None
                le = self.cfg.leader_election
                raise PermanentError(
                    f"another controller ({holder or 'unknown'}) holds the "
                    f"leader Lease {le.namespace}/{le.lease_name}"
                )
            time.sleep(min(1.0, self.cfg.leader_election.retry_period))
            self._next_renew = 0.0

    def _lose_leadership(self) -> None:
        log.error(
            "lost the leader Lease (not renewed within %.0fs): cancelling running work",
            self.cfg.leader_election.renew_deadline,
        )
        self._is_leader = False
        with self._lock:
            old, self._cancel = self._cancel, threading.Event()
        old.set()

    def _renew_node_leases(self, now: float) -> None:
        if now < self._next_node_renew:
            return
        self._next_node_renew = now + max(1.0, self.cfg.leader_election.node_lease_duration / 3)
        with self._lock:
            held = list(self._node_leases.items())
        for name, entry in held:
            lease, guard = entry
            with guard:  # never renew a Lease its worker is giving up right now
                with self._lock:
                    if self._node_leases.get(name) is not entry:
                        continue
                try:
                    if not lease.try_acquire():
                        log.warning(
                            "node Lease %s was taken by %s while we worked",
                            lease.name,
                            lease.current_holder(),
                        )
                except FleetmedicError as exc:
                    log.warning("node Lease %s: %s", lease.name, exc)

    # -- one cycle ------------------------------------------------------------------
    def views(self) -> list[NodeView]:
        views = self.watcher.snapshot()
        return [views[name] for name in sorted(views)]

    def cycle(self) -> tuple[float, int]:
        """Decide, admit and start work. Returns (seconds until it is worth looking again,
        actions admitted)."""
        self.cycles += 1
        now, mono = self.clock(), time.monotonic()
        # Busy nodes first, then the Nodes: a worker records its outcome (watcher.put)
        # before it leaves _busy, so a node that is not busy here is seen with its record.
        # The other order can decide a node from a view older than its outcome, i.e.
        # repeat work that just finished (at 5,000 nodes: every escalation email twice).
        busy = self.busy()
        with self._lock:
            self._backoff = {n: t for n, t in self._backoff.items() if t > mono}
            backoff = dict(self._backoff)
        views = self.views()
        self._observe(views, now)
        self.breaker.observe(views, now)
        wait = IDLE_WAKE
        if backoff:
            wait = min(wait, min(backoff.values()) - mono)
        slots = [n for n, a in busy.items() if a.new_work or a.step in budget.WORKING_STEPS]
        decisions = decide_all(
            views, now, self.cfg, skip=set(busy) | set(backoff), memo=self._settled
        )
        for _, a in decisions:
            if a.kind == Kind.WAIT and a.not_before is not None:
                wait = min(wait, (a.not_before - now).total_seconds() + 0.05)
        paused = None
        if actionable(decisions) or self.breaker.open:  # open: watch for a reset
            switches = self._switches()
            paused = switches.paused
            self.breaker.adopt_reset(switches.breaker, now)
        plan = make_plan(
            views,
            decisions,
            now,
            self.cfg,
            busy_slots=slots,
            paused=paused,
            breaker_reason=self.breaker.reason,
        )
        if plan.admission.held:
            wait = min(wait, HELD_WAKE)
        self._say(plan)
        if self.dry_run:
            return wait, 0
        decided_on = {v.name: v for v, _ in plan.decisions}
        for action in plan.admission.admitted:
            self._submit(decided_on[action.node], action)
        self.admitted_total += len(plan.admission.admitted)
        if mono >= self._next_prune:
            self._next_prune = mono + PRUNE_EVERY
            self.pool.submit(runner.prune_runs, self.cfg.ansible)
        return wait, len(plan.admission.admitted)

    def _switches(self) -> Switches:
        """The pause ConfigMap, read at most every few seconds (only when there is work)."""
        at, switches = self._switches_read
        if at and time.monotonic() - at < PAUSE_CACHE:
            return switches
        try:
            switches = read_switches(self.kube, self.cfg)
        except FleetmedicError as exc:
            log.warning("cannot read the pause switch (%s); holding all action", exc)
            switches = Switches(f"pause switch unreadable: {exc}")
        self._switches_read = (time.monotonic(), switches)
        self.metrics.paused.set(1 if switches.paused else 0)
        return switches

    def _say(self, plan: Plan) -> None:
        held = {a.node: why for a, why in plan.admission.held}
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

    def _observe(self, views: list[NodeView], now: datetime) -> None:
        counts: dict[str, int] = {}
        longest = 0.0
        for v in views:
            counts[v.state] = counts.get(v.state, 0) + 1
            if v.in_repair:
                since = parse_time(v.annotations.get(keys.ANN_STATE_SINCE))
                if since:
                    longest = max(longest, (now - since).total_seconds())
        self.metrics.set_states(counts, sum(1 for v in views if v.slow_network))
        self.metrics.unhealthy_seconds.set(longest)

    # -- one node's work ----------------------------------------------------------
    def _submit(self, view: NodeView, action: Action) -> None:
        with self._lock:
            self._busy[action.node] = action
            cancel = self._cancel
        try:
            future = self.pool.submit(self._work, view, action, cancel)
        except RuntimeError:  # shutting down
            with self._lock:
                self._busy.pop(action.node, None)
            return
        with self._lock:
            self._futures[action.node] = future

    def _work(self, view: NodeView, action: Action, cancel: threading.Event) -> None:
        name = action.node
        lease = None
        try:
            if cancel.is_set():
                return
            if action.kind in LEASED_KINDS:
                lease = self._take_node_lease(name)
                if lease is None:
                    return
            if action.kind == Kind.WRITE:
                assert action.update is not None
                self.write(action.update)
                return
            run_id = (
                runner.new_run_id(f"{name}-{action.phase or action.kind}")
                if action.kind in (Kind.RUN, Kind.PROBE)
                else None
            )
            upd = ladder.begin(view, action, self.clock(), self.cfg, run_id)
            if upd is not None:
                view = self.write(upd)
            if cancel.is_set():
                raise Cancelled(f"{name}: cancelled before {action.kind}")
            outcome = self.executor.execute(action, view, run_id, cancel)
            if action.kind == Kind.ESCALATE:
                self.metrics.escalations.labels(outcome=outcome.status).inc()
            upd = ladder.complete(view, action, outcome, self.clock(), self.cfg)
            if upd is not None:
                self.write(upd, retry_for=RECORD_RETRY)
        except Stale as exc:
            log.info("%s: %s; deciding again", name, exc)
        except Cancelled as exc:
            log.info("%s", exc)
        except TemporaryError as exc:
            log.warning(
                "%s: %s (%s); trying again in %.0fs", name, exc, action.describe(), exc.delay
            )
            self._back_off(name, max(exc.delay, 1.0))
        except FleetmedicError as exc:
            log.error("%s: %s (%s)", name, exc, action.describe())
            self._back_off(name, ERROR_BACKOFF)
        except Exception:
            log.exception("%s: unexpected error in %s", name, action.describe())
            self._back_off(name, ERROR_BACKOFF)
        finally:
            if lease is not None:
                self._give_node_lease(name, lease)
            with self._lock:
                self._busy.pop(name, None)
                self._futures.pop(name, None)
                self.finished += 1
            self._wake.set()

    def _back_off(self, name: str, seconds: float) -> None:
        with self._lock:
            self._backoff[name] = time.monotonic() + seconds

    def _take_node_lease(self, name: str) -> Lease | None:
        le = self.cfg.leader_election
        lease = Lease(
            self.kube,
            le.namespace,
            node_lease_name(name),
            self.identity,
            max(1, int(le.node_lease_duration)),
        )
        if not lease.try_acquire():
            holder = lease.current_holder()
            log.info("%s: node Lease held by %s; waiting", name, holder)
            self._back_off(name, min(le.node_lease_duration, 15.0))
            return None
        with self._lock:
            self._node_leases[name] = (lease, threading.Lock())
        return lease

    def _give_node_lease(self, name: str, lease: Lease) -> None:
        with self._lock:
            entry = self._node_leases.get(name)
        guard = entry[1] if entry else threading.Lock()
        with guard:
            with self._lock:
                self._node_leases.pop(name, None)
            try:
                lease.release()
            except FleetmedicError as exc:
                log.warning("%s: could not release the node Lease: %s", name, exc)

    # -- writing ------------------------------------------------------------------
    def write(self, upd: Update, retry_for: float = 0.0) -> NodeView:
        """Apply ``upd`` to the Node (read-modify-write, RV-guarded), record the result in
        the informer's cache, post its Events. Stale propagates; other TemporaryErrors are
        retried for ``retry_for`` seconds."""
        deadline = time.monotonic() + retry_for
        while True:
            try:
                return self._write_once(upd)
            except Stale:
                raise
            except TemporaryError as exc:
                if time.monotonic() >= deadline or self._stop.is_set():
                    raise
                log.warning("%s: recording failed (%s); retrying", upd.node, exc)
                time.sleep(min(max(exc.delay, 0.5), 5.0))

    def _write_once(self, upd: Update) -> NodeView:
        changed = False
        before = None

        def mutate(node: dict) -> bool:
            nonlocal changed, before
            before = self.vocab.repair_state_of((node.get("spec") or {}).get("taints") or [])
            changed = upd.apply(node, self.vocab)
            return changed

        node = self.kube.update_node(upd.node, mutate)
        after = self.watcher.put(node)
        if not changed:
            return after
        if upd.state is not None and (before or "healthy") != after.state:
            log.info("%s: %s -> %s", upd.node, before or "healthy", after.state)
        for ev in upd.events:
            log.info("%s: %s: %s", upd.node, ev.reason, ev.message)
            self.kube.post_event(node, ev.reason, ev.message, ev.type)
        for attempt in upd.append:
            self.metrics.remediations.labels(step=attempt.step, result=attempt.result).inc()
            start, end = parse_time(attempt.start), parse_time(attempt.end)
            if start and end and attempt.step in budget.WORKING_STEPS:
                self.metrics.duration.labels(step=attempt.step).observe(
                    max(0.0, (end - start).total_seconds())
                )
        return after
