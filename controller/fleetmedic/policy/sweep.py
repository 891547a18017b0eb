"""Diagnostic sweeps of idle nodes (issue 20 part 4): which nodes, when, how many. Pure.

On a schedule per profile (``sweep:``), the controller takes idle nodes out of
scheduling with its maintenance taint, runs the vendor's level-2 diagnostics on them and
puts them back, or into the ladder when the diagnostics fail (controller/sweeper.py does
the I/O). This module decides:

- :func:`plan`: the nodes to start sweeping now, and the maintenance taints to take off;
- :func:`judge`: what one run's result means for the node (pass, fail and its rung,
  unknown);
- :func:`record_edit`: the write that ends a sweep (taint off, result on the Node).

A node is *idle* when no pod bound to it that is not finished asks for a GPU
(:func:`wants_gpu`: ``nvidia.com/gpu`` or ``amd.com/gpu`` in any container's requests or
limits). It is *due* when its ``fleetmedic.io/last-sweep`` is older than ``every`` (or
absent). A sweep starts only on a healthy, schedulable node without anyone's signal,
within the sweep's windows, while automation is not paused, and only as far as both
``sweep.max_concurrent`` and the pool's repair budget (``safety.max_concurrent``, its
percentage and ``min_healthy``) allow: a node under a sweep counts as one in repair.

A maintenance taint that no sweep of this process is running is an orphan (a controller
killed mid-sweep, or one that lost its leadership): it is taken off at once, even while
paused, since it only keeps a healthy node idle. The interrupted sweep is not recorded,
so the node is due again and swept later: that is how a sweep survives a restart.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from fleetmedic.model import keys, nodeedit
from fleetmedic.model.config import Config
from fleetmedic.model.nodestate import NodeView
from fleetmedic.model.vocabulary import Vocabulary
from fleetmedic.policy import budget, handoff
from fleetmedic.policy.history import parse_time
from fleetmedic.policy.profiles import Assignment

GPU_RESOURCES = ("nvidia.com/gpu", "amd.com/gpu")
PASS, FAIL, UNKNOWN = "pass", "fail", "unknown"
DEFAULT_RUNG = "reboot"  # a failed diagnostic the catalog does not map enters here
MAX_DETAIL = 400


# -- idle ------------------------------------------------------------------------------
def wants_gpu(pod: Mapping[str, Any]) -> bool:
    """True for a pod that is not finished and asks for a GPU in any container."""
    if ((pod.get("status") or {}).get("phase")) in ("Succeeded", "Failed"):
        return False
    spec = pod.get("spec") or {}
    for c in (*(spec.get("containers") or ()), *(spec.get("initContainers") or ())):
        res = c.get("resources") or {}
        for part in ("requests", "limits"):
            amounts = res.get(part) or {}
            if any(str(amounts.get(r, "0")) not in ("0", "") for r in GPU_RESOURCES):
                return True
    return False


# -- the record on the Node ------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class LastSweep:
    at: str  # RFC 3339, when the sweep ended
    result: str  # pass | fail | unknown
    level: int = 2
    summary: str = ""
    run: str = ""  # the ansible run id (its artifacts keep the full output)

    def encode(self) -> str:
        return json.dumps(dataclasses.asdict(self), separators=(",", ":"), sort_keys=True)

    @classmethod
    def of(cls, view: NodeView) -> LastSweep | None:
        data = view.annotation_json(keys.ANN_LAST_SWEEP)
        if not isinstance(data, Mapping) or parse_time(data.get("at")) is None:
            return None
        return cls(
            at=str(data["at"]),
            result=str(data.get("result", UNKNOWN)),
            level=int(data.get("level", 2)) if str(data.get("level", "")).isdigit() else 2,
            summary=str(data.get("summary", "")),
            run=str(data.get("run", "")),
        )


def due(view: NodeView, now: datetime, every: float) -> bool:
    last = LastSweep.of(view)
    at = parse_time(last.at) if last else None
    return at is None or now - at >= timedelta(seconds=every)


# -- planning --------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class SweepPlan:
    start: tuple[tuple[str, str], ...] = ()  # (node, profile), oldest sweep first
    release: tuple[str, ...] = ()  # nodes whose orphaned maintenance taint comes off
    held: Mapping[str, str] = dataclasses.field(default_factory=dict)  # profile -> why not

    def __bool__(self) -> bool:
        return bool(self.start or self.release)


def plan(
    views: Sequence[NodeView],
    now: datetime,
    cfg: Config,
    assignment: Assignment,
    *,
    gpu_busy: Iterable[str],
    sweeping: Iterable[str] = (),
    skip: Iterable[str] = (),
    paused: str | None = None,
    breakers: Mapping[str, str | None] | None = None,
) -> SweepPlan:
    """What to start and release now. ``gpu_busy``: nodes with a pod asking for a GPU;
    ``sweeping``: nodes this process is sweeping; ``skip``: nodes it is otherwise working
    on or leaving alone; ``paused``: why automation is stopped (or None); ``breakers``:
    per profile, why its circuit breaker stops it (or None). A node NVSentinel works on
    (its state label, before its cordon lands) is held as the ladder holds it."""
    mine = set(sweeping)
    not_now = mine | set(skip)
    release = tuple(v.name for v in views if v.maintenance and v.name not in not_now)
    not_now |= set(gpu_busy) | set(handoff.holds(views, cfg))
    start: list[tuple[str, str]] = []
    held: dict[str, str] = {}
    by_profile: dict[str, list[NodeView]] = {}
    for v in views:
        p = assignment.profile_of.get(v.name)
        if p is not None:
            by_profile.setdefault(p, []).append(v)
    for name in cfg.profile_names():
        pcfg = cfg.profile(name)
        sw, members = pcfg.sweep, by_profile.get(name, [])
        if sw is None or not sw.enabled or not members:
            continue
        stopped = (
            paused
            or (pcfg.safety.pause and "paused by config (safety.pause)")
            or (breakers or {}).get(name)
        )
        if stopped:
            held[name] = stopped
            continue
        if sw.windows and not any(w.contains(now) for w in sw.windows):
            held[name] = "outside the sweep windows"
            continue
        room = _room(members, mine, pcfg)
        if room <= 0:
            held[name] = "no room in the sweep or repair budget"
            continue
        candidates = [
            v for v in members if v.name not in not_now and _sweepable(v) and due(v, now, sw.every)
        ]
        candidates.sort(key=lambda v: (_last_at(v), v.name))
        start += [(v.name, name) for v in candidates[:room]]
    return SweepPlan(tuple(start), release, held)


def _room(members: list[NodeView], mine: set[str], cfg: Config) -> int:
    """Sweeps this pool may start now: the sweep limit, the repair budget's free slots
    (a node under a sweep holds one) and min_healthy, the strictest."""
    assert cfg.sweep is not None
    swept = {v.name for v in members if v.name in mine or v.maintenance}
    repairing = {v.name for v in members if budget.holds_slot(v)}
    by_sweep = cfg.sweep.max_concurrent - len(swept)
    by_budget = budget.slots(len(members), cfg.safety) - len(repairing | swept)
    healthy = sum(1 for v in members if v.state == "healthy" and v.name not in swept)
    by_health = healthy - budget.min_healthy(len(members), cfg.safety)
    return min(by_sweep, by_budget, by_health)


def _sweepable(v: NodeView) -> bool:
    """Healthy, schedulable, no one's signal on it, not already under maintenance."""
    return (
        v.state == "healthy"
        and not v.slow_network
        and not v.unschedulable
        and not v.foreign
        and not v.maintenance
    )


