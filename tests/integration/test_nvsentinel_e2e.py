"""fleetmedic as NVSentinel's external remediator, end to end: NVSentinel's own CRD on the
real API server, the test stand-in playing NVSentinel's part (tests/harness/nvsentinel.py:
quarantine, drain, the ExternalRemediationRequest from its template, the release, the
take-back: the only stand-in besides the GPU), and ``fleetmedic run`` as a real subprocess
repairing real nspawn nodes with Ansible (reboots, the GPU reset, the reinstall, the email).

Cases (issue 41): an Xid 79 request -> reboot -> Complete=True and the node back; a lost GPU
-> reboot -> reimage -> manual, one email, Complete=False, then `fleetmedic release` ->
True; COMPONENT_RESET on one GPU UUID -> the reset of that GPU only; requests NVSentinel has
not released -> untouched; SIGKILL mid-reboot and an API server restart -> one reboot and
the request completed; a request deleted mid-repair -> the node held fenced, recorded; the
responder off -> requests ignored; NVSentinel's signals alone (the ``nvsentinel`` foreign
preset) -> one repair, and another only when NVSentinel quarantines the node anew.
"""

from __future__ import annotations

import json
import threading
import time

import pytest
import yaml

from tests.harness import ctlenv, ctlwait
from tests.harness.ctlbench import Benches, fast_playbooks, pool_name
from tests.harness.ctlenv import (
    annotation,
    cli,
    history,
    state_of,
    taints,
    wait_state,
    wait_until,
)
from tests.harness.ctlrbac import NAMESPACE, SA, install_controller_rbac, manifests
from tests.harness.manifests import apply
from tests.harness.nvsentinel import (
    COMPLETE,
    MANAGED_LABEL,
    RELEASE_TAINT,
    RELEASED,
    STATE_LABEL,
    NVSentinel,
    health_event,
    install_crd,
)
from tests.harness.smtp import body_text

pytestmark = [pytest.mark.fleet, pytest.mark.kube, pytest.mark.slow]

ON = {"nvsentinel": {"enabled": True}}
GPU1 = "GPU-fa4e5d1c-0000-4000-8000-000000000001"  # set as GPU 1's UUID by test c


@pytest.fixture
def nvs(kube, fleet_factory, tmp_path, request):
    """``nvs(nodes)`` -> (bench, stand-in): a fresh fleet and pool (ctlbench), NVSentinel's
    CRD installed and its stand-in reconciling; all removed at the end."""
    install_crd(kube)
    standin = NVSentinel(kube).start()
    benches = Benches(kube, fleet_factory, tmp_path)
    tag = request.node.name.split("_")[1][:5].lower()
    yield lambda nodes=1: (benches.new(nodes, pool_name(f"nv{tag}")), standin)
    benches.stop_controllers(log_lines=80)
    standin.stop()
    standin.forget()
    benches.delete_nodes()


class Watch:
    """Every distinct ExternalRemediationComplete (status, reason, message) of one request,
    and when our repair taint was first and last seen on its node: polled in the
    background while the test waits."""

    def __init__(self, nv: NVSentinel, name: str, node: str) -> None:
        self.nv, self.name, self.node = nv, name, node
        self.seen: list[tuple[str, str, str]] = []
        self.taint_first = self.taint_last = None
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)
        self._t.start()

    def _run(self) -> None:
        while not self._stop.wait(0.2):
            try:
                c = self.nv.condition(self.name, COMPLETE) or {}
                if state_of(self.nv.kube, self.node) != "healthy":
                    now = time.monotonic()
                    self.taint_first = self.taint_first or now
                    self.taint_last = now
            except Exception:  # (the API server restarting under a test)
                continue
            said = (c.get("status", ""), c.get("reason", ""), c.get("message", ""))
            if said[0] and (not self.seen or self.seen[-1] != said):
                self.seen.append(said)

    def stop(self) -> list[tuple[str, str, str]]:
        self._stop.set()
        self._t.join(5)
        return self.seen


def complete(nv: NVSentinel, name: str, status: str) -> dict | None:
    c = nv.condition(name, COMPLETE)
    return c if c and c["status"] == status else None


def err_events(kube, name: str) -> list[dict]:
    return kube.request(
        "GET",
        "/api/v1/namespaces/default/events?fieldSelector="
        f"involvedObject.kind%3DExternalRemediationRequest,involvedObject.name%3D{name}",
    )["items"]


