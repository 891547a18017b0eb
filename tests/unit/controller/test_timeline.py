"""`fleetmedic history NODE`: attempts and Events merged, newest first."""

from __future__ import annotations

import json

from fleetmedic.controller.timeline import render, timeline
from fleetmedic.model import keys
from fleetmedic.policy.history import Attempt, encode


def test_attempts_and_events_merge_newest_first():
    attempts = [
        Attempt(
            1,
            "reset",
            1,
            "2026-11-24T10:00:00Z",
            "2026-11-24T10:01:00Z",
            "fail",
            "reset",
            "r1",
            "In use by another client",
        ),
        Attempt(1, "reboot", 1, "2026-11-24T10:01:00Z", "2026-11-24T10:05:00Z", "pass", None, "r2"),
    ]
    node = {"metadata": {"annotations": {keys.ANN_HISTORY: encode(attempts)}}}
    events = [
        {
            "reason": "Fenced",
            "type": "Warning",
            "message": "Xid 79\n on 0000:3b:00",
            "lastTimestamp": "2026-11-24T09:59:30Z",
            "source": {"component": "fleetmedic-agent"},
        },
        {
            "reason": "Repaired",
            "type": "Normal",
            "message": "reboot attempt 1 passed verify",
            "lastTimestamp": "2026-11-24T10:05:00Z",
            "reportingComponent": "fleetmedic",
        },
    ]
    rows = timeline(node, events)
    assert [(r["source"], r["what"]) for r in rows] == [
        ("history", "episode 1: reboot attempt 1"),
        ("event", "Repaired"),
        ("history", "episode 1: reset attempt 1 at reset"),
        ("event", "Fenced"),
    ]
    assert rows[2]["result"] == "fail" and rows[2]["run_id"] == "r1"
    assert rows[3]["message"] == "Xid 79 on 0000:3b:00" and rows[3]["by"] == "fleetmedic-agent"
    text = render(rows)
    assert text.splitlines()[0].startswith("2026-11-24 10:05:00  fleetmedic")
    assert "[run r1]: In use by another client" in text
    json.dumps(rows)  # the --json output is plain data


def test_a_node_with_nothing_says_so():
    assert timeline({"metadata": {}}, []) == [] and render([]) == "no history"
