"""Fences only go up (issue 27 part 3), as a property: whatever kernel-log findings come,
in whatever order, with the agent restarted between any of them (re-reading the whole
boot), the node's repair taint is never lowered, and ends at the strongest of what it had
and what the findings asked for. Other taints are never touched."""

from __future__ import annotations

from agent_helpers import VOCAB, Node, xid
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fleetmedic.model.actions import fence_state
from fleetmedic.policy.fenceup import RANK, stronger

# code -> (line text, the catalog's action for it)
LINES = {
    79: ("GPU has fallen off the bus.", "reboot"),
    64: ("Row remapping failure", "manual"),
    119: (
        "Timeout after 45s of waiting for RPC response from GPU4 GSP! Expected function 76 "
        "(GSP_RM_CONTROL) (0x20801702 0x4).",
        "reset",
    ),
    43: ("Ch 00000008", "none"),
    31: (
        "Ch 0000000a, intr 00000000. MMU Fault: ENGINE GRAPHICS GPC2 GPCCLIENT_T1_7 faulted @ "
        "0x2b57_b3000000. Fault is of type FAULT_PDE ACCESS_TYPE_VIRT_WRITE",
        "monitor",
    ),
}


def repair(node: Node) -> str | None:
    states = [s for s in RANK if VOCAB.repair(s).as_taint() in node.kube.node["spec"]["taints"]]
    assert len(states) <= 1, states
    return states[0] if states else None


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    before=st.sampled_from([None, "diagnose", "reset", "reboot", "power_cycle", "manual"]),
    steps=st.lists(
        st.tuples(st.sampled_from(sorted(LINES)), st.sampled_from([0x18, 0x3B]), st.booleans()),
        max_size=8,
    ),
)
def test_fences_only_go_up_under_restarts(tmp_path_factory, before, steps):
    node = Node(tmp_path_factory.mktemp("n"))
    if before:
        node.kube.node["spec"]["taints"].append(VOCAB.repair(before).as_taint())
    node.log.write_text("")
    want, seen, t = before, before, 100.0
    xid31_on: set[int] = set()  # GPUs that had an Xid 31 already
    for code, bus, restart in steps:
        text, action = LINES[code]
        t += 3600.0  # an hour apart: never one event (but within WORKFLOW_XID_31's 24 h)
        with open(node.log, "a") as f:
            f.write(xid(code, bus, t, text))
        want = stronger(want, fence_state(action))
        if code == 31:
            if bus in xid31_on:  # repeating on one GPU: NVIDIA's RUN_DCGMEUD
                want = stronger(want, "diagnose")
            xid31_on.add(bus)
        node.run_once()
        if restart:
            node.run_once()  # the agent restarted: the whole boot read again
        now = repair(node)
        assert RANK.get(now or "", -1) >= RANK.get(seen or "", -1), (seen, now)
        seen = now
    assert repair(node) == want
    assert "example.com/team=a" in node.kube.taints()