def back_with_nvsentinel(kube, name: str) -> bool:
    """NVSentinel has the node again, in service: no release mark, no cordon, no state."""
    n = ctlenv.node(kube, name)
    labels = n["metadata"].get("labels") or {}
    return (
        not any(t["key"] == RELEASE_TAINT for t in n["spec"].get("taints") or [])
        and MANAGED_LABEL not in labels
        and STATE_LABEL not in labels
        and not n["spec"].get("unschedulable")
    )


def untouched(kube, name: str) -> None:
    n = ctlenv.node(kube, name)
    ours = [k for k in n["metadata"].get("annotations") or {} if k.startswith("fleetmedic.io/")]
    assert state_of(kube, name) == "healthy" and not ours and not history(kube, name), (name, ours)


# -- a) Xid 79 -> reboot -> Complete=True, node back; unreleased requests untouched ----------
def test_a_xid79_request_reboots_once_completes_true_and_nvsentinel_takes_the_node_back(nvs):
    b, nv = nvs(1)
    node = b.fleet.node(1)
    ctlenv.xid79(node)  # `fleetmedic check` fails until a reboot
    [name] = b.register()
    addr = node.address
    waiting, owned = b.make_nodes([f"{b.pool}-w", f"{b.pool}-o"], [addr, addr])
    boots = node.boots
    cfg = b.config(**ON)
    proc = b.controller(cfg)
    wait_until(lambda: "watching" in proc.log.read_text(), 60, "the controller up")
    # NVSentinel has not released these: its janitor waits (another operation holds the
    # node), or the release marks are gone from the node although the condition says True
    held_back = nv.create_request(health_event(waiting))
    nv.initialize(held_back)
    nv.quarantine(owned)
    no_marks = nv.create_request(health_event(owned))
    nv.initialize(no_marks)
    nv._set_condition(no_marks, RELEASED, "True", "ReleaseTaintApplied", "(marks removed since)")

    req = nv.hand_over(name, health_event(name, action="RESTART_BM", codes=("79",)))
    handed = time.monotonic()
    watch = Watch(nv, req, name)
    wait_until(lambda: complete(nv, req, "True"), 240, "the request completed True")
    wait_until(lambda: back_with_nvsentinel(b.kube, name), 30, "NVSentinel took the node back")
    seen = watch.stop()

    assert node.boots == boots + 1, "exactly one reboot"
    [attempt] = history(b.kube, name)
    assert (attempt["step"], attempt["result"]) == ("reboot", "pass"), attempt
    done = nv.condition(req, COMPLETE)
    assert done["reason"] == "Repaired" and done["message"].startswith("fleetmedic: ")
    released = nv.condition(req, RELEASED)
    assert (released["status"], released["reason"]) == ("True", "ReleaseTaintApplied"), (
        "NVSentinel's own condition kept as it wrote it"
    )
    assert nv.get(req)["status"].get("completionTime"), "janitor closed it"
    progress = [m for s, _, m in seen if s == "Unknown" and m.startswith("fleetmedic:")]
    assert any("reboot attempt 1 of episode 1" in m for m in progress), seen
    reasons = [e["reason"] for e in err_events(b.kube, req)]
    assert "RemediationStep" in reasons and "RemediationSucceeded" in reasons, reasons
    assert (
        taints(b.kube, name) == [] and annotation(b.kube, name, "fleetmedic.io/nvsentinel") is None
    )
    # one owner at a time: NVSentinel's pipeline acted before our fence went on, and took the
    # node back only after the request was complete
    assert watch.taint_first is not None and watch.taint_first > handed
    theirs = nv.acts_on(name)
    assert all(
        a.at < watch.taint_first for a in theirs if a.what != "take-back" and a.what != "cleanup"
    )
    assert all(a.at > watch.taint_last for a in theirs if a.what == "take-back")
    # what NVSentinel did not release stays as it is
    ctlwait.looked_again(b.kube, proc.config, waiting)
    for n in (waiting, owned):
        untouched(b.kube, n)
    for r in (held_back, no_marks):
        assert nv.condition(r, COMPLETE)["reason"] == "AwaitingExternalSystem", r
    assert ctlenv.node(b.kube, owned)["spec"].get("unschedulable"), "NVSentinel's cordon kept"
    port = yaml.safe_load(cfg.read_text())["metrics"]["port"]
    answered = 'fleetmedic_nvsentinel_requests_answered_total{reason="Repaired",status="True"}'
    assert ctlenv.scrape(port, answered) == 1
    assert ctlenv.scrape(port, "fleetmedic_nvsentinel_requests_claimed") == 0


