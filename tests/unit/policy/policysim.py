"""A pure simulated fleet for driving the policy the way the controller loop will.

Nodes are plain Node dicts, written only through ``Update.apply`` (the same
mutate the controller passes to ``Kube.update_node``). Behind each node is a
small "truth": its boot_id, whether it answers, and what fault it has. The
loop can be "killed" at any point between decide, begin, execute and complete,
which is how the crash-safety properties are checked.
"""

from __future__ import annotations

import copy
import dataclasses
import random
from collections import Counter
from datetime import UTC, datetime, timedelta
from typing import Any

from fleetmedic.model import keys
from fleetmedic.model.config import Config, parse
from fleetmedic.model.nodestate import ForeignSignal, view
from fleetmedic.policy import budget, ladder, plan, replacements
from fleetmedic.policy.actions import Action, Kind, Outcome, Stale, Update
from fleetmedic.policy.history import decode, stamp
from fleetmedic.policy.phases import probe

T0 = datetime(2026, 11, 21, 12, 0, tzinfo=UTC)
FOREIGN_TAINT = {"key": "example.com/other-team", "value": "x", "effect": "NoSchedule"}

# what cures a node: "reboot", "reimage", "never" (hardware), or "none" (it is fine)
FAULTS = ("none", "reboot", "reimage", "never")


def make_node(
    name: str,
    vendor: str = "nvidia",
    taints: list[dict] | None = None,
    annotations: dict | None = None,
    unschedulable: bool = False,
    conditions: list[dict] | None = None,
    labels: dict | None = None,
) -> dict:
    return {
        "metadata": {
            "name": name,
            "labels": {keys.LABEL_VENDOR: vendor, **(labels or {})},
            "annotations": dict(annotations or {}),
            "resourceVersion": "1",
        },
        "spec": {"taints": list(taints or []), "unschedulable": unschedulable},
        "status": {
            "addresses": [{"type": "InternalIP", "address": "192.0.2.1"}],
            "conditions": list(conditions or []),
        },
    }


def config(**overrides: Any) -> Config:
    data: dict[str, Any] = {
        "safety": {"min_healthy": 0, "breaker": {"enabled": False}},
        "ansible": {"playbook_dir": "/pb"},
        "ladder": {"history_limit": 200},
    }
    for path, value in overrides.items():
        node = data
        *parents, leaf = path.split("__")
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = value
    if "power_cycle" in data["ladder"].get("order", ()):
        # a ladder may name power_cycle only with a bmc section (its values are not read here)
        data["bmc"] = {"username": "admin", "password_file": "/etc/fleetmedic/bmc-password"}
    return parse(data)


@dataclasses.dataclass
class Truth:
    fault: str = "none"
    boot_id: str = "boot-0"
    boots: int = 0
    reachable: bool = True
    fixed_by: set = dataclasses.field(default_factory=set)  # steps applied so far
    pdb_blocks: int = 0  # drains that will still be blocked
    requests: set = dataclasses.field(default_factory=set)  # node-side once-per-request marker
    refuses_reset: bool = False  # nvidia-smi --gpu-reset says "In use by another client"
    resets: int = 0
    terminated: bool = False  # the replace rung handed its instance to the cloud

    @property
    def healthy(self) -> bool:
        # what cures each fault: a reset-class fault is cured by anything from a GPU reset up,
        # a power_cycle-class one only by a cold boot (it survives a warm reboot)
        cures = {
            "none": {"nothing"},
            "reset": {"reset", "reboot", "reinstall"},
            "reboot": {"reboot", "reinstall"},
            "power_cycle": {"power_cycle"},
            "reimage": {"reinstall"},
        }.get(self.fault, set())
        return self.fault == "none" or bool(cures & self.fixed_by)


