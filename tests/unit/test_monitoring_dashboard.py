"""The Grafana dashboard (deploy/monitoring/dashboards/fleetmedic.json) is valid against
the dashboard JSON model and shows what issue 18 asks for.

The schema (tests/monitoring/grafana-dashboard.schema.json) is ours, written from
Grafana's published dashboard schema (the JSON Schema grafana-foundation-sdk generates
from Grafana's CUE dashboard kind, jsonschema/dashboard.jsonschema.json): the same
property names, required keys, enums and bounds, every object closed. jsonschema checks it.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import jsonschema
import pytest

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "deploy" / "monitoring" / "dashboards" / "fleetmedic.json"
SCHEMA = json.loads((ROOT / "tests" / "monitoring" / "grafana-dashboard.schema.json").read_text())
VALIDATOR = jsonschema.Draft202012Validator(SCHEMA)


@pytest.fixture
def dash() -> dict:
    return json.loads(DASHBOARD.read_text())


def _errors(doc: dict) -> list[str]:
    return [f"{e.json_path}: {e.message[:200]}" for e in VALIDATOR.iter_errors(doc)]


def _panels(d: dict) -> list[dict]:
    return [p for p in d["panels"] if p["type"] != "row"]


def _exprs(d: dict) -> list[str]:
    return [t["expr"] for p in _panels(d) for t in p["targets"]]


def test_schema_is_a_valid_json_schema():
    jsonschema.Draft202012Validator.check_schema(SCHEMA)


def test_dashboard_matches_the_schema(dash):
    assert _errors(dash) == []


@pytest.mark.parametrize(
    "break_it, where",
    [
        (lambda d: d["panels"][1].update(gridpos=d["panels"][1].pop("gridPos")), "gridpos"),
        (lambda d: d["panels"][1]["gridPos"].update(w=25), "gridPos.w"),
        (lambda d: d.pop("templating"), "templating"),
        (lambda d: d["panels"][1]["fieldConfig"]["defaults"].update(colour="red"), "colour"),
        (lambda d: d["panels"][0].pop("collapsed"), "panels[0]"),
        (lambda d: d.update(graphTooltip=3), "graphTooltip"),
    ],
)
def test_schema_rejects_broken_dashboards(dash, break_it, where):
    broken = copy.deepcopy(dash)
    break_it(broken)
    errors = _errors(broken)
    assert errors, f"schema accepted a dashboard with a broken {where}"


def test_panels_are_well_formed(dash):
    ids = [p["id"] for p in dash["panels"]]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    names = {v["name"] for v in dash["templating"]["list"]}
    assert "datasource" in names
    for p in _panels(dash):
        assert p["title"] and p["targets"], p
        assert p["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, p["title"]
        refs = [t["refId"] for t in p["targets"]]
        assert len(refs) == len(set(refs)), p["title"]
        assert all(t["expr"].strip() for t in p["targets"]), p["title"]


def test_panels_do_not_overlap(dash):
    taken: dict[tuple[int, int], str] = {}
    for p in dash["panels"]:
        g = p["gridPos"]
        assert g["x"] + g["w"] <= 24, p["title"]
        for x in range(g["x"], g["x"] + g["w"]):
            for y in range(g["y"], g["y"] + g["h"]):
                assert (x, y) not in taken, f"{p['title']!r} overlaps {taken[(x, y)]!r}"
                taken[(x, y)] = p["title"]


def test_dashboard_shows_what_the_issue_asks_for(dash):
    exprs = "\n".join(_exprs(dash))
    # fleet state
    for state in ("healthy", "reboot", "reimage", "manual"):
        assert f'fleetmedic_nodes{{state="{state}"}}' in exprs
    # repairs over time
    assert "increase(fleetmedic_remediations_total[$__interval])" in exprs
    # MTTR (automatic and manual) and MTBI
    assert 'fleetmedic_time_to_repair_seconds_sum{repair="automatic"}' in exprs
    assert 'fleetmedic_time_to_repair_seconds_sum{repair="manual"}' in exprs
    assert "fleetmedic_time_between_incidents_seconds" in exprs
    # top failing nodes and codes
    assert "topk(10, sum by (node) (increase(fleetmedic_agent_findings_total" in exprs
    assert "topk(10, sum by (kind, code) (increase(fleetmedic_agent_findings_total" in exprs
