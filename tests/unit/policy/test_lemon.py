"""The lemon rule (policy/lemon.py, rmaflow.py) in the pure simulator: GPUs by identity,
episodes in a chain, the RMA candidate sent to manual instead of up the ladder."""

from __future__ import annotations

import dataclasses
import json
from datetime import timedelta

from hypothesis import given
from hypothesis import strategies as st

from fleetmedic.model import keys
from fleetmedic.model.config.lemon import LemonConfig
from fleetmedic.model.gpufacts import GpuReport, LoggedFault
from fleetmedic.model.gpus import FleetHistory, Gpu, Incident, NodeRecord
from fleetmedic.policy import lemon, plan
from fleetmedic.policy.actions import LOST, Kind, Outcome
from fleetmedic.policy.history import stamp
from tests.unit.policy.lemonsim import LemonWorld, gpu
from tests.unit.policy.policysim import T0, World, config, make_node

DAY = timedelta(days=1)


def healthy_gpus():
    return [gpu(0, "1652000000100"), gpu(1, "1652000000101")]


def lost_gpu1():
    return [gpu(0, "1652000000100"), gpu(1, "1652000000101", "lost")]


def episode(w: LemonWorld, node: str, cycles: int = 40, named: bool = False) -> None:
    """GPU 1 falls off the bus; the node is fenced at reboot and the ladder runs; the GPU
    is back once the node is rebooted (the fake's truth: a reboot cures it). ``named``:
    the driver named the lost GPU in the kernel log (its serial at its address)."""
    w.gpus[node] = [g for g in w.gpus[node] if g.index != 1] + [
        gpu(1, serial_of(w, node), "lost", named=named)
    ]
    w.truth[node].fault = "reboot"
    w.truth[node].fixed_by = set()
    w.nodes[node]["spec"]["taints"] = [w.vocab.repair("reboot").as_taint()]
    for _ in range(cycles):
        w.cycle(step=5)
        if w.truth[node].fixed_by:  # after the reboot the GPU answers again
            w.gpus[node] = [g for g in w.gpus[node] if g.index != 1] + [gpu(1, serial_of(w, node))]
        if (
            w.view(node).state in ("healthy", "manual")
            and keys.ANN_IN_FLIGHT not in (w.nodes[node]["metadata"]["annotations"])
        ):
            return


def serial_of(w: LemonWorld, node: str) -> str:
    return w.serials.get(node, "1652000000101")


def world() -> LemonWorld:
    w = LemonWorld(config())
    w.add("n1")
    w.gpus["n1"] = healthy_gpus()
    return w


def test_a_gpu_failing_three_times_in_a_week_goes_to_manual_on_the_third():
    w = world()
    episode(w, "n1")
    assert w.view("n1").state == "healthy"
    w.now += 2 * DAY
    episode(w, "n1")
    assert w.view("n1").state == "healthy"
    boots = w.truth["n1"].boots
    w.now += 2 * DAY
    episode(w, "n1")
    v = w.view("n1")
    assert v.state == "manual"
    assert w.truth["n1"].boots == boots, "no reboot on the third: the rung did not hold twice"
    rec = w.rma("n1")
    assert rec is not None and rec.ep == 3
    assert rec.summary.startswith("RMA candidate: GPU 1652000000101")
    assert rec.gpus[0]["count"] == 3 and rec.gpus[0]["family"] == "bus-loss"
    assert w.cases == [("n1", 3)], "one case phase, in the third episode"
    last = w.history("n1")[-2:]
    assert [(a.step, a.result) for a in last] == [
        ("reboot", "rma-candidate"),
        ("manual", "escalated"),
    ]
    assert w.emails[("n1", 3)] == 1
    # the escalation leads with the cause: the GPU and the recommendation
    esc = v.annotation_json(keys.ANN_HISTORY)[-1]
    assert esc["message"].startswith("RMA candidate: GPU 1652000000101")


def test_the_first_loss_is_named_at_the_verify_after_the_reboot():
    """GPU 1 is lost at its first diagnose (no serial known yet): the incident is held
    against its place, and named when the verify reads it back."""
    w = world()
    w.nodes["n1"]["metadata"]["annotations"].pop(keys.ANN_GPUS, None)
    episode(w, "n1")
    record = NodeRecord.decode(w.nodes["n1"]["metadata"]["annotations"][keys.ANN_GPUS])
    [inc] = record.incidents
    assert (inc.serial, inc.uid, inc.family, inc.ep) == (
        "1652000000101",
        "GPU-1652000000101",
        "bus-loss",
        1,
    )
    assert inc.why == "lost"


