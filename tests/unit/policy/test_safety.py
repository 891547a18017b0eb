"""Budget, maintenance window, circuit breaker, flap damping, release and reset."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st
from policysim import FOREIGN_TAINT, T0, World, config

from fleetmedic.model import keys
from fleetmedic.model.config import BreakerConfig, SafetyConfig
from fleetmedic.policy import breaker, budget, flap
from fleetmedic.policy.actions import Action, Kind
from fleetmedic.policy.history import Attempt
from fleetmedic.policy.release import release, reset


def start(node: str) -> Action:
    return Action(Kind.WRITE, node, "start", new_work=True)


class TestBudget:
    @given(st.integers(1, 2000), st.integers(1, 50), st.floats(0, 100))
    def test_slots_are_the_stricter_limit_and_at_least_one(self, pool, count, pct):
        cfg = SafetyConfig(max_concurrent=count, max_concurrent_percent=pct)
        n = budget.slots(pool, cfg)
        assert 1 <= n <= count
        assert n <= max(1, pool * pct / 100)

    @given(st.integers(0, 30), st.integers(0, 10), st.integers(1, 5))
    def test_never_admits_more_new_work_than_free_slots(self, candidates, active, limit):
        cfg = SafetyConfig(max_concurrent=limit, max_concurrent_percent=100, min_healthy=0)
        fleet = budget.Fleet(
            size=100, healthy=100, active=frozenset(f"busy{i}" for i in range(active))
        )
        got = budget.admit([start(f"n{i}") for i in range(candidates)], fleet, cfg, T0)
        assert len(got.admitted) == max(0, min(candidates, limit - active))
        assert len(got.admitted) + len(got.held) == candidates

    def test_work_under_way_is_never_held_by_the_budget(self):
        cfg = SafetyConfig(max_concurrent=1, min_healthy=0)
        fleet = budget.Fleet(size=10, healthy=5, active=frozenset({"a", "b"}))
        cont = Action(Kind.RUN, "a", "verify", phase="verify")
        assert budget.admit([cont], fleet, cfg, T0).admitted == (cont,)

    def test_min_healthy(self):
        cfg = SafetyConfig(min_healthy="50%", max_concurrent=5)
        fleet = budget.Fleet(size=10, healthy=4, active=frozenset())
        got = budget.admit([start("a")], fleet, cfg, T0)
        assert not got.admitted and "min_healthy is 5" in got.held[0][1]

    def test_pause_and_breaker_hold_everything(self):
        cfg = SafetyConfig(min_healthy=0)
        fleet = budget.Fleet(size=10, healthy=10, active=frozenset())
        acts = [start("a"), Action(Kind.RUN, "b", "verify"), Action(Kind.WAIT, "c", "later")]
        assert budget.admit(acts, fleet, cfg, T0, paused="pause CM").held[0][1] == "pause CM"
        assert not budget.admit(acts, fleet, cfg, T0, breaker="storm").admitted
        assert not budget.admit(acts, fleet, SafetyConfig(pause=True), T0).admitted

    def test_maintenance_window_holds_new_and_disruptive_work_only(self):
        cfg = SafetyConfig(
            min_healthy=0,
            max_concurrent_percent=100,
            maintenance_windows=[{"days": ["sat"], "start": "02:00", "end": "06:00"}],
        )
        fleet = budget.Fleet(size=10, healthy=10, active=frozenset({"b", "c"}))
        reboot = Action(Kind.RUN, "b", "reboot", phase="reboot", disruptive=True)
        verify = Action(Kind.RUN, "c", "verify", phase="verify")
        saturday_3am = datetime(2026, 11, 21, 3, 0, tzinfo=UTC)
        got = budget.admit(
            [start("a"), reboot, verify], fleet, cfg, saturday_3am + timedelta(hours=5)
        )
        assert got.admitted == (verify,)
        assert len(budget.admit([start("a"), reboot], fleet, cfg, saturday_3am).admitted) == 2

    def test_fleet_counts_in_flight_work_only(self):
        w = World(config())
        w.add("idle", state="reboot")
        w.add("busy", state="reboot")
        w.add("manual", state="manual")
        w.write(
            __import__("fleetmedic.policy.ladder", fromlist=["decide"])
            .decide(w.view("busy"), w.now, w.cfg)
            .update
        )
        fleet = budget.fleet_of(w.views())
        assert fleet.active == {"busy"} and fleet.healthy == 0 and fleet.size == 3


class TestWindow:
    @pytest.mark.parametrize(
        "when,inside",
        [
            ("2026-11-21T23:30:00", True),  # Saturday night
            ("2026-11-22T03:59:00", True),  # Sunday early: still Saturday's window
            ("2026-11-22T04:00:00", False),
            ("2026-11-20T23:30:00", False),  # Friday
        ],
    )
    def test_overnight_window(self, when, inside):
        cfg = SafetyConfig(
            maintenance_windows=[
                {"days": ["sat"], "start": "22:00", "end": "04:00", "timezone": "Europe/Berlin"}
            ]
        )
        t = datetime.fromisoformat(when).replace(tzinfo=UTC) - timedelta(hours=1)
        assert budget.in_window(t, cfg) is inside


class TestBreaker:
    cfg = BreakerConfig(threshold_percent=20, window=600, min_nodes=3)

    def test_first_observation_is_a_baseline(self):
        obs = breaker.observe(
            breaker.BreakerState(), frozenset(f"n{i}" for i in range(50)), 100, T0, self.cfg
        )
        assert not obs.tripped_now and not obs.state.open

    def test_trips_once_then_holds(self):
        state = breaker.observe(breaker.BreakerState(), frozenset(), 20, T0, self.cfg).state
        obs = breaker.observe(state, frozenset({"a", "b", "c"}), 20, T0, self.cfg)
        assert not obs.tripped_now, "3 of 20 is not more than 20%"
        obs = breaker.observe(
            obs.state,
            frozenset({"a", "b", "c", "d", "e"}),
            20,
            T0 + timedelta(seconds=60),
            self.cfg,
        )
        assert obs.tripped_now and obs.state.open and breaker.reason(obs.state)
        again = breaker.observe(
            obs.state, frozenset("abcdefg"), 20, T0 + timedelta(seconds=90), self.cfg
        )
        assert not again.tripped_now and again.state.open

    def test_old_turns_fall_out_of_the_window(self):
        state = breaker.observe(breaker.BreakerState(), frozenset(), 10, T0, self.cfg).state
        state = breaker.observe(state, frozenset({"a", "b"}), 10, T0, self.cfg).state
        obs = breaker.observe(
            state, frozenset({"a", "b", "c", "d"}), 10, T0 + timedelta(seconds=700), self.cfg
        )
        assert obs.recent == 2 and not obs.tripped_now

    def test_reset_does_not_replay_the_storm(self):
        state = breaker.observe(breaker.BreakerState(), frozenset(), 10, T0, self.cfg).state
        storm = frozenset("abcde")
        state = breaker.observe(state, storm, 10, T0, self.cfg).state
        assert state.open
        state = breaker.reset(state, T0 + timedelta(seconds=30))
        obs = breaker.observe(state, storm, 10, T0 + timedelta(seconds=31), self.cfg)
        assert not obs.state.open and obs.recent == 0

    def test_cooldown_closes_by_itself(self):
        cfg = BreakerConfig(threshold_percent=10, min_nodes=1, cooldown=60)
        state = breaker.observe(breaker.BreakerState(), frozenset(), 10, T0, cfg).state
        state = breaker.observe(state, frozenset("ab"), 10, T0, cfg).state
        assert state.open
        assert not breaker.observe(
            state, frozenset("ab"), 10, T0 + timedelta(seconds=61), cfg
        ).state.open

    def test_disabled_never_trips(self):
        cfg = BreakerConfig(enabled=False)
        state = breaker.observe(breaker.BreakerState(), frozenset(), 10, T0, cfg).state
        assert not breaker.observe(state, frozenset("abcdefghij"), 10, T0, cfg).tripped_now

    @given(st.lists(st.frozensets(st.sampled_from("abcdefghij")), min_size=1, max_size=30))
    def test_storm_email_at_most_once_per_trip_and_record_round_trips(self, seq):
        state, trips = breaker.BreakerState(), 0
        for i, unhealthy in enumerate(seq):
            obs = breaker.observe(state, unhealthy, 10, T0 + timedelta(seconds=i), self.cfg)
            trips += obs.tripped_now
            record = breaker.record_of(obs.state)
            assert breaker.Record.decode(record.encode()) == record
            assert record.open == obs.state.open
            state = obs.state
        assert trips <= 1

    def test_an_open_breaker_survives_a_restart_without_a_second_trip(self):
        state = breaker.observe(breaker.BreakerState(), frozenset(), 10, T0, self.cfg).state
        state = breaker.observe(state, frozenset("abcde"), 10, T0, self.cfg).state
        saved = breaker.Record.decode(breaker.record_of(state).encode())
        assert saved.nodes == tuple("abcde")
        restarted = breaker.resume(saved)
        later = T0 + timedelta(seconds=5)
        first = breaker.observe(restarted, frozenset("abcdefg"), 10, later, self.cfg)
        assert first.state.open and not first.tripped_now, "still open, no second storm email"
        second = breaker.observe(first.state, frozenset("abcdefgh"), 10, later, self.cfg)
        assert second.state.open and not second.tripped_now and second.recent == 1
        assert not breaker.resume(None).open and not breaker.resume(breaker.Record()).open

    def test_a_reset_elsewhere_is_seen_only_for_our_trip(self):
        state = breaker.observe(breaker.BreakerState(), frozenset(), 10, T0, self.cfg).state
        state = breaker.observe(state, frozenset("abcde"), 10, T0, self.cfg).state
        ours = breaker.record_of(state)
        assert not breaker.reset_elsewhere(state, ours)
        assert not breaker.reset_elsewhere(state, None), "a missing record resets nothing"
        closed = breaker.closed_by(ours, T0 + timedelta(seconds=60), "alice@bastion")
        assert not closed.open and closed.reset_by == "alice@bastion" and closed.nodes == ours.nodes
        assert breaker.reset_elsewhere(state, closed)
        assert not breaker.reset_elsewhere(breaker.reset(state, T0), closed), "closed already"

    @given(st.text(max_size=200))
    def test_any_record_text_decodes_or_is_ignored(self, raw):
        record = breaker.Record.decode(raw)
        assert record is None or isinstance(record, breaker.Record)


class TestFlap:
    def ep(self, n: int, start: str) -> Attempt:
        return Attempt(n, "reboot", 1, start, start, "pass")

    def test_counts_episodes_within_the_window(self):
        hist = [
            self.ep(1, "2026-11-01T00:00:00Z"),
            self.ep(2, "2026-11-20T00:00:00Z"),
            self.ep(3, "2026-11-21T00:00:00Z"),
        ]
        assert flap.recent_entries(hist, T0, 7 * 86400) == 2
        assert flap.damped(hist, T0, 3, 7 * 86400)
        assert not flap.damped(hist, T0, 4, 7 * 86400)
        assert flap.reason(3, 7 * 86400).startswith("entered repair 3 times within 7d")


class TestRelease:
    def test_release_clears_ours_only_and_records_it(self):
        w = World(config())
        w.add(
            "n1",
            state="manual",
            taints=[FOREIGN_TAINT],
            annotations={
                keys.ANN_ESCALATED: '{"ep": 1, "decided": "x", "sent": "y"}',
                keys.ANN_CORDONED: "true",
            },
            unschedulable=True,
        )
        w.write(release(w.view("n1"), T0, w.cfg, by="alice"))
        v = w.view("n1")
        assert v.state == "healthy" and v.taints == (FOREIGN_TAINT,) and not v.unschedulable
        assert keys.ANN_ESCALATED not in v.annotations
        assert w.history("n1")[-1].result == "released" and "alice" in w.history("n1")[-1].message

    def test_reset_also_removes_slow_network(self):
        w = World(config())
        w.add("n1", taints=[FOREIGN_TAINT, w.vocab.slow_network.as_taint()], state="reboot")
        w.write(reset(w.view("n1"), T0, w.cfg))
        assert w.view("n1").taints == (FOREIGN_TAINT,)
