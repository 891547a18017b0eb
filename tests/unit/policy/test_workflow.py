"""NVIDIA's Xid workflows as a pure policy: place and company decide, not counts.

Replay-safety (the same lines again change nothing), order independence where it
holds, and the bounds, with hypothesis."""

from __future__ import annotations

import itertools
import json

from hypothesis import given, settings
from hypothesis import strategies as st

from fleetmedic.policy.workflow import (
    MAX_EVENTS,
    MAX_KEYS,
    Occurrence,
    Recent,
    follows,
    judge,
    to_json,
)
from fleetmedic.scan.xidcontext import WorkflowSpec, XidContext

XID13 = WorkflowSpec(
    rule="xid.13",
    kind="same-location",
    action="diagnose",
    otherwise="monitor",
    bucket="WORKFLOW_XID_13",
    count=2,
    window=86400,
    burst=10,
    where=("gpc", "tpc"),
)
XID31 = WorkflowSpec(
    rule="xid.31",
    kind="same-gpu",
    action="diagnose",
    otherwise="monitor",
    bucket="WORKFLOW_XID_31",
    count=2,
    window=86400,
    burst=10,
)
XID45 = WorkflowSpec(
    rule="xid.45", kind="follows", action="none", otherwise="none", bucket="WORKFLOW_XID_45"
)


def at(gpc, tpc, sm=0):
    return XidContext(gpc=gpc, tpc=tpc, sm=sm)


NOWHERE = XidContext()


def occ(rule, when, ctx=NOWHERE, gpu="0000:cb:00", clock="uptime"):
    return Occurrence(rule, gpu, when, clock, ctx)


def feed(events, spec=XID13, state=None, boot="b1"):
    """``events``: (time, context, gpu); returns the final state JSON and the verdicts."""
    verdicts = []
    for when, ctx, gpu in events:
        v = judge(state, occ(spec.rule, when, ctx, gpu), spec, boot=boot)
        if v.changed:
            state = json.loads(json.dumps(to_json(v.state)))  # as the annotation holds it
        verdicts.append(v)
    return state, verdicts


def test_xid13_at_one_place_again_calls_for_diagnose():
    _, vs = feed([(100, at(7, 7, 0), "g"), (3700, at(7, 7, 1), "g")])  # another SM: same place
    assert [v.fired for v in vs] == [False, True]
    assert vs[1].action == "diagnose" and vs[1].context == "same-place"
    assert "gpc=7,tpc=7" in vs[1].detail


def test_xid13_three_times_at_one_place_over_two_hours_fires_once_then_starts_over():
    _, vs = feed([(t, at(7, 7), "g") for t in (100, 3700, 7200)])
    assert [v.fired for v in vs] == [False, True, False]  # used up, then counted afresh


def test_xid13_at_forty_places_never_fires():
    places = list(itertools.product(range(8), range(9)))[:40]
    gpus = [f"0000:{b:02x}:00" for b in (0x18, 0x2A, 0x3A, 0x5D, 0x9A, 0xAB, 0xBA, 0xDB)]
    events = [(100 + 180 * i, at(*places[i]), gpus[i % 8]) for i in range(40)]
    _, vs = feed(events)
    assert not any(v.fired for v in vs)
    assert {v.action for v in vs} == {"monitor"}
    assert {v.context for v in vs} <= {"solo", "different-places"}


def test_lines_of_one_fault_are_one_event():
    _, vs = feed([(100.0, at(7, 7), "g"), (100.2, at(7, 7), "g"), (100.4, at(7, 7, 3), "g")])
    assert not any(v.fired for v in vs)
    assert [v.context for v in vs] == ["solo", "same-event", "same-event"]


def test_a_line_without_a_place_is_not_counted():
    state, vs = feed([(100, XidContext(), "g"), (200, XidContext(), "g")])
    assert [v.context for v in vs] == ["no-place", "no-place"] and state is None


def test_xid13_outside_the_window_does_not_add_up():
    _, vs = feed([(100, at(1, 2), "g"), (100 + 86400 + 1, at(1, 2), "g")])
    assert not any(v.fired for v in vs)


def test_xid31_twice_on_one_gpu_fires_and_once_on_each_gpu_does_not():
    _, once_each = feed([(100 + i, XidContext(), f"gpu{i}") for i in range(8)], XID31)
    assert not any(v.fired for v in once_each)
    _, twice = feed([(100, XidContext(), "g"), (1900, XidContext(), "g")], XID31)
    assert [v.fired for v in twice] == [False, True]
    assert twice[1].context == "same-gpu"