def test_a_repair_that_holds_for_the_window_starts_the_count_over():
    w = world()
    episode(w, "n1")
    w.now += 1 * DAY
    episode(w, "n1")
    w.now += 8 * DAY  # healthy for longer than the 7-day window
    episode(w, "n1")
    assert w.view("n1").state == "healthy", "repaired again, not a lemon"
    assert w.rma("n1") is None
    w.now += 1 * DAY
    episode(w, "n1")
    assert w.view("n1").state == "healthy", "two in the new chain"
    w.now += 1 * DAY
    episode(w, "n1")
    assert w.view("n1").state == "manual" and w.rma("n1").gpus[0]["count"] == 3


def test_the_same_gpu_in_another_node_keeps_its_history():
    w = world()
    episode(w, "n1")
    w.now += DAY
    episode(w, "n1")
    # the GPU moves to a new node (a new name, the same serial): its past comes with it.
    # It falls off the bus before n2 ever read it: the driver's kernel-log lines name it.
    w.add("n2")
    w.gpus["n2"] = [gpu(0, "1652000000900")]
    w.now += DAY
    episode(w, "n2", named=True)
    assert w.view("n2").state == "manual"
    rec = w.rma("n2")
    assert [c["node"] for c in rec.gpus[0]["chain"]] == ["n1", "n1", "n2"]


def test_each_episode_counts_once_whatever_rungs_it_climbed():
    w = world()
    w.gpus["n1"] = lost_gpu1()
    w.truth["n1"].fault = "never"  # nothing cures it: reboot, reimage, manual
    w.nodes["n1"]["spec"]["taints"] = [w.vocab.repair("reboot").as_taint()]
    w.run(60, step=5)
    record = NodeRecord.decode(w.nodes["n1"]["metadata"]["annotations"][keys.ANN_GPUS])
    assert len({(i.ep, i.family) for i in record.incidents}) == 1
    assert w.view("n1").state == "manual" and w.rma("n1") is None


def test_a_pool_can_turn_a_family_off():
    cfg = config(ladder__lemon={"families": {"bus-loss": {"count": 0}}})
    w = LemonWorld(cfg)
    w.add("n1")
    w.gpus["n1"] = healthy_gpus()
    for _ in range(3):
        episode(w, "n1")
        w.now += DAY
    # no RMA candidate: the node-level flap damping (safety.flap) is what stops the third
    assert w.view("n1").state == "manual" and w.rma("n1") is None
    assert next(a.result for a in w.history("n1") if a.ep == 3) == "flap-damped"
    assert w.cases == []


def test_a_row_remap_failure_is_a_candidate_at_once():
    w = world()
    w.gpus["n1"] = [gpu(0, "1652000000100"), gpu(1, "1652000000101", "row_remap_failure")]
    w.truth["n1"].fault = "reboot"
    w.nodes["n1"]["spec"]["taints"] = [w.vocab.repair("reboot").as_taint()]
    w.run(20, step=5)
    assert w.view("n1").state == "manual"
    assert w.rma("n1").gpus[0]["family"] == "memory-exhausted"


# -- the parts ---------------------------------------------------------------------------
def inc(at, node="n1", ep=1, family="bus-loss", serial="S1"):
    return Incident(serial, f"GPU-{serial}", family, node, ep, stamp(at), "lost", 1)


def test_chain_breaks_where_a_repair_held_for_the_window():
    week = 7 * 86400.0
    got = lemon.chain([inc(T0), inc(T0 + DAY, ep=2), inc(T0 + 10 * DAY, ep=3)], week)
    assert [i.ep for i in got] == [3]
    got = lemon.chain([inc(T0), inc(T0 + 5 * DAY, ep=2), inc(T0 + 10 * DAY, ep=3)], week)
    assert [i.ep for i in got] == [1, 2, 3], "every five days: each within the window"


