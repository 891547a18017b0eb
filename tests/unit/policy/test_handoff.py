"""The hand-off with NVSentinel, decision by decision (policy/handoff.py), and the whole
trip through the pure ladder (policysim): claim, rungs reported, completion, withdrawal."""

from __future__ import annotations

import json

import pytest
from policysim import T0, World, config, make_node

from fleetmedic.model import keys
from fleetmedic.model.nodestate import view
from fleetmedic.policy import handoff, ladder
from fleetmedic.policy.actions import Kind
from fleetmedic.policy.history import Attempt, encode
from fleetmedic.policy.inflight import Escalated, InFlight
from fleetmedic.policy.nvsentinel import read
from fleetmedic.scan import catalog

CAT = catalog.load()
NAME = "extrr-he1"
RELEASE = {
    "key": "nvsentinel.dgxc.nvidia.com/external-remediation",
    "value": NAME,
    "effect": "NoSchedule",
}
MARKS = {
    "nvsentinel.dgxc.nvidia.com/managed": "false",
    "dgxc.nvidia.com/nvsentinel-state": "remediating",
}
CFG = config(nvsentinel={"enabled": True})


def err(
    *,
    released: str | None = "True",
    complete: tuple[str, str, str] | None = ("Unknown", "AwaitingExternalSystem", "waiting"),
    action: str = "RESTART_BM",
    codes=("79",),
    deleting: bool = False,
    node: str = "n1",
    **he,
):
    conds = []
    if released:
        conds.append({"type": "NVSentinelOwnershipReleased", "status": released})
    if complete:
        s, r, m = complete
        conds.append(
            {
                "type": "ExternalRemediationComplete",
                "status": s,
                "reason": r,
                "message": m,
                "lastTransitionTime": "2026-11-21T11:00:00Z",
            }
        )
    meta = {"name": NAME, "uid": "uid-1", "generation": 1}
    if deleting:
        meta["deletionTimestamp"] = "2026-11-21T12:00:00Z"
    spec = {
        "nodeName": node,
        "checkName": "SysLogsXIDError",
        "recommendedAction": action,
        "errorCode": list(codes),
        **he,
    }
    return read({"metadata": meta, "spec": {"healthEvent": spec}, "status": {"conditions": conds}})


def node_view(*, marks=True, state=None, annotations=None, labels=None):
    taints = [RELEASE] if marks else []
    if state:
        taints.append(CFG.vocabulary().repair(state).as_taint())
    lab = {**(MARKS if marks else {}), **(labels or {})}
    n = make_node("n1", taints=taints, annotations=annotations, labels=lab)
    return view(n, CFG.vocabulary(), CFG.foreign())


def claim(**kw) -> str:
    base = dict(err=NAME, uid="uid-1", ep=1, rung="reboot", at="2026-11-21T12:00:00Z")
    return handoff.Claim(**{**base, **kw}).encode()


def decide(req, v):
    return handoff.decide(req, v, T0, CFG, CAT)


def test_a_request_not_released_is_left_alone():
    for req in (err(released=None), err(released="Unknown"), err(released="False")):
        step = decide(req, node_view(marks=False))
        assert step.idle and "has not released" in step.reason


def test_released_but_without_the_marks_on_the_node_nvsentinel_still_owns_it():
    step = decide(err(), node_view(marks=False))
    assert step.idle and "NVSentinel owns it" in step.reason
    # the taint of another request does not count either
    other = node_view(marks=True)
    req = err()
    req2 = type(req)(**{**req.__dict__, "name": "extrr-other"})
    assert decide(req2, other).idle


def test_released_and_marked_is_claimed_at_the_rung_asked():
    step = decide(err(), node_view())
    upd = step.update
    assert upd is not None and upd.state == "reboot" and upd.expect_state == "healthy"
    c = json.loads(upd.annotations[keys.ANN_HANDOFF])
    assert (c["err"], c["ep"], c["rung"]) == (NAME, 1, "reboot")
    assert upd.annotations[keys.ANN_ENTERED_BY] == "nvsentinel"
    finding = json.loads(upd.annotations[keys.ANN_LAST_FINDING])
    assert finding["xid"] == 79 and finding["source"] == "nvsentinel"
    assert upd.events[0].reason == "RepairEntered" and NAME in upd.events[0].message
    assert step.condition is None, "the claim itself writes nothing on the ERR"


