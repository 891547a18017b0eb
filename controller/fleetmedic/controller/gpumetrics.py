"""The GPUs' metrics: episodes per GPU, and the mean time between incidents per node and
per pool, from each Node's GPU record (model/gpus.py). Gauges set from the views every
cycle (a node whose record did not change costs a dictionary lookup).

Known gap: a GPU's episodes on nodes it was in before count on the node that recorded
them; the store (controller/gpustore.py) has the whole past, ``fleetmedic history``
shows it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Gauge

from fleetmedic.controller.parts import Look, Part
from fleetmedic.model import keys
from fleetmedic.model.gpus import Incident, NodeRecord
from fleetmedic.model.nodestate import NodeView
from fleetmedic.policy.history import parse_time


@dataclass(frozen=True)
class _Seen:
    raw: str | None
    episodes: dict[str, int]  # GPU (serial, else unique id) -> episodes
    times: tuple[float, ...]  # the node's incident times, one per episode


class GpuMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.episodes = Gauge(
            "fleetmedic_gpu_episodes",
            "Episodes (repair trips) held against each GPU by its serial, in its node's record",
            ["node", "profile", "gpu"],
            registry=registry,
        )
        self.node_mtbi = Gauge(
            "fleetmedic_node_mean_time_between_incidents_seconds",
            "Mean time between the GPU incidents of each node with two or more",
            ["node", "profile"],
            registry=registry,
        )
        self.pool_mtbi = Gauge(
            "fleetmedic_pool_mean_time_between_incidents_seconds",
            "Mean time between GPU incidents in each profile's pool (two or more)",
            ["profile"],
            registry=registry,
        )
        self._seen: dict[str, _Seen] = {}

    def observe(self, views: Sequence[NodeView], profile_of: Mapping[str, str]) -> None:
        self.episodes.clear()
        self.node_mtbi.clear()
        self.pool_mtbi.clear()
        pools: dict[str, list[float]] = {}
        present = set()
        for v in views:
            raw = v.annotations.get(keys.ANN_GPUS)
            if raw is None:
                continue
            present.add(v.name)
            seen = self._seen.get(v.name)
            if seen is None or seen.raw != raw:
                seen = self._seen[v.name] = _summary(raw)
            profile = profile_of.get(v.name, "default")
            for gpu, n in seen.episodes.items():
                self.episodes.labels(node=v.name, profile=profile, gpu=gpu).set(n)
            gap = mean_gap(seen.times)
            if gap is not None:
                self.node_mtbi.labels(node=v.name, profile=profile).set(gap)
            pools.setdefault(profile, []).extend(seen.times)
        for profile, times in pools.items():
            gap = mean_gap(sorted(times))
            if gap is not None:
                self.pool_mtbi.labels(profile=profile).set(gap)
        for gone in [n for n in self._seen if n not in present]:
            del self._seen[gone]


class GpuGauges(Part):
    """The loop's part that sets the gauges from each cycle's views."""

    name = "gpu-gauges"

    def __init__(self, gauges: GpuMetrics) -> None:
        self.gauges = gauges

    def observe(self, look: Look) -> None:
        self.gauges.observe(look.views, look.assignment.profile_of)


def _summary(raw: str) -> _Seen:
    record = NodeRecord.decode(raw)
    episodes: dict[str, set[int]] = {}
    times: dict[int, float] = {}
    for i in record.incidents:
        episodes.setdefault(i.serial or i.uid, set()).add(i.ep)
        t = _time(i)
        if t is not None:
            times[i.ep] = min(times.get(i.ep, t), t)
    counts = {gpu: len(eps) for gpu, eps in episodes.items()}
    return _Seen(raw, counts, tuple(sorted(times.values())))


def _time(i: Incident) -> float | None:
    t = parse_time(i.at)
    return t.timestamp() if t else None


def mean_gap(times: Sequence[float]) -> float | None:
    """The mean of the gaps between consecutive times (None with fewer than two)."""
    if len(times) < 2:
        return None
    ordered = sorted(times)
    return (ordered[-1] - ordered[0]) / (len(ordered) - 1)