def test_a_repair_holds_from_its_return_to_service_not_from_the_fault():
    """The hold is counted from when the repair returned the node (its verify), so a
    repair that took long does not shorten what it must hold."""
    week = 7 * 86400.0
    slow = dataclasses.replace(inc(T0), back=stamp(T0 + 6 * DAY))
    got = lemon.chain([slow, inc(T0 + 7 * DAY + DAY / 2, ep=2)], week)
    assert [i.ep for i in got] == [1, 2], "it held a day and a half, not a week"
    held = dataclasses.replace(inc(T0), back=stamp(T0 + DAY))
    assert [i.ep for i in lemon.chain([held, inc(T0 + 9 * DAY, ep=2)], week)] == [2]


@given(st.lists(st.integers(min_value=0, max_value=60 * 86400), max_size=12, unique=True))
def test_chain_is_the_newest_run_with_every_gap_within_the_window(offsets):
    window = 7 * 86400.0
    incs = [inc(T0 + timedelta(seconds=o), ep=n) for n, o in enumerate(offsets)]
    got = lemon.chain(incs, window)
    if not incs:
        assert got == ()
        return
    times = sorted(offsets)
    assert got[-1].at == stamp(T0 + timedelta(seconds=times[-1]))
    assert len(got) <= len(incs)
    gaps = [b - a for a, b in zip(times[-len(got) :], times[-len(got) + 1 :], strict=False)]
    assert all(g <= window for g in gaps)
    if len(got) < len(times):  # the one before the chain is more than a window back
        assert times[-len(got)] - times[-len(got) - 1] > window


def test_a_lost_gpu_keeps_the_identity_read_at_its_place():
    old = NodeRecord((Gpu(0, "0000:18:00.0", "S0", "U0"), Gpu(1, "0000:28:00.0", "S1", "U1")))
    v = World(config())
    v.nodes["n1"] = make_node("n1", annotations={keys.ANN_GPUS: old.encode()})
    report = GpuReport("nvidia", tuple(lost_gpu1()))
    j = lemon.judge(v.view("n1"), report, FleetHistory(), 4, T0, LemonConfig())
    [i] = j.incidents
    assert (i.uid, i.serial, i.family, i.why) == ("U1", "S1", "bus-loss", "lost")
    assert j.headline() == "GPU 1 lost"


def test_a_gpu_gone_from_the_list_is_lost_and_a_kernel_fault_names_its_address():
    old = NodeRecord((Gpu(0, "0000:18:00.0", "S0", "U0"), Gpu(1, "0000:28:00.0", "S1", "U1")))
    w = World(config())
    w.nodes["n1"] = make_node("n1", annotations={keys.ANN_GPUS: old.encode()})
    only0 = GpuReport("nvidia", (gpu(0, "S0", pci="0000:18:00.0"),))
    j = lemon.judge(w.view("n1"), only0, FleetHistory(), 1, T0, LemonConfig())
    assert [(i.serial, i.family) for i in j.incidents] == [("S1", "bus-loss")]
    xid = GpuReport(
        "nvidia",
        (gpu(0, "S0", pci="0000:18:00.0"), gpu(1, "S1", pci="0000:28:00.0")),
        (LoggedFault("xid.48", "0000:28:00", "Double Bit ECC Error"),),
    )
    j = lemon.judge(w.view("n1"), xid, FleetHistory(), 2, T0, LemonConfig())
    assert [(i.serial, i.family, i.why) for i in j.incidents] == [
        ("S1", "memory-uncorrectable", "xid.48 on 0000:28:00")
    ]


def test_records_stay_within_their_bounds_and_read_back():
    incs = [inc(T0 + timedelta(hours=h), ep=h, serial=f"S{h % 8}") for h in range(200)]
    raw = NodeRecord((), tuple(incs)).encode()
    assert len(raw.encode()) <= 3072
    back = NodeRecord.decode(raw)
    assert back.incidents and back.incidents[-1].ep == 199, "the newest kept"
    fleet = FleetHistory(incs)
    assert FleetHistory.decode(fleet.encode(limit=4096)).all()[-1].ep == 199
    assert NodeRecord.decode("not json") == NodeRecord()
    assert NodeRecord.decode('{"gpus": [{"i": "x"}], "inc": [7]}') == NodeRecord()