def test_a_stronger_fence_already_there_stays_and_the_claim_joins_it():
    fl = InFlight(
        1, "reimage", 1, "reinstall", "running", "2026-11-21T11:00:00Z", "2026-11-21T11:00:00Z"
    )
    v = node_view(state="reimage", annotations={keys.ANN_IN_FLIGHT: fl.encode()})
    upd = decide(err(), v).update
    assert upd.state is None and keys.ANN_LAST_FINDING not in upd.annotations
    assert json.loads(upd.annotations[keys.ANN_HANDOFF])["ep"] == 1
    assert upd.events[0].reason == "HandoffJoined"


def test_a_reset_request_names_its_gpus_for_the_reset_rung():
    ents = [{"entityType": "GPU_UUID", "entityValue": "GPU-1"}]
    req = err(action="COMPONENT_RESET", codes=(), entitiesImpacted=ents, isFatal=False)
    upd = decide(req, node_view()).update
    assert upd.state == "reset"
    assert json.loads(upd.annotations[keys.ANN_RESET_GPUS]) == ["GPU-1"]


def test_progress_is_reported_per_rung_and_not_repeated():
    fl = InFlight(
        1, "reboot", 1, "drain", "running", "2026-11-21T11:00:00Z", "2026-11-21T11:00:00Z"
    )
    v = node_view(
        state="reboot", annotations={keys.ANN_IN_FLIGHT: fl.encode(), keys.ANN_HANDOFF: claim()}
    )
    step = decide(err(), v)
    c = step.condition
    assert (c["type"], c["status"], c["reason"]) == (
        "ExternalRemediationComplete",
        "Unknown",
        "RemediationInProgress",
    )
    assert c["message"] == "fleetmedic: reboot attempt 1 of episode 1, drain"
    assert c["lastTransitionTime"] == "2026-11-21T11:00:00Z", "status unchanged: time kept"
    assert step.event.reason == "RemediationStep"
    same = err(complete=("Unknown", "RemediationInProgress", c["message"]))
    assert decide(same, v).idle
    # the next phase of the same rung: the message moves, no second Event
    fl2 = fl.with_(phase="verify")
    v2 = node_view(
        state="reboot", annotations={keys.ANN_IN_FLIGHT: fl2.encode(), keys.ANN_HANDOFF: claim()}
    )
    step2 = decide(same, v2)
    assert step2.condition["message"].endswith("verify") and step2.event is None


def test_a_pass_completes_true_and_then_the_claim_goes():
    hist = encode([Attempt(1, "reboot", 1, "t", "t", "pass", phase="verify")])
    v = node_view(annotations={keys.ANN_HANDOFF: claim(), keys.ANN_HISTORY: hist})
    step = decide(err(), v)
    assert (step.condition["status"], step.condition["reason"]) == ("True", "Repaired")
    assert step.event.reason == "RemediationSucceeded"
    assert step.after.annotations[keys.ANN_HANDOFF] is None
    # written already (e.g. the drop failed before a restart): only the drop is left
    done = err(complete=("True", "Repaired", "fleetmedic: x"))
    assert decide(done, v).update.annotations[keys.ANN_HANDOFF] is None


