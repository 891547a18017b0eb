"""The ladder, transition by transition (the property tests cover the combinations)."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from policysim import FOREIGN_TAINT, T0, World, config

from fleetmedic.errors import ConfigError
from fleetmedic.model import keys
from fleetmedic.policy import ladder
from fleetmedic.policy.actions import Kind, Outcome, Stale
from fleetmedic.policy.history import Attempt, encode
from fleetmedic.policy.inflight import InFlight


def in_flight(w: World, name: str) -> dict | None:
    raw = w.nodes[name]["metadata"]["annotations"].get(keys.ANN_IN_FLIGHT)
    return json.loads(raw) if raw else None


def step_until(w: World, name: str, kind: str, phase: str | None = None, limit: int = 20):
    """Run whole cycles until the node's next decision is ``kind`` (/``phase``)."""
    for _ in range(limit):
        action = ladder.decide(w.view(name), w.now, w.cfg)
        if action.kind == kind and (phase is None or action.phase == phase):
            return action
        w.cycle()
    raise AssertionError(f"{name} never reached {kind} {phase}: {action.describe()}")


def test_healthy_node_gets_no_action():
    w = World(config())
    w.add("n1")
    assert ladder.decide(w.view("n1"), w.now, w.cfg).kind == Kind.NONE


def test_reboot_step_runs_diagnose_drain_reboot_verify_then_clears():
    """The diagnose run published the boot id: the reboot needs no probe run of its own."""
    w = World(config())
    w.add("n1", fault="reboot", state="reboot", taints=[FOREIGN_TAINT])
    assert w.phases_run(8) == [
        (Kind.WRITE, None),
        (Kind.RUN, "diagnose"),
        (Kind.DRAIN, "drain"),
        (Kind.RUN, "reboot"),
        (Kind.RUN, "verify"),
    ]
    v = w.view("n1")
    assert v.state == "healthy" and not v.unschedulable
    assert FOREIGN_TAINT in v.taints, "someone else's taint must survive"
    assert keys.ANN_IN_FLIGHT not in v.annotations and keys.ANN_CORDONED not in v.annotations
    assert v.labels[keys.LABEL_STATE] == "healthy"
    [attempt] = w.history("n1")
    assert (attempt.step, attempt.result, attempt.ep, attempt.run_id) == (
        "reboot",
        "pass",
        1,
        "run-x",
    )
    assert w.truth["n1"].boots == 1


def test_failed_verify_climbs_to_reimage_then_manual_with_one_email():
    w = World(config())
    w.add("n1", fault="never", state="reboot")
    w.run(30)
    v = w.view("n1")
    assert v.state == "manual"
    assert [(a.step, a.result) for a in w.history("n1")] == [
        ("reboot", "fail"),
        ("reimage", "fail"),
        ("manual", "escalated"),
    ]
    assert w.emails == {("n1", 1): 1}
    assert json.loads(v.annotations[keys.ANN_ESCALATED])["sent"]
    assert v.unschedulable, "a manual node stays cordoned until a human releases it"
    assert ladder.decide(v, w.now, w.cfg).kind == Kind.NONE


def test_a_diagnose_that_published_no_boot_id_leaves_the_reboot_its_probe():
    w = World(config())
    w.diagnose_publishes_boot_id = False
    w.add("n1", fault="reboot", state="reboot")
    assert w.phases_run(8) == [
        (Kind.WRITE, None),
        (Kind.RUN, "diagnose"),
        (Kind.DRAIN, "drain"),
        (Kind.PROBE, "reboot"),
        (Kind.RUN, "reboot"),
        (Kind.RUN, "verify"),
    ]
    assert w.view("n1").state == "healthy" and w.truth["n1"].boots == 1


