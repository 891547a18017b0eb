"""The return gate's restore phase (policy/partition.py) in the simulated fleet: the layout
recorded at the first diagnose of an episode, put back once per request after the repair,
and passed over without a run for nodes that had no partitions."""

from __future__ import annotations

import json
from collections import Counter

from policysim import World, config

from fleetmedic.model import keys
from fleetmedic.policy import ladder, partition
from fleetmedic.policy.actions import Action, Kind, Outcome

MIG = {
    "vendor": "nvidia",
    "partitioned": True,
    "gpus": [{"index": 0, "mig": True, "mig_pending": True, "devices": {"3g.40gb": 2}}],
}
PLAIN = {
    "vendor": "nvidia",
    "partitioned": False,
    "gpus": [{"index": 0, "mig": False, "mig_pending": False, "devices": {}}],
}


class PartitionWorld(World):
    """A World whose nodes have a partition layout that a reset, a reboot or a reinstall
    loses, that diagnose records and that the restore playbook puts back (once per
    request id, as the role does)."""

    def __init__(self, *a, **kw) -> None:
        super().__init__(*a, **kw)
        self.layout: dict[str, dict] = {}  # what the node has now
        self.applied: Counter = Counter()  # request id -> layouts applied
        self.restored: set[str] = set()  # the role's once-per-request marker
        self.restore_breaks = False  # the readback still differs (a broken GPU)
        self.runs: list[tuple[str, str]] = []

    def act(self, action: Action) -> Outcome:
        if action.kind == Kind.RUN:
            self.runs.append((action.node, action.phase or ""))
        if action.kind == Kind.RUN and action.phase == "diagnose":
            have = self.layout.get(action.node, PLAIN)
            line = json.dumps({"request_id": "x", "summary": "s", "layout": have})
            data = self.diagnose_data(action.node)  # the boot id, as the base World
            return Outcome("ok", run_id="run-x", stdout=f"evidence: ok\n{line}", data=data)
        if action.kind == Kind.RUN and action.phase == partition.PHASE:
            want = action.hostvars["fleetmedic_partition_layout"]
            request = action.hostvars["fleetmedic_request_id"]
            before = self.layout.get(action.node, PLAIN)
            if before != want and request not in self.restored:
                self.applied[request] += 1
                self.restored.add(request)
                if not self.restore_breaks:
                    self.layout[action.node] = want
            if self.layout.get(action.node, PLAIN) != want:
                return Outcome(
                    "failed",
                    run_id="run-x",
                    task="Fail when the layout is not the recorded one",
                    message="partition layout differs from the record: GPU 0: want MIG 3g.40gb "
                    "x2, have MIG off",
                )
            said = {
                "applied": before != want,
                "before": "GPU 0: MIG off",
                "after": "GPU 0: MIG 3g.40gb x2",
            }
            return Outcome("ok", run_id="run-x", stdout=json.dumps(said))
        outcome = super().act(action)
        repaired = action.kind == Kind.RUN and action.phase in ("reset", "reboot", "reinstall")
        if repaired and action.node in self.layout:
            self.layout[action.node] = PLAIN  # lost, as on Hopper
        return outcome


def record(w: World, name: str) -> dict | None:
    raw = w.nodes[name]["metadata"]["annotations"].get(keys.ANN_PARTITION)
    return json.loads(raw) if raw else None


def test_every_repair_rung_restores_before_verify_by_default():
    ladder_cfg = config().ladder
    for rung in ("reset", "reboot", "power_cycle", "reimage"):
        phases = ladder_cfg.step(rung).phases
        assert phases[-2:] == ("restore", "verify"), (rung, phases)
    assert "restore" not in ladder_cfg.diagnose.phases  # diagnostics change no layout


def test_a_mig_node_is_rebooted_and_returns_with_its_instances():
    w = PartitionWorld(config())
    w.add("n1", fault="reboot", state="reboot", labels={"nvidia.com/mig.config": "all-3g.40gb"})
    w.layout["n1"] = MIG
    w.run(10)
    v = w.view("n1")
    assert v.state == "healthy"
    assert w.layout["n1"] == MIG
    assert [p for _, p in w.runs] == ["diagnose", "reboot", "restore", "verify"]
    rec = record(w, "n1")
    assert rec["ep"] == 1 and rec["layout"] == MIG
    assert rec["labels"] == {"nvidia.com/mig.config": "all-3g.40gb"}
    [attempt] = w.history("n1")
    assert attempt.result == "pass"
    assert (
        "restore: applied; before: GPU 0: MIG off; after: GPU 0: MIG 3g.40gb x2" in attempt.message
    )
    assert sum(w.applied.values()) == 1