def test_a_decision_never_climbs_past_a_candidate():
    """Fences only go up: after the case phase the node is at manual, and the ESCALATE
    that follows names the candidate."""
    w = world()
    for _ in range(3):
        episode(w, "n1")
        w.now += DAY
    decisions = [a for _, a in plan.decide_all(w.views(), w.now, w.cfg)]
    assert all(a.kind in (Kind.NONE, Kind.WAIT) for a in decisions), decisions


def test_flap_damping_waits_for_the_diagnose_and_applies_when_no_gpu_is_the_lemon():
    """GPU 1 failed twice, then GPU 0 fails: the third entry in a week would be damped at
    once; it waits for the diagnose (GPU 1 might be the lemon), which names GPU 0 (its
    first), so the damping applies then, with the evidence taken."""
    w = world()
    episode(w, "n1")
    w.now += DAY
    episode(w, "n1")
    w.now += DAY
    w.gpus["n1"] = [gpu(0, "1652000000100", "ecc_uncorrected"), gpu(1, "1652000000101")]
    w.truth["n1"].fault, w.truth["n1"].fixed_by = "reboot", set()
    w.nodes["n1"]["spec"]["taints"] = [w.vocab.repair("reboot").as_taint()]
    w.run(10, step=5)
    third = [a for a in w.history("n1") if a.ep == 3]
    assert third[0].result == "flap-damped" and third[0].phase == "diagnose", third
    assert w.view("n1").state == "manual" and w.rma("n1") is None
    record = NodeRecord.decode(w.nodes["n1"]["metadata"]["annotations"][keys.ANN_GPUS])
    assert ("1652000000100", "memory-uncorrectable", 3) in {
        (i.serial, i.family, i.ep) for i in record.incidents
    }, "the diagnose that ran first recorded GPU 0's fault"


def test_a_node_fenced_for_hands_by_a_vendor_rma_criterion_gets_its_case_before_the_email():
    """The agent fences a Xid 64 (row-remap failure) straight at manual: the case phase
    runs first (its run names the GPU), then the one email, which carries it."""
    w = world()
    mark = {"rule": "xid.64", "pci": "0000:28:00", "msg": "GPU memory remapping failure"}
    w.nodes["n1"]["metadata"]["annotations"][keys.ANN_LAST_FINDING] = json.dumps(mark)
    w.gpus["n1"] = [gpu(0, "1652000000100"), gpu(1, "1652000000101", "row_remap_failure")]
    w.nodes["n1"]["spec"]["taints"] = [w.vocab.repair("manual").as_taint()]
    w.run(10, step=5)
    assert w.cases == [("n1", 1)]
    assert [(a.step, a.result) for a in w.history("n1")] == [
        ("manual", "rma-candidate"),
        ("manual", "escalated"),
    ]
    rec = w.rma("n1")
    assert rec.gpus[0]["family"] == "memory-exhausted" and rec.gpus[0]["serial"] == "1652000000101"
    assert w.emails[("n1", 1)] == 1 and w.truth["n1"].boots == 0


def test_a_human_s_manual_taint_is_escalated_as_before():
    w = world()
    w.nodes["n1"]["spec"]["taints"] = [w.vocab.repair("manual").as_taint()]
    w.run(5, step=5)
    assert w.cases == [] and [a.result for a in w.history("n1")] == ["escalated"]


def test_the_gpu_pods_leave_before_the_case_s_diagnostics_or_it_goes_without_them():
    """DCGM level 3 loads every GPU: the case phase is preceded by the GPU pods' drain; a
    drain a PodDisruptionBudget holds gives a case without the diagnostics."""
    for blocked, level in ((0, 3), (5, 0)):
        w = LemonWorld(config(safety__drain={"pdb_blocked": "skip"}))
        w.add("n1")
        w.gpus["n1"] = [gpu(0, "1652000000100"), gpu(1, "1652000000101", "row_remap_failure")]
        w.truth["n1"].fault = "reboot"
        w.nodes["n1"]["spec"]["taints"] = [w.vocab.repair("reboot").as_taint()]
        seen = []
        for _ in range(12):
            for action in w.cycle(step=5):
                seen.append((action.kind, action.phase, action.gpu_only))
                if action.phase == "rma":
                    assert action.hostvars["rma_case_diag_level"] == level
            if action.phase == "diagnose" and blocked:
                w.truth["n1"].pdb_blocks = blocked
        assert (Kind.DRAIN, "rma_drain", True) in seen and (Kind.RUN, "rma", False) in seen
        assert w.view("n1").state == "manual" and w.cases == [("n1", 1)]