def test_the_diagnose_boot_id_is_kept_until_the_boot_and_dropped_after_it():
    w = World(config())
    w.add("n1", fault="reboot", state="reboot")
    step_until(w, "n1", Kind.DRAIN, "drain")
    assert in_flight(w, "n1")["boot_id"] == "boot-0", "the diagnose's read, through the drain"
    step_until(w, "n1", Kind.RUN, "reboot")
    assert in_flight(w, "n1")["boot_id"] == "boot-0"
    step_until(w, "n1", Kind.RUN, "verify")
    assert w.truth["n1"].boot_id == "boot-1"
    assert "boot_id" not in in_flight(w, "n1"), "read before the boot: nothing after it"


def test_a_step_that_boots_nothing_keeps_no_boot_id():
    w = World(config())
    w.add("n1", fault="reset", state="reset")
    step_until(w, "n1", Kind.DRAIN, "drain_gpu")
    assert "boot_id" not in in_flight(w, "n1")


def test_reimage_picks_the_playbook_by_vendor():
    w = World(config(ladder__playbooks={"reinstall_amd": {"playbook": "reinstall_rocm.yml"}}))
    w.add("n1", state="reimage")
    w.nodes["n1"]["metadata"]["labels"][keys.LABEL_VENDOR] = "amd"
    action = step_until(w, "n1", Kind.RUN, "reinstall")
    assert action.playbook == "/pb/reinstall_rocm.yml"
    assert action.hostvars["fleetmedic_vendor"] == "amd" and action.disruptive
    assert action.hostvars["fleetmedic_collect_evidence"] is False
    assert action.hostvars["fleetmedic_request_id"] == "e1-reimage1-20261121T120000Z"


def test_reimage_without_vendor_label_fails_the_step_instead_of_guessing():
    w = World(config())
    w.add("n1", state="reimage")
    del w.nodes["n1"]["metadata"]["labels"][keys.LABEL_VENDOR]
    w.run(3)  # start, diagnose, drain; next comes the reinstall decision
    action = ladder.decide(w.view("n1"), w.now, w.cfg)
    assert action.kind == Kind.WRITE and "gpu-vendor" in action.reason
    w.write(action.update)
    assert w.view("n1").state == "manual"
    assert w.history("n1")[-1].result == "fail"


def test_unreachable_counts_as_failure():
    w = World(config())
    w.add("n1", state="reboot")
    w.truth["n1"].reachable = False
    w.run(12)
    assert [(a.step, a.result) for a in w.history("n1")][:2] == [
        ("reboot", "unreachable"),
        ("reimage", "unreachable"),
    ]
    assert w.view("n1").state == "manual"


def test_retries_repeat_the_step_before_climbing():
    w = World(config(ladder__reboot={"phases": ["reboot", "verify"], "retries": 1}))
    w.add("n1", fault="never", state="reboot")
    w.run(20)
    hist = [(a.step, a.attempt, a.result) for a in w.history("n1")]
    assert hist[:3] == [("reboot", 1, "fail"), ("reboot", 2, "fail"), ("reimage", 1, "fail")]


def test_failed_diagnose_does_not_block_the_repair():
    w = World(config())
    w.add("n1", fault="reboot", state="reboot")
    action = step_until(w, "n1", Kind.RUN, "diagnose")
    w.write(ladder.begin(w.view("n1"), action, w.now, w.cfg, "r1"))
    w.write(
        ladder.complete(
            w.view("n1"), action, Outcome("failed", "r1", "nvidia-smi hung"), w.now, w.cfg
        )
    )
    assert in_flight(w, "n1")["phase"] == "drain"
    w.run(6)
    [attempt] = w.history("n1")
    assert attempt.result == "pass" and "diagnose failed: nvidia-smi hung" in attempt.message