def test_the_ladder_ending_with_a_human_completes_false_and_keeps_the_claim():
    hist = encode(
        [
            Attempt(1, "reboot", 1, "t", "t", "fail"),
            Attempt(1, "reimage", 1, "t", "t", "fail"),
        ]
    )
    esc = Escalated(ep=1, decided="2026-11-21T12:00:00Z").encode()
    v = node_view(
        state="manual",
        annotations={keys.ANN_HANDOFF: claim(), keys.ANN_HISTORY: hist, keys.ANN_ESCALATED: esc},
    )
    step = decide(err(), v)
    c = step.condition
    assert (c["status"], c["reason"]) == ("False", "EscalatedToHuman")
    assert "reboot fail, reimage fail" in c["message"] and "fleetmedic release n1" in c["message"]
    assert step.after is None, "kept: the human's release turns it True"
    # released by the human afterwards: True
    hist2 = encode(
        [
            Attempt(1, "reboot", 1, "t", "t", "fail"),
            Attempt(1, "manual", 1, "t", "t", "released", message="released by ops@bastion"),
        ]
    )
    v2 = node_view(annotations={keys.ANN_HANDOFF: claim(), keys.ANN_HISTORY: hist2})
    step2 = decide(err(complete=("False", "EscalatedToHuman", "fleetmedic: x")), v2)
    assert (step2.condition["status"], step2.condition["reason"]) == ("True", "ReleasedByHuman")


def test_fleetmedic_reset_stops_without_vouching():
    v = node_view(annotations={keys.ANN_HANDOFF: claim(stopped="ops@bastion")})
    step = decide(err(), v)
    assert (step.condition["status"], step.condition["reason"]) == ("False", "RepairStopped")
    assert step.after is not None
    answered = err(complete=("False", "RepairStopped", "fleetmedic: stopped"))
    assert "not taken again" in decide(answered, node_view()).reason


def test_contact_support_runs_diagnostics_then_goes_to_a_human():
    hist = encode([Attempt(1, "diagnose", 1, "t", "t", "pass", phase="verify")])
    v = node_view(
        annotations={
            keys.ANN_HANDOFF: claim(rung="diagnose", then="manual"),
            keys.ANN_HISTORY: hist,
        }
    )
    upd = decide(err(action="CONTACT_SUPPORT"), v).update
    assert upd.state == "manual" and upd.expect_state == "healthy"
    c = json.loads(upd.annotations[keys.ANN_HANDOFF])
    assert (c["ep"], c["rung"], c.get("then")) == (2, "manual", None)


@pytest.mark.parametrize("how", ["gone", "deleting"])
def test_a_request_withdrawn_mid_repair_holds_the_node_fenced(how):
    fl = InFlight(
        1, "reboot", 1, "reboot", "running", "2026-11-21T11:00:00Z", "2026-11-21T11:00:00Z"
    )
    v = node_view(
        marks=False,
        state="reboot",
        annotations={keys.ANN_IN_FLIGHT: fl.encode(), keys.ANN_HANDOFF: claim()},
    )
    step = decide(None if how == "gone" else err(deleting=True), v)
    upd = step.update
    hold = json.loads(upd.annotations[keys.ANN_HOLD])
    assert hold["err"] == NAME and "fleetmedic release n1" in hold["why"]
    assert upd.state is None and upd.annotations[keys.ANN_HANDOFF] is None, "fence kept"
    assert upd.events[0].reason == "HandoffWithdrawn"
    # the ladder stops at its next safe point: nothing more is decided
    held = node_view(
        marks=False,
        state="reboot",
        annotations={
            keys.ANN_IN_FLIGHT: fl.encode(),
            keys.ANN_HOLD: upd.annotations[keys.ANN_HOLD],
        },
    )
    a = ladder.decide(held, T0, CFG)
    assert a.kind == Kind.NONE and a.reason.startswith("held for a human: NVSentinel withdrew")
    # gone while healthy: only the claim goes
    assert decide(
        None, node_view(marks=False, annotations={keys.ANN_HANDOFF: claim()})
    ).update.annotations == {
        keys.ANN_HANDOFF: None,
        keys.ANN_RESET_GPUS: None,
    }


def test_replaced_completes_true():
    v = node_view(
        state="replace", annotations={keys.ANN_HANDOFF: claim(), keys.ANN_REPLACED: "asg"}
    )
    c = decide(err(action="REPLACE_VM"), v).condition
    assert (c["status"], c["reason"]) == ("True", "Replaced")


