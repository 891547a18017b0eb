"""Issue 27 in the agent (in-memory Node; the same flows run against the real API server
in tests/integration/test_storm.py): a crash-looping job's storm fences nothing; what
NVIDIA's workflows call hardware fences ``diagnose``; a stronger finding raises a weaker
fence; a restart reads the same lines again and changes nothing."""

from __future__ import annotations

import pytest
from agent_helpers import REBOOT, VOCAB, Node

from fleetmedic.agent.kernelwatch import KernelWatch
from fleetmedic.agent.metrics import AgentMetrics
from fleetmedic.agent.xidflows import XidFlows
from fleetmedic.model import keys
from tests.harness.storm import GPUS, dmesg, storm, xid13, xid31, xid79

DIAGNOSE = "fleetmedic.io/repair=diagnose"
RESET = "fleetmedic.io/repair=reset"


def ours(node: Node) -> set[str]:
    return {t for t in node.kube.taints() if t.startswith("fleetmedic.io/")}


def write(node: Node, lines: list[str]) -> None:
    with open(node.log, "a") as f:
        f.writelines(lines)


def test_the_storm_fences_nothing_and_a_restart_changes_nothing(tmp_path):
    node = Node(tmp_path)
    write(node, dmesg(storm()))
    node.run_once()
    assert ours(node) == set()
    first = node.kube.ann(keys.ANN_MONITOR_COUNTS)
    wf = first["wf"]["h"]
    assert {k.split("|")[0] for k in wf} == {"xid.13", "xid.31"}
    assert sum(len(v["e"]) for k, v in wf.items() if k.startswith("xid.13")) == 40
    writes = node.kube.writes
    node.run_once()  # a restart: the same two hours read again
    assert node.kube.ann(keys.ANN_MONITOR_COUNTS) == first and ours(node) == set()
    assert node.kube.writes == writes, "a replay costs no write"


@pytest.mark.parametrize("before", [None, "reset", "diagnose"])
def test_the_storm_then_xid79_fences_reboot_raising_a_weaker_fence(tmp_path, before):
    node = Node(tmp_path)
    if before:
        node.kube.node["spec"]["taints"].append(VOCAB.repair(before).as_taint())
    write(node, [*dmesg(storm()), f"[{9000.0:12.6f}] {xid79(GPUS[4])}\n"])
    node.run_once()
    assert ours(node) == {REBOOT}
    assert "example.com/team=a" in node.kube.taints()  # nobody else's taint touched
    mark = node.kube.ann(keys.ANN_LAST_FINDING)
    assert mark["rule"] == "xid.79" and mark["acted"] is True


def test_xid13_three_times_at_one_gpc_tpc_fences_diagnose(tmp_path):
    node = Node(tmp_path)
    lines = [line for t in (100, 2500, 6000) for line in dmesg([(t, m) for m in xid13(0xCB, 7, 7)])]
    write(node, lines)
    kw = node.run_once()
    assert ours(node) == {DIAGNOSE} and kw.acted == 1
    (event,) = node.kube.events
    assert "WORKFLOW_XID_13" in event[2] and "gpc=7,tpc=7" in event[2]
    mark = node.kube.ann(keys.ANN_LAST_FINDING)  # the evidence names the fence's cause
    assert mark["rule"] == "xid.13" and mark["acted"] is True
    writes = node.kube.writes
    node.run_once()  # a restart reads the three events again: nothing new is written
    assert node.kube.writes == writes and ours(node) == {DIAGNOSE}


def test_a_workflow_fence_does_not_hide_a_later_xid79(tmp_path):
    """The workflow's fence moves the watermark to its own line; an Xid 79 after it is
    new, and raises the fence."""
    node = Node(tmp_path)
    lines = [line for t in (100, 2500) for line in dmesg([(t, m) for m in xid13(0xCB, 7, 7)])]
    write(node, lines)
    node.run_once()
    assert ours(node) == {DIAGNOSE}
    write(node, [f"[{9000.0:12.6f}] {xid79(GPUS[4])}\n"])
    node.run_once()
    assert ours(node) == {REBOOT}
    assert node.kube.ann(keys.ANN_LAST_FINDING)["rule"] == "xid.79"


def test_a_workflow_that_does_not_fence_leaves_the_last_finding_alone(tmp_path):
    node = Node(tmp_path)
    write(node, dmesg(storm()))
    node.run_once()
    assert node.kube.ann(keys.ANN_LAST_FINDING) is None


def test_xid31_twice_on_one_gpu_fences_diagnose_and_once_on_each_does_not(tmp_path):
    node = Node(tmp_path)
    write(node, dmesg([(100 + k * 60.0, xid31(bus)) for k, bus in enumerate(GPUS)]))
    node.run_once()
    assert ours(node) == set()
    write(node, dmesg([(3000.0, xid31(GPUS[2]))]))
    node.run_once()
    assert ours(node) == {DIAGNOSE}


def test_a_diagnose_fence_is_raised_by_a_stronger_finding_but_not_lowered(tmp_path):
    node = Node(tmp_path)
    node.kube.node["spec"]["taints"].append(VOCAB.reboot.as_taint())
    write(node, [line for t in (100, 2500) for line in dmesg([(t, m) for m in xid13(0xCB, 1, 2)])])
    node.run_once()
    assert ours(node) == {REBOOT}  # diagnose is weaker than reboot: left as it is


def test_workflow_decisions_are_counted(tmp_path):
    node = Node(tmp_path)
    write(node, dmesg(storm()))
    metrics = AgentMetrics()
    kw = node.watch()
    kw.flows = XidFlows(on_verdict=metrics.verdict)
    kw.run()
    assert isinstance(kw, KernelWatch)

    def n(workflow, context, action):
        return (
            metrics.registry.get_sample_value(
                "fleetmedic_agent_workflow_decisions_total",
                {"workflow": workflow, "context": context, "action": action},
            )
            or 0
        )

    assert n("xid.45", "follows", "none") == 20
    assert n("xid.31", "solo", "monitor") == 8
    assert n("xid.13", "solo", "monitor") + n("xid.13", "different-places", "monitor") == 40
    assert n("xid.13", "no-place", "monitor") == 40  # the ESR line of each event
    assert n("xid.13", "same-event", "monitor") == 40  # the Global Exception line


def test_lines_without_a_time_are_never_judged_so_a_restart_cannot_make_a_repeat(tmp_path):
    node = Node(tmp_path)
    write(node, [f"{line}\n" for line in xid13(0xCB, 7, 7)[:1]])  # no timestamp at all
    node.run_once()
    node.run_once()  # read again: by our clock it would be a second event
    assert ours(node) == set()