class TestCrashDuringReboot:
    """kill -9 between writing the marker and recording the end of the reboot."""

    def _killed_during_reboot(self, reboot_happened: bool) -> World:
        w = World(config())
        w.add("n1", fault="reboot", state="reboot")
        action = step_until(w, "n1", Kind.RUN, "reboot")
        w.write(ladder.begin(w.view("n1"), action, w.now, w.cfg, "run-1"))
        if reboot_happened:
            w.act(action)
        assert in_flight(w, "n1")["status"] == "running"
        return w

    def test_finished_reboot_is_not_repeated(self):
        w = self._killed_during_reboot(reboot_happened=True)
        assert ladder.decide(w.view("n1"), w.now, w.cfg).kind == Kind.PROBE
        w.run(4)
        assert w.truth["n1"].boots == 1
        assert w.history("n1")[-1].result == "pass"
        assert "reboot confirmed after a restart" in w.history("n1")[-1].message

    def test_reboot_that_never_started_is_run(self):
        w = self._killed_during_reboot(reboot_happened=False)
        w.run(4)
        assert w.truth["n1"].boots == 1 and w.history("n1")[-1].result == "pass"

    def test_node_still_down_is_probed_until_the_reboot_timeout_then_fails(self):
        w = self._killed_during_reboot(reboot_happened=True)
        w.truth["n1"].reachable = False
        w.run(10)
        assert not w.history("n1"), "within the reboot timeout it is only probed again"
        assert in_flight(w, "n1")["retry_at"]
        w.now += timedelta(seconds=w.cfg.ladder.playbooks.reboot.timeout)
        w.run(1)
        assert w.history("n1")[0].result == "unreachable"
        assert w.view("n1").state == "reimage"


def test_interrupted_reinstall_waits_for_a_node_that_is_still_rebooting():
    w = World(config())
    w.add("n1", fault="reimage", state="reimage")
    action = step_until(w, "n1", Kind.RUN, "reinstall")
    w.write(ladder.begin(w.view("n1"), action, w.now, w.cfg, "run-1"))  # then killed
    w.truth["n1"].reachable = False  # mid-reboot
    w.run(5)
    assert not w.history("n1") and in_flight(w, "n1")["status"] == "running"
    w.truth["n1"].reachable = True
    w.run(4)
    assert w.history("n1")[-1].result == "pass"
    assert w.truth["n1"].boots == 1, "the role's request-id marker stops a second reboot"


def test_interrupted_reinstall_fails_once_its_timeout_is_over():
    w = World(config())
    w.add("n1", fault="reimage", state="reimage")
    action = step_until(w, "n1", Kind.RUN, "reinstall")
    w.write(ladder.begin(w.view("n1"), action, w.now, w.cfg, "run-1"))
    w.truth["n1"].reachable = False
    w.now += timedelta(seconds=w.cfg.ladder.playbooks.reinstall_nvidia.timeout)
    w.run(1)
    assert w.history("n1")[-1].result == "unreachable" and w.view("n1").state == "manual"


def test_interrupted_idempotent_phase_is_simply_run_again():
    w = World(config())
    w.add("n1", state="reboot")
    action = step_until(w, "n1", Kind.RUN, "verify")
    w.write(ladder.begin(w.view("n1"), action, w.now, w.cfg, "run-1"))
    again = ladder.decide(w.view("n1"), w.now, w.cfg)
    assert (again.kind, again.phase) == (Kind.RUN, "verify") and "interrupted" in again.reason


def test_complete_on_a_node_that_moved_on_is_stale():
    w = World(config())
    w.add("n1", state="reboot")
    action = step_until(w, "n1", Kind.RUN, "diagnose")
    w.write(ladder.begin(w.view("n1"), action, w.now, w.cfg, "r"))
    view_before = w.view("n1")
    # a human escalates by hand meanwhile
    w.nodes["n1"]["spec"]["taints"] = [w.vocab.manual.as_taint()]
    upd = ladder.complete(view_before, action, Outcome("ok"), w.now, w.cfg)
    with pytest.raises(Stale):
        upd.apply(w.nodes["n1"], w.vocab)


def test_taint_moved_by_a_human_is_followed():
    w = World(config())
    w.add("n1", state="reboot")
    step_until(w, "n1", Kind.DRAIN)
    w.nodes["n1"]["spec"]["taints"] = [w.vocab.reimage.as_taint()]
    w.run(1)
    assert in_flight(w, "n1")["step"] == "reimage"
    assert w.history("n1")[-1].result == "superseded"


