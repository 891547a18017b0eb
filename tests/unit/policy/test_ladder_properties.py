"""Properties of the whole policy on a simulated fleet, under random faults,
random outcomes and random controller crashes (kill -9 between any two steps)."""

from __future__ import annotations

import random
from collections import Counter

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from policysim import FAULTS, FOREIGN_TAINT, World, config

from fleetmedic.model import keys
from fleetmedic.policy import budget
from fleetmedic.policy.history import DRAIN_BLOCKED, ESCALATED, FLAP_DAMPED

FAST = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])

fleets = st.lists(
    st.tuples(
        st.sampled_from((*FAULTS, "vanish")),
        st.sampled_from([None, "reboot", "reboot", "reimage", "manual"]),
        st.booleans(),
    ),  # cordoned by someone else beforehand
    min_size=1,
    max_size=8,
)


def build(spec, seed, **cfg_overrides) -> World:
    w = World(config(**cfg_overrides), random.Random(seed))
    for i, (fault, state, cordoned) in enumerate(spec):
        w.add(
            f"n{i}",
            fault="never" if fault == "vanish" else fault,
            state=state,
            taints=[FOREIGN_TAINT],
            unschedulable=cordoned,
        )
        w.truth[f"n{i}"].reachable = fault != "vanish"
    return w


def run_checked(w: World, cycles: int, limit: int) -> None:
    for _ in range(cycles):
        w.cycle()
        active = budget.fleet_of(w.views()).active
        assert len(active) <= limit, f"{len(active)} nodes in repair, limit {limit}"


@FAST
@given(fleets, st.integers(1, 3), st.integers(0, 2**32), st.floats(0, 0.3))
def test_never_more_than_max_concurrent_in_repair(spec, max_concurrent, seed, crash):
    w = build(spec, seed, safety__max_concurrent=max_concurrent, safety__max_concurrent_percent=100)
    w.crash_rate = crash
    w.unreachable_rate = 0.1
    run_checked(w, 120, max_concurrent)
    assert w.max_active <= max_concurrent


@FAST
@given(fleets, st.integers(0, 2**32), st.floats(0, 0.3), st.floats(0, 0.5))
def test_every_node_ends_healthy_or_escalated_exactly_once(spec, seed, crash, email_fail):
    w = build(spec, seed, safety__max_concurrent=2, safety__max_concurrent_percent=100)
    w.crash_rate, w.email_fail_rate = crash, email_fail
    for _ in range(600):
        w.cycle()
        if w.settled():
            break
    assert w.settled(), {n: w.view(n).state for n in w.nodes}
    for name, (fault, state, _) in zip(
        sorted(w.nodes, key=lambda n: int(n[1:])), spec, strict=True
    ):
        v = w.view(name)
        hist = w.history(name)
        escalations = Counter(a.ep for a in hist if a.result == ESCALATED)
        assert all(c == 1 for c in escalations.values()), "escalation decided more than once"
        if v.state == "manual":
            assert escalations, "a manual node must have been escalated"
            assert w.emails[(name, max(escalations))] >= 1, "the email must go out"
        if fault in ("none", "reboot", "reimage") and state != "manual" and crash == 0:
            assert v.state == "healthy"
        assert FOREIGN_TAINT in v.taints, "never touch another team's taint"


@FAST
@given(fleets, st.integers(0, 2**32), st.floats(0, 0.4))
def test_a_finished_reboot_is_never_repeated(spec, seed, crash):
    w = build(spec, seed, safety__max_concurrent=3, safety__max_concurrent_percent=100)
    w.crash_rate = crash
    w.run(400)
    assert all(n == 1 for n in w.reboots.values()), w.reboots


