"""The result contract every check and the agent rely on."""

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fleetmedic.checks import base
from fleetmedic.checks.base import CheckResult


def test_result_round_trips_through_json():
    r = base.problem(
        "nvidia.remapped_rows",
        "GPU 1: row remapping failed",
        action="manual",
        gpus={"1": {"failure": True}},
    )
    back = CheckResult.from_dict(json.loads(json.dumps(r.to_dict())))
    assert back == r
    assert r.to_dict()["action"] == "manual"
    assert "action" not in base.ok("x", "fine").to_dict()


def test_summary_is_always_one_line():
    r = base.unknown("amd.agents", "rocminfo said:\n  hsa error\n\tout of resources")
    assert r.summary == "rocminfo said: hsa error out of resources"


@pytest.mark.parametrize(
    "kwargs",
    [
        {"status": "fine"},
        {"category": "disk"},
        {"action": "reinstall"},
    ],
)
def test_invalid_fields_are_rejected(kwargs):
    fields = {"name": "x", "status": "ok", "summary": "s", **kwargs}
    with pytest.raises(ValueError):
        CheckResult(**fields)


def test_not_applicable_is_ok_but_marked():
    r = base.not_applicable("nvidia.nvlink", "not supported")
    assert r.status == "ok" and not r.applicable
    assert base.ok("nvidia.ecc", "fine").applicable


@pytest.mark.parametrize(
    "statuses,want,code",
    [
        ([], "ok", 0),
        (["ok", "ok"], "ok", 0),
        (["ok", "unknown"], "unknown", 2),
        (["unknown", "problem", "ok"], "problem", 1),
    ],
)
def test_overall_and_exit_code(statuses, want, code):
    results = [CheckResult(f"c{i}", s, "") for i, s in enumerate(statuses)]
    assert base.overall(results) == want
    assert base.exit_code(results) == code


def test_by_category():
    results = [
        CheckResult("a", "ok", "", category="gpu"),
        CheckResult("b", "unknown", "", category="gpu"),
        CheckResult("n", "problem", "", category="network"),
    ]
    assert base.by_category(results) == {"gpu": "unknown", "network": "problem"}


@given(st.lists(st.sampled_from(base.STATUSES), max_size=12))
def test_worst_is_order_independent_and_problem_dominates(statuses):
    w = base.worst(statuses)
    assert w == base.worst(list(reversed(statuses)))
    if "problem" in statuses:
        assert w == "problem"
    elif "unknown" in statuses:
        assert w == "unknown"
    else:
        assert w == "ok"