def test_removed_taint_ends_the_repair_and_undoes_only_our_cordon():
    w = World(config())
    w.add("n1", state="reboot")
    step_until(w, "n1", Kind.RUN, "reboot")  # drained: cordoned by us
    assert w.view("n1").unschedulable
    w.nodes["n1"]["spec"]["taints"] = []
    w.run(1)
    v = w.view("n1")
    assert not v.unschedulable and keys.ANN_IN_FLIGHT not in v.annotations
    assert w.history("n1")[-1].result == "released"


def test_cordon_made_by_someone_else_is_kept():
    w = World(config())
    w.add("n1", fault="reboot", state="reboot", unschedulable=True)
    w.run(8)
    v = w.view("n1")
    assert v.state == "healthy" and v.unschedulable


class TestForeignSignals:
    def test_enters_reboot(self):
        w = World(config())
        w.add("n1", conditions=[{"type": "GPUProblem", "status": "True"}])
        action = ladder.decide(w.view("n1"), w.now, w.cfg)
        assert action.kind == Kind.WRITE and "GPUProblem" in action.reason
        w.write(action.update)
        assert w.view("n1").state == "reboot"

    # The old behaviour (ignore the signal for foreign_grace after our repair, then repair
    # again) looped: Konduktor never clears its taint, so the node was repaired again and
    # again until flap damping. Each signal now has a lifecycle.

    def test_konduktor_taint_is_cleared_after_our_repair_and_never_loops(self):
        w = World(config())
        mine = {"key": "example.com/keep-me", "value": "x", "effect": "NoSchedule"}
        w.add("n1", fault="reboot", taints=[KONDUKTOR, mine])
        w.run(12)
        v = w.view("n1")
        assert v.state == "healthy" and KONDUKTOR not in v.taints and mine in v.taints
        [attempt] = w.history("n1")
        assert attempt.result == "pass" and "cleared konduktor's taint" in attempt.message
        w.now += timedelta(days=1)
        w.run(10)
        assert len(w.history("n1")) == 1, "repaired once, and stays in service"
        assert keys.ANN_ENTERED_BY not in w.view("n1").annotations

    def test_aws_taint_waits_for_the_aws_agent_and_acts_again_only_when_set_anew(self):
        w = World(config())
        w.add("n1", fault="reboot", taints=[dict(AWS, timeAdded="2026-11-21T11:00:00Z")])
        w.run(12)
        assert [(a.step, a.result) for a in w.history("n1")] == [("reboot", "pass")]
        v = w.view("n1")
        assert v.state == "healthy" and v.foreign_signals, "the AWS agent removes its own taint"
        w.run(10)
        assert len(w.history("n1")) == 1, "the same signal is not repaired twice"
        # the AWS agent re-checks: its taint goes, so our record of it goes too
        w.nodes["n1"]["spec"]["taints"] = []
        w.run(2)
        assert keys.ANN_FOREIGN_HANDLED not in w.view("n1").annotations
        # ... and a new taint later is a new fault
        w.nodes["n1"]["spec"]["taints"] = [dict(AWS, timeAdded="2026-11-22T09:00:00Z")]
        w.truth["n1"].fixed_by.clear()
        w.run(12)
        assert [(a.ep, a.result) for a in w.history("n1")] == [(1, "pass"), (2, "pass")]

    def test_npd_condition_acts_again_only_on_a_new_transition(self):
        w = World(config())
        problem = {"type": "GPUProblem", "status": "True", "lastTransitionTime": "T1"}
        w.add("n1", fault="reboot", conditions=[problem])
        w.run(12)
        assert len(w.history("n1")) == 1 and w.view("n1").state == "healthy"
        w.run(5)
        assert len(w.history("n1")) == 1
        w.nodes["n1"]["status"]["conditions"] = [{**problem, "lastTransitionTime": "T2"}]
        assert ladder.decide(w.view("n1"), w.now, w.cfg).kind == Kind.WRITE

    @pytest.mark.parametrize(
        "severity,state",
        [("RESET", "reset"), ("REBOOT", "reboot"), ("ISOLATE", "manual"), ("MONITOR", None)],
    )
    def test_aws_severity_picks_the_rung_and_its_results_become_evidence(self, severity, state):
        w = World(config())
        w.add("n1", taints=[AWS])
        meta = w.nodes["n1"]["metadata"]
        meta["labels"]["gpu-healthcheck.aws-samples.io/severity"] = severity
        meta["annotations"]["gpu-healthcheck.aws-samples.io/results"] = "dcgm diag: PCIe FAIL"
        action = ladder.decide(w.view("n1"), w.now, w.cfg)
        if state is None:
            assert action.kind == Kind.NONE and "asks for nothing" in action.reason
            return
        w.write(action.update)
        v = w.view("n1")
        assert v.state == state and v.annotations[keys.ANN_ENTERED_BY] == "aws-gpu-healthcheck"
        assert "dcgm diag: PCIe FAIL" in v.annotations[keys.ANN_LAST_FINDING]

    def test_a_release_gives_the_signal_the_same_lifecycle(self):
        from fleetmedic.policy.release import release

        w = World(config())
        w.add("n1", state="manual", taints=[KONDUKTOR])
        w.write(release(w.view("n1"), w.now, w.cfg))
        v = w.view("n1")
        assert v.state == "healthy" and KONDUKTOR not in v.taints
        assert ladder.decide(v, w.now, w.cfg).kind == Kind.NONE

    def test_a_reset_leaves_the_signal_to_its_tool_and_does_not_loop(self):
        from fleetmedic.policy.release import reset

        w = World(config())
        w.add("n1", state="manual", taints=[KONDUKTOR])
        w.write(reset(w.view("n1"), w.now, w.cfg))
        v = w.view("n1")
        assert v.state == "healthy" and KONDUKTOR in v.taints, "reset removes only ours"
        assert ladder.decide(v, w.now, w.cfg).kind == Kind.NONE, "answered, not a new fault"
        [attempt] = w.history("n1")
        assert "left to konduktor" in attempt.message
        # Konduktor setting its taint anew is a new fault
        w.nodes["n1"]["spec"]["taints"] = [dict(KONDUKTOR, timeAdded="2026-11-25T09:00:00Z")]
        assert ladder.decide(w.view("n1"), w.now, w.cfg).kind == Kind.WRITE

    def test_clear_is_refused_for_a_condition(self):
        with pytest.raises(ConfigError, match="a condition belongs to the tool"):
            config(
                foreign_signals=[
                    {"kind": "condition", "key": "GPUProblem", "after_repair": "clear"}
                ]
            )


