"""History, in-flight and escalation records, and Update.apply."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st
from policysim import FOREIGN_TAINT, make_node

from fleetmedic.model import keys
from fleetmedic.model.vocabulary import preset
from fleetmedic.policy import history
from fleetmedic.policy.actions import Stale, Update
from fleetmedic.policy.history import Attempt
from fleetmedic.policy.inflight import Escalated, InFlight

attempts = st.builds(
    Attempt,
    ep=st.integers(1, 50),
    step=st.sampled_from(["reboot", "reimage"]),
    attempt=st.integers(1, 3),
    start=st.just("2026-11-21T10:00:00Z"),
    end=st.just("2026-11-21T10:05:00Z"),
    result=st.sampled_from(["pass", "fail", "unreachable"]),
    phase=st.none() | st.just("verify"),
    run_id=st.none() | st.text(min_size=1, max_size=20),
    message=st.text(max_size=50),
)


@given(st.lists(attempts, max_size=30))
def test_history_round_trips(items):
    assert history.decode(history.encode(items)) == items


@given(st.lists(attempts, max_size=100), st.lists(attempts, max_size=5), st.integers(8, 40))
def test_history_stays_bounded_and_keeps_the_newest(old, new, limit):
    kept = history.append(old, new, limit)
    assert len(kept) <= limit
    assert kept[-len(new) :] == new or not new


def test_history_annotation_stays_small():
    long = Attempt(
        9,
        "reimage",
        3,
        "2026-11-21T10:00:00Z",
        "2026-11-21T10:05:00Z",
        "fail",
        "verify",
        "20261121T100000Z-verify-deadbeef",
        history.short("x" * 5000),
    )
    assert len(history.encode([long] * 40)) < 20_000  # of the 256 KB all annotations share


@pytest.mark.parametrize("raw", [None, "", "nope", "{}", '[{"ep": "x"}]', "[1, 2]"])
def test_malformed_history_reads_as_empty(raw):
    assert history.decode(raw) == []


def test_episode_starts_and_last_pass():
    a = Attempt(1, "reboot", 1, "2026-11-21T10:00:00Z", "2026-11-21T10:05:00Z", "fail")
    b = Attempt(1, "reimage", 1, "2026-11-21T10:06:00Z", "2026-11-21T10:30:00Z", "pass")
    assert history.episode_starts([b, a]) == {1: history.parse_time(a.start)}
    assert history.last_pass([a, b]) == history.parse_time(b.end)


def test_in_flight_round_trip_and_strict_decode():
    fl = InFlight(
        2,
        "reboot",
        1,
        "reboot",
        "running",
        "2026-11-21T10:00:00Z",
        "2026-11-21T10:01:00Z",
        run_id="r",
        boot_id="b",
        notes=("n",),
    )
    assert InFlight.decode(fl.encode()) == fl
    assert InFlight.decode(None) is None
    for bad in ("{", "[]", '{"ep": 1}', fl.encode().replace("running", "weird")):
        with pytest.raises(ValueError):
            InFlight.decode(bad)


def test_malformed_escalation_record_still_counts_as_sent():
    assert Escalated.decode("garbage").sent
    assert Escalated.decode(None) is None


class TestUpdateApply:
    vocab = preset("default")

    def test_sets_our_taint_and_keeps_others(self):
        node = make_node(
            "n1",
            taints=[
                FOREIGN_TAINT,
                {"key": "fleetmedic.io/repair", "value": "reboot", "effect": "NoExecute"},
            ],
        )
        assert Update("n1", "2026-11-21T10:00:00Z", state="reimage").apply(node, self.vocab)
        taints = node["spec"]["taints"]
        assert FOREIGN_TAINT in taints and self.vocab.reimage.as_taint() in taints
        assert {
            "key": "fleetmedic.io/repair",
            "value": "reboot",
            "effect": "NoExecute",
        } in taints, "same key, other effect: not ours"
        ann = node["metadata"]["annotations"]
        assert ann[keys.ANN_STATE_SINCE] == "2026-11-21T10:00:00Z"
        assert node["metadata"]["labels"][keys.LABEL_STATE] == "reimage"

    def test_precondition_on_state(self):
        node = make_node("n1", taints=[self.vocab.manual.as_taint()])
        with pytest.raises(Stale):
            Update("n1", "t", expect_state="reboot", state="reimage").apply(node, self.vocab)

    def test_precondition_on_in_flight(self):
        node = make_node("n1", annotations={keys.ANN_IN_FLIGHT: "{}"})
        with pytest.raises(Stale):
            Update("n1", "t", expect_inflight=None).apply(node, self.vocab)

    def test_history_is_appended_to_what_is_on_the_node_now(self):
        a = Attempt(1, "reboot", 1, "s", "e", "fail")
        node = make_node("n1", annotations={keys.ANN_HISTORY: history.encode([a])})
        b = Attempt(1, "reimage", 1, "s", "e", "pass")
        Update("n1", "t", append=(b,)).apply(node, self.vocab)
        assert history.decode(node["metadata"]["annotations"][keys.ANN_HISTORY]) == [a, b]

    def test_uncordon_only_when_we_cordoned(self):
        theirs = make_node("n1", unschedulable=True)
        Update("n1", "t", uncordon=True).apply(theirs, self.vocab)
        assert theirs["spec"]["unschedulable"]
        ours = make_node("n2", unschedulable=True, annotations={keys.ANN_CORDONED: "true"})
        Update("n2", "t", uncordon=True).apply(ours, self.vocab)
        assert not ours["spec"]["unschedulable"]
        assert keys.ANN_CORDONED not in ours["metadata"]["annotations"]

    def test_no_change_reports_false(self):
        node = make_node("n1")
        node["metadata"]["labels"][keys.LABEL_STATE] = "healthy"
        assert not Update("n1", "t").apply(node, self.vocab)
        assert json.dumps(node)  # still plain JSON
