"""Helpers for the agent's unit tests (imported by name; pytest puts this directory on
sys.path): :class:`MemoryKube`, an in-memory Node store with the API server's merge-patch
semantics, and :class:`Node`, a kernel log and boot id file with such a store behind a
KernelWatch. The same flows run against the real API server in
tests/integration/test_agent_*.py."""

from __future__ import annotations

import copy
import json
import threading
from pathlib import Path

from fleetmedic.agent.config import KernelWatchConfig
from fleetmedic.agent.kernelwatch import KernelWatch
from fleetmedic.agent.retry import Retrier
from fleetmedic.agent.writer import NodeWriter
from fleetmedic.model.nodeedit import merge_patch
from fleetmedic.model.vocabulary import preset

FOREIGN = {"key": "example.com/team", "value": "a", "effect": "NoSchedule"}


class MemoryKube:
    """get_node / update_node / post_event over one dict, with merge-patch semantics."""

    def __init__(self, node: dict | None = None) -> None:
        self.node = node or {
            "metadata": {"name": "n1", "annotations": {}, "labels": {}},
            "spec": {"taints": [dict(FOREIGN)]},
        }
        self.events: list[tuple[str, str, str]] = []
        self.writes = 0

    def get_node(self, name: str) -> dict:
        assert name == self.node["metadata"]["name"], "the agent must read only its own node"
        return copy.deepcopy(self.node)

    def update_node(self, name: str, mutate) -> dict:
        old = self.get_node(name)
        new = copy.deepcopy(old)
        if mutate(new) is False or not merge_patch(old, new):
            return old
        self.writes += 1
        self.node = new
        return copy.deepcopy(new)

    def post_event(self, node, reason, message, type="Normal", component="fleetmedic") -> None:
        self.events.append((reason, type, message))

    # test conveniences
    def taints(self) -> set[str]:
        return {f"{t['key']}={t.get('value', '')}" for t in self.node["spec"].get("taints") or []}

    def ann(self, key: str):
        raw = self.node["metadata"]["annotations"].get(key)
        return None if raw is None else json.loads(raw)


VOCAB = preset()
REBOOT = "fleetmedic.io/repair=reboot"
MANUAL = "fleetmedic.io/repair=manual"


def xid(code=79, bus=0x3B, t=100.0, text="GPU has fallen off the bus."):
    return (
        f"[{t:12.6f}] NVRM: Xid (PCI:0000:{bus:02x}:00): {code}, pid=2417, name=python3, {text}\n"
    )


def banner(t=0.0):
    return f"[{t:12.6f}] Linux version 6.1.0-18-amd64 (gcc-12) #1 SMP PREEMPT_DYNAMIC Debian 6.1.76-1\n"


class Node:
    """One node: its kernel log, boot id file and (in-memory) Node object."""

    def __init__(self, tmp: Path):
        self.log = tmp / "kern.log"
        self.boot_file = tmp / "boot_id"
        self.boot_file.write_text("boot-a\n")
        self.kube = MemoryKube()

    def watch(self, once=True, stop=None, thresholds=None) -> KernelWatch:
        stop = stop or threading.Event()
        cfg = KernelWatchConfig(
            source=str(self.log),
            poll=0.02,
            boot_id_file=str(self.boot_file),
            thresholds=thresholds or {},
        )
        return KernelWatch(cfg, NodeWriter(self.kube, "n1", VOCAB), Retrier(stop), stop, once=once)

    def run_once(self, thresholds=None) -> KernelWatch:
        kw = self.watch(thresholds=thresholds)
        kw.run()
        return kw

    def release(self):
        """The controller (or a human) clears the repair taint."""
        self.kube.node["spec"]["taints"] = [
            t for t in self.kube.node["spec"]["taints"] if not t["key"].startswith("fleetmedic.io/")
        ]