KONDUKTOR = {"key": "trainy.konduktor.ai/faulty", "value": "true", "effect": "NoSchedule"}
AWS = {"key": "gpu-healthcheck.aws-samples.io/unhealthy", "value": "true", "effect": "NoSchedule"}


class TestDrainBlocked:
    def _blocked(self, mode: str) -> World:
        w = World(config(safety__drain={"pdb_blocked": mode}))
        w.add("n1", fault="reboot", state="reboot")
        w.truth["n1"].pdb_blocks = 1
        step_until(w, "n1", Kind.DRAIN)
        w.cycle()
        return w

    def test_wait_retries_later(self):
        w = self._blocked("wait")
        fl = in_flight(w, "n1")
        assert fl["phase"] == "drain" and fl["retry_at"]
        assert ladder.decide(w.view("n1"), w.now, w.cfg).kind == Kind.WAIT

    def test_skip_repairs_anyway_and_says_so(self):
        w = self._blocked("skip")
        assert in_flight(w, "n1")["phase"] == "reboot"
        w.run(4)
        assert "drain incomplete" in w.history("n1")[-1].message

    def test_escalate_goes_to_manual(self):
        w = self._blocked("escalate")
        assert w.view("n1").state == "manual"
        assert w.history("n1")[-1].result == "drain-blocked"

    def test_force_asks_the_drain_to_delete(self):
        w = World(config(safety__drain={"pdb_blocked": "force"}))
        w.add("n1", state="reboot")
        assert step_until(w, "n1", Kind.DRAIN).force

    def test_force_without_the_grant_goes_to_a_human_not_round_again(self):
        w = World(config(safety__drain={"pdb_blocked": "force"}))
        w.add("n1", state="reboot")
        drain = step_until(w, "n1", Kind.DRAIN)
        w.write(ladder.begin(w.view("n1"), drain, w.now, w.cfg, None))
        denied = Outcome("forbidden", message="1 pod(s) protected ...: delete pod x/y: HTTP 403")
        upd = ladder.complete(w.view("n1"), drain, denied, w.now, w.cfg)
        assert "DrainForceForbidden" in [e.reason for e in upd.events]
        w.write(upd)
        assert w.view("n1").state == "manual"
        assert w.history("n1")[-1].result == "drain-blocked"
        assert "HTTP 403" in w.history("n1")[-1].message
        assert ladder.decide(w.view("n1"), w.now, w.cfg).kind == Kind.ESCALATE


