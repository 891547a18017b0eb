"""The replace rung, transition by transition, and the day's record of replacements."""

from __future__ import annotations

import json
from datetime import timedelta

from policysim import FOREIGN_TAINT, T0, World, config

from fleetmedic.model import keys
from fleetmedic.policy import ladder, replacements
from fleetmedic.policy.actions import Kind, Outcome
from fleetmedic.policy.history import parse_time, stamp

REPLACE_LADDER = {"ladder__order": ["reboot", "replace", "manual"]}


def world(**kw) -> World:
    return World(config(**{**REPLACE_LADDER, **kw}))


def kinds_until_settled(w: World, cycles: int = 30) -> list[tuple[str, str | None]]:
    seen: list[tuple[str, str | None]] = []
    for _ in range(cycles):
        seen += [(a.kind, a.phase) for a in w.cycle()]
        if w.settled():
            break
    return seen


def test_a_node_the_reboot_does_not_cure_is_noticed_then_handed_to_the_cloud_once():
    w = world()
    w.add("n1", fault="never", state="reboot", taints=[FOREIGN_TAINT])
    seen = kinds_until_settled(w)
    # reboot fails, then: diagnose, drain, the notice, the hand-off; no verify after it
    assert seen[-4:] == [
        (Kind.RUN, "diagnose"),
        (Kind.DRAIN, "drain"),
        (Kind.ESCALATE, "notify"),
        (Kind.REPLACE, "replace"),
    ]
    assert w.log == [("notice", "n1"), ("terminate", "n1")], "the email before the hand-off"
    v = w.view("n1")
    assert v.state == "replace" and v.unschedulable, "fenced until the cloud removes it"
    assert keys.ANN_IN_FLIGHT not in v.annotations
    assert json.loads(v.annotations[keys.ANN_REPLACED])["ep"] == 1
    assert FOREIGN_TAINT in v.taints
    assert [(a.step, a.result) for a in w.history("n1")] == [
        ("reboot", "fail"),
        ("replace", "replaced"),
    ]
    assert "instance terminated" in w.history("n1")[-1].message
    assert w.emails[("n1", 1)] == 1, "the notice, and no manual escalation"
    # never decided on again, whatever the clock says
    for later in (timedelta(0), timedelta(days=30)):
        d = ladder.decide(w.view("n1"), w.now + later, w.cfg)
        assert d.kind == Kind.NONE and "handed to the cloud" in d.reason


def test_a_node_that_does_not_answer_is_still_handed_to_the_cloud():
    """A hung instance is what replace is for: the diagnose phase cannot reach it, the
    drain, the notice and the hand-off do not need it."""
    w = world()
    w.add("n1", fault="never", state="reboot")
    w.truth["n1"].reachable = False
    seen = kinds_until_settled(w)
    assert seen[-3:] == [
        (Kind.DRAIN, "drain"),
        (Kind.ESCALATE, "notify"),
        (Kind.REPLACE, "replace"),
    ]
    assert w.log == [("notice", "n1"), ("terminate", "n1")]
    reboot, replaced = w.history("n1")
    assert (reboot.step, reboot.result, reboot.phase) == ("reboot", "unreachable", "diagnose")
    assert (replaced.step, replaced.result) == ("replace", "replaced")
    assert "diagnose unreachable" in replaced.message
    assert w.emails[("n1", 1)] == 1, "the notice, and no manual escalation"


def test_the_replace_rung_takes_a_repair_slot_and_is_window_gated():
    w = world()
    w.add("n1", state="replace")
    start = ladder.decide(w.view("n1"), w.now, w.cfg)
    assert start.kind == Kind.WRITE and start.new_work
    w.cycle()
    while (a := ladder.decide(w.view("n1"), w.now, w.cfg)).kind != Kind.REPLACE:
        w.execute(a)
    assert a.disruptive and a.playbook == "/pb/replace.yml"
    assert a.hostvars["fleetmedic_step"] == "replace"


def test_a_failed_notice_is_retried_and_never_skipped():
    w = world(smtp={"host": "relay", "from": "f@example.test", "to": ["o@example.test"]})
    w.add("n1", state="replace")
    w.email_fail_rate = 1.0
    for _ in range(6):
        w.cycle()
    assert not w.log and w.terminations == {}, "no hand-off before the notice is sent"
    fl = json.loads(w.view("n1").annotations[keys.ANN_IN_FLIGHT])
    assert (fl["phase"], fl["status"]) == ("notify", "pending") and fl["retry_at"]
    w.email_fail_rate = 0.0
    kinds_until_settled(w, 40)
    assert w.log == [("notice", "n1"), ("terminate", "n1")]


def test_a_failed_hand_off_climbs_to_manual_with_one_escalation():
    w = world()
    w.add("n1", state="replace")
    w.handoff_fail_rate = 1.0
    kinds_until_settled(w, 40)
    v = w.view("n1")
    assert v.state == "manual" and keys.ANN_REPLACED not in v.annotations
    assert [(a.step, a.result) for a in w.history("n1")] == [
        ("replace", "fail"),
        ("manual", "escalated"),
    ]
    assert "AccessDenied" in w.history("n1")[0].message
    assert w.log == [("notice", "n1"), ("email", "n1")]


