"""Every escalation leads with its cause: the email subject, the chat title and the
Event name the node, the finding and the rungs tried, and the subject fits in 78
characters (policy/escalation.py, model/escalationtext.py).

Each path is driven through the pure ladder (policysim), then rendered the way the
executor and the chat sender render it."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import timedelta

import pytest

from fleetmedic.adapters import chat, notify
from fleetmedic.model import keys
from fleetmedic.model.escalationtext import SUBJECT_LIMIT, shown_message, subject
from fleetmedic.model.gpus import Gpu, NodeRecord
from fleetmedic.policy import escalation, ladder
from fleetmedic.policy.actions import Kind
from fleetmedic.policy.history import Attempt, encode
from tests.unit.policy.lemonsim import LemonWorld, gpu
from tests.unit.policy.policysim import World, config

LONG = "gpu-node-prod-us-east-1c-0127"  # a real fleet's names are long


def escalate_action(w: World, name: str):
    """Run the ladder until it decides the escalation; that action."""
    for _ in range(80):
        a = ladder.decide(w.view(name), w.now, w.cfg)
        if a.kind == Kind.ESCALATE and a.phase != "notify":
            return a
        w.cycle(step=5)
    raise AssertionError(f"{name} never escalated: {w.history(name)}")


def rendered(w: World, name: str, cluster: str = "") -> tuple[str, str, str]:
    """(email subject, chat title, Event message) of the node's escalation."""
    action = escalate_action(w, name)
    w.write(ladder.begin(w.view(name), action, w.now, w.cfg))
    view = w.view(name)
    from fleetmedic.controller.execute import escalation_reason

    reason = escalation_reason(view, action)
    said = escalation.headline(view, action.ep, reason)
    esc = notify.Escalation.of(
        view, reason, "2026-11-21T12:00:00Z", action.ep, (), cluster, "", said
    )
    title = chat.escalation(name, action.reason, [], None, action.ep, cluster).title
    return esc.subject(), title, action.reason


def gpu_lost_to_the_end(name: str) -> World:
    """GPU 1 lost through reset, reboot and reimage (test_controller_e2e's test_b)."""
    w = LemonWorld(config(ladder__order=["reset", "reboot", "reimage", "manual"]))
    w.add(name, fault="never", state="reset")
    lost = gpu(1, "1652000000101", "lost", named=True)
    w.gpus[name] = [gpu(0, "1652000000100"), replace(lost, rma={"errors": ["GPU_IS_LOST"]})]
    return w


def test_the_ladder_ran_out_leads_with_the_lost_gpu_and_the_rungs():
    w = gpu_lost_to_the_end("gpu-2")
    email, title, event = rendered(w, "gpu-2")
    # the whole line is 83 characters: the rungs become a count, the finding stays whole
    assert email == "gpu-2 needs hands: GPU 1 lost (GPU_IS_LOST); 3 rungs failed"
    assert title == f"[fleetmedic] {email}"
    assert event.startswith("GPU 1 lost (GPU_IS_LOST); reset, reboot, reimage did not cure it")


def test_the_issue_example_fits_as_is():
    said = "GPU 1 lost (GPU_IS_LOST); reboot, reimage did not cure it"
    assert subject("gpu-2", said) == f"gpu-2 needs hands: {said}"


def manual_by_the_agent(name: str) -> World:
    w = World(config())
    mark = {
        "rule": "xid.64",
        "pci": "0000:28:00",
        "msg": "GPU memory remapping failure",
        "boot": "b",
    }
    w.add(name, state="manual", annotations={keys.ANN_LAST_FINDING: json.dumps(mark)})
    return w


def flap_damped(name: str) -> World:
    w = World(config(safety__flap={"count": 2, "window": "1d"}))
    old = Attempt(1, "reboot", 1, "2026-11-21T06:00:00Z", "2026-11-21T06:10:00Z", "pass")
    results = {
        "gpu": {
            "status": "problem",
            "detail": "nvidia.ecc: GPU 3: 2 uncorrected volatile ECC errors",
        }
    }
    w.add(
        name,
        state="reboot",
        annotations={keys.ANN_HISTORY: encode([old]), keys.ANN_LAST_RESULTS: json.dumps(results)},
    )
    return w


def drain_blocked(name: str) -> World:
    w = World(config(safety__drain={"pdb_blocked": "escalate"}))
    mark = {
        "rule": "xid.79",
        "pci": "0000:5a:00",
        "msg": "GPU has fallen off the bus.",
        "boot": "b",
    }
    w.add(
        name, fault="reboot", state="reboot", annotations={keys.ANN_LAST_FINDING: json.dumps(mark)}
    )
    w.truth[name].pdb_blocks = 5
    return w