def _last_at(v: NodeView) -> str:
    last = LastSweep.of(v)
    return last.at if last else ""  # never swept sorts first


# -- judging a run ---------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Verdict:
    result: str  # pass | fail | unknown
    summary: str
    rung: str | None = None  # the repair state a failed node enters
    tests: tuple[Mapping[str, Any], ...] = ()  # the failed tests, per GPU


def judge(status: str, stdout: str, message: str = "") -> Verdict:
    """One run's verdict from the host's outcome and ``fleetmedic diag --json``'s output
    (the last line of the diag task's stdout). Only a diagnostic that says ``problem``
    fails a node: a run that did not finish, or a tool that is missing or timed out, is
    unknown and the node goes back to service (the agent's checks still watch it)."""
    result = diag_json(stdout)
    if result is None:
        why = message or "no diagnostic result"
        return Verdict(UNKNOWN, _clip(f"{status}: {why}" if status != "ok" else why))
    summary = _clip(f"{result.get('name', 'diag')}: {result.get('summary', '')}".rstrip(": "))
    diag_status = result.get("status")
    if diag_status == "ok":
        return Verdict(PASS, summary)
    if diag_status == "problem":
        evidence = result.get("evidence") or {}
        failed = evidence.get("failed")
        rows = failed if isinstance(failed, list) else []
        tests = tuple(t for t in rows if isinstance(t, Mapping))
        return Verdict(FAIL, summary, str(result.get("action") or DEFAULT_RUNG), tests)
    return Verdict(UNKNOWN, summary)


