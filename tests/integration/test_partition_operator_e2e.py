"""The restore phase for operator-managed nodes through the controller: a kwok Node labelled
``nvidia.com/mig.config`` (NVIDIA's mig-manager owns its MIG layout) mapped onto a fleet node
that really reboots, real Ansible, ``fleetmedic run`` as a subprocess (SIGKILLed in one test),
the real kube-apiserver. The controller hands the restore to mig-manager: it evicts the
agent's pod on the node and waits for ``nvidia.com/mig.config.state=success``, then reads the
layout back over SSH.

The one stand-in is mig-manager itself (tests/harness/partition_operator.py): it manages GPU
hardware, which the fleet fakes. It watches the real API server for its pod and label, and
applies the layout to the node's fake GPUs through the fake nvidia-mig-parted over SSH, as
the real agent's reconfigure script does.
"""

from __future__ import annotations

import json

import pytest

from tests.harness import ctlenv, partitions
from tests.harness.ctlbench import Benches, pool_name
from tests.harness.ctlenv import annotation, history, wait_state, wait_until
from tests.harness.partition_operator import (
    CONFIG_LABEL,
    DCM_CONFIG_LABEL,
    DCM_STATE_LABEL,
    STATE_LABEL,
    DeviceConfigManagerStandIn,
    MigManagerStandIn,
)

pytestmark = [pytest.mark.fleet, pytest.mark.kube, pytest.mark.slow]

LAYOUT = "all-3g.40gb"
CONFIGS = {
    LAYOUT: [{"devices": "all", "mig-enabled": True, "mig-devices": {"3g.40gb": 2}}],
    "all-disabled": [{"devices": "all", "mig-enabled": False}],
}


@pytest.fixture
def bench(kube, fleet_factory, tmp_path):
    benches = Benches(kube, fleet_factory, tmp_path)
    agents: list[MigManagerStandIn] = []

    def new(mode: str = "apply"):
        b = benches.new(1, pool_name("po"))
        node = b.fleet.node(1)
        partitions.mig(node)  # the layout mig-manager made before the fault
        name = f"{b.pool}-1"
        b.make_nodes(
            [name],
            [node.address],
            taints=[ctlenv.repair_taint("reboot")],
            labels={CONFIG_LABEL: LAYOUT, STATE_LABEL: "success"},
        )
        # a namespace of this test's own: the API server is shared by the session
        agent = MigManagerStandIn(kube, name, node, f"gpu-op-{b.pool}", CONFIGS, mode).start()
        agents.append(agent)
        return b, node, name, agent

    yield new
    for a in agents:
        a.stop()
        print(f"--- stand-in: pods {a.pods}, runs {a.runs}, errors {a.errors[-3:]}")
    benches.stop_controllers(log_lines=80)
    benches.delete_nodes()
    assert not [e for a in agents for e in a.errors], "the stand-in hit errors (above)"


def operator_config(b, agent, wait: float = 300, **ladder):
    """The pool's config with the mig-manager entry pointed at the stand-in's namespace (the
    documented way to set an operator's namespace or pod labels)."""
    mig_manager = {
        "name": "mig-manager",
        "config_label": CONFIG_LABEL,
        "state_label": STATE_LABEL,
        "failure": ["failed"],
        "namespace": agent.namespace,
        "pod_labels": {"app": "nvidia-mig-manager"},
    }
    restore = {"operators": [mig_manager], "operator_wait": wait}
    return b.config(ladder={"restore": restore, **ladder})


def test_a_mig_manager_node_rebooted_for_xid79_gets_its_instances_back_from_the_operator(bench):
    b, node, name, agent = bench()
    before = partitions.mig_devices(node)
    assert len(before) == 4
    ctlenv.xid79(node)
    boots = node.boots
    first_pod = agent.pods[-1]
    proc = b.controller(operator_config(b, agent))
    wait_state(b.kube, name, "healthy", proc, 300)
    assert node.boots == boots + 1, "one reboot"
    assert partitions.mig_devices(node) == before, "the same instances, the same MIG UUIDs"
    # the operator applied it, once, from a new pod (the controller's trigger); the
    # controller's playbook only read it back
    assert partitions.mig_parted_applies(node) == [True]
    assert len(agent.pods) == 2 and agent.pods[0] == first_pod, agent.pods
    assert agent.runs[-1] == (LAYOUT, "success")
    labels = ctlenv.node(b.kube, name)["metadata"]["labels"]
    assert labels[STATE_LABEL] == "success" and labels[CONFIG_LABEL] == LAYOUT
    rec = annotation(b.kube, name, "fleetmedic.io/partition-layout")
    assert rec["labels"] == {CONFIG_LABEL: LAYOUT}
    assert rec["handoff"]["pod"] == first_pod
    [attempt] = history(b.kube, name)
    assert (attempt["step"], attempt["result"], attempt["phase"]) == ("reboot", "pass", "verify")
    assert (
        f"restore: mig-manager applied {CONFIG_LABEL}={LAYOUT} (success in " in attempt["message"]
    ), attempt["message"]
    assert "after: GPU 0: MIG 3g.40gb x2; GPU 1: MIG 3g.40gb x2" in attempt["message"]
    audits = [
        json.loads(line[line.index("{") :])
        for line in proc.log.read_text().splitlines()
        if '"audit": true' in line
    ]
    done = [a["what"] for a in audits if a["node"] == name]
    assert done == ["diagnose", "drain", "reboot", "restore", "verify"], done


