"""Domain incidents: nodes that share a rack, a switch or an NVLink domain and fence
together are one problem, not N.

Pure: the controller (controller/domainkeeper.py), ``fleetmedic plan`` and the simulator
in the unit tests call :func:`review` with the nodes, the ``domains:`` config, the time,
what it remembers of when each node fenced (:class:`Memory`) and the open incidents; it
says which incidents open, which close and which nodes are held.

- **Fenced** is any fence: a repair taint of ours (agent, sweep, human) or another
  tool's signal (:func:`fenced`, the breaker's own notion of unhealthy).
- **Opening.** A domain (one value of a configured label key) opens an incident when
  ``threshold`` of its nodes fenced within ``window``. Never two for one domain: a
  domain with an open incident opens none.
- **While open** every node of the domain is held (:func:`holds`): no per-node action,
  except the rung that was under way on it when the incident opened, which finishes
  (``Incident.running``). A node in two domains' incidents is held by both.
- **Settling.** A node newly fenced in a domain that could reach its threshold waits
  ``settle`` before its own rung starts, so the first node of a failing domain is not
  rebooted before its neighbours fence.
- **The domain playbook** (``action: {playbook: ...}``): recorded in the incident
  (:attr:`Incident.play`), run once over its fenced nodes, then the verify; its steps are
  policy/domains_play.py. An incident whose playbook or verify is under way closes when
  that ends (those that pass return, the rest go to their ladders), not before.
- **Closing.** When no node of the domain is fenced any more (they passed), after
  ``release_after``, when the label is gone from every node or its key from the config,
  or by hand (``fleetmedic domain release``, on the record). The nodes' fences that
  counted towards it are then forgotten (:attr:`Review.memory`), so the closing never
  reopens it at once: nodes still fenced go to their own ladders.

When a node fenced is remembered (:func:`remember`): the first time the controller saw
it fenced, and at the first look after a start (the baseline) not at all, as the
breaker takes its baseline, so a restart never opens incidents for old fences.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from fleetmedic.model import keys
from fleetmedic.model.config import DomainConfig, quantity_of
from fleetmedic.model.nodestate import NodeView
from fleetmedic.policy.domainindex import Index as Index  # (re-exported: the callers keep one)
from fleetmedic.policy.domainindex import fenced as fenced  # (re-exported)
from fleetmedic.policy.domains_play import PENDING, Play, planned
from fleetmedic.policy.history import parse_time, stamp

RECORD_KEY = "domains"
"""The data key of the open incidents' record on the pause ConfigMap."""
BEFORE = ""
"""A fence time that does not count: seen at the baseline, or already counted."""


def name_of(key: str, value: str) -> str:
    """A domain's name, as ``fleetmedic domain release`` takes it."""
    return f"{key}={value}"


