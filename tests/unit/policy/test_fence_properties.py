"""Fences only go up (issue 27 part 3), as properties of a simulated node that the agent
(or a human, or another tool) fences again at random states and moments while the
controller works it, under controller crashes (kill -9 between any two steps):

- a fence never goes down: while the node is out of service its state is never milder
  than the strongest fence set in this episode (a weaker one is put back at the next step);
- a raised fence is always acted on: the node returns to service only from an attempt that
  passed at a rung at least as strong as the strongest fence of the episode;
- the diagnose state's diagnostics run at most once per attempt, however often the
  controller is killed mid-run.
"""

from __future__ import annotations

import random

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from policysim import config
from test_diagnose_rung import DWorld, add_taint

from fleetmedic.model.vocabulary import REPAIR_STATES
from fleetmedic.policy.history import PASS
from fleetmedic.policy.rungs import entry_rung

FAST = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
STATES = ("diagnose", "reset", "reboot", "reimage", "manual")
rank = REPAIR_STATES.index

fences = st.lists(
    st.tuples(st.integers(0, 12), st.sampled_from(STATES)),  # (cycles before, state)
    min_size=1,
    max_size=5,
)


class Episode:
    """What the test knows of the node's current episode."""

    def __init__(self, w: DWorld) -> None:
        self.w = w
        self.floor = "diagnose"  # the strongest fence of this episode (as the ladder enters it)
        self.seen = 0  # history entries of earlier episodes
        self.out = True  # out of service

    def fenced(self) -> None:
        """Someone fenced the node: its taints now say ``state``."""
        state = self.w.view("n1").state
        entered = "manual" if state == "manual" else entry_rung(self.w.cfg.ladder.order, state)
        if not self.out:
            self.out, self.floor = True, entered
        elif rank(entered) > rank(self.floor):
            self.floor = entered

    def check(self) -> None:
        """The invariants after one controller cycle."""
        v = self.w.view("n1")
        if v.state == "healthy":
            if self.out:
                done = self.w.history("n1")[self.seen :]
                passed = [a for a in done if a.result == PASS]
                assert passed, done
                assert rank(passed[-1].step) >= rank(self.floor), (self.floor, done)
                self.out, self.seen = False, len(self.w.history("n1"))
            return
        assert self.out
        assert rank(v.state) >= rank(self.floor), (v.state, self.floor)
        if rank(v.state) > rank(self.floor):
            self.floor = v.state


@FAST
@given(
    fences,
    st.sampled_from(["none", "reset", "reboot", "reimage"]),
    st.sampled_from(["default", "ossci"]),
    st.integers(0, 2**32),
    st.floats(0, 0.3),
)
def test_fences_only_go_up_and_a_raised_fence_is_acted_on(spec, fault, preset, seed, crash):
    w = DWorld(
        config(taints__preset=preset, safety__flap={"count": 8}),
        random.Random(seed),
    )
    w.add("n1", fault=fault, state="diagnose")
    w.crash_rate = crash
    ep = Episode(w)
    for wait, state in spec:
        for _ in range(wait):
            w.cycle()
            ep.check()
        if w.view("n1").state == "healthy":
            w.truth["n1"].fixed_by.clear()  # a new fault: the fence is for something
        add_taint(w, state)
        ep.fenced()
        # the controller's next step takes a stronger fence and puts a weaker one back
        # (a fence set and taken off again between two of its looks is not seen at all,
        # and a look killed before it wrote anything is no look: that step runs unkilled,
        # else a fence replaced at once would be asserted on with no trace of it left)
        w.crash_rate = 0.0
        w.cycle()
        w.crash_rate = crash
        ep.check()
    for _ in range(400):
        w.cycle()
        ep.check()
        if w.settled():
            break
    assert w.settled()
    assert all(n == 1 for n in w.started.values()), w.started
