"""The return gate's burn-in (policy/burnin.py) in the simulated fleet: a phase after
verify on every rung when the pool turns it on, absent when not; a failure climbs with the
measured and expected bus bandwidth; a pass returns the node; a restart resumes it."""

from __future__ import annotations

import json

from policysim import World, config

from fleetmedic.controller.status import node_status
from fleetmedic.policy import burnin, ladder
from fleetmedic.policy.actions import Action, Kind, Outcome

ON = {"enabled": True}
EXPECTED = 360.0


class BurnInWorld(World):
    """A World whose nodes have a bus bandwidth the burn-in measures (GB/s, by node)."""

    def __init__(self, *a, **kw) -> None:
        super().__init__(*a, **kw)
        self.busbw: dict[str, float] = {}
        self.burnins: list[Action] = []

    def act(self, action: Action) -> Outcome:
        if action.kind == Kind.RUN and action.phase == burnin.PHASE:
            self.burnins.append(action)
            bw = self.busbw.get(action.node, EXPECTED)
            floor = EXPECTED * 0.8
            said = (
                f"all_reduce bus bandwidth {bw:.1f} GB/s at 1 GiB on 8 GPUs, expected "
                f"{EXPECTED:g} GB/s (at least {floor:.1f}, 20% below)"
            )
            passed = bw >= floor
            line = json.dumps(
                {
                    "result": "pass" if passed else "fail",
                    "diag": {"level": 2, "status": "ok", "summary": "all tests passed"},
                    "collective": {"status": "ok" if passed else "problem", "summary": said},
                }
            )
            if passed:
                return Outcome("ok", run_id="run-b", stdout=line)
            return Outcome(
                "failed",
                run_id="run-b",
                task="Fail when the burn-in did not pass",
                message=f"burn-in fail: {said}",
                stdout=line,
            )
        return super().act(action)


def test_off_by_default_the_rung_runs_what_it_did():
    w = BurnInWorld(config())
    w.add("n1", fault="reboot", state="reboot")
    assert w.phases_run() == [
        (Kind.WRITE, None),
        (Kind.RUN, "diagnose"),
        (Kind.DRAIN, "drain"),
        (Kind.RUN, "reboot"),
        (Kind.RUN, "verify"),
    ]
    assert w.burnins == [] and w.view("n1").state == "healthy"


def test_on_a_burnin_follows_verify_on_every_rung_and_a_pass_untaints():
    for rung, fault in (("reset", "reset"), ("reboot", "reboot"), ("reimage", "reimage")):
        w = BurnInWorld(config(ladder__burnin=ON))
        w.add("n1", fault=fault, state=rung)
        done = w.phases_run()
        assert done[-2:] == [(Kind.RUN, "verify"), (Kind.RUN, "burnin")], (rung, done)
        v = w.view("n1")
        assert v.state == "healthy" and not v.unschedulable
        [attempt] = w.history("n1")
        assert (attempt.step, attempt.result, attempt.phase) == (rung, "pass", "burnin")
        assert "burn-in passed: diag level 2 ok; all_reduce bus bandwidth 360.0 GB/s" in (
            attempt.message
        )
        [run] = w.burnins
        assert run.playbook == "/pb/burnin.yml" and run.timeout == 1200
        assert run.hostvars["burnin_diag_level"] == 2


def test_the_profile_figure_is_picked_by_the_nodes_label():
    w = BurnInWorld(config(ladder__burnin={**ON, "hardware_profile": "p5"}))
    w.add("n1", fault="reboot", state="reboot",
          labels={"node.kubernetes.io/instance-type": "p5.48xlarge"})  # fmt: skip
    w.phases_run()
    [run] = w.burnins
    assert run.hostvars["burnin_hardware_profile"] == "p5"
    assert run.hostvars["burnin_labels"] == ["node.kubernetes.io/instance-type=p5.48xlarge"]


