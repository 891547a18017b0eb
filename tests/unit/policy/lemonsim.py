"""The policy simulator (policysim.World) with GPUs that have identities: each node's
diagnose phase reports its GPUs as ``fleetmedic gpus --json`` does, and a fleet store
stands in for the pause ConfigMap's GPU history, fed as the executor feeds it
(controller/execute.py ``_gpu_history``)."""

from __future__ import annotations

import dataclasses
from typing import Any

from fleetmedic.model import keys
from fleetmedic.model.gpufacts import GpuFacts, GpuReport
from fleetmedic.model.gpus import FleetHistory
from fleetmedic.policy import lemon, rmaflow
from fleetmedic.policy.actions import Action, Kind, Outcome
from tests.unit.policy.policysim import World


def gpu(
    index: int, serial: str, *signals: str, pci: str | None = None, named: bool = False
) -> GpuFacts:
    """A GPU as the node reports it; a lost one answers with neither serial nor UUID,
    unless the driver named it in this boot's kernel log (``named``: checks/identity.py)."""
    lost = "lost" in signals and not named
    return GpuFacts(
        index=index,
        pci="" if lost else (pci or f"0000:{0x18 + 0x10 * index:02x}:00.0"),
        serial="" if lost else serial,
        uid="" if lost else f"GPU-{serial}",
        model="NVIDIA H100 80GB HBM3",
        signals=tuple(signals),
    )


class LemonWorld(World):
    def __init__(self, cfg: Any, **kw: Any) -> None:
        super().__init__(cfg, **kw)
        self.gpus: dict[str, list[GpuFacts]] = {}  # node -> what its diagnose reports now
        self.serials: dict[str, str] = {}  # node -> the serial of its GPU 1 (the one that fails)
        self.fleet = FleetHistory()  # the store
        self.cases: list[tuple[str, int]] = []  # (node, ep) of each case phase run

    def report(self, node: str) -> GpuReport:
        return GpuReport("nvidia", tuple(self.gpus.get(node, ())))

    def act(self, action: Action) -> Outcome:
        out = super().act(action)
        if action.kind != Kind.RUN:
            return out
        if action.phase == "diagnose":
            rep = self.report(action.node)
            data = {lemon.REPORT_KEY: {action.node: rep.to_json()}}
            judged = lemon.judge(
                self.view(action.node), rep, self.fleet, action.ep, self.now, self.cfg.ladder.lemon
            )
            self.fleet = self.fleet.with_(judged.record.incidents)
            mine = {g.key for g in judged.record.gpus if g.key}
            data[rmaflow.HISTORY_KEY] = [i.to_json() for i in self.fleet.all() if i.key in mine]
            return dataclasses.replace(out, data=data)
        if action.phase == "verify" and out.ok:  # (playbooks/verify.yml reads the GPUs too)
            rep = self.report(action.node)
            learned = lemon.learn(self.view(action.node), rep, self.now, action.ep)
            self.fleet = self.fleet.with_(learned.incidents)  # (as gpuwork.repair_held_from)
            return dataclasses.replace(out, data={lemon.REPORT_KEY: {action.node: rep.to_json()}})
        if action.phase == lemon.PHASE:  # (rma_case.yml runs the diagnostics role too)
            self.cases.append((action.node, action.ep))
            rep = self.report(action.node)
            data = {
                lemon.REPORT_KEY: {action.node: rep.to_json()},
                rmaflow.HISTORY_KEY: [i.to_json() for i in self.fleet.all()],
                rmaflow.CASES_KEY: [f"/ev/{action.node}.json"],
            }
            return dataclasses.replace(out, data=data)
        return out

    def rma(self, node: str) -> rmaflow.RmaRecord | None:
        return rmaflow.RmaRecord.decode(
            self.nodes[node]["metadata"]["annotations"].get(keys.ANN_RMA)
        )

    def release(self, node: str) -> None:
        """What `fleetmedic release` leaves: no repair taint, no in-flight or escalation."""
        meta = self.nodes[node]["metadata"]
        for k in (keys.ANN_IN_FLIGHT, keys.ANN_ESCALATED):
            meta["annotations"].pop(k, None)
        self.nodes[node]["spec"]["taints"] = []
        self.nodes[node]["spec"]["unschedulable"] = False
