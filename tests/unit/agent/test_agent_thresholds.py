"""Monitor findings that add up (issue 12 item 4): past a threshold the agent fences; a
restart neither forgets the count nor counts a line twice.

Since issue 27 the catalog counts no application Xid (13, 31 and 43 are judged by NVIDIA's
workflows, tests/unit/agent/test_agent_workflows.py); the machinery is the same for any
rule, shown here with a threshold the agent config sets on Xid 69 (RESTART_APP)."""

from __future__ import annotations

import json
import threading

from agent_helpers import Node, xid

from fleetmedic.agent.config import KernelWatchConfig
from fleetmedic.agent.kernelwatch import KernelWatch
from fleetmedic.agent.retry import Retrier
from fleetmedic.agent.writer import NodeWriter
from fleetmedic.model import keys
from fleetmedic.model.vocabulary import preset

XID69 = "Class Error: ChId 0008, Class 0000cbc0, Offset 00000184, Data ffffffff, ErrorCode 00000004"
FIVE = {"xid.69": {"count": 5, "window": 3600, "action": "reset"}}


def taints(node: Node) -> list[str]:
    return [f"{t['key']}={t.get('value', '')}" for t in node.kube.node["spec"].get("taints", [])]


def counts(node: Node) -> dict:
    raw = node.kube.node["metadata"].get("annotations", {}).get(keys.ANN_MONITOR_COUNTS)
    return json.loads(raw) if raw else {}


RESET = "fleetmedic.io/repair=reset"


def repair_taints(node: Node) -> list[str]:
    return [t for t in taints(node) if t.startswith("fleetmedic.io/repair=")]


def write(node: Node, times: list[float]) -> None:
    with open(node.log, "a") as f:
        for t in times:
            f.write(xid(69, 0xCB, t, XID69))


def test_five_in_an_hour_fence_and_four_do_not(tmp_path):
    node = Node(tmp_path)
    write(node, [100, 200, 300, 400])
    node.run_once(FIVE)
    assert repair_taints(node) == []
    assert len(counts(node)["seen"]["xid.69|0000:cb:00"]["t"]) == 4
    node.run_once(FIVE)  # a restart reads the same four lines again: still four
    assert len(counts(node)["seen"]["xid.69|0000:cb:00"]["t"]) == 4
    assert repair_taints(node) == []
    write(node, [500])
    node.run_once(FIVE)  # the fifth, after a restart: the count was not forgotten
    assert repair_taints(node) == [RESET]  # reset-class: the ladder's reset rung


def test_the_crossing_line_becomes_the_last_finding_and_a_restart_adds_nothing(tmp_path):
    """The fence's evidence names what fenced it (status, the email and quarantine's "the
    same fault again" read ``last-finding``); it is also the watermark, so a restart that
    reads the five lines again writes nothing."""
    node = Node(tmp_path)
    write(node, [100, 200, 300, 400, 500])
    node.run_once(FIVE)
    mark = json.loads(node.kube.node["metadata"]["annotations"][keys.ANN_LAST_FINDING])
    assert (mark["rule"], mark["n"], mark["acted"]) == ("xid.69", 5, True)
    before = (node.kube.writes, taints(node))
    node.run_once(FIVE)
    assert (node.kube.writes, taints(node)) == before


def test_a_storm_of_lines_is_one_event_and_released_nodes_are_not_refenced(tmp_path):
    node = Node(tmp_path)
    write(node, [100, 100.1, 100.2, 100.3, 100.4, 100.5])  # one burst, six lines
    node.run_once(FIVE)
    assert repair_taints(node) == []
    write(node, [200, 300, 400, 500])
    node.run_once(FIVE)
    assert repair_taints(node) == [RESET]
    node.release()
    node.run_once(FIVE)  # the same lines read again after a human released the node
    assert repair_taints(node) == []


def test_the_catalog_counts_no_application_xid(tmp_path):
    node = Node(tmp_path)
    write(node, [100 * i for i in range(1, 21)])  # twenty Xid 69 in half an hour
    node.run_once()
    assert repair_taints(node) == [] and counts(node) == {}


def test_the_catalog_ships_no_count_and_the_agent_config_adds_one(tmp_path):
    """Issue 39 item 6: no count without a published source ships, so GSP watchdogs (the
    driver: "not considered as errors") never fence by a count of ours; an operator's
    own count in the agent config still does."""
    node = Node(tmp_path)
    node.log.write_text(
        "".join(
            f"[{t:12.6f}] GSP task watchdog timeout @ pc:0x1250c5c, partition:2#0, task:3\n"
            for t in (100, 200, 300, 400)
        )
    )
    node.run_once()
    assert repair_taints(node) == [] and "seen" not in counts(node)
    cfg = KernelWatchConfig(
        source=str(node.log),
        boot_id_file=str(node.boot_file),
        thresholds={"nvrm.gsp-watchdog": {"count": 3, "window": 3600, "action": "reset"}},
    )
    stop = threading.Event()
    KernelWatch(cfg, NodeWriter(node.kube, "n1", preset()), Retrier(stop), stop, once=True).run()
    assert repair_taints(node) == [RESET]
