"""deploy/monitoring/metrics.yaml is the one list of metric names the alert rules, the
dashboard and the promtool unit tests may use, and what it calls `exported` is exactly
what the controller, the node agent and the Loki source export (a metric renamed or added
in code fails here first)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, Info

from fleetmedic.agent.lokisource import LokiMetrics
from fleetmedic.agent.metrics import AgentMetrics
from fleetmedic.controller.metrics import Metrics

ROOT = Path(__file__).resolve().parents[2]
MON = ROOT / "deploy" / "monitoring"
LIST = yaml.safe_load((MON / "metrics.yaml").read_text())
METRICS = {m["name"]: m for m in LIST["metrics"]}
TARGET_LABELS = set(LIST["target_labels"])
HISTOGRAM_SUFFIXES = ("_bucket", "_sum", "_count")
NAME_RE = re.compile(r"\b(fleetmedic_[a-z0-9_]+)")
MATCHER_RE = re.compile(r"\b(fleetmedic_[a-z0-9_]+)\{([^}]*)\}")
BY_RE = re.compile(r"\b(?:by|without)\s*\(([^)]*)\)")


def _expressions() -> dict[str, str]:
    """Every PromQL expression we ship or test with, keyed by where it is."""
    out = {}
    rules = yaml.safe_load((MON / "rules" / "fleetmedic.rules.yaml").read_text())
    for g in rules["groups"]:
        for r in g["rules"]:
            out[f"rule {r.get('alert') or r.get('record')}"] = r["expr"]
    dash = json.loads((MON / "dashboards" / "fleetmedic.json").read_text())
    for p in dash["panels"]:
        for t in p.get("targets", []):
            out[f"panel {p['title']!r} {t['refId']}"] = t["expr"]
    tests = yaml.safe_load(
        (ROOT / "tests" / "monitoring" / "fleetmedic.rules.test.yaml").read_text()
    )
    for t in tests["tests"]:
        for s in t.get("input_series", []):
            out[f"test {t['name']!r} series"] = s["series"]
    return out


def _base(name: str) -> str | None:
    if name in METRICS:
        return name
    for suffix in HISTOGRAM_SUFFIXES:
        if (
            name.endswith(suffix)
            and METRICS.get(name[: -len(suffix)], {}).get("type") == "histogram"
        ):
            return name[: -len(suffix)]
    return None


def _exported(metrics: object | None = None) -> dict[str, tuple[str, set[str]]]:
    """What the controller (or ``metrics``) exports: exposition name -> (type, labels)."""
    kinds = {Counter: "counter", Gauge: "gauge", Histogram: "histogram", Info: "info"}
    out = {}
    held = list(vars(metrics or Metrics()).values())
    # the phases' counters are held in one dict (Metrics.phases, from policy/phases/)
    held += [m for value in held if isinstance(value, dict) for m in value.values()]
    for metric in held:
        kind = next((k for cls, k in kinds.items() if isinstance(metric, cls)), None)
        if kind is None:
            continue
        # prometheus_client keeps the declared label names here; the exposition only
        # shows labels of children that exist, so it cannot tell them for a fresh counter.
        name = metric._name + {"counter": "_total", "info": "_info"}.get(kind, "")
        labels = set(metric._labelnames)
        if kind == "info":
            name = metric._name + "_info"
            labels = {"version"}
        out[name] = (kind, labels)
    return out


def test_the_list_is_well_formed():
    for m in LIST["metrics"]:
        assert set(m) == {"name", "type", "labels", "source", "status"}, m
        assert m["type"] in ("counter", "gauge", "histogram", "info"), m
        assert m["source"] in ("controller", "agent", "loki"), m
        assert m["status"] in ("exported", "planned"), m
        assert m["name"].startswith("fleetmedic_"), m
        assert (m["type"] == "counter") == m["name"].endswith("_total"), m
    assert len(METRICS) == len(LIST["metrics"]), "a name is listed twice"


@pytest.mark.parametrize("source", ["controller", "loki", "agent"])
def test_exported_means_exported_by_the_code(source):
    # the Loki source's metrics join the controller's registry when `sources.loki` is set
    # (and are `fleetmedic watch loki --metrics-port`'s own); the agent's are its own
    # registry's (`fleetmedic agent --metrics-port`)
    exported = _exported(
        {"controller": None, "loki": LokiMetrics(CollectorRegistry()), "agent": AgentMetrics()}[
            source
        ]
    )
    assert exported, f"no {source} metric found: the check would pass by not checking"
    listed = {n: m for n, m in METRICS.items() if m["source"] == source}
    for name, (kind, labels) in exported.items():
        assert name in listed, f"{name} is exported but not in deploy/monitoring/metrics.yaml"
        m = listed[name]
        assert m["status"] == "exported", f"{name} is exported now: mark it exported"
        assert (m["type"], set(m["labels"])) == (kind, labels), name
    for name, m in listed.items():
        if m["status"] == "exported":
            assert name in exported, f"{name} is listed as exported but the {source} lacks it"


def test_rules_dashboard_and_tests_use_only_listed_names():
    unknown = {
        where: sorted(set(n for n in NAME_RE.findall(expr) if _base(n) is None))
        for where, expr in _expressions().items()
    }
    assert {w: n for w, n in unknown.items() if n} == {}


@pytest.mark.parametrize("where", sorted(_expressions()))
def test_label_names_exist(where):
    expr = _expressions()[where]
    used: set[str] = set()
    for name, matchers in MATCHER_RE.findall(expr):
        labels = {m.split("=")[0].strip().rstrip("!~") for m in matchers.split(",") if "=" in m}
        allowed = set(METRICS[_base(name)]["labels"]) | TARGET_LABELS
        assert labels <= allowed, f"{name}: unknown labels {sorted(labels - allowed)}"
    for group in BY_RE.findall(expr):
        used |= {g.strip() for g in group.split(",") if g.strip()}
    known = TARGET_LABELS | {"le"}
    for n in NAME_RE.findall(expr):
        if _base(n):
            known |= set(METRICS[_base(n)]["labels"])
    assert used <= known, f"grouped by unknown labels {sorted(used - known)}"
