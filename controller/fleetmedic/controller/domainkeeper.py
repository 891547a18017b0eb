"""Domain incidents as the controller drives them: reviewed every cycle, recorded so a
restarted or new leader finds them, told to people, an Event and a record on each of its
nodes, the metrics.

The policy (when an incident opens, which nodes it holds, when it closes) is
:mod:`fleetmedic.policy.domains`; this module drives it, with three helpers:

- the record (controller/domainrecord.py): data key ``domains`` of the pause ConfigMap,
  read at start and on becoming leader, written when one opens or closes;
- the messages (controller/domainmessages.py): one email and one chat message per
  incident, and one of each when its playbook's incident closes, through the outbox
  (controller/outbox.py), which retries and keeps them;
- ``fleetmedic domain release NAME`` marks the incident closed on that record; the leader
  reads the record every few seconds while an incident is open and adopts the release;
- on each node of the domain: an Event (``DomainIncidentOpened``/``Closed``) and the
  ``fleetmedic.io/domain-incidents`` annotation (history, status, the inventory groups);
- a domain playbook (``action: {playbook: ...}``; policy/domains_play.py): recorded on the
  record before it starts and after it ends, run (and the verify after it) by the
  :class:`~fleetmedic.controller.domainplayer.DomainPlayer`; the incident closes when the
  verify has returned the nodes that pass, and the close's email says what it did.

The nodes' records run off the main loop (``send``), and never break it.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Collection, Sequence
from datetime import datetime

from fleetmedic.adapters import runner
from fleetmedic.controller import domainmessages
from fleetmedic.controller.domainplayer import RUN, VERIFY, DomainPlayer, Done
from fleetmedic.controller.domainrecord import CLOSED_KEPT, IncidentStore
from fleetmedic.controller.parts import Context, Look, Part
from fleetmedic.errors import FleetmedicError
from fleetmedic.model import nodeedit
from fleetmedic.model.config import DomainConfig
from fleetmedic.model.nodestate import NodeView
from fleetmedic.policy import domainnode, domains, domains_play
from fleetmedic.policy.domains import Incident, Review
from fleetmedic.policy.history import stamp

log = logging.getLogger(__name__)
READ_EVERY = 5.0  # seconds between reads of the record while incidents are open
PLAY_RETRY = 30.0  # seconds before a domain playbook that could not start is tried again
EMPTY = domains.NONE


class DomainKeeper(Part):
    """``send`` runs a job off the main loop (the nodes' records); ``outbox`` takes the
    messages. One part of the loop (controller/parts.py): its review of the cycle is
    :attr:`last`, which the plan reads."""

    name = "domains"

    def __init__(self, ctx: Context) -> None:
        self.cfg, self.cluster, self.metrics = ctx.cfg, ctx.cluster, ctx.metrics
        self.dry_run, self.send, self.outbox = ctx.dry_run, ctx.side_job, ctx.outbox
        self.cluster_name = ctx.cfg.cluster_name or ""  # (named in emails and chat)
        self.store = IncidentStore(ctx.cfg, ctx.cluster, dry_run=ctx.dry_run)
        self.player, self.wake = DomainPlayer.if_configured(ctx), ctx.wake
        self._play_retry: dict[str, float] = {}  # incident id -> monotonic time to try again
        self._play_said: dict[str, str] = {}  # incident id -> the last wait logged
        self.by_key: dict[str, DomainConfig] = {d.key: d for d in ctx.cfg.domains}
        self.memory = domains.Memory()
        self.index = domains.Index(tuple(self.by_key))  # (across cycles: see Index)
        self.incidents: tuple[Incident, ...] = ()
        self.closed: tuple[Incident, ...] = ()  # recently closed, as on the record
        self.released: list[Incident] = []  # closed by hand, not yet reviewed
        self.last: Review = EMPTY
        self._read_at = 0.0

    @property
    def enabled(self) -> bool:
        return bool(self.cfg.domains)

    # -- the record ----------------------------------------------------------------------
    def restore(self) -> None:
        """Start from the record (a restart, a new leader); the first review takes the
        baseline of fences, so old fences open nothing."""
        if not self.enabled:
            return
        try:
            every = self.store.read().incidents
        except FleetmedicError as exc:
            log.warning("cannot read the domain incidents' record (%s); starting with none", exc)
            return
        self.incidents = tuple(i for i in every if i.open)
        self.closed = tuple(i for i in every if not i.open)[-CLOSED_KEPT:]
        self.memory = domains.Memory()
        self.metrics.domain_incidents_open.set(len(self.incidents))
        for inc in self.incidents:
            log.error(
                "domain incident %s open since %s (recorded on ConfigMap %s): its nodes stay "
                "held until they pass or `fleetmedic domain release %s`",
                inc.name,
                inc.opened_at,
                self.cfg.safety.pause_configmap,
                inc.name,
            )
            if inc.play is not None and inc.play.status in (
                domains_play.RUNNING,
                domains_play.VERIFY,
            ):
                log.warning(
                    "domain incident %s: its playbook %s was %s (run %s) when the last "
                    "controller stopped: resumed with the same request id %s",
                    inc.name,
                    inc.play.playbook,
                    "running" if inc.play.status == domains_play.RUNNING else "verifying",
                    inc.play.run_id,
                    domains_play.request_id(inc.id),
                )

    def poll_releases(self) -> None:
        """While incidents are open, adopt a ``fleetmedic domain release`` from the record
        (read at most every :data:`READ_EVERY` seconds)."""
        if not self.incidents or time.monotonic() - self._read_at < READ_EVERY:
            return
        self._read_at = time.monotonic()
        try:
            record = {i.id: i for i in self.store.read().incidents}
        except FleetmedicError as exc:
            log.warning("cannot read the domain incidents' record (%s)", exc)
            return
        for inc in self.incidents:
            there = record.get(inc.id)
            if there is not None and not there.open:
                log.warning(
                    "domain incident %s released by %s at %s: its nodes go to their own ladders",
                    inc.name,
                    there.closed_by or "someone",
                    there.closed_at,
                )
                self.released.append(there)
        gone = {i.id for i in self.released}
        self.incidents = tuple(i for i in self.incidents if i.id not in gone)

    def _save(self, still_open: str | None = None) -> bool:
        """The last closed incidents and the open ones on the record (domainrecord.py)."""
        return self.store.save((*self.closed, *self.incidents), still_open)

    # -- every cycle ---------------------------------------------------------------------
    def observe(self, look: Look) -> None:
        self.review(look.views, look.now, look.busy)

    def active(self) -> bool:
        return self.player is not None and self.player.active()

    def cancel(self) -> None:
        if self.player is not None:
            self.player.cancel()  # (its record says running: the next leader resumes)

    def shutdown(self, grace: float) -> None:
        if self.player is not None:
            self.player.shutdown(grace)

    def review(
        self, views: Sequence[NodeView], now: datetime, busy: Collection[str] = ()
    ) -> Review:
        """One look (every cycle). ``busy``: nodes with ladder work under way in this
        process (a domain playbook waits for them)."""
        if not self.enabled:
            return EMPTY
        self.poll_releases()
        if self.player is not None:
            self._take_results(now)
        released, self.released = self.released, []
        for inc in released:
            if self.player is not None and self.player.busy(inc.id):
                self.player.cancel_one(inc.id)  # (released by hand mid-run)
        rev = domains.review(
            views, self.cfg.domains, now, self.memory, (*self.incidents, *released), self.index
        )
        self.memory, self.incidents, self.last = rev.memory, rev.open, rev
        if rev.opened or rev.closed or released:
            self.closed = (*self.closed, *released, *rev.closed)[-CLOSED_KEPT:]
            self._save()
        by_name = {v.name: v for v in views} if (rev.opened or rev.closed or released) else {}
        for inc in rev.opened:
            self._opened(inc, views, by_name)
        for inc in (*rev.closed, *released):
            self._closed(inc, views)
        self.metrics.domain_incidents_open.set(len(rev.open))
        if any(i.play is not None for i in rev.open):
            for inc in rev.open:
                if inc.play is not None:
                    self._drive(inc, views, now, busy)
        return rev

    # -- the domain playbook ---------------------------------------------------------------
    def _replace(self, inc: Incident, play: domains_play.Play) -> Incident:
        new = dataclasses.replace(inc, play=play)
        self.incidents = tuple(new if i.id == inc.id else i for i in self.incidents)
        return new

    def _take_results(self, now: datetime) -> None:
        """What the player's runs ended with, recorded on the incidents (and the record)."""
        assert self.player is not None
        done: list[Done] = self.player.results()
        if not done:
            return
        by_id = {i.id: i for i in self.incidents}
        for d in done:
            inc = by_id.get(d.incident)
            if inc is None or inc.play is None:
                continue  # released meanwhile
            if d.error:
                log.warning(
                    "domain incident %s: its %s could not run (%s); trying again in %.0fs",
                    inc.name,
                    "playbook" if d.what == RUN else "verify",
                    d.error,
                    PLAY_RETRY,
                )
                self._play_retry[inc.id] = time.monotonic() + PLAY_RETRY
                continue
            if d.what == RUN:
                timeout = self._play_timeout(inc)
                play = domains_play.ran(inc.play, d.results, d.message, now, timeout)
                if play.status == domains_play.RUNNING:  # the run was lost: again, later
                    self._play_retry[inc.id] = time.monotonic() + self.cfg.ladder.probe_interval
            else:
                play = domains_play.verified(inc.play, d.results, now)
                log.warning(
                    "domain incident %s: verify passed on %s; still failing: %s",
                    inc.name,
                    ", ".join(play.passed) or "none",
                    ", ".join(play.failed) or "none",
                )
            by_id[inc.id] = self._replace(inc, play)
        self._save()

    def _hold(self, names: list[str]) -> bool:
        """The node Leases of all of them (as the ladder holds one per node), or none."""
        assert self.player is not None
        held: list[str] = []
        for n in names:
            if not self.player.hold(n):
                self.player.let_go(held)
                return False
            held.append(n)
        return True

    def _play_timeout(self, inc: Incident) -> float:
        cfg = self.by_key.get(inc.key)
        book = cfg.playbook if cfg is not None else None
        return (book.timeout if book else None) or self.cfg.ansible.job_timeout

    def _drive(
        self, inc: Incident, views: Sequence[NodeView], now: datetime, busy: Collection[str]
    ) -> None:
        """The next step of an open incident's playbook (policy/domains_play.py)."""
        play, player = inc.play, self.player
        assert play is not None
        if player is None or player.busy(inc.id):
            return
        if time.monotonic() < self._play_retry.get(inc.id, 0.0):
            return
        members = {v.name: v for v in views if v.labels.get(inc.key) == inc.value}
        fenced = [n for n, v in members.items() if domains.fenced(v)]
        nxt = domains_play.next_step(play, fenced, [n for n in busy if n in members])
        if nxt.what == "wait":
            if self._play_said.get(inc.id) != nxt.why:
                self._play_said[inc.id] = nxt.why
                log.info("domain incident %s: playbook waits: %s", inc.name, nxt.why)
            return
        if self.dry_run:
            if self._play_said.get(inc.id) != nxt.what:
                self._play_said[inc.id] = nxt.what
                log.info(
                    "dry run, would %s domain incident %s's playbook %s over %s",
                    nxt.what,
                    inc.name,
                    play.playbook,
                    ", ".join(nxt.nodes),
                )
            return
        if nxt.what == "finish":
            closed = dataclasses.replace(
                inc, closed_at=stamp(now), closed_by="playbook", why=domains_play.summary(play)
            )
            self.incidents = tuple(i for i in self.incidents if i.id != inc.id)
            self.released.append(closed)  # (the next look records it, forgets its fences)
            self._play_retry.pop(inc.id, None)
            self._play_said.pop(inc.id, None)
            self.wake()
            return
        targets = [members[n] for n in nxt.nodes if n in members]
        if not self._hold([v.name for v in targets]):
            self._play_retry[inc.id] = time.monotonic() + self.cfg.leader_election.retry_period
            log.info("domain incident %s: playbook waits for its nodes' Leases", inc.name)
            return
        if nxt.what == "run":
            run_id = runner.new_run_id(f"domain-{inc.value}")
            started = self._replace(inc, domains_play.began(play, nxt.nodes, run_id, now))
            if not self._save(still_open=inc.id):  # recorded before it starts, or not run
                self._replace(started, play)
                player.let_go([v.name for v in targets])
                self._play_retry[inc.id] = time.monotonic() + PLAY_RETRY
                log.warning(
                    "domain incident %s: playbook not started: its start could not be "
                    "recorded on the pause ConfigMap (or it was released meanwhile)",
                    inc.name,
                )
                return
            assert started.play is not None
            player.start(RUN, inc.id, inc.name, started.play, targets, run_id)
            return
        run_id = runner.new_run_id(f"domain-verify-{inc.value}")
        checking = self._replace(inc, domains_play.verifying(play, run_id))
        assert checking.play is not None
        player.start(VERIFY, inc.id, inc.name, checking.play, targets, run_id)

    def _members(self, inc: Incident, views: Sequence[NodeView]) -> list[NodeView]:
        return [v for v in views if v.labels.get(inc.key) == inc.value]

    def _opened(
        self, inc: Incident, views: Sequence[NodeView], by_name: dict[str, NodeView]
    ) -> None:
        members = self._members(inc, views)
        log.error(
            "domain incident %s opened: %s; nodes %s held (no per-node rung) until they "
            "pass or `fleetmedic domain release %s`",
            inc.name,
            inc.why,
            ", ".join(inc.nodes),
            inc.name,
        )
        self.metrics.domain_incidents.labels(key=inc.key).inc()
        if self.dry_run:
            return
        fenced = [by_name[n] for n in inc.nodes if n in by_name]
        page = domainmessages.page(self.cfg, inc, fenced, len(members), self.cluster_name)
        message = f"{inc.why}; held with the domain's {len(members)} nodes"
        names = [v.name for v in members]
        self.send(lambda: self._mark(names, inc, "DomainIncidentOpened", message, "Warning"))
        for letter in domainmessages.opened(self.cfg, inc, page, self.by_key.get(inc.key)):
            self.outbox.post(letter)

    def _closed(self, inc: Incident, views: Sequence[NodeView]) -> None:
        log.warning("domain incident %s closed (%s): %s", inc.name, inc.closed_by, inc.why)
        if self.dry_run:
            return
        names = [v.name for v in self._members(inc, views)]
        message = f"closed ({inc.closed_by}): {inc.why}; nodes still fenced go to their own ladders"
        self.send(lambda: self._mark(names, inc, "DomainIncidentClosed", message, "Normal"))
        if inc.play is not None and inc.play.status == domains_play.DONE:
            domain: DomainConfig | None = self.by_key.get(inc.key)
            for letter in domainmessages.closed(self.cfg, inc, domain, self.cluster_name):
                self.outbox.post(letter)

    # -- side effects (on the worker pool) -----------------------------------------------
    def _mark(self, names: list[str], inc: Incident, reason: str, message: str, kind: str) -> None:
        """The incident on each node: its annotation entry and an Event."""
        for name in names:

            def mutate(node: dict) -> bool:
                ann = (node.get("metadata") or {}).get("annotations") or {}
                value = domainnode.node_entry(ann.get(domainnode.ANN_INCIDENTS), inc)
                return nodeedit.set_annotation(node, domainnode.ANN_INCIDENTS, value)

            try:
                written = self.cluster.update_node(name, mutate)
            except FleetmedicError as exc:
                log.warning("%s: domain incident %s not recorded on it: %s", name, inc.name, exc)
                continue
            self.cluster.post_event(written, reason, f"{inc.name}: {message}", kind)
