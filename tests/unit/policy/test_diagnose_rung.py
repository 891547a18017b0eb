"""The diagnose state (issue 27 part 2) and fences that only go up (part 3): a node fenced
at ``diagnose`` gets the vendor diagnostics while fenced; a pass returns it untouched, a
failure enters the rung its failed test maps to (never milder than the first repair rung),
and anything the run could not tell enters the first repair rung."""

from __future__ import annotations

import json
from collections import Counter

import pytest
from policysim import World, config

from fleetmedic.model import keys
from fleetmedic.policy import diagnose, ladder, sweep
from fleetmedic.policy.actions import Action, Kind, Outcome
from fleetmedic.policy.history import SUPERSEDED

UNMAPPED = "unmapped"  # a failed test the catalog does not name (diag prints no action)


def diag_line(status: str = "ok", action: str | None = None) -> str:
    """What `fleetmedic diag --json` prints (the last line of the run's stdout)."""
    doc: dict = {"name": "diag.dcgm", "status": status, "summary": f"level 2: {status}"}
    if status == "problem":
        doc["evidence"] = {"failed": [{"name": "Memory", "gpus": [3], "status": "fail"}]}
        if action:
            doc["action"] = action
    return "a warning first\n" + json.dumps(doc)


class DWorld(World):
    """A world whose diagnostics runs say what the node's truth is: pass on a sound node,
    fail mapped to the fault's rung otherwise (``never``: manual). ``said`` overrides it.
    A run is started once per request id (the playbook's record on the node): a re-run of
    the same request waits for that run and prints its result."""

    said: Outcome | None = None

    def __init__(self, *a, **kw) -> None:
        super().__init__(*a, **kw)
        self.started: Counter = Counter()  # request id -> diagnostics started on the node
        self.results: dict[str, Outcome] = {}
        self.phases: list[tuple[str, str]] = []  # (step, phase) of every action run

    def act(self, action: Action) -> Outcome:
        if action.phase:
            self.phases.append((action.step or "", action.phase))
        if action.phase != diagnose.PHASE:
            return super().act(action)
        assert action.hostvars["quarantine_level"] == self.cfg.ladder.diagnose_level
        assert action.hostvars["quarantine_fabric"] is False
        request = action.hostvars["fleetmedic_request_id"]
        if request not in self.results:
            self.started[request] += 1
            self.results[request] = self.said or self._truth_says(action.node)
        return self.results[request]

    def _truth_says(self, node: str) -> Outcome:
        fault = self.truth[node].fault
        if fault == "none":
            return Outcome("ok", run_id="run-d", stdout=diag_line())
        rung = {"never": "manual"}.get(fault, fault)
        return Outcome("failed", run_id="run-d", stdout=diag_line("problem", rung))


def world(**kw) -> DWorld:
    return DWorld(config(**kw))


def settle(w: World, cycles: int = 60) -> None:
    for _ in range(cycles):
        w.cycle()
        if w.settled():
            return
    raise AssertionError(f"not settled: {w.view('n1').state} {w.view('n1').annotations}")


def test_a_pass_returns_the_node_untouched():
    w = world()
    w.add("n1", state="diagnose")
    settle(w)
    t = w.truth["n1"]
    assert w.view("n1").state == "healthy" and not w.nodes["n1"]["spec"]["unschedulable"]
    assert (t.boots, t.resets, t.fixed_by) == (0, 0, set())  # no reboot, no reset
    assert w.phases == [
        ("diagnose", "drain_gpu"),
        ("diagnose", "diagnostics"),
        ("diagnose", "verify"),
    ]
    [done] = w.history("n1")
    assert (done.step, done.result, done.phase) == ("diagnose", "pass", "verify")
    assert "diagnostics level 2: pass" in done.message
    assert list(w.started.values()) == [1]


@pytest.mark.parametrize(
    "fault,rung",
    [("reboot", "reboot"), ("reimage", "reimage"), ("never", "manual")],
)
def test_a_failure_enters_the_rung_the_failed_test_maps_to(fault, rung):
    w = world()
    w.add("n1", fault=fault, state="diagnose")
    for _ in range(6):
        w.cycle()
        if w.view("n1").state != "diagnose":
            break
    assert w.view("n1").state == rung
    [failed] = w.history("n1")
    assert (failed.step, failed.result, failed.phase) == ("diagnose", "fail", "diagnostics")
    assert "diagnostics level 2: fail" in failed.message
    settle(w, 200)
    steps = {a.step for a in w.history("n1")}
    assert "reset" not in steps  # straight to the mapped rung, no wasted reset


