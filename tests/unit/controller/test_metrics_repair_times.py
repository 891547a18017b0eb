"""The controller's MTTR and MTBI histograms and the per-node state-since series, from the
Nodes it observes cycle by cycle (the scrape of a running controller is in the e2e tests)."""

from __future__ import annotations

from datetime import UTC, datetime

from prometheus_client import generate_latest

from fleetmedic.controller.metrics import Metrics
from fleetmedic.model import keys
from fleetmedic.model.nodestate import view
from fleetmedic.model.vocabulary import preset
from fleetmedic.policy.history import Attempt, encode

VOCAB = preset()
T = datetime(2026, 11, 24, 12, 0, tzinfo=UTC)


def node(state: str | None, history=(), since: str | None = None):
    ann = {keys.ANN_HISTORY: encode(list(history))} if history else {}
    if since:
        ann[keys.ANN_STATE_SINCE] = since
    taints = [VOCAB.repair(state).as_taint()] if state else []
    return view({"metadata": {"name": "n1", "annotations": ann}, "spec": {"taints": taints}}, VOCAB)


def sample(m: Metrics, text: str) -> float:
    for line in generate_latest(m.registry).decode().splitlines():
        if line.startswith(text + " "):
            return float(line.split()[-1])
    return 0.0


def test_repair_and_incident_times_are_observed_on_transitions():
    m = Metrics()
    m.observe([node(None)], T)  # baseline: healthy
    m.observe([node("reboot", since="2026-11-24T12:00:00Z")], T)
    assert sample(m, 'fleetmedic_node_state_since_timestamp_seconds{node="n1",state="reboot"}')
    first = Attempt(1, "reboot", 1, "2026-11-24T12:00:00Z", "2026-11-24T12:10:00Z", "pass")
    m.observe([node(None, [first])], T)
    assert sample(m, 'fleetmedic_time_to_repair_seconds_count{repair="automatic"}') == 1
    assert sample(m, 'fleetmedic_time_to_repair_seconds_sum{repair="automatic"}') == 600
    assert not sample(m, 'fleetmedic_node_state_since_timestamp_seconds{node="n1",state="reboot"}')
    # fenced again a day later: the time since the last repair, labelled by how it was done
    later = datetime(2026, 11, 25, 12, 10, tzinfo=UTC)
    m.observe([node("reset", [first], since="2026-11-25T12:10:00Z")], later)
    assert sample(m, 'fleetmedic_time_between_incidents_seconds_sum{repair="automatic"}') == 86400
    # a human released it: a manual repair
    released = Attempt(2, "manual", 1, "2026-11-25T12:10:00Z", "2026-11-25T15:10:00Z", "released")
    m.observe([node(None, [first, released])], later)
    assert sample(m, 'fleetmedic_time_to_repair_seconds_sum{repair="manual"}') == 3 * 3600


def test_a_restart_does_not_observe_what_happened_before_it():
    done = Attempt(1, "reboot", 1, "2026-11-24T12:00:00Z", "2026-11-24T12:10:00Z", "pass")
    m = Metrics()
    m.observe([node(None, [done])], T)
    assert sample(m, 'fleetmedic_time_to_repair_seconds_count{repair="automatic"}') == 0