# -- b) lost GPU -> reboot -> reimage -> manual, one email, False; release -> True -----------
def test_b_lost_gpu_climbs_to_manual_one_email_false_then_release_completes_true(nvs, smtp_sink):
    b, nv = nvs(1)
    node = b.fleet.node(1)
    ctlenv.prepare_apt_repo([node])  # reimage really reinstalls the driver
    ctlenv.gpu_lost(node)  # stays lost through reboot and reinstall
    [name] = b.register()
    cfg = b.config(smtp_sink, **ON)
    proc = b.controller(cfg)
    event = health_event(
        name,
        action="RESTART_BM",
        codes=("GPU_FALLEN_OFF_BUS",),
        check="SysLogsGPUFallenOff",
        message="NVRM: The NVIDIA GPU 0000:28:00.0 has fallen off the bus and is not responding",
    )
    req = nv.hand_over(name, event)
    wait_until(lambda: complete(nv, req, "False"), 600, "the request completed False")
    [msg] = smtp_sink.wait_for(1, timeout=60)
    assert state_of(b.kube, name) == "manual"
    steps = [(a["step"], a["result"]) for a in history(b.kube, name)]
    assert steps == [("reboot", "fail"), ("reimage", "fail"), ("manual", "escalated")], steps
    done = nv.condition(req, COMPLETE)
    assert done["reason"] == "EscalatedToHuman" and "reboot fail, reimage fail" in done["message"]
    assert f"fleetmedic release {name}" in done["message"]
    # False leaves the node released: NVSentinel keeps off it
    assert RELEASE_TAINT in {t["key"] for t in taints(b.kube, name)}
    assert "NVSentinel SysLogsGPUFallenOff" in body_text(msg), "its finding in the email"
    ctlwait.looked_again(b.kube, cfg, name)  # cycles that saw it escalated: still one email
    assert len(smtp_sink.messages) == 1, "exactly one email"
    assert proc.alive

    out = cli(cfg, "release", name)
    assert out.returncode == 0, out.stderr
    said = f"nvsentinel: {req}: ExternalRemediationComplete=True (ReleasedByHuman)"
    assert said in out.stdout, out.stdout  # (by the command, or the controller just before)
    done = nv.condition(req, COMPLETE)
    assert (done["status"], done["reason"]) == ("True", "ReleasedByHuman")
    wait_until(lambda: back_with_nvsentinel(b.kube, name), 30, "NVSentinel took the node back")
    assert annotation(b.kube, name, "fleetmedic.io/nvsentinel") is None


# -- c) COMPONENT_RESET of one GPU -> that GPU's reset only --------------------------------
def test_c_component_reset_on_one_gpu_uuid_resets_that_gpu_only(nvs):
    b, nv = nvs(1)
    node = b.fleet.node(1)
    ctlenv.reset_curable(node)  # GPU 1: uncorrected ECC errors a reset clears
    # the fake GPUs' default UUIDs differ per node (issue 43): GPU 1 gets the one named below
    state = json.loads((node.state_dir / "nvml.json").read_text())
    state["gpus"][1]["uuid"] = GPU1
    (node.state_dir / "nvml.json").write_text(json.dumps(state))
    [name] = b.register()
    boot, boots = node.boot_id(), node.boots
    # with exactly the shipped RBAC and the opt-in grant (no admin rights anywhere)
    install_controller_rbac(b.kube)
    for doc in manifests(["nvsentinel.yaml"]):
        apply(b.kube, doc)
    proc = b.controller(
        b.config(
            kube={"kubeconfig": b.kube.kubeconfig_for_serviceaccount(NAMESPACE, SA)},
            leader_election={"namespace": NAMESPACE, "lease_name": f"fleetmedic-{b.pool}"},
            safety={"pause_configmap": f"{NAMESPACE}/fleetmedic"},
            **ON,
        )
    )
    event = health_event(
        name,
        action="COMPONENT_RESET",
        codes=("48",),  # Xid 48 (DBE) is a reset in the catalog: fences stay at reset
        fatal=False,
        entities=(("PCI", "0000:28:00.0"), ("GPU_UUID", GPU1)),
    )
    req = nv.hand_over(name, event)
    wait_until(lambda: complete(nv, req, "True"), 300, "the request completed True")
    gpus = json.loads((node.state_dir / "nvml.json").read_text())["gpus"]
    assert [g.get("resets") for g in gpus] == [None, 1], "GPU 1 reset, GPU 0 untouched"
    assert node.boot_id() == boot and node.boots == boots, "no reboot"
    [attempt] = history(b.kube, name)
    assert (attempt["step"], attempt["result"]) == ("reset", "pass"), attempt
    assert annotation(b.kube, name, "fleetmedic.io/reset-gpus") is None, "the episode's only"
    log = proc.log.read_text(errors="replace")
    assert "HTTP 403" not in log and "forbidden" not in log.lower(), log[-3000:]