@pytest.mark.parametrize(
    "said",
    [
        Outcome("unreachable", message="ssh: connect timed out"),
        Outcome("timeout", message="job timed out"),
        Outcome("ok", stdout="no json at all"),
        Outcome("ok", stdout='{"name": "diag.dcgm", "status": "unknown", "summary": "no dcgmi"}'),
        Outcome("failed", stdout="{not json"),
    ],
)
def test_unknown_is_never_healthy_it_enters_the_first_repair_rung(said):
    w = world()
    w.add("n1", state="diagnose")
    w.said = said
    for _ in range(6):
        w.cycle()
        if w.view("n1").state != "diagnose":
            break
    assert w.view("n1").state == "reset"
    assert sweep.judge(said.status, said.stdout, said.message).result == sweep.UNKNOWN


@pytest.mark.parametrize(
    "order,mapped,rung",
    [
        (["diagnose", "reset", "reboot", "reimage", "manual"], UNMAPPED, "reboot"),  # sweep's
        (["diagnose", "reset", "reboot", "reimage", "manual"], "reboot", "reboot"),
        (["diagnose", "reboot", "reimage", "manual"], "reset", "reboot"),  # never milder
        (["diagnose", "reboot", "reimage", "manual"], "diagnose", "reboot"),
        (["diagnose", "reset", "reboot", "manual"], "reimage", "manual"),  # next one up
        (["diagnose", "reset", "reboot", "replace", "manual"], "reimage", "replace"),
        (["diagnose", "manual"], "reboot", "manual"),
    ],
)
def test_the_rung_after_a_failure(order, mapped, rung):
    cfg = config(ladder__order=order)
    stdout = diag_line("problem", None if mapped == UNMAPPED else mapped)
    v = diagnose.verdict(Outcome("failed", stdout=stdout))
    assert v.result == sweep.FAIL
    assert diagnose.rung_after(cfg, v) == rung


def test_a_pool_without_diagnose_starts_such_nodes_at_its_first_rung():
    w = world(ladder__order=["reset", "reboot", "reimage", "manual"])
    w.add("n1", state="diagnose")
    w.cycle()
    assert w.view("n1").state == "reset"
    settle(w)
    assert not w.started and {a.step for a in w.history("n1")} == {"reset"}


def test_diagnose_counts_under_the_budget():
    w = world(safety__max_concurrent=1)
    for name in ("n1", "n2", "n3"):
        w.add(name, state="diagnose")
    for _ in range(40):
        w.cycle()
        assert w.max_active <= 1
    assert all(w.view(n).state == "healthy" for n in ("n1", "n2", "n3"))


def test_diagnostics_interrupted_by_a_restart_resume_without_running_twice():
    """Killed after the run started (the marker says running) and before its end was
    recorded: the next decision resumes the phase with the same request id."""
    w = world()
    w.add("n1", state="diagnose")
    while True:
        [action] = [a for a in ladder_actions(w) if a.node == "n1"]
        if action.phase == diagnose.PHASE:
            break
        w.execute(action)
    w.write(ladder.begin(w.view("n1"), action, w.now, w.cfg, "run-1"))
    w.act(action)  # the controller dies here, the run goes on on the node
    again = ladder.decide(w.view("n1"), w.now, w.cfg)
    assert (again.kind, again.phase, again.resumed) == (Kind.RUN, diagnose.PHASE, True)
    assert again.hostvars["fleetmedic_request_id"] == action.hostvars["fleetmedic_request_id"]
    settle(w)
    assert list(w.started.values()) == [1] and w.view("n1").state == "healthy"


def ladder_actions(w: World) -> list[Action]:
    return [ladder.decide(v, w.now, w.cfg) for v in w.views()]


# -- fences only go up (part 3) ----------------------------------------------------------
def add_taint(w: World, state: str, name: str = "n1") -> None:
    """Fence as the agent does: the default preset has one key (its value is replaced: the
    API server keeps one taint per key and effect); ossci's one key per state (beside)."""
    new = w.vocab.repair(state).as_taint()
    taints = w.nodes[name]["spec"]["taints"]
    w.nodes[name]["spec"]["taints"] = [t for t in taints if t["key"] != new["key"]] + [new]