@dataclasses.dataclass(frozen=True)
class Incident:
    key: str
    value: str
    opened_at: str
    nodes: tuple[str, ...]  # the nodes fenced when it opened
    running: tuple[tuple[str, str], ...] = ()  # (node, "ep/step/attempt") under way then
    closed_at: str | None = None
    closed_by: str | None = None  # passed | release_after | gone | a person
    why: str = ""  # what opened it (or closed it)
    play: Play | None = None  # the domain playbook's record (action: playbook; domains_play.py)

    @property
    def name(self) -> str:
        return name_of(self.key, self.value)

    @property
    def id(self) -> str:
        """Unique per incident (a domain may have another later)."""
        return f"{self.name}@{self.opened_at}"

    @property
    def open(self) -> bool:
        return self.closed_at is None

    def to_json(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["running"] = dict(self.running)
        data["play"] = self.play.to_json() if self.play else None
        return {k: v for k, v in data.items() if v not in (None, "", {}, ())}

    @classmethod
    def from_json(cls, data: Any) -> Incident | None:
        if not isinstance(data, Mapping):
            return None
        try:
            running = data.get("running") or {}
            return cls(
                key=str(data["key"]),
                value=str(data["value"]),
                opened_at=str(data["opened_at"]),
                nodes=tuple(str(n) for n in data.get("nodes") or ()),
                running=tuple(sorted((str(k), str(v)) for k, v in dict(running).items())),
                closed_at=data.get("closed_at"),
                closed_by=data.get("closed_by"),
                why=str(data.get("why") or ""),
                play=Play.from_json(data.get("play")),
            )
        except (KeyError, TypeError, ValueError):
            return None


def playing(inc: Incident) -> bool:
    """Its domain playbook started (running, verifying, or done and not yet closed): the
    incident then closes when it ends (domains_play.py: ``finish``), not because its nodes
    were returned meanwhile."""
    return inc.play is not None and inc.play.status != PENDING


def encode(incidents: Iterable[Incident]) -> str:
    """The record on the pause ConfigMap: JSON a human can read with kubectl."""
    return json.dumps([i.to_json() for i in incidents], sort_keys=True)


def decode(raw: str | None) -> tuple[Incident, ...]:
    """The incidents of a record; an unreadable record or entry reads as none."""
    try:
        data = json.loads(raw) if raw else []
    except ValueError:
        return ()
    if not isinstance(data, list):
        return ()
    return tuple(i for i in (Incident.from_json(d) for d in data) if i is not None)


@dataclasses.dataclass(frozen=True)
class Memory:
    """When each fenced node was first seen fenced (:data:`BEFORE`: it does not count)."""

    primed: bool = False
    since: Mapping[str, str] = dataclasses.field(default_factory=dict)


def remember(memory: Memory, fenced_now: Iterable[str], now: datetime) -> Memory:
    """``memory`` after one look at the nodes (``fenced_now``: the fenced ones): a node
    that turned fenced is stamped now (at the baseline: :data:`BEFORE`); one no longer
    fenced is forgotten."""
    at = stamp(now) if memory.primed else BEFORE
    old = memory.since
    return Memory(True, {n: old.get(n, at) for n in fenced_now})


def threshold(cfg: DomainConfig, size: int) -> int:
    """Fenced nodes that open an incident in a domain of ``size`` nodes (at least 2)."""
    return max(2, quantity_of(cfg.threshold, size, round_up=True))


@dataclasses.dataclass(frozen=True)
class Near:
    """A domain with recent fences but no incident: ``fenced`` of ``threshold``."""

    key: str
    value: str
    fenced: tuple[str, ...]
    threshold: int
    size: int

    @property
    def name(self) -> str:
        return name_of(self.key, self.value)


@dataclasses.dataclass(frozen=True)
class Review:
    opened: tuple[Incident, ...]
    closed: tuple[Incident, ...]  # with closed_at and closed_by set
    open: tuple[Incident, ...]  # every incident open after this review
    held: Mapping[str, tuple[str, ...]]  # node -> names of the incidents that hold it
    settling: Mapping[str, datetime]  # node -> when its own rung may start
    near: tuple[Near, ...]
    memory: Memory
    views: Mapping[str, NodeView] = dataclasses.field(default_factory=dict)  # held, settling

    def incident_of(self, node: str) -> Incident | None:
        names = self.held.get(node)
        return next((i for i in self.open if i.name == names[0]), None) if names else None


NONE = Review((), (), (), {}, {}, (), Memory())
"""No domains configured (or nothing to say)."""


def _marker(v: NodeView) -> str | None:
    """The view's rung under way as ``ep/step/attempt`` (None: none, or unreadable)."""
    raw = v.annotations.get(keys.ANN_IN_FLIGHT)
    if not raw:
        return None
    try:
        data = json.loads(raw)
        return f"{int(data['ep'])}/{data['step']}/{int(data['attempt'])}"
    except (ValueError, KeyError, TypeError):
        return None


def review(
    views: Sequence[NodeView],
    cfgs: Sequence[DomainConfig],
    now: datetime,
    memory: Memory,
    incidents: Sequence[Incident],
    index: Index | None = None,
) -> Review:
    """One look at the domains (see the module docstring). ``memory`` is the state
    before this look; :attr:`Review.memory` the one to keep. ``incidents``: the open
    ones, and any closed by hand since the last look (their fences are forgotten).
    ``index``: the caller's :class:`Index`, kept across calls (None: a fresh one)."""
    by_key = {c.key: c for c in cfgs}
    if index is None or index.keys != tuple(by_key):
        index = Index(tuple(by_key))
    index.update(views)
    memory = remember(memory, index.fenced, now)
    since = dict(memory.since)
    members = index.members
    at = stamp(now)
    kept: list[Incident] = []
    closed: list[Incident] = []
    for inc in incidents:
        if not inc.open:  # closed by hand since the last review: its fences counted
            for n in members.get(inc.key, {}).get(inc.value, {}):
                if n in since:
                    since[n] = BEFORE
            continue
        cfg = by_key.get(inc.key)
        domain = members.get(inc.key, {}).get(inc.value, {})
        opened = parse_time(inc.opened_at) or now
        if cfg is None:
            why = f"{inc.key} is no longer a configured domain key"
            closed.append(dataclasses.replace(inc, closed_at=at, closed_by="gone", why=why))
        elif not domain:
            why = f"no node carries {inc.name} any more"
            closed.append(dataclasses.replace(inc, closed_at=at, closed_by="gone", why=why))
        elif not any(n in since for n in domain) and not playing(inc):
            why = f"every node of {inc.name} passed"
            closed.append(dataclasses.replace(inc, closed_at=at, closed_by="passed", why=why))
        elif cfg.release_after and now - opened >= timedelta(seconds=cfg.release_after):
            why = f"open {cfg.release_after:g}s (release_after): nodes go to their own ladders"
            closed.append(
                dataclasses.replace(inc, closed_at=at, closed_by="release_after", why=why)
            )
        else:
            kept.append(inc)
    for inc in closed:  # their fences counted once: they never reopen it by themselves
        for n in members.get(inc.key, {}).get(inc.value, {}):
            if n in since:
                since[n] = BEFORE
    open_names = {i.name for i in kept}
    opened_now: list[Incident] = []
    near: list[Near] = []
    settling: dict[str, datetime] = {}
    view = index.view
    touched = {  # the domains with a fenced node: no other can open or settle
        (key, value)
        for n in since
        for key, value in zip(index.keys, index.seen[n][1], strict=True)
        if value
    }
    for cfg in cfgs:
        window_start = now - timedelta(seconds=cfg.window)
        domains = members.get(cfg.key, {})
        for value in sorted(v for k, v in touched if k == cfg.key):
            names = domains.get(value, {})
            inside = [n for n in names if n in since]
            if not inside or name_of(cfg.key, value) in open_names:
                continue
            need = threshold(cfg, len(names))
            if need > len(names):
                continue  # too small a domain ever to open one: its nodes are the ladder's
            recent = [n for n in inside if (t := parse_time(since[n])) and t >= window_start]
            if len(recent) >= need:
                running = tuple(
                    (n, m) for n in sorted(inside) if (m := _marker(view(n))) is not None
                )
                inc = Incident(
                    key=cfg.key,
                    value=value,
                    opened_at=at,
                    nodes=tuple(sorted(inside)),
                    running=running,
                    why=f"{len(recent)} of {len(names)} nodes fenced within {cfg.window:g}s "
                    f"(threshold {need})",
                    play=planned(cfg),
                )
                opened_now.append(inc)
                open_names.add(inc.name)
                continue
            if recent:
                near.append(Near(cfg.key, value, tuple(sorted(recent)), need, len(names)))
            for n in recent:
                t = parse_time(since[n])
                assert t is not None
                due = t + timedelta(seconds=cfg.settle)
                if due > now and _marker(view(n)) is None:
                    settling[n] = max(due, settling.get(n, due))
    every_open = (*kept, *opened_now)
    held: dict[str, tuple[str, ...]] = {}
    for inc in every_open:
        for n in members.get(inc.key, {}).get(inc.value, {}):
            held[n] = (*held.get(n, ()), inc.name)
    for n in held:
        settling.pop(n, None)
    return Review(
        opened=tuple(opened_now),
        closed=tuple(closed),
        open=every_open,
        held=held,
        settling=settling,
        near=tuple(near),
        memory=Memory(True, since),
        views={n: view(n) for n in (*held, *settling)},
    )


def holds(rev: Review) -> dict[str, str]:
    """Node -> why its actions wait this cycle: held by an incident (except the rung
    under way when the incident opened, which finishes), or settling."""
    out: dict[str, str] = {}
    if not rev.held and not rev.settling:
        return out
    running = {(n, m) for i in rev.open for n, m in i.running}
    for v in rev.views.values():
        names = rev.held.get(v.name)
        if names:
            marker = _marker(v)
            if marker is not None and (v.name, marker) in running:
                continue
            out[v.name] = "domain incident " + " and ".join(names) + " holds it"
        elif v.name in rev.settling:
            out[v.name] = (
                f"newly fenced in a domain: waiting until {stamp(rev.settling[v.name])} "
                "to see whether its neighbours fence too"
            )
    return out


def next_due(rev: Review, now: datetime) -> float | None:
    """Seconds until a settling node's wait ends (None: none waits)."""
    if not rev.settling:
        return None
    return max(0.0, min((t - now).total_seconds() for t in rev.settling.values()))


def grouped(rev: Review) -> dict[str, str]:
    """Node in repair -> the incident it counts as against min_healthy: a domain's sick
    nodes count once (a node in two incidents counts as the first). The breaker counts
    nodes, as before: incidents in many domains at once still trip it."""
    return {n: names[0] for n, names in rev.held.items() if rev.views[n].in_repair}


def common(views: Sequence[NodeView]) -> list[str]:
    """What the fenced nodes' findings have in common: each rule, failing check, foreign
    tool or rung that two or more of them share, most shared first."""
    counts: dict[str, set[str]] = {}

    def add(what: str, node: str) -> None:
        counts.setdefault(what, set()).add(node)

    for v in views:
        finding = v.annotation_json(keys.ANN_LAST_FINDING)
        if isinstance(finding, Mapping):
            rule = finding.get("rule") or finding.get("summary")
            if rule:
                add(f"finding {rule}", v.name)
        results = v.annotation_json(keys.ANN_LAST_RESULTS)
        if isinstance(results, Mapping):
            for cat, entry in results.items():
                if isinstance(entry, Mapping) and entry.get("status") not in (None, "ok"):
                    add(f"check {cat}: {entry.get('status')}", v.name)
        for tool in v.foreign_signals:
            add(f"signal {tool}", v.name)
        if v.state != "healthy":
            add(f"fenced at {v.state}", v.name)
    shared = [(len(ns), what) for what, ns in counts.items() if len(ns) >= 2]
    return [f"{what} ({n} nodes)" for n, what in sorted(shared, key=lambda p: (-p[0], p[1]))]