def test_a_node_without_partitions_runs_no_restore_playbook():
    w = PartitionWorld(config())
    w.add("n1", fault="reboot", state="reboot")
    # the same actions as before the restore phase existed
    assert w.phases_run(10) == [
        (Kind.WRITE, None),
        (Kind.RUN, "diagnose"),
        (Kind.DRAIN, "drain"),
        (Kind.RUN, "reboot"),
        (Kind.RUN, "verify"),
    ]
    [attempt] = w.history("n1")
    assert attempt.result == "pass"
    assert "no GPU partitions before the repair" in attempt.message


def test_nothing_recorded_means_nothing_restored():
    w = PartitionWorld(config(ladder__reboot={"phases": ["reboot", "restore", "verify"]}))
    w.add("n1", fault="reboot", state="reboot")
    w.layout["n1"] = MIG
    w.run(10)
    assert w.view("n1").state == "healthy"
    assert "restore" not in [p for _, p in w.runs]
    assert "no partition layout recorded before the repair" in w.history("n1")[-1].message


def test_a_restore_that_fails_climbs_and_the_next_rung_restores_the_first_record():
    w = PartitionWorld(config())
    w.add("n1", fault="reboot", state="reboot")
    w.layout["n1"] = MIG
    w.restore_breaks = True
    for _ in range(12):
        w.cycle()
        if w.view("n1").state == "reimage":
            break
    assert w.view("n1").state == "reimage"
    [failed] = w.history("n1")
    assert (failed.step, failed.result, failed.phase) == ("reboot", "fail", "restore")
    assert "partition layout differs from the record: GPU 0" in failed.message
    w.restore_breaks = False
    w.run(12)
    assert w.view("n1").state == "healthy"
    # reimage's diagnose saw the lost layout; the episode's first record stood
    assert record(w, "n1")["layout"] == MIG
    assert w.layout["n1"] == MIG
    assert [r.result for r in w.history("n1")] == ["fail", "pass"]


def test_a_restart_during_restore_resumes_without_applying_twice():
    w = PartitionWorld(config())
    w.add("n1", fault="reboot", state="reboot")
    w.layout["n1"] = MIG
    for _ in range(12):
        action = ladder.decide(w.view("n1"), w.now, w.cfg)
        if action.kind == Kind.RUN and action.phase == "restore":
            break
        w.cycle()
    # the controller writes "running", applies the layout, and is killed before recording
    w.write(ladder.begin(w.view("n1"), action, w.now, w.cfg, "run-1"))
    w.act(action)
    resumed = ladder.decide(w.view("n1"), w.now, w.cfg)
    assert (resumed.kind, resumed.phase, resumed.resumed) == (Kind.RUN, "restore", True)
    assert resumed.hostvars["fleetmedic_request_id"] == action.hostvars["fleetmedic_request_id"]
    w.run(6)
    assert w.view("n1").state == "healthy"
    assert list(w.applied.values()) == [1]
    assert w.layout["n1"] == MIG


def test_a_record_of_an_earlier_episode_is_not_restored():
    w = PartitionWorld(config())
    old = {"ep": 7, "at": "x", "layout": MIG}
    w.add(
        "n1",
        fault="reboot",
        state="reboot",
        annotations={keys.ANN_PARTITION: json.dumps(old)},
    )
    w.run(10)
    assert w.view("n1").state == "healthy"
    assert "restore" not in [p for _, p in w.runs]
    assert record(w, "n1")["ep"] == 1 and record(w, "n1")["layout"] == PLAIN


def test_record_from_ignores_output_that_is_no_record():
    w = World(config())
    w.add("n1")
    v = w.view("n1")
    assert partition.record_from(v, 1, "", "t") == {}
    assert partition.record_from(v, 1, "PLAY RECAP\nok=3", "t") == {}
    assert partition.record_from(v, 1, json.dumps({"layout": "x"}), "t") == {}
    assert partition.record_from(v, 1, "{" + "x" * partition.MAX_RECORD + "}", "t") == {}
    got = partition.record_from(v, 1, json.dumps({"layout": MIG, "summary": "GPU 0"}), "t")
    assert json.loads(got[keys.ANN_PARTITION])["layout"] == MIG


def test_status_shows_restore_while_it_runs():
    from fleetmedic.controller.status import node_status

    w = PartitionWorld(config())
    w.add("n1", fault="reboot", state="reboot")
    w.layout["n1"] = MIG
    for _ in range(12):
        action = ladder.decide(w.view("n1"), w.now, w.cfg)
        if action.kind == Kind.RUN and action.phase == "restore":
            break
        w.cycle()
    w.write(ladder.begin(w.view("n1"), action, w.now, w.cfg, "run-1"))
    assert node_status(w.view("n1"), w.now)["doing"] == "RESTORE: reboot#1 restore running"