class World:
    def __init__(
        self,
        cfg: Config,
        rng: random.Random | None = None,
        foreign: tuple[ForeignSignal, ...] | None = None,
    ) -> None:
        self.cfg, self.vocab = cfg, cfg.vocabulary()
        self.foreign = cfg.foreign() if foreign is None else foreign
        self.rng = rng or random.Random(0)
        self.nodes: dict[str, dict] = {}
        self.truth: dict[str, Truth] = {}
        self.now = T0
        self.reboots: Counter = Counter()  # (node, ep, step, attempt) -> reboots done
        self.emails: Counter = Counter()  # (node, ep) -> emails delivered
        self.max_active = 0
        self.stale = 0
        self.crash_rate = 0.0
        self.email_fail_rate = 0.0
        self.unreachable_rate = 0.0
        self.lost_rate = 0.0  # the run's execution node is lost after it did the work
        # the replace rung's cloud: the day's record (as on the pause ConfigMap), the
        # instances terminated (node -> times), and the order things happened in
        self.ledger: tuple[replacements.Entry, ...] = ()
        self.terminations: Counter = Counter()
        self.replaced_at: dict[str, datetime] = {}
        self.reserved: dict[tuple[str, int], datetime] = {}  # when each hand-off was admitted
        self.log: list[tuple[str, str]] = []  # (what, node): email, notice, terminate
        self.handoff_fail_rate = 0.0
        # the diagnose playbook publishes the node's boot id, as the diagnostics role does
        # (then the booting phase needs no probe of its own: phases/probe.py)
        self.diagnose_publishes_boot_id = True

    # -- building -----------------------------------------------------------
    def add(self, name: str, fault: str = "none", state: str | None = None, **kw: Any) -> None:
        taints = list(kw.pop("taints", []))
        if state:
            taints.append(self.vocab.repair(state).as_taint())
        self.nodes[name] = make_node(name, taints=taints, **kw)
        self.truth[name] = Truth(fault=fault)

    def view(self, name: str):
        return view(self.nodes[name], self.vocab, self.foreign)

    def views(self):
        return [self.view(n) for n in sorted(self.nodes)]

    def history(self, name: str):
        return decode(self.nodes[name]["metadata"]["annotations"].get(keys.ANN_HISTORY))

    # -- the loop -----------------------------------------------------------
    def write(self, upd: Update | None) -> bool:
        if upd is None:
            return False
        node = copy.deepcopy(self.nodes[upd.node])
        try:
            upd.apply(node, self.vocab)
        except Stale:
            self.stale += 1
            return False
        self.nodes[upd.node] = node
        return True

    def crashed(self) -> bool:
        return self.rng.random() < self.crash_rate

    def phases_run(self, cycles: int = 12) -> list[tuple[Kind, str | None]]:
        """What ``cycles`` whole cycles did, as (kind, phase) in order."""
        out: list[tuple[Kind, str | None]] = []
        for _ in range(cycles):
            out += [(a.kind, a.phase) for a in self.cycle()]
        return out

    def cycle(self, step: float = 30.0, paused: str | None = None) -> list[Action]:
        views = self.views()
        decisions = plan.decide_all(views, self.now, self.cfg)
        admitted = plan.make_plan(views, decisions, self.now, self.cfg, paused=paused).admission
        for action in admitted.admitted:
            self.execute(action)
            self.max_active = max(self.max_active, len(budget.fleet_of(self.views()).active))
        self.now += timedelta(seconds=step)
        return list(admitted.admitted)

    def execute(self, action: Action) -> None:
        if action.kind == Kind.WRITE:
            self.write(action.update)
            return
        if self.crashed():
            return  # killed before writing the marker
        self.write(ladder.begin(self.view(action.node), action, self.now, self.cfg, "run-x"))
        if self.crashed():
            return  # killed before acting
        outcome = self.act(action)
        if action.kind in (Kind.RUN, Kind.PROBE) and self.rng.random() < self.lost_rate:
            outcome = Outcome("lost", message="execution node exec-1: no route for 30s")
        if self.crashed():
            return  # killed before recording the end
        self.write(ladder.complete(self.view(action.node), action, outcome, self.now, self.cfg))

    def act(self, action: Action) -> Outcome:
        t = self.truth[action.node]
        if action.kind == Kind.ESCALATE:
            if action.phase == "notify" and (held := self.reserve(action)):
                return held
            if self.rng.random() < self.email_fail_rate:
                return Outcome("failed", message="relay down")
            self.emails[(action.node, action.ep)] += 1
            self.log.append(("notice" if action.phase == "notify" else "email", action.node))
            return Outcome("ok")
        if action.kind == Kind.REPLACE:
            return self.hand_off(action, t)
        if action.kind == Kind.DRAIN:
            node = self.nodes[action.node]
            if not node["spec"].get("unschedulable"):
                node["spec"]["unschedulable"] = True
                node["metadata"]["annotations"][keys.ANN_CORDONED] = "true"
            if t.pdb_blocks > 0 and not action.force:
                t.pdb_blocks -= 1
                return Outcome("blocked", message="default/web-0 protected by a PDB")
            return Outcome("ok")
        if not t.reachable or self.rng.random() < self.unreachable_rate:
            return Outcome("unreachable", message="ssh: connect timed out")
        if action.kind == Kind.PROBE:
            return Outcome("ok", boot_id=t.boot_id)
        assert action.kind == Kind.RUN, action
        if action.phase == "reset":
            if t.refuses_reset:
                return Outcome(
                    "failed", run_id="run-x", task="reset", message="In use by another client"
                )
            t.resets += 1
        if action.phase in ("reset", "reboot", "power_cycle", "reinstall"):
            t.fixed_by.add(action.phase)
        # reboot.yml always reboots (the policy's boot_id record guards it); reimage.yml
        # reboots once per request id, as the real reboot role does
        request = action.hostvars["fleetmedic_request_id"]
        boots = action.phase in ("reboot", "power_cycle")
        if boots or (action.phase == "reinstall" and request not in t.requests):
            t.requests.add(request)
            attempt = action.hostvars["fleetmedic_attempt"]
            self.reboots[(action.node, action.ep, action.step, attempt)] += 1
            t.boots += 1
            t.boot_id = f"boot-{t.boots}"
            t.fixed_by.add("reboot")
        if action.phase == "verify" and not t.healthy:
            return Outcome("failed", run_id="run-x", task="gpu checks", message="Xid 79")
        if action.phase == "diagnose":
            return Outcome("ok", run_id="run-x", data=self.diagnose_data(action.node))
        return Outcome("ok", run_id="run-x")

    def diagnose_data(self, node: str) -> dict:
        """What a diagnose run publishes: the node's boot id, as the diagnostics role does
        (unless ``diagnose_publishes_boot_id`` is off)."""
        if not self.diagnose_publishes_boot_id:
            return {}
        return {probe.PUBLISHED: {node: self.truth[node].boot_id}}

    def reserve(self, action: Action) -> Outcome | None:
        """As the executor: a slot in the day's record (None), or held."""
        limit = self.cfg.safety.max_replacements_per_day
        got = replacements.reserve(self.ledger, action.node, action.ep, limit, self.now)
        if not got.ok:
            retry = stamp(got.retry_at) if got.retry_at else None
            return Outcome("held", message=got.why, retry_at=retry)
        if got.changed:
            self.reserved[(action.node, action.ep)] = self.now
        self.ledger = got.entries
        return None

    def hand_off(self, action: Action, t: Truth) -> Outcome:
        """As the executor: the day's slot, then terminate the instance (once: replace.yml
        finds an instance terminated already and does nothing)."""
        if held := self.reserve(action):
            return held
        if t.terminated:
            return Outcome("ok", run_id="run-x", message="instance terminated already")
        if self.rng.random() < self.handoff_fail_rate:
            return Outcome("failed", run_id="run-x", task="terminate", message="AccessDenied")
        t.terminated = True
        self.terminations[action.node] += 1
        self.replaced_at[action.node] = self.now
        self.log.append(("terminate", action.node))
        return Outcome("ok", run_id="run-x", message="instance terminated")

    def run(self, cycles: int, **kw: Any) -> None:
        for _ in range(cycles):
            self.cycle(**kw)

    def settled(self) -> bool:
        """Every node healthy, or in manual with its email delivered."""
        for name in self.nodes:
            v = self.view(name)
            if v.state == "manual":
                esc = v.annotation_json(keys.ANN_ESCALATED) or {}
                if not esc.get("sent"):
                    return False
            elif v.state == "replace" and keys.ANN_REPLACED in v.annotations:
                continue  # handed to the cloud: its life ended
            elif v.state != "healthy" or keys.ANN_IN_FLIGHT in v.annotations or v.foreign_signals:
                return False
        return True