def test_a_slow_node_fails_the_burnin_and_climbs_with_measured_vs_expected():
    w = BurnInWorld(config(ladder__burnin=ON))
    w.add("n1", fault="reboot", state="reboot")
    w.busbw["n1"] = EXPECTED * 0.6
    for _ in range(12):
        w.cycle()
        if w.view("n1").state != "reboot":
            break
    assert w.view("n1").state == "reimage"
    [failed] = w.history("n1")
    assert (failed.step, failed.result, failed.phase) == ("reboot", "fail", "burnin")
    assert (
        "burn-in fail: all_reduce bus bandwidth 216.0 GB/s at 1 GiB on 8 GPUs, expected 360 "
        "GB/s (at least 288.0, 20% below)" in failed.message
    )
    # the next rung passes through the gate too, and is still slow: manual in the end
    w.run(20)
    assert w.view("n1").state == "manual"
    assert [r.step for r in w.history("n1") if r.phase == "burnin"] == ["reboot", "reimage"]


def test_a_burnin_that_times_out_climbs():
    w = BurnInWorld(config(ladder__burnin=ON))
    w.add("n1", fault="reboot", state="reboot")
    for _ in range(12):
        action = ladder.decide(w.view("n1"), w.now, w.cfg)
        if action.kind == Kind.RUN and action.phase == burnin.PHASE:
            break
        w.cycle()
    w.write(ladder.begin(w.view("n1"), action, w.now, w.cfg, "run-1"))
    gone = Outcome("timeout", run_id="run-1", message="no result within 1200s")
    w.write(ladder.complete(w.view("n1"), action, gone, w.now, w.cfg))
    assert w.view("n1").state == "reimage"
    assert w.history("n1")[-1].message.endswith("burn-in timeout: no result within 1200s")


def test_a_restart_during_the_burnin_resumes_it_and_status_says_burn_in():
    w = BurnInWorld(config(ladder__burnin={**ON, "timeouts": {"reboot": "30m"}}))
    w.add("n1", fault="reboot", state="reboot")
    for _ in range(12):
        action = ladder.decide(w.view("n1"), w.now, w.cfg)
        if action.kind == Kind.RUN and action.phase == burnin.PHASE:
            break
        w.cycle()
    assert action.timeout == 1800
    # the controller writes "running" and is killed before the run ends
    w.write(ladder.begin(w.view("n1"), action, w.now, w.cfg, "run-1"))
    assert node_status(w.view("n1"), w.now)["doing"] == "BURN-IN: reboot#1 burnin running"
    resumed = ladder.decide(w.view("n1"), w.now, w.cfg)
    assert (resumed.kind, resumed.phase, resumed.resumed) == (Kind.RUN, "burnin", True)
    assert resumed.hostvars["fleetmedic_request_id"] == action.hostvars["fleetmedic_request_id"]
    w.run(4)
    assert w.view("n1").state == "healthy"
    assert len(w.burnins) == 1  # the killed run never reported; the resumed one did


def test_a_gate_turned_off_meanwhile_lets_the_verified_node_return():
    w = BurnInWorld(config(ladder__burnin=ON))
    w.add("n1", fault="reboot", state="reboot")
    for _ in range(12):
        action = ladder.decide(w.view("n1"), w.now, w.cfg)
        if action.kind == Kind.RUN and action.phase == burnin.PHASE:
            break
        w.cycle()
    w.cfg = config()
    w.run(3)
    assert w.view("n1").state == "healthy" and w.burnins == []


def test_the_metric_label_and_the_history_line():
    line = json.dumps({"result": "unknown", "diag": {}, "collective": {}})
    assert burnin.outcome_label(Outcome("failed", stdout=line, message="burn-in unknown")) == (
        "unknown"
    )
    assert burnin.outcome_label(Outcome("unreachable", message="ssh")) == "unreachable"
    assert burnin.summary(Outcome("ok", stdout="PLAY RECAP")) == "burn-in passed"
    assert burnin.summary(Outcome("unreachable", message="ssh: timed out")) == (
        "burn-in unreachable: ssh: timed out"
    )
