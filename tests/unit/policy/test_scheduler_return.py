"""Our fence gone while a repair is in flight: a person's resume releases the repair, the
scheduler's own return to service does not (issue 37). Slurm clears our reason the same
way for both (policy/phases/repair.returned_by_scheduler says why and when it can be Slurm):
with ReturnToService=2 (the adapter's ``scheduler-returns-nodes`` label) and a reboot
through Slurm running, the fence is put back and the reboot verified; anywhere else, and
with ReturnToService 0 or 1, a return to service is a person's and releases the node.
End to end against slurmctld: tests/integration/test_slurm_controller_e2e.py."""

from __future__ import annotations

import pytest
from policysim import World, config

from fleetmedic.model import keys
from fleetmedic.policy import ladder
from fleetmedic.policy.actions import Kind

RETURNS = {keys.LABEL_SCHEDULER_RETURNS: "true"}  # ReturnToService=2


def slurm_world(labels: dict, reboot_via: str = "slurm") -> World:
    w = World(config(kind="slurm", ladder__reboot_via=reboot_via))
    w.add("n1", fault="reboot", state="reboot", labels=labels)
    return w


def asked_then_killed(w: World, phase: str = "reboot") -> None:
    """Cycles until ``phase`` is about to run, then its start is written and the controller
    dies (no outcome recorded): the record says the phase is running."""
    for _ in range(20):
        action = ladder.decide(w.view("n1"), w.now, w.cfg)
        if action.kind in (Kind.RUN, Kind.DRAIN) and action.phase == phase:
            w.write(ladder.begin(w.view("n1"), action, w.now, w.cfg, "run-x"))
            if phase == "reboot":
                w.act(action)  # the reboot happened; nobody recorded its end
            return
        w.cycle()
    raise AssertionError(f"never reached {phase}")


def returned_to_service(w: World) -> None:
    w.nodes["n1"]["spec"]["taints"] = []  # no drain, no reason: as slurmctld shows it


def test_slurms_own_return_after_its_reboot_is_fenced_again_and_verified():
    w = slurm_world(RETURNS)
    asked_then_killed(w)
    returned_to_service(w)
    action = ladder.decide(w.view("n1"), w.now, w.cfg)
    assert action.kind == Kind.WRITE and action.update.state == "reboot", action.describe()
    assert "the scheduler does by itself" in action.reason
    w.write(action.update)
    w.run(8)
    v = w.view("n1")
    assert v.state == "healthy"
    assert [(a.step, a.result) for a in w.history("n1")] == [("reboot", "pass")]
    assert w.truth["n1"].boots == 1, "verified, not rebooted again"


@pytest.mark.parametrize(
    "labels, reboot_via, phase",
    [
        ({}, "slurm", "reboot"),  # ReturnToService 0 or 1: Slurm never returns our node
        (RETURNS, "ansible", "reboot"),  # our drain keeps DRAIN through an SSH reboot
        (RETURNS, "slurm", "drain"),  # before our reboot through Slurm: DRAIN is set
        (RETURNS, "slurm", "verify"),  # after it: drained again by the reboot step
    ],
)
def test_any_other_return_to_service_is_a_persons_and_releases_the_node(labels, reboot_via, phase):
    w = slurm_world(labels, reboot_via)
    asked_then_killed(w, phase)
    returned_to_service(w)
    w.run(1)
    v = w.view("n1")
    assert v.state == "healthy" and keys.ANN_IN_FLIGHT not in v.annotations
    assert w.history("n1")[-1].result == "released"