class TestEscalation:
    def test_finding_that_needs_hands_escalates_directly(self):
        w = World(config())
        w.add("n1", state="manual")
        action = ladder.decide(w.view("n1"), w.now, w.cfg)
        assert action.kind == Kind.ESCALATE and action.ep == 1

    def test_failed_email_is_recorded_and_retried_not_redecided(self):
        w = World(config(smtp={"to": ["oncall@example.test"], "retry_interval": 60}))
        w.add("n1", state="manual")
        w.email_fail_rate = 1.0
        w.run(3)
        esc = json.loads(w.view("n1").annotations[keys.ANN_ESCALATED])
        assert "sent" not in esc
        assert esc["tries"] >= 1 and esc["error"] == "relay down"
        w.email_fail_rate = 0.0
        w.run(4)
        assert w.emails == {("n1", 1): 1}
        assert [a.result for a in w.history("n1")] == ["escalated"]

    def test_unreadable_record_goes_to_a_human(self):
        w = World(config())
        w.add("n1", state="reboot", annotations={keys.ANN_IN_FLIGHT: "{not json"})
        action = ladder.decide(w.view("n1"), w.now, w.cfg)
        assert action.kind == Kind.WRITE
        w.write(action.update)
        assert w.view("n1").state == "manual"


def test_flap_damped_node_goes_straight_to_manual():
    w = World(config(safety__flap={"count": 2, "window": "1d"}))
    old = Attempt(1, "reboot", 1, "2026-11-21T06:00:00Z", "2026-11-21T06:10:00Z", "pass")
    w.add("n1", state="reboot", annotations={keys.ANN_HISTORY: encode([old])})
    action = ladder.decide(w.view("n1"), w.now, w.cfg)
    assert action.kind == Kind.WRITE and "2 times" in action.reason and not action.new_work
    w.run(3)
    assert w.view("n1").state == "manual"
    assert [a.result for a in w.history("n1")] == ["pass", "flap-damped", "escalated"]


def test_node_pause_annotation_stops_action():
    w = World(config())
    w.add("n1", state="reboot", annotations={keys.ANN_PAUSE: "true"})
    assert ladder.decide(w.view("n1"), w.now, w.cfg).kind == Kind.NONE


def test_phase_removed_from_config_restarts_the_attempt():
    w = World(config())
    fl = InFlight(
        ep=1,
        step="reboot",
        attempt=1,
        phase="reinstall",
        status="pending",
        step_start="2026-11-21T11:00:00Z",
        since="2026-11-21T11:00:00Z",
    )
    w.add("n1", state="reboot", annotations={keys.ANN_IN_FLIGHT: fl.encode()})
    w.run(1)
    assert in_flight(w, "n1")["phase"] == "diagnose"


