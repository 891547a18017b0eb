"""Shared helpers for the safety and RBAC tests (tests/integration/test_safety_*.py,
test_rbac_controller.py). No tests here.

- ``safety_bench`` fixture: tests/harness/ctlbench.py's bench, as test_controller_e2e's
  ``bench`` (a fresh fleet, its nodes prepared, a pool, config writing, controllers
  stopped with their log shown at the end), with the pool named by ``tag`` and its kwok
  Nodes deleted at the end so no later test sees them.
- :func:`install_controller_rbac`: deploy/controller as shipped (kustomization order);
  the opt-in force-drain grant is not in it (``manifests(["force-drain.yaml"])``).
- :func:`intervals`: per node, the [start, end] of every attempt recorded in its history
  annotation, as datetimes.
"""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

import pytest

from tests.harness import ctlenv
from tests.harness import manifests as shipped
from tests.harness.ctlbench import Benches, pool_name

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy" / "controller"
NAMESPACE = "fleetmedic"
SA = "fleetmedic-controller"
REPAIR_KEY = "fleetmedic.io/repair"

apply, remove = shipped.apply, shipped.remove  # test_rbac_controller.py imports them from here


def manifests(names: list[str] | None = None) -> list[dict]:
    return shipped.load(DEPLOY, names)


def install_controller_rbac(kube) -> None:
    kube.ensure_namespace("default")
    for doc in manifests():
        apply(kube, doc)


def state_of(kube, name: str) -> str:
    values = [t["value"] for t in ctlenv.taints(kube, name) if t["key"] == REPAIR_KEY]
    return values[0] if values else "healthy"


def history(kube, name: str) -> list[dict]:
    return ctlenv.annotation(kube, name, "fleetmedic.io/history", [])


def _t(s: str) -> datetime:
    return datetime.fromisoformat(s.replace("Z", "+00:00"))


def intervals(kube, names: list[str]) -> dict[str, list[tuple[datetime, datetime, dict]]]:
    return {
        n: [
            (_t(a["start"]), _t(a["end"]), a)
            for a in history(kube, n)
            if a.get("start") and a.get("end")
        ]
        for n in names
    }


def max_overlap(spans: list[tuple[datetime, datetime]]) -> int:
    """Most spans open at one instant (an end and a start at the same instant do not overlap)."""
    points = sorted(
        [(s, 1) for s, _ in spans] + [(e, -1) for _, e in spans], key=lambda p: (p[0], p[1])
    )
    best = cur = 0
    for _, d in points:
        cur += d
        best = max(best, cur)
    return best


@pytest.fixture
def safety_bench(kube, fleet_factory, tmp_path):
    benches = Benches(kube, fleet_factory, tmp_path)
    yield lambda nodes=1, tag="sf": benches.new(nodes, pool_name(tag))
    benches.stop_controllers(log_lines=60)
    benches.delete_nodes()


def dump(obj) -> str:
    return json.dumps(obj, indent=1, default=str)[:3000]