def test_holds_while_nvsentinel_works_on_a_node():
    def v(name, state, labels=None, **kw):
        lab = {"dgxc.nvidia.com/nvsentinel-state": state, **(labels or {})}
        return view(make_node(name, labels=lab, **kw), CFG.vocabulary())

    managed = {"nvsentinel.dgxc.nvidia.com/managed": "false"}
    views = [
        v("q", "quarantined"),
        v("d", "drain-succeeded"),
        v("f", "remediation-failed"),  # NVSentinel gave up: not held
        v("r", "remediating", taints=[RELEASE], labels=managed),  # released, not claimed yet
        v("ours", "draining", annotations={keys.ANN_IN_FLIGHT: "{}"}),  # we were first
    ]
    claimed = v(
        "c",
        "remediating",
        taints=[RELEASE],
        labels=managed,
        annotations={keys.ANN_HANDOFF: claim()},
    )
    views.append(claimed)
    held = handoff.holds(views, CFG)
    assert set(held) == {"q", "d", "r"} and "quarantined" in held["q"]
    assert "the responder claims it" in held["r"], "its request's rung, not another signal's"
    # signals only (the preset, no hand-off): drain-succeeded is where NVSentinel stops, and
    # a released node is another remediator's
    preset = config(foreign_signals=["nvsentinel"])
    held = handoff.holds(views, preset)
    assert set(held) == {"q", "r"} and "the hand-off is off" in held["r"]
    assert handoff.holds(views, config()) == {}


def test_the_whole_trip_through_the_ladder():
    """Claimed, repaired by the (simulated) ladder with a reboot, completed True."""
    w = World(CFG)
    w.add("n1", fault="reboot", taints=[RELEASE], labels=MARKS)
    step = handoff.decide(err(), w.view("n1"), w.now, CFG, CAT)
    assert w.write(step.update)
    reported = set()
    for _ in range(20):
        w.cycle()
        s = handoff.decide(err(), w.view("n1"), w.now, CFG, CAT)
        if s.condition and s.condition["status"] == "Unknown":
            reported.add(s.condition["message"].split(",")[0])
        if s.condition and s.condition["status"] != "Unknown":
            break
    assert (s.condition["status"], s.condition["reason"]) == ("True", "Repaired"), s.reason
    assert w.truth["n1"].boots == 1
    assert "fleetmedic: reboot attempt 1 of episode 1" in reported
    v = w.view("n1")
    assert RELEASE in v.taints and v.labels["nvsentinel.dgxc.nvidia.com/managed"] == "false", (
        "NVSentinel's marks are never ours to remove"
    )
    assert w.write(s.after) and keys.ANN_HANDOFF not in w.view("n1").annotations


def test_the_reset_phase_is_for_the_gpus_named_and_the_episode_forgets_them():
    fl = InFlight(1, "reset", 1, "reset", "pending", "2026-11-21T11:00:00Z", "2026-11-21T11:00:00Z")
    ann = {keys.ANN_IN_FLIGHT: fl.encode(), keys.ANN_RESET_GPUS: json.dumps(["GPU-1"])}
    a = ladder.decide(node_view(state="reset", annotations=ann), T0, CFG)
    assert (a.kind, a.phase) == (Kind.RUN, "reset")
    assert a.hostvars["fleetmedic_reset_gpu_ids"] == ["GPU-1"]
    # another phase of the rung gets nothing of it; no annotation: every GPU
    other = ladder.decide(
        node_view(
            state="reset",
            annotations={**ann, keys.ANN_IN_FLIGHT: fl.with_(phase="diagnose").encode()},
        ),
        T0,
        CFG,
    )
    assert "fleetmedic_reset_gpu_ids" not in other.hostvars
    plain = ladder.decide(
        node_view(state="reset", annotations={keys.ANN_IN_FLIGHT: fl.encode()}), T0, CFG
    )
    assert "fleetmedic_reset_gpu_ids" not in plain.hostvars
    # the pass that returns the node drops them
    w = World(CFG)
    w.add(
        "n1", fault="reset", state="reset", annotations={keys.ANN_RESET_GPUS: json.dumps(["GPU-1"])}
    )
    w.run(20)
    assert w.view("n1").state == "healthy" and keys.ANN_RESET_GPUS not in w.view("n1").annotations