@pytest.mark.parametrize("preset", ["default", "ossci"])
def test_a_stronger_fence_during_diagnostics_wins_at_the_next_step(preset):
    w = world(taints__preset=preset)
    w.add("n1", fault="reboot", state="diagnose")
    w.said = Outcome("ok", run_id="run-d", stdout=diag_line())  # diagnostics would pass
    while True:
        [action] = ladder_actions(w)
        if action.phase == diagnose.PHASE:
            break
        w.execute(action)
    w.write(ladder.begin(w.view("n1"), action, w.now, w.cfg, "run-1"))
    seen = w.view("n1")  # the Node as the controller wrote it before the run (work.py)
    outcome = w.act(action)
    add_taint(w, "reboot")  # the agent saw a Xid 79 meanwhile
    # the pass was decided for diagnose: it must not go on (nor clear the fence later)
    assert not w.write(ladder.complete(seen, action, outcome, w.now, w.cfg))
    assert w.stale == 1
    nxt = ladder.decide(w.view("n1"), w.now, w.cfg)
    assert nxt.kind == Kind.WRITE and "stronger fence wins" in nxt.reason
    w.execute(nxt)
    v = w.view("n1")
    assert v.state == "reboot"
    assert w.nodes["n1"]["spec"]["taints"] == [w.vocab.reboot.as_taint()]  # ours, one
    assert json.loads(v.annotations[keys.ANN_IN_FLIGHT])["step"] == "reboot"
    [moved] = w.history("n1")
    assert (moved.step, moved.result) == ("diagnose", SUPERSEDED)
    settle(w)
    assert w.truth["n1"].boots == 1 and w.history("n1")[-1].step == "reboot"


def test_a_stronger_fence_the_ladder_skips_enters_the_next_rung_up():
    w = world(ladder__order=["diagnose", "reset", "reboot", "reimage", "manual"])
    w.add("n1", state="reset")
    w.cycle()
    add_taint(w, "power_cycle")  # this pool has no BMC: the next rung up is reimage
    w.cycle()
    assert w.view("n1").state == "reimage"


def test_a_weaker_fence_never_lowers_the_node():
    w = world()
    w.add("n1", fault="reboot", state="reboot")
    w.cycle()
    w.cycle()
    assert json.loads(w.view("n1").annotations[keys.ANN_IN_FLIGHT])["step"] == "reboot"
    # someone puts a milder taint in place of ours
    w.nodes["n1"]["spec"]["taints"] = [w.vocab.reset.as_taint()]
    action = ladder.decide(w.view("n1"), w.now, w.cfg)
    assert action.kind == Kind.WRITE and "fences only go up" in action.reason
    w.execute(action)
    assert w.view("n1").state == "reboot"
    settle(w)
    assert "reset" not in {a.step for a in w.history("n1")}
    # the agent's weaker finding in place of ours: put back at the next step
    w.add("n2", fault="reboot", state="reboot")
    w.cycle()
    add_taint(w, "diagnose", "n2")
    w.cycle()
    assert w.view("n2").state == "reboot"
    settle(w)
    assert {a.step for a in w.history("n2")} == {"reboot"}


def test_a_weaker_fence_beside_ours_changes_nothing():
    w = world(taints__preset="ossci")
    w.add("n1", fault="reboot", state="reboot")
    w.cycle()
    add_taint(w, "diagnose")  # ossci: one key per state, so it stands beside ours
    assert w.view("n1").state == "reboot"
    settle(w)
    assert {a.step for a in w.history("n1")} == {"reboot"}
    assert w.nodes["n1"]["spec"]["taints"] == []


@pytest.mark.parametrize(("fault", "rung"), [("none", None), ("reboot", "reboot")])
def test_a_foreign_signal_can_ask_for_diagnostics_first(fault, rung):
    """A tool whose signal means "look closer" enters diagnose: a sound node returns with no
    reboot and the tool's taint cleared; a sick one climbs to the rung its test maps to."""
    signal = {"kind": "taint", "key": "example.com/gpu-suspect", "tool": "suspect"}
    w = world(foreign_signals=[{**signal, "enters": "diagnose", "after_repair": "clear"}])
    suspect = {"key": "example.com/gpu-suspect", "value": "true", "effect": "NoSchedule"}
    w.add("n1", fault=fault, taints=[suspect])
    w.write(ladder.decide(w.view("n1"), w.now, w.cfg).update)
    assert w.view("n1").state == "diagnose"
    assert w.view("n1").annotations[keys.ANN_ENTERED_BY] == "suspect"
    settle(w)
    steps = [(a.step, a.result) for a in w.history("n1")]
    if rung is None:
        assert steps == [("diagnose", "pass")] and w.truth["n1"].boots == 0
    else:
        assert steps[0][0] == "diagnose" and steps[0][1] != "pass"
        assert ("reboot", "pass") in steps and w.truth["n1"].boots >= 1
    assert w.view("n1").state == "healthy" and suspect not in w.view("n1").taints