def test_start_of_an_episode_takes_a_slot():
    w = World(config())
    w.add("n1", state="reboot")
    action = ladder.decide(w.view("n1"), T0, w.cfg)
    assert action.new_work and action.kind == Kind.WRITE


# -- the reset rung (issue 14) ---------------------------------------------------------


def test_reset_rung_drains_only_gpu_pods_resets_and_verifies_without_a_reboot():
    w = World(config())
    w.add("n1", fault="reset", state="reset")
    kinds = []
    for _ in range(8):
        kinds += [(a.kind, a.phase, a.gpu_only) for a in w.cycle()]
    assert kinds == [
        (Kind.WRITE, None, False),
        (Kind.RUN, "diagnose", False),
        (Kind.DRAIN, "drain_gpu", True),
        (Kind.RUN, "reset", False),
        (Kind.RUN, "verify", False),
    ]
    v = w.view("n1")
    assert v.state == "healthy" and not v.unschedulable
    assert [(a.step, a.result) for a in w.history("n1")] == [("reset", "pass")]
    assert (w.truth["n1"].boots, w.truth["n1"].resets) == (0, 1)


def test_the_reset_phase_runs_the_reset_playbook_as_a_disruptive_step():
    w = World(config())
    w.add("n1", fault="reset", state="reset")
    action = step_until(w, "n1", Kind.RUN, "reset")
    assert action.playbook == "/pb/reset.yml" and action.disruptive
    assert action.hostvars["fleetmedic_collect_evidence"] is False  # diagnose took it
    assert action.hostvars["fleetmedic_request_id"].startswith("e1-reset1-")


def test_a_refused_reset_climbs_to_exactly_one_reboot():
    w = World(config())
    w.add("n1", fault="reset", state="reset")
    w.truth["n1"].refuses_reset = True
    w.run(12)
    v = w.view("n1")
    assert v.state == "healthy"
    assert [(a.step, a.result) for a in w.history("n1")] == [("reset", "fail"), ("reboot", "pass")]
    assert "In use by another client" in w.history("n1")[0].message
    assert w.truth["n1"].boots == 1


def test_a_gpu_lost_for_good_climbs_reset_reboot_reimage_manual_with_one_email():
    w = World(config())
    w.add("n1", fault="never", state="reset")
    w.run(40)
    assert [(a.step, a.result) for a in w.history("n1")] == [
        ("reset", "fail"),
        ("reboot", "fail"),
        ("reimage", "fail"),
        ("manual", "escalated"),
    ]
    assert w.emails == {("n1", 1): 1}


def test_a_ladder_without_reset_starts_a_reset_fenced_node_at_reboot():
    w = World(config(ladder__order=["reboot", "reimage", "manual"]))
    w.add("n1", fault="reset", state="reset")
    action = ladder.decide(w.view("n1"), w.now, w.cfg)
    assert action.kind == Kind.WRITE and "skips" in action.reason
    w.run(10)
    assert w.view("n1").state == "healthy"
    assert [(a.step, a.result) for a in w.history("n1")] == [("reboot", "pass")]
    assert (w.truth["n1"].boots, w.truth["n1"].resets) == (1, 0)


def test_power_cycle_rung_confirms_its_boot_like_a_reboot():
    w = World(config(ladder__order=["reboot", "power_cycle", "reimage", "manual"]))
    w.add("n1", fault="power_cycle", state="reboot")
    w.run(16)
    assert w.view("n1").state == "healthy"
    assert [(a.step, a.result) for a in w.history("n1")] == [
        ("reboot", "fail"),
        ("power_cycle", "pass"),
    ]
    assert w.truth["n1"].boots == 2
    # the power-cycle's boot is guarded by the boot id its diagnose read, as a reboot's is
    w2 = World(config(ladder__order=["power_cycle", "reimage", "manual"]))
    w2.add("n1", fault="power_cycle", state="power_cycle")
    step_until(w2, "n1", Kind.RUN, "power_cycle")
    assert in_flight(w2, "n1")["boot_id"] == w2.truth["n1"].boot_id
    # or, when the diagnose published none, by a boot_id probe
    w3 = World(config(ladder__order=["power_cycle", "reimage", "manual"]))
    w3.diagnose_publishes_boot_id = False
    w3.add("n1", fault="power_cycle", state="power_cycle")
    assert step_until(w3, "n1", Kind.PROBE, "power_cycle").timeout == w3.cfg.ladder.probe_timeout