def test_the_days_limit_holds_the_third_node_until_a_slot_frees():
    w = world(safety__max_replacements_per_day=2, safety__max_concurrent=3)
    for i in range(3):
        w.add(f"n{i}", state="replace")
    for _ in range(20):
        w.cycle()
    assert len(w.terminations) == 2
    [held] = [n for n in w.nodes if n not in w.terminations]
    fl = json.loads(w.view(held).annotations[keys.ANN_IN_FLIGHT])
    assert fl["phase"] == "notify" and fl["status"] == "pending", "held before its notice"
    assert ("notice", held) not in w.log
    first = min(parse_time(e.at) for e in w.ledger)  # reserved before the notice
    assert fl["retry_at"] == stamp(first + replacements.DAY)
    d = ladder.decide(w.view(held), w.now, w.cfg)
    assert d.kind == Kind.WAIT
    w.now = first + replacements.DAY
    kinds_until_settled(w)
    assert sorted(w.terminations.values()) == [1, 1, 1]
    assert w.replaced_at[held] >= first + replacements.DAY


def test_removing_the_taint_of_a_replaced_node_forgets_the_record():
    w = world()
    w.add("n1", state="replace")
    kinds_until_settled(w)
    node = w.nodes["n1"]
    node["spec"]["taints"] = [t for t in node["spec"]["taints"] if t.get("value") != "replace"]
    w.cycle()
    v = w.view("n1")
    assert v.state == "healthy" and keys.ANN_REPLACED not in v.annotations
    assert not v.unschedulable


def test_a_resumed_hand_off_is_the_same_request():
    w = world()
    w.add("n1", state="replace")
    while (a := ladder.decide(w.view("n1"), w.now, w.cfg)).kind != Kind.REPLACE:
        w.execute(a)
    w.write(ladder.begin(w.view("n1"), a, w.now, w.cfg, "run-1"))  # ... then killed
    again = ladder.decide(w.view("n1"), w.now, w.cfg)
    assert again.kind == Kind.REPLACE and again.resumed
    assert again.hostvars["fleetmedic_request_id"] == a.hostvars["fleetmedic_request_id"]
    done = ladder.complete(w.view("n1"), again, Outcome("ok", message="x"), w.now, w.cfg)
    assert done is not None and done.annotations[keys.ANN_IN_FLIGHT] is None


# -- the day's record -------------------------------------------------------------------
def test_reserve_counts_a_node_and_episode_once_and_forgets_after_a_day():
    got = replacements.reserve((), "a", 1, 2, T0)
    assert got.ok and got.changed and [e.node for e in got.entries] == ["a"]
    again = replacements.reserve(got.entries, "a", 1, 2, T0 + timedelta(hours=1))
    assert again.ok and not again.changed, "a resumed hand-off is not counted twice"
    b = replacements.reserve(got.entries, "b", 1, 2, T0 + timedelta(hours=1))
    c = replacements.reserve(b.entries, "c", 1, 2, T0 + timedelta(hours=2))
    assert not c.ok and c.retry_at == T0 + replacements.DAY and "limit 2" in c.why
    later = replacements.reserve(b.entries, "c", 1, 2, T0 + replacements.DAY)
    assert later.ok and [e.node for e in later.entries] == ["b", "c"]
    assert not replacements.reserve((), "a", 1, 0, T0).ok, "0: no replacements at all"


def test_the_record_round_trips_and_refuses_garbage():
    entries = replacements.reserve((), "a", 3, 1, T0).entries
    assert replacements.decode(replacements.encode(entries)) == entries
    assert replacements.decode(None) == ()
    for bad in ("{", '[{"node": "a"}]', '[{"node": "a", "ep": 1, "at": "yesterday"}]'):
        try:
            replacements.decode(bad)
        except ValueError:
            continue
        raise AssertionError(f"{bad!r} decoded")
    assert replacements.record_key() == "replacements"
    assert replacements.record_key("cloud") == "replacements.cloud"


def test_replace_manual_sends_a_needs_hands_fence_to_the_cloud_not_to_a_human():
    w = world(ladder__replace_manual=True)
    w.add("n1", state="manual")
    kinds_until_settled(w)
    assert w.view("n1").state == "replace" and w.terminations == {"n1": 1}
    assert [(a.step, a.result) for a in w.history("n1")] == [("replace", "replaced")]
    assert w.log == [("notice", "n1"), ("terminate", "n1")], "no manual escalation"
    # off (the default): manual stays a human's
    w = world()
    w.add("n1", state="manual")
    kinds_until_settled(w)
    assert w.view("n1").state == "manual" and not w.terminations


def test_a_failed_hand_off_under_replace_manual_still_ends_with_a_human():
    w = world(ladder__replace_manual=True)
    w.add("n1", state="manual")
    w.handoff_fail_rate = 1.0
    kinds_until_settled(w, 40)
    assert w.view("n1").state == "manual"
    assert [(a.step, a.result) for a in w.history("n1")] == [
        ("replace", "fail"),
        ("manual", "escalated"),
    ]
