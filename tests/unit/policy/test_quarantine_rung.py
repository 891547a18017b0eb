"""The quarantine rung: when a repaired node is held for deep diagnostics, what the run's
result recommends, and where the node goes then."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from policysim import T0, World, config, make_node

from fleetmedic.errors import ConfigError
from fleetmedic.model import keys
from fleetmedic.model.config import parse
from fleetmedic.model.nodestate import view
from fleetmedic.model.vocabulary import preset
from fleetmedic.policy import ladder, quarantine
from fleetmedic.policy.actions import Action, Kind, Outcome
from fleetmedic.policy.history import PASS, Attempt, stamp

XID79 = json.dumps({"boot": "b", "fp": "f", "rule": "xid.79", "action": "reboot"})
TESTS = [
    {"category": "Hardware", "name": "Memory", "gpus": [0], "status": "pass", "warnings": []},
    {"category": "Hardware", "name": "Memory", "gpus": [1], "status": "pass", "warnings": []},
    {"category": "Stress", "name": "SM Stress", "gpus": [0], "status": "pass", "warnings": []},
]
FABRIC_OK = [{"name": "fabric.ports", "status": "ok", "summary": "2 RDMA ports up"}]


def diag_line(status="ok", tests=TESTS, fabric=FABRIC_OK, summary="none failed") -> str:
    doc = {
        "name": "diag.dcgm",
        "status": status,
        "summary": summary,
        "evidence": {"level": 3, "tests": tests},
    }
    if fabric is not None:
        doc["fabric"] = fabric
    return "some warning\n" + json.dumps(doc)


class QWorld(World):
    """A world whose quarantine runs print ``self.diag`` (None: the run fails)."""

    diag: str | None = diag_line()
    quarantines = 0

    def act(self, action: Action) -> Outcome:
        if action.phase == quarantine.PHASE:
            self.quarantines += 1
            assert action.hostvars["quarantine_level"] == self.cfg.ladder.quarantine.level
            if self.diag is None:
                return Outcome("unreachable", run_id="run-q", message="ssh: timed out")
            return Outcome("ok", run_id="run-q", stdout=self.diag)
        return super().act(action)


def world(**kw) -> QWorld:
    return QWorld(config(**{"ladder__order": ["reboot", "reimage", "manual"], **kw}))


def fence(w: QWorld, name: str = "n1") -> None:
    """The agent fences the node for a Xid 79 (its finding names the catalog rule)."""
    node = w.nodes[name]
    node["spec"]["taints"].append(w.vocab.repair("reboot").as_taint())
    node["metadata"]["annotations"][keys.ANN_LAST_FINDING] = XID79
    w.truth[name].fixed_by.clear()
    w.truth[name].fault = "reboot"


def settle(w: QWorld, cycles: int = 40) -> None:
    for _ in range(cycles):
        w.cycle()
        if w.settled():
            return
    raise AssertionError(f"not settled: {w.view('n1').annotations}")


def q_record(w: QWorld, name: str = "n1") -> dict:
    return json.loads(w.view(name).annotations[keys.ANN_QUARANTINE])


ENABLED = {"ladder__quarantine": {"enabled": True}}


def test_the_second_repair_for_the_same_xid_goes_through_quarantine_and_returns():
    w = world(**ENABLED)
    w.add("n1")
    fence(w)
    settle(w)
    assert w.view("n1").state == "healthy" and w.quarantines == 0, "the first repair returns"
    assert w.history("n1")[-1].fault == "xid.79"
    w.now += timedelta(days=2)
    fence(w)
    settle(w)
    v = w.view("n1")
    assert v.state == "healthy" and not v.unschedulable and w.quarantines == 1
    rec = q_record(w)
    assert rec["recommendation"] == "return-to-service" and rec["level"] == 3
    assert rec["why"] == "repaired 2 times for xid.79 within 7d"
    assert {(t["test"], tuple(t["gpus"]), t["result"]) for t in rec["tests"]} == {
        ("Memory", (0,), "pass"),
        ("Memory", (1,), "pass"),
        ("SM Stress", (0,), "pass"),
    }
    assert rec["fabric"] == [
        {"check": "fabric.ports", "status": "ok", "summary": "2 RDMA ports up"}
    ]
    last = w.history("n1")[-1]
    assert (last.result, last.phase, last.fault) == (PASS, "quarantine", "xid.79")


def test_outside_the_window_or_another_fault_or_disabled_no_quarantine():
    for kw, later, rule in (
        (ENABLED, timedelta(days=8), "xid.79"),
        (ENABLED, timedelta(hours=1), "xid.48"),
        ({}, timedelta(hours=1), "xid.79"),
    ):
        w = world(**kw)
        w.add("n1")
        fence(w)
        settle(w)
        w.now += later
        fence(w)
        w.nodes["n1"]["metadata"]["annotations"][keys.ANN_LAST_FINDING] = json.dumps(
            {"boot": "b", "fp": "f", "rule": rule}
        )
        settle(w)
        assert w.quarantines == 0 and w.view("n1").state == "healthy", (kw, later, rule)
        assert keys.ANN_QUARANTINE not in w.view("n1").annotations


def test_a_failed_test_recommends_replace_and_climbs_to_the_terminal_step():
    failed = [*TESTS, {"name": "SM Stress", "gpus": [1], "status": "fail", "warnings": ["SM 3"]}]
    # a pool whose ladder has replace: there; else manual, whose email carries the result
    for order, want in ((["reboot", "replace", "manual"], "replace"), (None, "manual")):
        w = world(**ENABLED, **({"ladder__order": order} if order else {}))
        w.diag = diag_line("problem", failed, summary="SM Stress (GPU 1)")
        w.add("n1")
        for _ in range(2):
            fence(w)
            for _ in range(12):
                w.cycle()
            w.now += timedelta(hours=1)
        v = w.view("n1")
        assert v.state == want and v.unschedulable, (order, v.state)
        rec = q_record(w)
        assert rec["recommendation"] == "replace"
        assert rec["tests"][0] == {
            "test": "SM Stress",
            "gpus": [1],
            "result": "fail",
            "message": "SM 3",
        }, "failed tests first"
        attempts = [(a.step, a.result, a.phase) for a in w.history("n1")]
        assert ("reboot", "fail", "quarantine") in attempts
        if want == "manual":
            assert w.emails[("n1", 2)] == 1


@pytest.mark.parametrize(
    "diag",
    [
        None,  # the run was unreachable
        diag_line("unknown", [], summary="dcgmi diag -r 3 timed out after 2700 s"),
        diag_line(fabric=None),  # an older fleetmedic on the node: no fabric checks
        diag_line(fabric=[{"name": "fabric.ports", "status": "unknown", "summary": "?"}]),
        "no json here",
    ],
)
def test_what_the_run_could_not_tell_is_never_a_return_to_service(diag):
    w = world(**ENABLED)
    w.diag = diag
    w.add("n1")
    for _ in range(2):
        fence(w)
        settle(w)
        w.now += timedelta(hours=1)
    assert w.view("n1").state == "manual"
    assert q_record(w)["recommendation"] == "unknown"


def test_a_fabric_finding_recommends_replace():
    down = [{"name": "fabric.ports", "status": "problem", "summary": "mlx5_1/1 DOWN/Disabled"}]
    res = quarantine.judge("ok", diag_line(fabric=down))
    assert res.recommendation == quarantine.REPLACE and "mlx5_1/1 DOWN" in res.summary


def test_a_request_quarantines_the_next_return_and_is_answered():
    w = world()  # not enabled: the request is honoured anyway
    w.add("n1")
    fence(w)
    req = quarantine.request_record("alice", stamp(T0))
    w.nodes["n1"]["metadata"]["annotations"][keys.ANN_QUARANTINE_REQUEST] = req
    settle(w)
    assert w.quarantines == 1 and w.view("n1").state == "healthy"
    assert q_record(w)["why"] == "requested by alice"
    assert keys.ANN_QUARANTINE_REQUEST not in w.view("n1").annotations


def test_a_restart_mid_quarantine_runs_it_again_from_the_marker():
    w = world(**ENABLED)
    w.add("n1")
    fence(w)
    settle(w)
    fence(w)
    while True:
        a = ladder.decide(w.view("n1"), w.now, w.cfg)
        if a.phase == quarantine.PHASE:
            break
        w.execute(a)
        w.now += timedelta(seconds=30)
    # begin written, then the controller dies: the marker says running
    w.write(ladder.begin(w.view("n1"), a, w.now, w.cfg, "run-1"))
    again = ladder.decide(w.view("n1"), w.now + timedelta(minutes=5), w.cfg)
    assert again.kind == Kind.RUN and again.phase == quarantine.PHASE and again.resumed
    assert "again" in again.reason and not again.disruptive
    w.execute(again)
    assert w.view("n1").state == "healthy" and q_record(w)["run"] == "run-q"


def test_the_annotation_stays_under_its_limit_failed_rows_kept():
    rows = [
        {"test": f"t{i}", "gpus": [i % 8], "result": "fail" if i == 77 else "pass"}
        for i in range(400)
    ]
    res = quarantine.Result(quarantine.REPLACE, "x", tuple(rows), ())
    text = quarantine.record(res, 4, stamp(T0), "run-1", "why", limit=4096)
    doc = json.loads(text)
    assert len(text.encode()) <= 4096
    assert doc["tests"][0]["test"] == "t77" and "left out" in doc["omitted"]
    small = json.loads(quarantine.record(res, 4, stamp(T0), "run-1", "why"))
    assert len(small["tests"]) == 400 and "omitted" not in small


def test_the_fault_is_named_by_rule_or_kind_and_code():
    vocab = preset()

    def fault(finding) -> str | None:
        ann = {keys.ANN_LAST_FINDING: json.dumps(finding)} if finding is not None else {}
        return quarantine.fault_of(view(make_node("n", annotations=ann), vocab))

    assert fault({"rule": "xid.79", "boot": "b", "fp": "f"}) == "xid.79"
    assert fault({"kind": "xid", "code": 79}) == "xid.79"
    assert fault({"kind": "diag", "summary": "sweep level 2"}) == "diag"
    assert fault({"summary": "foreign"}) is None and fault(None) is None


def test_due_counts_passes_for_the_same_fault_in_the_window():
    def passed(days_ago: float, fault: str | None = "xid.79") -> Attempt:
        at = stamp(T0 - timedelta(days=days_ago))
        return Attempt(ep=1, step="reboot", attempt=1, start=at, end=at, result=PASS, fault=fault)

    week = 7 * 86400
    assert not quarantine.due([], "xid.79", T0, 2, week)
    assert quarantine.due([passed(1)], "xid.79", T0, 2, week)
    assert not quarantine.due([passed(8)], "xid.79", T0, 2, week)
    assert not quarantine.due([passed(1, "xid.48")], "xid.79", T0, 2, week)
    assert not quarantine.due([passed(1, None)], None, T0, 2, week), "unnamed never matches"
    assert not quarantine.due([passed(1)], "xid.79", T0, 3, week)
    assert quarantine.due([passed(1), passed(2)], "xid.79", T0, 3, week)
    assert quarantine.due([], None, T0, 1, week), "count 1: every repair"


def test_config_is_validated():
    cfg = parse({"ladder": {"quarantine": {"enabled": True, "window": "3d", "level": 4}}})
    q = cfg.ladder.quarantine
    assert (q.count, q.window, q.level, q.playbook) == (2, 3 * 86400, 4, "quarantine.yml")
    for bad in ({"level": 6}, {"count": 0}, {"window": "10s"}, {"nope": 1}):
        with pytest.raises((ConfigError, ValueError)):
            parse({"ladder": {"quarantine": bad}})


def test_asking_fences_a_node_in_service_at_the_first_rung_then_quarantines_it():
    w = world()
    w.add("n1")
    upd, what = quarantine.ask(w.view("n1"), w.cfg, "alice", stamp(w.now))
    assert "fenced at reboot" in what
    assert w.write(upd)
    v = w.view("n1")
    assert v.state == "reboot" and quarantine.requested(v) == "alice"
    settle(w)
    assert w.quarantines == 1 and w.view("n1").state == "healthy"
    assert q_record(w)["why"] == "requested by alice"


def test_asking_about_a_node_under_repair_only_marks_it_and_some_nodes_refuse():
    w = world(ladder__order=["reboot", "replace", "manual"])
    w.add("r", state="reboot")
    w.add("m", state="manual")
    w.add("x", state="replace")
    upd, what = quarantine.ask(w.view("r"), w.cfg, "bob", stamp(w.now))
    assert upd.state is None and "before it returns" in what
    assert upd.annotations[keys.ANN_QUARANTINE_REQUEST]
    for name, why in (("m", "manual"), ("x", "does not return it to service")):
        with pytest.raises(ValueError, match=why):
            quarantine.ask(w.view(name), w.cfg, "bob", stamp(w.now))


def test_a_release_by_hand_answers_an_open_request():
    from fleetmedic.policy import release

    w = world()
    w.add("n1")
    upd, _ = quarantine.ask(w.view("n1"), w.cfg, "alice", stamp(w.now))
    w.write(upd)
    w.write(release.release(w.view("n1"), w.now, w.cfg, by="bob"))
    v = w.view("n1")
    assert v.state == "healthy" and quarantine.requested(v) is None