def test_without_diagnostics_the_case_needs_no_drain():
    w = LemonWorld(config(ladder__lemon={"rma": {"diag_level": 0}}))
    w.add("n1")
    w.gpus["n1"] = [gpu(0, "1652000000100"), gpu(1, "1652000000101", "row_remap_failure")]
    w.truth["n1"].fault = "reboot"
    w.nodes["n1"]["spec"]["taints"] = [w.vocab.repair("reboot").as_taint()]
    phases = [a.phase for _ in range(10) for a in w.cycle(step=5)]
    assert "rma" in phases and "rma_drain" not in phases


def test_a_moved_gpu_counts_the_hold_of_its_last_repair_on_the_node_it_left():
    """Its last repair on the first node held from that node's verify: the store carries
    when, so its failure on the second node soon after is the second in its chain, while
    the first node's earlier episode, held longer than the window, is not."""
    w = LemonWorld(config(ladder__lemon={"families": {"bus-loss": {"count": 2, "window": "1d"}}}))
    w.add("n1")
    w.gpus["n1"] = healthy_gpus()
    episode(w, "n1")
    w.now += 2 * DAY
    # the second repair takes 20 hours (its drain held by a PodDisruptionBudget, say)
    w.gpus["n1"] = [gpu(0, "1652000000100"), gpu(1, "1652000000101", "lost")]
    w.truth["n1"].fault, w.truth["n1"].fixed_by = "reboot", set()
    w.nodes["n1"]["spec"]["taints"] = [w.vocab.repair("reboot").as_taint()]
    while (w.view("n1").annotation_json(keys.ANN_IN_FLIGHT) or {}).get("phase") in (
        None,
        "diagnose",
    ):
        w.cycle(step=5)  # its start and its diagnose
    w.now += timedelta(hours=20)
    for _ in range(30):
        w.cycle(step=5)
        if w.truth["n1"].fixed_by:
            w.gpus["n1"] = healthy_gpus()
    assert w.view("n1").state == "healthy" and w.rma("n1") is None
    w.add("n2")
    w.gpus["n2"] = [gpu(0, "1652000000900")]
    w.gpus["n1"] = [gpu(0, "1652000000100"), gpu(1, "1652000000555")]
    w.now += timedelta(hours=6)  # 26 h after that fault, 6 h after its repair held
    episode(w, "n2", named=True)
    rec = w.rma("n2")
    assert w.view("n2").state == "manual" and rec is not None
    assert [(c["node"], c["ep"]) for c in rec.gpus[0]["chain"]] == [("n1", 2), ("n2", 1)]


def test_a_case_at_manual_whose_runs_are_lost_past_its_timeout_is_escalated():
    """The case phase at ``manual`` (no rung above it): its execution node lost on every
    try until the case's timeout passes. The node is escalated with its one email, as
    any attempt that fails at the top of the ladder."""

    class LostCaseWorld(LemonWorld):
        def act(self, action):
            if action.kind == Kind.RUN and action.phase == lemon.PHASE:
                self.cases.append((action.node, action.ep))
                return Outcome(LOST, message="execution node ex1 lost")
            return super().act(action)

    w = LostCaseWorld(config())
    w.add("n1")
    w.gpus["n1"] = [gpu(0, "1652000000100"), gpu(1, "1652000000101", "row_remap_failure")]
    mark = {"rule": "xid.64", "pci": "0000:28:00", "msg": "GPU memory remapping failure"}
    w.nodes["n1"]["metadata"]["annotations"][keys.ANN_LAST_FINDING] = json.dumps(mark)
    w.nodes["n1"]["spec"]["taints"] = [w.vocab.repair("manual").as_taint()]
    w.run(300, step=15)  # 75 min: past the case's 60 min timeout
    assert len(w.cases) > 1  # resumed after each loss, until the timeout
    assert [(a.step, a.result) for a in w.history("n1")][-1] == ("manual", "escalated")
    assert w.emails[("n1", 1)] == 1