def unreadable_record(name: str) -> World:
    w = World(config())
    w.add(name, state="reboot", annotations={keys.ANN_IN_FLIGHT: "{not json"})
    return w


def rma_candidate(name: str) -> World:
    w = LemonWorld(config())
    w.add(name)
    w.gpus[name] = [gpu(0, "1652000000100"), gpu(1, "1652000000101")]
    for _ in range(3):
        w.gpus[name][1] = gpu(1, "1652000000101", "lost", named=True)
        w.truth[name].fault, w.truth[name].fixed_by = "reboot", set()
        w.nodes[name]["spec"]["taints"] = [w.vocab.repair("reboot").as_taint()]
        for _ in range(40):
            w.cycle(step=5)
            if w.truth[name].fixed_by:
                w.gpus[name][1] = gpu(1, "1652000000101")
            if w.view(name).state == "manual" or (
                w.view(name).state == "healthy"
                and keys.ANN_IN_FLIGHT not in w.view(name).annotations
            ):
                break
        w.now += timedelta(days=1)
    assert w.view(name).state == "manual"
    return w


PATHS = {
    # path: (build, a word of the finding the subject must carry)
    "ladder ran out": (gpu_lost_to_the_end, "GPU 1 lost"),
    "fenced for hands by the agent": (manual_by_the_agent, "Xid 64"),
    "flap damped": (flap_damped, "nvidia.ecc: GPU 3"),
    "drain blocked": (drain_blocked, "Xid 79"),
    "unreadable record": (unreadable_record, "unreadable in-flight record"),
    "RMA candidate": (rma_candidate, "RMA candidate: GPU 1652000000101"),
}


@pytest.mark.parametrize("path", sorted(PATHS))
@pytest.mark.parametrize(("name", "cluster"), [("gpu-2", ""), (LONG, "prod-us-east")])
def test_every_escalation_subject_fits_and_names_the_finding(path, name, cluster):
    build, finding = PATHS[path]
    w = build(name)
    email, title, event = rendered(w, name, cluster)
    assert len(email) <= SUBJECT_LIMIT, (path, email)
    head = f"{name}{' on ' + cluster if cluster else ''} needs hands: "
    assert email.startswith(head), (path, email)
    # the finding itself, or (a long name leaving little room) its first words, cut
    room = email[len(head) :].rstrip("…")
    assert finding.startswith(room) or room.startswith(finding) or finding in email, (path, email)
    assert title.endswith(email), "the chat line is the subject"
    assert finding in event or event.startswith(finding[:20]), (path, event)


def test_the_replace_notice_says_so_and_names_the_finding():
    view_said = "GPU 1 lost (GPU_IS_LOST); reboot did not cure it"
    s = subject(LONG, view_said, "is being replaced", "prod-us-east")
    assert s.startswith(f"{LONG} on prod-us-east is being replaced: GPU 1 lost")
    assert len(s) <= SUBJECT_LIMIT
    assert chat.replacing(LONG, view_said, None, "delete_node").title.startswith(
        f"[fleetmedic] {LONG} is being replaced: GPU 1 lost"
    )


def test_a_phase_with_nothing_to_do_is_not_shown_unless_it_failed_there():
    msg = "restore: no GPU partitions before the repair; left alone; verify failed in task 'x'"
    assert shown_message(msg, "verify") == "verify failed in task 'x'"
    assert shown_message(msg, "restore").startswith("restore: no GPU partitions")


def test_the_gpu_record_names_the_gpu_even_without_the_agent():
    w = World(config())
    record = NodeRecord((Gpu(1, "0000:28:00.0", "S1", "U1"),)).encode()
    w.add("n1", state="manual", annotations={keys.ANN_GPUS: record})
    assert (
        escalation.cause(w.view("n1"), 1, "fenced for manual repair") == "fenced for manual repair"
    )


def test_the_noise_left_out_is_exactly_the_restore_phase_s_skip_notes():
    from fleetmedic.model.escalationtext import NOISE
    from fleetmedic.policy import partition

    w = World(config())
    w.add("none")
    w.add("flat", annotations={keys.ANN_PARTITION: json.dumps({"ep": 1, "layout": {}})})
    notes = {partition.skip_note(w.view(n), 1) for n in ("none", "flat")}
    assert notes == set(NOISE)
    assert shown_message("; ".join(notes)) == ""
