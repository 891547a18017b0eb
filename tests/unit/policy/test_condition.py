"""fleetmedic's NodeCondition: what it says on the ladder and after it."""

from __future__ import annotations

import json
from datetime import UTC, datetime

from fleetmedic.model import keys
from fleetmedic.model.nodestate import view
from fleetmedic.model.vocabulary import preset
from fleetmedic.policy.condition import wanted

NOW = datetime(2026, 11, 25, 12, 0, tzinfo=UTC)
VOCAB = preset("default")


def node(state: str | None, condition=None, **annotations) -> dict:
    taints = [VOCAB.repair(state).as_taint()] if state else []
    return {
        "metadata": {"name": "n1", "annotations": annotations, "labels": {}},
        "spec": {"taints": taints},
        "status": {"conditions": [condition] if condition else []},
    }


def cond(status: str, reason: str) -> dict:
    return {"type": keys.CONDITION, "status": status, "reason": reason}


def test_a_node_we_never_touched_gets_no_condition():
    assert wanted(view(node(None), VOCAB), NOW) is None


def test_on_the_ladder_it_is_true_with_the_rung_and_the_finding():
    v = view(node("power_cycle", **{keys.ANN_LAST_FINDING: "Xid 79 on 0000:3b:00.0"}), VOCAB)
    c = wanted(v, NOW)
    assert (c["type"], c["status"], c["reason"]) == (keys.CONDITION, "True", "PowerCycle")
    assert "Xid 79 on 0000:3b:00.0" in c["message"] and c["lastTransitionTime"]


def test_a_rung_change_keeps_the_transition_time_and_an_unchanged_one_writes_nothing():
    v = view(node("reimage", cond("True", "Reboot")), VOCAB)
    c = wanted(v, NOW)
    assert c["reason"] == "Reimage" and "lastTransitionTime" not in c
    assert wanted(view(node("reimage", cond("True", "Reimage")), VOCAB), NOW) is None


def test_back_in_service_says_how():
    repaired = json.dumps(
        [{"ep": 1, "step": "reboot", "attempt": 1, "start": "a", "end": "b", "result": "pass"}]
    )
    released = json.dumps(
        [
            {
                "ep": 1,
                "step": "manual",
                "attempt": 1,
                "start": "a",
                "end": "b",
                "result": "released",
                "message": "released by alice",
            }
        ]
    )
    c = wanted(view(node(None, cond("True", "Reboot"), **{keys.ANN_HISTORY: repaired}), VOCAB), NOW)
    assert (c["status"], c["reason"]) == ("False", "Repaired") and "reboot pass" in c["message"]
    c = wanted(view(node(None, cond("True", "Manual"), **{keys.ANN_HISTORY: released}), VOCAB), NOW)
    assert (c["reason"], c["lastTransitionTime"]) == ("Released", "2026-11-25T12:00:00Z")
    assert "released by alice" in c["message"]