def test_a_new_boot_or_clock_starts_over():
    state, _ = feed([(100, at(7, 7), "g")])
    _, vs = feed([(200, at(7, 7), "g")], state=state, boot="b2")
    assert not vs[0].fired
    v = judge(state, occ("xid.13", 200, at(7, 7), "g", clock="wall"), XID13, boot="b1")
    assert not v.fired


def test_xid45_follows_the_xid_before_it_or_is_solo():
    recent = Recent()
    assert follows(recent, occ("xid.45", 100), XID45).context == "solo"
    recent.note("0000:cb:00", 99.99, 43)
    v = follows(recent, occ("xid.45", 100), XID45)
    assert (v.context, v.detail, v.action) == ("follows", "Xid 43", "none")
    assert follows(recent, occ("xid.45", 500), XID45).context == "solo"  # long after
    named = follows(Recent(), occ("xid.45", 100, XidContext(cause=149)), XID45)
    assert (named.context, named.detail) == ("follows", "Xid 149 (named)")


def test_recent_is_bounded():
    recent = Recent(limit=4)
    for i in range(10):
        recent.note(f"g{i}", i, 43)
    assert list(recent.by_gpu) == ["g6", "g7", "g8", "g9"]


def test_a_line_of_the_fencing_event_read_again_after_the_fence_is_not_a_new_event():
    """Found by the replay property: 199766 is the same event as 199756 (within burst);
    an earlier-stamped line then fires, and a replay must not count 199766 as new."""
    events = _events(
        [(199756.0, (0, 0, 0), "g"), (199766.0, (0, 0, 0), "g"), (113360.0, (0, 0, 0), "g")]
    )
    state, first = feed(events)
    assert [v.fired for v in first] == [False, False, True]
    again, second = feed(events, state=state)
    assert again == state and not any(v.changed for v in second)


def test_malformed_state_is_a_clean_slate():
    for bad in (None, [], "x", {"boot": "b1", "h": []}, {"boot": "b1", "h": {"k": {"e": "x"}}}):
        v = judge(bad, occ("xid.13", 100, at(1, 1)), XID13, boot="b1")
        assert v.changed and not v.fired


# -- properties --------------------------------------------------------------------
PLACES = st.tuples(st.integers(0, 7), st.integers(0, 8), st.integers(0, 3))
GPUS = st.sampled_from(["0000:18:00", "0000:2a:00", "0000:3a:00"])
EVENTS = st.lists(
    st.tuples(st.floats(0, 200_000, allow_nan=False), PLACES, GPUS), min_size=0, max_size=60
)


def _events(raw):
    return [(t, at(g, p, s), gpu) for t, (g, p, s), gpu in raw]


@settings(max_examples=200, deadline=None)
@given(EVENTS, st.sampled_from([XID13, XID31]))
def test_replaying_the_same_lines_changes_nothing(raw, spec):
    events = _events(raw)
    state, _ = feed(events, spec)
    again, second = feed(events, spec, state=state)
    assert again == state
    assert not any(v.fired for v in second)  # a replay never fences twice


@settings(max_examples=200, deadline=None)
@given(EVENTS)
def test_the_state_stays_small(raw):
    state, _ = feed(_events(raw) * 3)
    if state is not None:
        assert len(state["h"]) <= MAX_KEYS
        assert all(len(e["e"]) <= MAX_EVENTS for e in state["h"].values())
        assert len(json.dumps(state)) < 4096


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 7), st.integers(0, 8)), unique=True, max_size=40),
    st.randoms(use_true_random=False),
)
def test_distinct_places_never_fire_in_any_order(places, rnd):
    """Each place once (the storm): no order makes it fire."""
    events = [(100.0 + 60 * i, at(g, t), "g") for i, (g, t) in enumerate(places)]
    rnd.shuffle(events)
    _, vs = feed(events)
    assert not any(v.fired for v in vs)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.integers(0, 1430), min_size=2, max_size=6, unique=True),
    st.randoms(use_true_random=False),
)
def test_repeats_at_one_place_fire_in_any_order(minutes, rnd):
    """Events at one place, each more than ``burst`` apart and within the window: the
    place fires at the second, whatever order the lines arrive in (a re-read file, two
    sources); the events it used up never fire again."""
    events = [(60.0 * m, at(3, 4, m % 4), "g") for m in minutes]
    rnd.shuffle(events)
    _, vs = feed(events)
    assert [v.fired for v in vs[:2]] == [False, True]
