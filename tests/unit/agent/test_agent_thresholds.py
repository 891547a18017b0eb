"""Monitor findings that add up (issue 12 item 4): past the catalog's threshold the agent
fences; a restart neither forgets the count nor counts a line twice."""

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

XID13 = "Graphics SM Warp Exception on (GPC 7, TPC 7, SM 0): Illegal Instruction Parameter"


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
            f.write(xid(13, 0xCB, t, XID13))


def test_five_xid13_in_an_hour_fence_and_four_do_not(tmp_path):
    node = Node(tmp_path)
    write(node, [100, 200, 300, 400])
    node.run_once()
    assert repair_taints(node) == []
    assert len(counts(node)["seen"]["xid.13|0000:cb:00"]["t"]) == 4
    node.run_once()  # a restart reads the same four lines again: still four
    assert len(counts(node)["seen"]["xid.13|0000:cb:00"]["t"]) == 4
    assert repair_taints(node) == []
    write(node, [500])
    node.run_once()  # the fifth, after a restart: the count was not forgotten
    assert repair_taints(node) == [RESET]  # reset-class: the ladder's reset rung


def test_a_storm_of_lines_is_one_event_and_released_nodes_are_not_refenced(tmp_path):
    node = Node(tmp_path)
    write(node, [100, 100.1, 100.2, 100.3, 100.4, 100.5])  # one burst, six lines
    node.run_once()
    assert repair_taints(node) == []
    write(node, [200, 300, 400, 500])
    node.run_once()
    assert repair_taints(node) == [RESET]
    node.release()
    node.run_once()  # the same lines read again after a human released the node
    assert repair_taints(node) == []


def test_the_agent_config_overrides_the_catalog(tmp_path):
    node = Node(tmp_path)
    write(node, [100, 200, 300, 400, 500, 600])
    cfg = KernelWatchConfig(
        source=str(node.log),
        boot_id_file=str(node.boot_file),
        thresholds={"xid.13": {"count": 0, "window": 3600, "action": "reset"}},
    )
    stop = threading.Event()
    KernelWatch(cfg, NodeWriter(node.kube, "n1", preset()), Retrier(stop), stop, once=True).run()
    assert repair_taints(node) == [] and counts(node) == {}