def test_power_cycle_of_a_node_that_does_not_answer_goes_ahead_without_its_boot_id():
    """A hung node is what a power cycle is for: the BMC reaches what SSH cannot."""
    w = World(config(ladder__order=["power_cycle", "reimage", "manual"]))
    w.add("n1", fault="power_cycle", state="power_cycle")
    w.truth["n1"].reachable = False  # hung: its diagnose gets no answer, so no boot id
    probe = step_until(w, "n1", Kind.PROBE, "power_cycle")
    w.execute(probe)
    assert in_flight(w, "n1")["boot_id"] == "unknown"
    run = ladder.decide(w.view("n1"), w.now, w.cfg)
    assert (run.kind, run.phase) == (Kind.RUN, "power_cycle")
    w.truth["n1"].reachable = True  # the power cycle brings it back
    w.run(6)
    assert w.view("n1").state == "healthy"
    [attempt] = w.history("n1")
    assert attempt.result == "pass" and "without a boot id: unreachable" in attempt.message


def test_a_power_cycle_a_restart_interrupted_runs_again_for_the_same_request():
    """Killed between power-off and power-on, the node is off: the probe cannot tell
    "booting" from "left off", the BMC can. The same request runs again (the playbook
    powers the node on, never off twice) instead of waiting out the phase's timeout."""
    w = World(config(ladder__order=["power_cycle", "reimage", "manual"]))
    w.add("n1", fault="power_cycle", state="power_cycle")
    run = step_until(w, "n1", Kind.RUN, "power_cycle")
    w.write(ladder.begin(w.view("n1"), run, w.now, w.cfg, "run-1"))  # then killed
    w.truth["n1"].reachable = False  # powered off by the killed run
    probe = ladder.decide(w.view("n1"), w.now, w.cfg)
    assert probe.kind == Kind.PROBE and "under way" in probe.reason
    w.execute(probe)
    again = ladder.decide(w.view("n1"), w.now, w.cfg)
    assert (again.kind, again.phase) == (Kind.RUN, "power_cycle"), again.describe()
    assert again.hostvars["fleetmedic_request_id"] == run.hostvars["fleetmedic_request_id"]
    assert not again.resumed
    w.truth["n1"].reachable = True
    w.run(4)
    [attempt] = w.history("n1")
    assert (attempt.step, attempt.result) == ("power_cycle", "pass")
    assert "run again for the same request" in attempt.message


def test_a_hung_node_fails_the_reboot_rung_at_once_and_is_power_cycled():
    """Unreachable from the start: the reboot rung fails at its diagnose (SSH is what it
    needs), the power_cycle rung goes on without evidence or boot id (the BMC reaches it)."""
    w = World(config(ladder__order=["reboot", "power_cycle", "manual"]))
    w.add("n1", fault="power_cycle", state="reboot")
    w.truth["n1"].reachable = False
    run = step_until(w, "n1", Kind.RUN, "power_cycle", limit=30)
    w.truth["n1"].reachable = True  # the power cycle brings it back
    w.execute(run)
    w.run(4)
    assert w.view("n1").state == "healthy"
    reboot, cycle = w.history("n1")
    assert (reboot.step, reboot.result, reboot.phase) == ("reboot", "unreachable", "diagnose")
    assert (cycle.step, cycle.result) == ("power_cycle", "pass")
    assert "diagnose unreachable" in cycle.message and "without a boot id" in cycle.message
