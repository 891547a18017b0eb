"""Per-pool profiles: each node to one profile, decided with its profile's ladder, admitted
through its profile's budget and breaker, with the top level's min_healthy over the fleet."""

from __future__ import annotations

import pytest
from policysim import World, config

from fleetmedic.errors import ConfigError
from fleetmedic.model.config import parse
from fleetmedic.policy.actions import Kind
from fleetmedic.policy.plan import decide_all, make_plan
from fleetmedic.policy.profiles import assign

TRAIN = {"pool": "train"}
INFER = {"pool": "infer"}


def two_pools(**top) -> World:
    w = World(
        config(
            profiles=[
                {
                    "name": "training",
                    "selector": "pool=train",
                    "safety": {
                        "max_concurrent": 2,
                        "max_concurrent_percent": 100,
                        "min_healthy": 0,
                    },
                },
                {
                    "name": "inference",
                    "selector": "pool in (infer, serve)",
                    "ladder": {"order": ["reboot", "manual"]},
                    "safety": {
                        "max_concurrent": 1,
                        "max_concurrent_percent": 100,
                        "min_healthy": 0,
                    },
                },
            ],
            **top,
        )
    )
    for i in range(4):
        w.add(f"t{i}", fault="reboot", state="reset", labels=TRAIN)
        w.add(f"i{i}", fault="reboot", state="reset", labels=INFER)
    w.add("other", fault="reboot", state="reboot")
    return w


def test_each_profile_keeps_its_own_budget_and_ladder():
    w = two_pools()
    first = {a.node: a for a in w.cycle()}
    started = {n: a for n, a in first.items() if a.new_work}
    # training: 2 slots; default (top level, max_concurrent 1 of a pool of 1): 1
    assert sorted(started) == ["other", "t0", "t1"]
    # the inference ladder has no reset rung: its reset-fenced nodes move to reboot first...
    assert all("skips" in first[f"i{i}"].reason for i in range(4))
    assert {w.view(f"i{i}").state for i in range(4)} == {"reboot"}
    # ... then start there, one at a time (inference: 1 slot)
    started.update({a.node: a for a in w.cycle() if a.new_work})
    assert sorted(started) == ["i0", "other", "t0", "t1"]
    assert started["t0"].profile == "training" and started["i0"].profile == "inference"
    assert started["other"].profile == "default"
    w.run(20)
    steps = {a.step for name in ("i0", "i1") for a in w.history(name)}
    assert steps == {"reboot"}
    assert {a.step for a in w.history("t0")} == {"reset", "reboot"}
    assert w.max_active <= 4


def test_a_node_two_profiles_select_is_left_alone_and_named_in_one_line():
    w = two_pools()
    w.add("both", fault="reboot", state="reboot", labels={"pool": "train"})
    w.nodes["both"]["metadata"]["labels"]["pool"] = "serve"
    cfg = config(
        profiles=[
            {"name": "a", "selector": "pool=serve"},
            {"name": "b", "selector": "pool in (serve, x)"},
        ]
    )
    views = [w.view("both"), w.view("other")]
    assignment = assign(views, cfg)
    assert assignment.error() == (
        "node both is selected by profiles a and b: "
        "a node belongs to one profile, fix the selectors"
    )
    decisions = dict((v.name, a) for v, a in decide_all(views, w.now, cfg, assignment=assignment))
    assert decisions["both"].kind == Kind.NONE and "profiles a and b" in decisions["both"].reason
    assert decisions["other"].kind == Kind.WRITE


def test_an_open_breaker_holds_only_its_own_profile():
    w = two_pools()
    views = w.views()
    decisions = decide_all(views, w.now, w.cfg)
    plan = make_plan(
        views,
        decisions,
        w.now,
        w.cfg,
        breaker_reason={"training": "circuit breaker open since then", "inference": None},
    )
    started = {a.node for a in plan.admission.admitted if a.new_work}
    assert started == {"other"}  # inference's nodes first move to its first rung (a write)
    assert {a.node for a in plan.admission.admitted} == {"i0", "i1", "i2", "i3", "other"}
    assert {n for n, why in plan.held.items() if "circuit breaker" in why} == {
        "t0",
        "t1",
        "t2",
        "t3",
    }


def test_the_top_level_min_healthy_holds_for_the_whole_fleet():
    w = two_pools(safety={"min_healthy": 5, "breaker": {"enabled": False}})
    # each profile's own min_healthy is 0: only the fleet-wide rule can hold them
    for i in range(4):
        w.add(f"h{i}", labels=TRAIN)  # 4 healthy of 13: below the fleet's 5
    views = w.views()
    plan = make_plan(views, decide_all(views, w.now, w.cfg), w.now, w.cfg)
    assert not [a for a in plan.admission.admitted if a.new_work]
    assert "fleet-wide: only 4 healthy, min_healthy is 5" in plan.held["t0"]


def test_profiles_merge_over_the_top_level():
    cfg = parse(
        {
            "safety": {"max_concurrent": 7, "drain": {"timeout": 99}},
            "ladder": {"order": ["reset", "reboot", "reimage", "manual"]},
            "profiles": [
                {
                    "name": "inference",
                    "selector": "pool=infer",
                    "safety": {"drain": {"grace_period": 30}},
                    "ladder": {"order": ["reboot", "manual"]},
                }
            ],
        }
    )
    inf = cfg.profile("inference")
    assert inf.safety.max_concurrent == 7 and inf.safety.drain.timeout == 99
    assert inf.safety.drain.grace_period == 30
    assert inf.ladder.order == ("reboot", "manual")
    assert cfg.profile("default") is cfg and cfg.ladder.order[0] == "reset"
    assert cfg.profile_names() == ("inference", "default")


@pytest.mark.parametrize(
    "profiles,expected",
    [
        (
            [{"name": "a", "selector": "x=1", "ladder": {"order": ["manual", "reboot"]}}],
            "profiles.0 (a): ladder.order: must be distinct rungs",
        ),
        ([{"name": "default", "selector": "x=1"}], "'default' is the top level itself"),
        ([{"name": "Bad_Name", "selector": "x=1"}], "profiles.0.name: string should match"),
        ([{"name": "a", "selector": "x in (1"}], "bad label selector part"),
        ([{"name": "a", "selector": " "}], "must select something"),
        (
            [{"name": "a", "selector": "x=1", "safety": {"pause_configmap": "a/b"}}],
            "safety.pause_configmap is fleet-wide",
        ),
        (
            [{"name": "a", "selector": "x=1"}, {"name": "a", "selector": "y=1"}],
            "profiles: the name 'a' is used twice",
        ),
        ([{"name": "a", "selector": "x=1", "kube": {}}], "profiles.0.kube: unknown key"),
    ],
)
def test_bad_profiles_are_one_line_errors(profiles, expected):
    with pytest.raises(ConfigError) as exc:
        parse({"profiles": profiles}, "config c.yaml")
    assert expected in str(exc.value) and "\n" not in str(exc.value)
