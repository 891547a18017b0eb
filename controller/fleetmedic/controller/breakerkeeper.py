"""The circuit breaker as the controller keeps it: observed every cycle, recorded on the
pause ConfigMap so it outlives the process, one storm email per trip (through the
outbox, controller/outbox.py).

The policy (when it trips, what a reset forgets) is :mod:`fleetmedic.policy.breaker`;
this module is its I/O: the record on the ConfigMap (read at start and on becoming
leader, written on a trip and on a cooldown), noticing a human's ``fleetmedic breaker
reset`` there, the storm email, the metric.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from datetime import datetime

from fleetmedic.adapters import notify
from fleetmedic.adapters.cluster import Cluster
from fleetmedic.controller import channels
from fleetmedic.controller.metrics import Metrics
from fleetmedic.controller.outbox import Outbox
from fleetmedic.controller.parts import Context, Look, Part
from fleetmedic.controller.switches import Switches, pause_configmap, read_switches
from fleetmedic.errors import FleetmedicError
from fleetmedic.model.config import Config
from fleetmedic.model.nodestate import NodeView
from fleetmedic.policy import breaker
from fleetmedic.policy.history import stamp

log = logging.getLogger(__name__)


class BreakerKeeper:
    """``outbox``: where the storm email goes."""

    def __init__(
        self,
        cfg: Config,
        cluster: Cluster,
        metrics: Metrics,
        *,
        dry_run: bool,
        outbox: Outbox,
        profile: str = "default",
        on_trip: Callable[[str, list[str], int, float], None] = lambda *a: None,
    ) -> None:
        """``cfg``: the profile's effective config (its breaker settings and recipients);
        ``on_trip(profile, nodes, pool, window)``: the chat notification of a trip."""
        self.cfg, self.cluster, self.metrics, self.dry_run = cfg, cluster, metrics, dry_run
        self.outbox, self.profile, self.on_trip = outbox, profile, on_trip
        self.gauge = metrics.breaker_open.labels(profile=profile)
        self.key = breaker.record_key(profile)
        self.state = breaker.BreakerState()
        self.saved: str | None = None  # the trip this process wrote on the ConfigMap

    @property
    def _of(self) -> str:
        return "" if self.profile == "default" else f" of profile {self.profile}"

    @property
    def _flag(self) -> str:
        return "" if self.profile == "default" else f" --profile {self.profile}"

    @property
    def open(self) -> bool:
        return self.state.open

    @property
    def reason(self) -> str | None:
        """Why automation is stopped (for budget.admit), or None."""
        return breaker.reason(self.state)

    def restore(self) -> None:
        """Start from the record on the pause ConfigMap (a restart, a new leader)."""
        try:
            record = read_switches(self.cluster, self.cfg).breaker_of(self.profile)
        except FleetmedicError as exc:
            log.warning("cannot read the circuit breaker's record (%s); starting closed", exc)
            return
        self.state = breaker.resume(record)
        self.saved = record.tripped_at if record and record.open else None
        self.gauge.set(1 if self.state.open else 0)
        if record and record.open:
            log.error(
                "circuit breaker%s open since %s (recorded on ConfigMap %s); automation "
                "stays paused until `fleetmedic breaker reset%s`",
                self._of,
                record.tripped_at,
                self.cfg.safety.pause_configmap,
                self._flag,
            )

    def observe(self, views: Sequence[NodeView], now: datetime) -> None:
        cfg = self.cfg.safety.breaker
        was_open = self.state.open
        obs = breaker.observe(self.state, breaker.unhealthy_names(views), len(views), now, cfg)
        self.state = obs.state
        self.gauge.set(1 if obs.state.open else 0)
        if was_open and not obs.state.open:
            log.warning(
                "circuit breaker closed after its cooldown (%.0fs); automation resumes",
                cfg.cooldown or 0,
            )
            self._save(breaker.record_of(obs.state, reset_by="cooldown"))
        if not obs.tripped_now:
            return
        log.error(
            "circuit breaker%s tripped: %d nodes turned unhealthy within %.0fs (limit %d); "
            "automation paused until `fleetmedic breaker reset%s`",
            self._of,
            obs.recent,
            cfg.window,
            obs.limit,
            self._flag,
        )
        if self._save(breaker.record_of(obs.state)):
            self.saved = obs.state.tripped_at
        if not self.dry_run:
            nodes = sorted({n for n, _ in obs.state.turned})
            self.on_trip(self.profile, nodes, len(views), cfg.window)
        if self.cfg.smtp and not self.dry_run:
            storm = notify.Storm(
                pool=len(views),
                nodes=sorted({n for n, _ in obs.state.turned}),
                window=cfg.window,
                threshold_percent=cfg.threshold_percent,
                tripped_at=obs.state.tripped_at or stamp(now),
                profile=self.profile,
                cluster=self.cfg.cluster_name or "",
            )
            self.outbox.post(
                channels.email(
                    storm,
                    id=f"email/storm/{self.profile}/{storm.tripped_at}",
                    what="storm email",
                    profile=self.profile,
                )
            )

    def adopt_reset(self, record: breaker.Record | None, now: datetime) -> None:
        """A human reset the trip we recorded (``fleetmedic breaker reset``): close it."""
        if self.saved is None or self.state.tripped_at != self.saved:
            return
        if breaker.reset_elsewhere(self.state, record):
            assert record is not None
            log.warning(
                "circuit breaker reset by %s at %s; automation resumes (the storm's "
                "turns are not replayed)",
                record.reset_by or "someone",
                record.reset_at,
            )
            self.state = breaker.reset(self.state, now)
            self.saved = None
            self.gauge.set(0)

    def _save(self, record: breaker.Record) -> bool:
        """Keep the breaker on the pause ConfigMap, so it outlives this process."""
        ref = pause_configmap(self.cfg)
        if ref is None or self.dry_run:
            return False
        try:
            self.cluster.patch_config_map_data(*ref, {self.key: record.encode()})
            return True
        except FleetmedicError as exc:
            log.warning(
                "circuit breaker kept in memory only, a restart closes it (%s); ship "
                "the ConfigMap of deploy/controller/configmap.yaml",
                exc,
            )
            return False


class Breakers(Part):
    """Every profile's breaker, as one part of the loop (controller/parts.py)."""

    name = "breakers"

    def __init__(self, ctx: Context, on_trip: Callable[[str, list[str], int, float], None]) -> None:
        """``on_trip(profile, nodes, pool, window)``: the chat notification of a trip."""
        self.keepers = {
            name: BreakerKeeper(
                ctx.cfg.profile(name),
                ctx.cluster,
                ctx.metrics,
                dry_run=ctx.dry_run,
                outbox=ctx.outbox,
                profile=name,
                on_trip=on_trip,
            )
            for name in ctx.cfg.profile_names()
        }

    def restore(self) -> None:
        for keeper in self.keepers.values():
            keeper.restore()

    def observe(self, look: Look) -> None:
        for name, keeper in self.keepers.items():
            members = look.assignment.nodes_of(name)
            keeper.observe([v for v in look.views if v.name in members], look.now)

    def any_open(self) -> bool:
        return any(k.open for k in self.keepers.values())

    def reasons(self) -> dict[str, str | None]:
        """Why each profile's automation is stopped (for budget.admit), or None."""
        return {name: k.reason for name, k in self.keepers.items()}

    def adopt_resets(self, switches: Switches, now: datetime) -> None:
        """A human's ``fleetmedic breaker reset`` on the pause ConfigMap, per profile."""
        for name, keeper in self.keepers.items():
            keeper.adopt_reset(switches.breaker_of(name), now)
