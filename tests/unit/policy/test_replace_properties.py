"""Properties of the replace rung on a simulated fleet under random faults, failed emails
and controller crashes (kill -9 between any two steps): every instance is handed to the
cloud at most once and never before its notice, within the budget and the day's limit."""

from __future__ import annotations

import random
from collections import Counter
from datetime import timedelta

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from policysim import FOREIGN_TAINT, World, config

from fleetmedic.model import keys
from fleetmedic.policy import budget, replacements
from fleetmedic.policy.history import REPLACED

FAST = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])

fleets = st.lists(
    st.tuples(
        st.sampled_from(("none", "reboot", "reimage", "never")),
        st.sampled_from([None, "reboot", "replace", "manual"]),
    ),
    min_size=1,
    max_size=8,
)
orders = st.sampled_from(
    [
        ["reboot", "replace", "manual"],
        ["reset", "reboot", "replace", "manual"],
        ["replace", "manual"],
    ]
)


def build(spec, order, seed, **kw) -> World:
    w = World(config(ladder__order=order, **kw), random.Random(seed))
    for i, (fault, state) in enumerate(spec):
        w.add(f"n{i}", fault=fault, state=state, taints=[FOREIGN_TAINT])
    return w


@FAST
@given(fleets, orders, st.integers(0, 2**32), st.floats(0, 0.3), st.floats(0, 0.5), st.booleans())
def test_each_instance_is_replaced_at_most_once_after_its_notice(
    spec, order, seed, crash, email_fail, replace_manual
):
    w = build(
        spec,
        order,
        seed,
        ladder__replace_manual=replace_manual,
        safety__max_concurrent=2,
        safety__max_concurrent_percent=100,
        safety__max_replacements_per_day=8,  # (the limit has a test of its own)
    )
    w.crash_rate, w.email_fail_rate = crash, email_fail
    for _ in range(800):
        w.cycle()
        active = budget.fleet_of(w.views()).active
        assert len(active) <= 2, f"{len(active)} nodes in repair, limit 2"
        if w.settled():
            break
    assert w.settled(), {n: w.view(n).state for n in w.nodes}
    assert all(n == 1 for n in w.terminations.values()), w.terminations
    for name in w.terminations:
        first = w.log.index(("terminate", name))
        assert ("notice", name) in w.log[:first], "the email goes out before the hand-off"
        v = w.view(name)
        assert v.state == "replace" and keys.ANN_REPLACED in v.annotations
        done = Counter(a.ep for a in w.history(name) if a.result == REPLACED)
        assert list(done.values()) == [1], "the history says it once"
        assert FOREIGN_TAINT in v.taints
    for name, (fault, state) in zip(sorted(w.nodes, key=lambda n: int(n[1:])), spec, strict=True):
        v = w.view(name)
        if name not in w.terminations:
            assert keys.ANN_REPLACED not in v.annotations
        if state == "manual" and not replace_manual:
            assert name not in w.terminations, "manual stays a human's unless configured"
        cured = "reboot" in order and state in (None, "reboot")
        if fault in ("none", "reboot") and cured and crash == 0:
            assert v.state == "healthy", "a node a reboot cures is never replaced"


@FAST
@given(fleets, orders, st.integers(0, 2**32), st.floats(0, 0.3), st.integers(0, 3))
def test_never_more_replacements_in_a_day_than_the_limit(spec, order, seed, crash, limit):
    w = build(
        spec,
        order,
        seed,
        safety__max_concurrent=3,
        safety__max_concurrent_percent=100,
        safety__max_replacements_per_day=limit,
    )
    w.crash_rate = crash
    for _ in range(300):
        w.cycle(step=600.0)  # 50 hours
        # a hand-off counts from when it was admitted (before its notice); a crash may
        # delay the termination itself, never admit another in its place
        times = sorted(w.reserved.values())
        for i, t in enumerate(times):
            in_day = [u for u in times[i:] if u - t < replacements.DAY]
            assert len(in_day) <= limit, times
    assert set(w.terminations) <= {node for node, _ in w.reserved}
    if limit == 0:
        assert not w.terminations


@FAST
@given(fleets, orders, st.integers(0, 2**32), st.floats(0, 0.3), st.sampled_from([1.0, 86400.0]))
def test_a_replaced_node_is_never_decided_on_again(spec, order, seed, crash, later):
    from fleetmedic.policy import ladder
    from fleetmedic.policy.actions import Kind

    w = build(spec, order, seed, safety__max_concurrent=3, safety__max_concurrent_percent=100)
    w.crash_rate = crash
    w.run(300)
    for name in w.terminations:
        for at in (w.now, w.now + timedelta(seconds=later)):
            assert ladder.decide(w.view(name), at, w.cfg).kind == Kind.NONE