def diag_json(stdout: str) -> Mapping[str, Any] | None:
    """The last JSON line of `fleetmedic diag --json`'s output (a result has a status)."""
    for line in reversed(stdout.strip().splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                data = json.loads(line)
            except ValueError:
                return None
            return data if isinstance(data, Mapping) and "status" in data else None
    return None


def _clip(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= MAX_DETAIL else text[: MAX_DETAIL - 3] + "..."


# -- the writes ------------------------------------------------------------------------
def record_edit(
    node: dict,
    vocab: Vocabulary,
    verdict: Verdict | None,
    at: str,
    level: int,
    run: str = "",
) -> bool:
    """End a sweep on ``node`` (a ``Cluster.update_node`` mutate): the maintenance taint off;
    with a verdict, the ``last-sweep`` record, and for a failure the repair taint at its
    rung with the diagnostics as evidence (``last-finding`` and a ``diag`` entry in
    ``last-results``, the annotations the agent's findings use). Without a verdict (the
    node got busy, or the sweep was interrupted) nothing else changes."""
    changed = nodeedit.remove_taint(node, vocab.maintenance)
    if verdict is None:
        return changed
    record = LastSweep(at, verdict.result, level, verdict.summary, run)
    changed |= nodeedit.set_annotation(node, keys.ANN_LAST_SWEEP, record.encode())
    if verdict.result != FAIL:
        return changed
    taints = (node.get("spec") or {}).get("taints") or []
    if vocab.repair_state_of(taints) is None:  # already fenced by someone: keep theirs
        changed |= nodeedit.add_taint(node, vocab.repair(verdict.rung or DEFAULT_RUNG))
    finding = {
        "kind": "diag",
        "summary": f"sweep level {level}: {verdict.summary}",
        "action": verdict.rung,
        "tests": list(verdict.tests),
        "run": run,
        "at": at,
    }
    changed |= nodeedit.set_annotation(node, keys.ANN_LAST_FINDING, _dumps(finding))
    ann = (node.get("metadata") or {}).get("annotations") or {}
    try:
        results = json.loads(ann.get(keys.ANN_LAST_RESULTS) or "{}")
    except ValueError:
        results = {}
    if not isinstance(results, dict):
        results = {}
    results["diag"] = {"status": "problem", "detail": verdict.summary, "since": at}
    changed |= nodeedit.set_annotation(node, keys.ANN_LAST_RESULTS, _dumps(results))
    return changed


def begin_edit(node: dict, vocab: Vocabulary) -> bool:
    """Start a sweep (a ``Cluster.update_node`` mutate): the maintenance taint on, only if the
    node is still healthy, schedulable and not under maintenance; False skips the write."""
    spec = node.get("spec") or {}
    taints = spec.get("taints") or []
    if vocab.repair_state_of(taints) is not None or spec.get("unschedulable"):
        return False
    return nodeedit.add_taint(node, vocab.maintenance)


def _dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), sort_keys=True, ensure_ascii=False)