def test_an_operator_that_reports_failed_fails_the_rung_and_it_climbs(bench):
    b, node, name, agent = bench()
    why = "error applying MIG configuration: GPU 0: MIG mode change refused"
    partitions.set_scenario_key(node, "fail", {"nvidia-mig-parted apply": why})
    ctlenv.xid79(node)
    proc = b.controller(operator_config(b, agent, order=["reboot", "manual"]))
    wait_state(b.kube, name, "manual", proc, 300)
    failed = history(b.kube, name)[0]
    assert (failed["step"], failed["result"], failed["phase"]) == ("reboot", "fail", "restore")
    assert (
        f"mig-manager reported {STATE_LABEL}=failed applying {CONFIG_LABEL}={LAYOUT}"
        in (failed["message"])
    ), failed["message"]
    assert agent.runs[-1] == (LAYOUT, "failed")
    assert partitions.mig_parted_applies(node) == []


def test_an_operator_that_never_answers_times_out_and_the_rung_climbs(bench):
    b, node, name, agent = bench("silent")
    ctlenv.xid79(node)
    proc = b.controller(operator_config(b, agent, wait=20, order=["reboot", "manual"]))
    wait_state(b.kube, name, "manual", proc, 300)
    failed = history(b.kube, name)[0]
    assert (failed["step"], failed["result"], failed["phase"]) == ("reboot", "fail", "restore")
    assert (
        f"mig-manager did not report {STATE_LABEL}=success for {CONFIG_LABEL}={LAYOUT} "
        f"within 20s ({STATE_LABEL}: unset)" in failed["message"]
    ), failed["message"]
    assert len(agent.pods) == 2, "the pod was restarted once"
    assert partitions.mig_parted_applies(node) == []


def test_a_controller_killed_while_waiting_resumes_without_triggering_twice(bench):
    b, node, name, agent = bench()
    before = partitions.mig_devices(node)
    ctlenv.xid79(node)
    cfg = operator_config(b, agent)
    first = b.controller(cfg, 1)

    # Killed once the agent's pod was evicted and its successor started: mig-manager then
    # finishes while no controller runs, and the next controller must not evict again. (A
    # kill between the recorded trigger and the eviction, where the next controller must
    # evict the recorded pod, is set up exactly in test_partition_operator_resume.py.)
    wait_until(lambda: len(agent.pods) == 2, 240, "the agent's pod restarted", interval=0.05)
    first.kill9()
    assert "handoff" in annotation(b.kube, name, "fleetmedic.io/partition-layout")
    wait_until(lambda: agent.runs[-1] == (LAYOUT, "success") and len(agent.runs) == 2, 60, "ok")
    second = b.controller(cfg, 2)
    wait_state(b.kube, name, "healthy", second, 240)
    assert partitions.mig_devices(node) == before
    assert len(agent.pods) == 2, f"one restart of the agent's pod, not two: {agent.pods}"
    assert partitions.mig_parted_applies(node) == [True], "one application of the layout"
    [attempt] = history(b.kube, name)
    assert (attempt["step"], attempt["result"]) == ("reboot", "pass")


def test_an_amd_node_through_a_reset_gets_cpx_nps4_back_from_the_device_config_manager(
    kube, fleet_factory, tmp_path
):
    benches = Benches(kube, fleet_factory, tmp_path)
    b = benches.new(1, pool_name("pa"))
    node = b.fleet.node(1)
    check = ctlenv.CHECK_YAML.replace("vendor: nvidia", "vendor: amd")
    node.ssh(f"printf '%s' '{check}' > /etc/fleetmedic/check.yaml")
    partitions.amd(node, "CPX", "NPS4")  # the layout DCM made before the fault
    name = f"{b.pool}-1"
    b.make_nodes(
        [name],
        [node.address],
        taints=[ctlenv.repair_taint("reset")],
        labels={
            "fleetmedic.io/gpu-vendor": "amd",
            DCM_CONFIG_LABEL: "cpx-nps4",
            DCM_STATE_LABEL: "success",
        },
    )
    profiles = {"cpx-nps4": {"compute": "CPX", "memory": "NPS4"}}
    agent = DeviceConfigManagerStandIn(kube, name, node, f"amd-op-{b.pool}", profiles).start()
    try:
        assert agent.runs == [("cpx-nps4", "success")]  # in place: nothing set at its start
        dcm = {
            "name": "device-config-manager",
            "config_label": DCM_CONFIG_LABEL,
            "state_label": DCM_STATE_LABEL,
            "failure": ["failure"],
            "namespace": agent.namespace,
            "pod_labels": {"app": "amdgpu-device-config-manager"},
        }
        cfg = b.config(ladder={"restore": {"operators": [dcm], "operator_wait": 300}})
        boots = node.boots
        proc = b.controller(cfg)
        wait_state(b.kube, name, "healthy", proc, 300)
        assert node.boots == boots, "a reset, no reboot"
        gpus = json.loads((node.state_dir / "amd.json").read_text())["gpus"]
        assert [g.get("resets") for g in gpus] == [1, 1], "the reset went through the hive"
        assert [(g["compute_partition"], g["memory_partition"]) for g in gpus] == [
            ("CPX", "NPS4")
        ] * 2
        assert [g.get("driver_reloads") for g in gpus] == [1, 1], "one reload, by DCM"
        assert len(agent.pods) == 2 and agent.runs[-1] == ("cpx-nps4", "success")
        [attempt] = history(b.kube, name)
        assert (attempt["step"], attempt["result"]) == ("reset", "pass")
        assert (
            f"restore: device-config-manager applied {DCM_CONFIG_LABEL}=cpx-nps4 (success in"
            in attempt["message"]
        ), attempt["message"]
        assert "after: GPU 0: CPX/NPS4; GPU 1: CPX/NPS4" in attempt["message"]
    finally:
        agent.stop()
        print(f"--- stand-in: pods {agent.pods}, runs {agent.runs}, errors {agent.errors[-3:]}")
        benches.stop_controllers(log_lines=80)
        benches.delete_nodes()
    assert not agent.errors, agent.errors