# -- e) SIGKILL mid-reboot, API server restart: one reboot, the request completed ----------
def test_e_sigkill_mid_reboot_and_an_apiserver_restart_reboot_once_and_complete(nvs):
    """Also the controller's own case of a SIGKILL while the node is down in its reboot
    (test_controller_e2e.py's e[node-down] was the same fleet and the same ladder run,
    fenced by a taint instead of the hand-off: merged here, its assertions kept): the
    restarted controller confirms the reboot by the boot id and never reboots again."""
    b, nv = nvs(1)
    node = b.fleet.node(1)
    ctlenv.xid79(node)
    [name] = b.register()
    node.set_boot_delay(8)
    boots = node.boots
    cfg = b.config(**ON)
    first = b.controller(cfg, 1)
    req = nv.hand_over(name, health_event(name))

    def in_reboot_phase():
        fl = annotation(b.kube, name, "fleetmedic.io/in-flight") or {}
        return fl.get("phase") == "reboot" and fl.get("status") == "running"

    wait_until(in_reboot_phase, 180, "the reboot phase to start")
    wait_until(
        lambda: node.boots > boots or node.status().get("state") != "running",
        60,
        "the node to go down",
        interval=0.1,
    )
    first.kill9()
    assert not first.alive
    down_at = node.status().get("state")
    b.kube.restart_apiserver()  # watches from before get 410: everything is listed again
    second = b.controller(cfg, 2)
    wait_until(lambda: complete(nv, req, "True"), 240, "the request completed True")
    wait_state(b.kube, name, "healthy", second, 60)
    node.set_boot_delay(0)
    assert second.alive
    assert node.boots == boots + 1, f"exactly one reboot (node was {down_at} at the kill)"
    [attempt] = history(b.kube, name)
    assert (attempt["step"], attempt["result"]) == ("reboot", "pass"), attempt
    assert "reboot confirmed after a restart" in attempt.get("message", ""), attempt
    wait_until(lambda: back_with_nvsentinel(b.kube, name), 30, "NVSentinel took the node back")


