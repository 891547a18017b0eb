"""The Loki source judges Xids by context on each node's own history, and raises fences,
exactly as the agent does (in-memory Node and a list standing in for Loki's answers; the
real Loki and API server run the same cases in tests/integration/test_storm.py)."""

from __future__ import annotations

import time

from agent_helpers import REBOOT, VOCAB, MemoryKube
from prometheus_client import CollectorRegistry

from fleetmedic.adapters.loki import Entry
from fleetmedic.agent.lokicursor import Cursor
from fleetmedic.agent.lokisource import LokiMetrics, LokiSource, LokiSourceConfig
from fleetmedic.agent.writer import NodeWriter
from tests.harness.storm import (
    AMD_GPUS,
    GPUS,
    TWO_HOURS,
    amd_fault,
    amd_reset,
    amd_storm,
    storm,
    xid13,
    xid79,
)

DIAGNOSE = "fleetmedic.io/repair=diagnose"


class Answers:
    """``query_range`` over fixed entries (the kernel query only; pods have none)."""

    def __init__(self, entries: list[Entry]) -> None:
        self.entries = entries

    def query_range(self, query: str, start: int, end: int, limit: int) -> list[Entry]:
        if "transport" not in query or "!=" in query:
            return []
        return [e for e in self.entries if start < e.ts <= end][:limit]


class Store:
    def __init__(self) -> None:
        self.cursor = Cursor()

    def load(self) -> Cursor:
        return self.cursor

    def save(self, cursor: Cursor) -> None:
        self.cursor = cursor


def run(events, kube: MemoryKube, registry: CollectorRegistry | None = None) -> LokiSource:
    start = time.time_ns() - int((TWO_HOURS + 60) * 1e9)
    entries = [
        Entry({"node_name": "n1", "transport": "kernel"}, start + int(t * 1e9) + i, msg)
        for i, (t, msg) in enumerate(sorted(events, key=lambda e: e[0]))
    ]
    src = LokiSource(
        LokiSourceConfig(endpoint="http://loki.invalid", lookback=TWO_HOURS + 3600),
        lambda node: NodeWriter(kube, node, VOCAB),
        Store(),
        client=Answers(entries),  # type: ignore[arg-type]
        metrics=LokiMetrics(registry or CollectorRegistry()),
    )
    src.poll()
    return src


def ours(kube: MemoryKube) -> set[str]:
    return {t for t in kube.taints() if t.startswith("fleetmedic.io/")}


def test_the_storm_through_loki_fences_nothing():
    kube, registry = MemoryKube(), CollectorRegistry()
    src = run(storm(), kube, registry)
    assert ours(kube) == set() and src.fenced == 0
    follows = {"workflow": "xid.45", "context": "follows", "action": "none"}
    assert registry.get_sample_value("fleetmedic_loki_workflow_decisions_total", follows) == 20


def test_storm_then_xid79_through_loki_raises_a_diagnose_fence_to_reboot():
    kube = MemoryKube()
    kube.node["spec"]["taints"].append(VOCAB.diagnose.as_taint())
    run([*storm(), (TWO_HOURS, xid79(GPUS[0]))], kube)
    assert ours(kube) == {REBOOT}


def test_xid13_at_one_place_through_loki_fences_diagnose():
    kube = MemoryKube()
    run([(t, m) for t in (100, 2000, 5000) for m in xid13(GPUS[3], 4, 5)], kube)
    assert ours(kube) == {DIAGNOSE}


def test_one_jobs_amd_page_fault_storm_through_loki_fences_nothing():
    """Issue 39: the AMD storm judged by context in the Loki source as in the agent."""
    kube = MemoryKube()
    src = run(amd_storm(), kube)
    assert ours(kube) == set() and src.fenced == 0


def test_an_amd_fault_right_after_a_reset_through_loki_fences_diagnose():
    """The fault is the stream's last report: the batch's end lets it out."""
    kube = MemoryKube()
    bus = AMD_GPUS[2]
    run(
        [*[(500.0, ln) for ln in amd_reset(bus)], *[(502.0, ln) for ln in amd_fault(bus, 7, 9)]],
        kube,
    )
    assert ours(kube) == {DIAGNOSE}