@FAST
@given(fleets, st.integers(0, 2**32), st.floats(0, 0.3), st.floats(0, 0.5))
def test_a_lost_execution_node_never_repeats_a_finished_reboot(spec, seed, crash, lost):
    """A Receptor execution node lost after the run did its work (the worst case: the
    reboot happened, the controller cannot know): resumed as after a restart, so the
    boot_id decides and no reboot runs twice; every node still ends healthy or escalated."""
    w = build(spec, seed, safety__max_concurrent=3, safety__max_concurrent_percent=100)
    w.crash_rate, w.lost_rate = crash, lost
    for _ in range(800):
        w.cycle()
        if w.settled():
            break
    assert w.settled(), {n: w.view(n).state for n in w.nodes}
    assert all(n == 1 for n in w.reboots.values()), w.reboots


@FAST
@given(
    fleets,
    st.integers(0, 2**32),
    st.floats(0, 0.3),
    st.sampled_from(["wait", "skip", "escalate", "force"]),
)
def test_no_skipping_from_reboot_to_manual(spec, seed, crash, pdb_mode):
    """Manual needs a failed reimage, flap damping, a blocked drain (escalate mode) or a
    finding that said manual (the node started there)."""
    w = build(
        spec,
        seed,
        safety__max_concurrent=3,
        safety__max_concurrent_percent=100,
        safety__drain={"pdb_blocked": pdb_mode},
    )
    w.crash_rate = crash
    for t in w.truth.values():
        t.pdb_blocks = random.Random(seed).randint(0, 2)
    w.run(300)
    for name, (_, state, _) in zip(sorted(w.nodes, key=lambda n: int(n[1:])), spec, strict=True):
        hist = w.history(name)
        for ep in {a.ep for a in hist if a.result == ESCALATED}:
            in_ep = [a for a in hist if a.ep == ep]
            reasons = {a.result for a in in_ep}
            failed_reimage = any(a.step == "reimage" and a.failed for a in in_ep)
            assert (
                failed_reimage
                or FLAP_DAMPED in reasons
                or DRAIN_BLOCKED in reasons
                or (state == "manual" and ep == 1)
            ), in_ep


@FAST
@given(st.integers(0, 2**32), st.booleans())
def test_only_our_cordon_is_undone(seed, cordoned_before):
    w = build([("reboot", "reboot", cordoned_before)], seed)
    w.run(40)
    v = w.view("n0")
    assert v.state == "healthy"
    assert v.unschedulable == cordoned_before
    assert keys.ANN_CORDONED not in v.annotations


@FAST
@given(fleets, st.integers(0, 2**32))
def test_pause_stops_every_action(spec, seed):
    w = build(spec, seed)
    before = {
        n: (list(w.nodes[n]["spec"]["taints"]), dict(w.nodes[n]["metadata"]["annotations"]))
        for n in w.nodes
    }
    for _ in range(20):
        assert w.cycle(paused="paused by ConfigMap") == []
    after = {
        n: (w.nodes[n]["spec"]["taints"], w.nodes[n]["metadata"]["annotations"]) for n in w.nodes
    }
    assert before == after


@FAST
@given(
    fleets, st.integers(0, 2**32), st.floats(0, 0.3), st.sampled_from([1.0, 3600.0, 86400.0 * 30])
)
def test_a_none_decision_never_changes_with_the_clock_alone(spec, seed, crash, later):
    """The controller keeps NONE decisions while a Node is unchanged (loop.decide_all's
    memo); that is only right if no Kind.NONE turns into work just because time passed."""
    from datetime import timedelta

    from fleetmedic.policy import ladder
    from fleetmedic.policy.actions import Kind

    w = build(spec, seed, safety__max_concurrent=2, safety__max_concurrent_percent=100)
    w.crash_rate = crash
    seen = 0

    def check_none_decisions() -> None:
        nonlocal seen
        for v in w.views():
            now = ladder.decide(v, w.now, w.cfg)
            if now.kind == Kind.NONE:
                seen += 1
                then = ladder.decide(v, w.now + timedelta(seconds=later), w.cfg)
                assert (then.kind, then.reason) == (now.kind, now.reason), v.name

    for _ in range(200):
        check_none_decisions()
        w.cycle()
        if w.settled():
            break
    check_none_decisions()  # settled: every node is healthy or escalated, i.e. Kind.NONE
    assert seen, "the run must reach Kind.NONE decisions (healthy or escalated nodes)"