# -- f) the request deleted mid-repair: stop at the next safe point, fenced, recorded -------
def test_f_request_deleted_mid_repair_holds_the_node_fenced_for_a_human(nvs):
    b, nv = nvs(1)
    node = b.fleet.node(1)
    ctlenv.xid79(node)
    [name] = b.register()
    cfg = b.config(**ON)
    proc = b.controller(cfg)
    req = nv.hand_over(name, health_event(name))

    def draining_or_later():
        fl = annotation(b.kube, name, "fleetmedic.io/in-flight") or {}
        return fl.get("phase") in ("drain", "reboot")

    wait_until(draining_or_later, 180, "the repair under way")
    nv.delete(req)  # an operator's `kubectl delete extrr`: janitor cleans up, then it is gone
    wait_until(lambda: not nv.exists(req), 30, "the request gone")
    hold = wait_until(
        lambda: annotation(b.kube, name, "fleetmedic.io/hold"), 60, "the node held for a human"
    )
    assert hold["err"] == req and "fleetmedic release" in hold["why"]
    assert state_of(b.kube, name) in ("reboot", "reimage"), "left fenced"
    # the action under way ends (its outcome recorded, or refused as stale); the loop then
    # decides the node held (a node with work under way is not decided: the in-flight
    # status alone cannot tell; a phase's end leaves the next one pending) and starts nothing
    wait_until(lambda: "held for a human" in proc.log.read_text(), 180, "the loop stops there")
    assert (annotation(b.kube, name, "fleetmedic.io/in-flight") or {}).get("status") == "pending"
    before = ctlenv.node(b.kube, name)["metadata"]["annotations"]
    seen = ctlwait.looked_again(b.kube, cfg, name, n=3)
    after = ctlenv.node(b.kube, name)["metadata"]["annotations"]
    for key in ("fleetmedic.io/in-flight", "fleetmedic.io/history"):
        assert before.get(key) == after.get(key), f"{key} moved while held"
    assert ctlwait.counts(cfg)["admitted"] == seen["admitted"], "nothing admitted while held"
    events = b.kube.request(
        "GET", f"/api/v1/namespaces/default/events?fieldSelector=involvedObject.name%3D{name}"
    )["items"]
    assert "HandoffWithdrawn" in {e["reason"] for e in events}
    out = cli(cfg, "release", name)  # no --force needed: nothing is under way
    assert out.returncode == 0, out.stderr
    assert annotation(b.kube, name, "fleetmedic.io/hold") is None
    assert state_of(b.kube, name) == "healthy"


# -- g) the responder off: requests ignored ---------------------------------------------------
def test_g_with_the_responder_off_requests_are_ignored(nvs):
    b, nv = nvs(1)
    [name] = b.register()
    proc = b.controller(b.config())  # no `nvsentinel:` section: off
    cfg = proc.config
    wait_until(lambda: "watching" in proc.log.read_text(), 60, "the controller up")
    req = nv.hand_over(name, health_event(name))
    ctlwait.looked_again(b.kube, cfg, name)  # cycles that saw the released node
    untouched(b.kube, name)
    assert nv.condition(req, COMPLETE)["reason"] == "AwaitingExternalSystem"
    assert "externalremediationrequest" not in proc.log.read_text()


# -- h) NVSentinel's signals alone (no hand-off): one repair, not again from a stale signal ---
def test_h_nvsentinel_signals_start_one_repair_and_again_only_when_set_anew(nvs):
    b, nv = nvs(1)
    [name] = b.register()
    cfg = b.config(
        ansible={"playbook_dir": fast_playbooks(b.dir), "forks": 5},  # (decisions, not reboots)
        ladder={"reboot": {"phases": ["drain", "verify"]}},
        foreign_signals=["nvsentinel"],
    )
    proc = b.controller(cfg)
    wait_until(lambda: "watching" in proc.log.read_text(), 60, "the controller up")
    nv.quarantine(name)  # NVSentinel's own part is under way: not ours yet
    ctlwait.looked_again(b.kube, cfg, name)
    untouched(b.kube, name)
    nv.set_state(name, "drain-succeeded", "drain")  # its pipeline ends here (no remediation)
    wait_until(lambda: len(history(b.kube, name)) == 1, 120, "one repair")
    wait_until(lambda: state_of(b.kube, name) == "healthy", 60, "back from our side")
    [attempt] = history(b.kube, name)
    assert (attempt["step"], attempt["result"]) == ("reboot", "pass"), attempt
    assert annotation(b.kube, name, "fleetmedic.io/foreign-handled"), "answered, recorded"
    assert ctlenv.node(b.kube, name)["spec"].get("unschedulable"), "NVSentinel's cordon is its own"
    ctlwait.looked_again(b.kube, cfg, name)  # the same signal stands: answered already
    assert len(history(b.kube, name)) == 1
    # NVSentinel's monitors find the node healthy: it lets go; a later quarantine is new
    nv.take_back(name)
    wait_until(
        lambda: annotation(b.kube, name, "fleetmedic.io/foreign-handled") is None,
        30,
        "the record of the cleared signal dropped",
    )
    time.sleep(1.1)  # (fault-quarantine's cordon-timestamp label counts in whole seconds)
    nv.quarantine(name)
    nv.set_state(name, "drain-succeeded", "drain")
    wait_until(lambda: len(history(b.kube, name)) == 2, 120, "the new quarantine repaired")
    assert [a["ep"] for a in history(b.kube, name)] == [1, 2]
