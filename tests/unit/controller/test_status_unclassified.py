"""``fleetmedic status`` shows the agent's safety net (issue 39 item 5): per node, how many
driver errors no catalog rule knows it logged this boot, and the last one."""

from __future__ import annotations

import json
from datetime import UTC, datetime

from fleetmedic.controller.status import node_status, render_status
from fleetmedic.model import keys
from fleetmedic.model.nodestate import view
from fleetmedic.model.vocabulary import preset
from fleetmedic.policy import netcount

AT = datetime(2026, 11, 28, 12, 0, tzinfo=UTC)
LINE = "amdgpu 0000:c5:00.0: amdgpu: a brand new failure the catalog has no rule for"


def node(name: str, net: dict | None) -> dict:
    monitor = {"wf": {"boot": "b", "h": {}}, **({"net": net} if net else {})}
    return {
        "metadata": {
            "name": name,
            "labels": {},
            "annotations": {keys.ANN_MONITOR_COUNTS: json.dumps(monitor)},
        },
        "spec": {},
    }


def test_the_net_count_and_last_line_are_a_column_only_where_there_are_some():
    state = netcount.add(
        None, boot="b", when=10.0, clock="uptime", rule="amdgpu.unclassified", message=LINE, at="t"
    ).state
    state = netcount.add(
        state, boot="b", when=50.0, clock="uptime", rule="amdgpu.unclassified", message=LINE, at="t"
    ).state
    rows = [
        node_status(view(node("gpu-1", state), preset()), AT),
        node_status(view(node("gpu-2", None), preset()), AT),
    ]
    assert rows[0]["unclassified"] == {"count": 2, "last": LINE}
    assert rows[1]["unclassified"] is None
    table = render_status(rows)
    assert "UNCLASSIFIED" in table.splitlines()[0]
    assert "2: amdgpu 0000:c5:00.0: amdgpu: a brand new failure the cata..." in table
    assert "UNCLASSIFIED" not in render_status(rows[1:]).splitlines()[0]


def test_the_net_count_is_replay_safe_and_per_boot():
    a = netcount.add(None, boot="b", when=10.0, clock="uptime", rule="r", message="x", at="t").state
    again = netcount.add(a, boot="b", when=10.0, clock="uptime", rule="r", message="x", at="t")
    assert not again.changed and again.state["n"] == 1  # the same line read after a restart
    burst = netcount.add(a, boot="b", when=12.0, clock="uptime", rule="r", message="x", at="t")
    assert not burst.changed  # one event
    other_boot = netcount.add(a, boot="c", when=5.0, clock="uptime", rule="r", message="y", at="t")
    assert other_boot.state["n"] == 1 and other_boot.state["last"] == "y"
