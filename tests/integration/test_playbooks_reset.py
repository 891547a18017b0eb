"""playbooks/reset.yml against nspawn fleet nodes with the GPU stand-ins: the reset rung's
node side. A reset-class fault is cured with the node's boot count unchanged; a refused or
failed reset fails the node with one line; the fabric manager of an NVSwitch system is
stopped and started around a full reset; AMD resets go through the XGMI hive.

The nodes' ``nvidia-smi`` and ``amd-smi`` are the fakes of tests/fakes (they change the
scenario files the checks read); everything else is real: sshd, systemd units, Ansible
through ansible-runner as the controller runs it.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

from tests.harness.fleet_ansible import failures, hosts_with, run_ansible

ROOT = Path(__file__).resolve().parents[2]
PLAYBOOK = ROOT / "playbooks" / "reset.yml"
pytestmark = [pytest.mark.fleet, pytest.mark.slow]


def check(vendor: str, gpus: int) -> list[str]:
    return ["fleetmedic", "check", "--json", "--vendor", vendor, "--expected-gpus", str(gpus),
            "--category", "gpu"]  # fmt: skip


def run_reset(fleet, node, vendor="nvidia", gpus=2, **extra):
    return run_ansible(
        fleet,
        playbook=PLAYBOOK,
        limit=node.name,
        extravars={
            "fleetmedic_node_lease": False,  # no cluster here; the Lease path is reboot.yml's
            "fleetmedic_collect_evidence": False,
            "fleetmedic_vendor": vendor,
            "gpu_health_command": check(vendor, gpus),
            "gpu_reset_verify_delay": 1,
            **extra,
        },
        timeout=240,
    )


def stats(r, key: str) -> dict:
    for e in r.events:
        if e.get("event") == "playbook_on_stats":
            return (e["event_data"].get("artifact_data") or {}).get(key, {})
    return {}


@pytest.fixture
def node(fleet):
    """node-1 of the shared fleet, with its scenario files put back afterwards."""
    n = fleet.node(1)
    yield n
    for name in ("nvml.json", "amd.json"):
        (n.state_dir / name).unlink(missing_ok=True)
    n.ssh(
        "systemctl stop nvidia-fabricmanager 2>/dev/null; "
        "rm -f /etc/systemd/system/nvidia-fabricmanager.service /usr/local/bin/nv-fabricmanager "
        "/var/lib/fleetmedic/gpu-reset-request.json; systemctl daemon-reload",
        check=False,
    )


def nvml(node) -> dict:
    return json.loads((node.state_dir / "nvml.json").read_text())


def set_nvml(node, doc: dict) -> None:
    (node.state_dir / "nvml.json").write_text(json.dumps(doc))


def test_a_reset_class_fault_is_cured_without_a_reboot(node):
    set_nvml(node, {"gpus": [{}, {"ecc_volatile_uncorrected": 4, "recovery_action": 1}]})
    boots, boot_id = node.boots, node.boot_id()
    rid = f"reset-{uuid.uuid4().hex[:6]}"

    r = run_reset(node.fleet, node, fleetmedic_request_id=rid)
    assert r.rc == 0, failures(r)
    assert node.boots == boots and node.boot_id() == boot_id, "the node rebooted"
    gpus = nvml(node)["gpus"]
    assert [g.get("resets") for g in gpus] == [1, 1], "every GPU once (no -i: all)"
    assert [g.get("persistence_mode") for g in gpus] == [1, 1], "persistence mode back on"
    assert gpus[1]["ecc_volatile_uncorrected"] == 0 and gpus[1]["recovery_action"] == 0
    done = stats(r, "fleetmedic_reset")[node.name]
    assert done["reset"] is True and done["scope"] == "all" and done["gpus"] == [0, 1]
    assert stats(r, "fleetmedic_check")[node.name]["status"] == "ok"

    # the same request again (a controller that restarted): verify only, no second reset
    r = run_reset(node.fleet, node, fleetmedic_request_id=rid)
    assert r.rc == 0, failures(r)
    assert [g.get("resets") for g in nvml(node)["gpus"]] == [1, 1]
    assert stats(r, "fleetmedic_reset")[node.name]["reset"] is False


def test_one_gpu_is_reset_alone_when_named(node):
    set_nvml(node, {"gpus": [{}, {"ecc_volatile_uncorrected": 4}]})
    r = run_reset(node.fleet, node, fleetmedic_reset_gpus=[1])
    assert r.rc == 0, failures(r)
    assert [g.get("resets") for g in nvml(node)["gpus"]] == [None, 1]


@pytest.mark.parametrize(
    "named",
    [
        "GPU-fa4e5d1c-0000-4000-8000-000000000001",  # GPU 1's UUID (NVSentinel's GPU_UUID)
        "0000:28:00.0",  # its PCI bus id as NVSentinel writes it (nvidia-smi: 00000000:28:00.0)
    ],
)
def test_one_gpu_named_by_uuid_or_bus_id_is_reset_alone(node, named):
    # the fake GPUs' default UUIDs differ per node (issue 43): GPU 1 gets the one named here
    gpu1 = {"ecc_volatile_uncorrected": 4, "uuid": "GPU-fa4e5d1c-0000-4000-8000-000000000001"}
    set_nvml(node, {"gpus": [{}, gpu1]})
    r = run_reset(node.fleet, node, fleetmedic_reset_gpu_ids=[named])
    assert r.rc == 0, failures(r)
    assert [g.get("resets") for g in nvml(node)["gpus"]] == [None, 1]


def test_a_gpu_named_that_the_node_does_not_list_fails_with_one_line(node):
    set_nvml(node, {"gpus": [{}, {"ecc_volatile_uncorrected": 4}]})
    r = run_reset(node.fleet, node, fleetmedic_reset_gpu_ids=["GPU-00000000-dead"])
    assert r.rc == 2 and hosts_with(r, "runner_on_failed") == {node.name}
    line = failures(r)[-1]
    assert line.startswith(f"{node.name}: no GPU GPU-00000000-dead on this node"), line
    assert "\n" not in line
    assert all("resets" not in g for g in nvml(node)["gpus"]), "nothing reset"


def test_a_refused_reset_fails_the_node_with_one_line(node):
    set_nvml(node, {"gpus": [{}, {"ecc_volatile_uncorrected": 4, "in_use": True}]})
    boots = node.boots
    r = run_reset(node.fleet, node)
    assert r.rc == 2 and hosts_with(r, "runner_on_failed") == {node.name}
    line = failures(r)[-1]
    assert line == (
        f"{node.name}: nvidia-smi --gpu-reset failed (rc 255): "
        "GPU 00000000:28:00.0: In use by another client"
    ), line
    assert "\n" not in line
    assert node.boots == boots
    gpus = nvml(node)["gpus"]
    assert all("resets" not in g for g in gpus), "a refused reset resets nothing"
    assert [g.get("persistence_mode") for g in gpus] == [1, 1], "persistence mode given back"


def test_a_lost_gpu_fails_the_reset(node):
    set_nvml(node, {"gpus": [{}, {"lost": True}]})
    r = run_reset(node.fleet, node)
    assert r.rc == 2
    line = failures(r)[-1]
    assert (
        "failed (rc 15): Unable to determine the device handle for GPU 00000000:28:00.0: " in line
    )
    assert "GPU is lost" in line and "\n" not in line
    assert nvml(node)["gpus"][1]["lost"] is True


def test_the_fabric_manager_is_stopped_and_started_around_a_full_reset(node):
    """NVSwitch system: the fabric manager holds every GPU; the role stops it, resets all GPUs
    (and the NVSwitches) even when one GPU was named, and starts it again."""
    set_nvml(node, {"nvswitch": True, "gpus": [{}, {"ecc_volatile_uncorrected": 4}]})
    node.ssh(
        "cp /usr/bin/sleep /usr/local/bin/nv-fabricmanager && "
        "printf '[Unit]\\nDescription=fake fabric manager\\n[Service]\\n"
        "ExecStart=/usr/local/bin/nv-fabricmanager infinity\\n' "
        "> /etc/systemd/system/nvidia-fabricmanager.service && "
        "systemctl daemon-reload && systemctl start nvidia-fabricmanager"
    )
    pid_before = node.ssh("systemctl show -p MainPID --value nvidia-fabricmanager").stdout.strip()

    r = run_reset(node.fleet, node, fleetmedic_reset_gpus=[1])
    assert r.rc == 0, failures(r)
    doc = nvml(node)
    assert doc["nvswitch_resets"] == 1 and [g.get("resets") for g in doc["gpus"]] == [1, 1]
    assert node.ssh("systemctl is-active nvidia-fabricmanager").stdout.strip() == "active"
    pid_after = node.ssh("systemctl show -p MainPID --value nvidia-fabricmanager").stdout.strip()
    assert pid_after != pid_before, "the fabric manager was restarted"
    assert stats(r, "fleetmedic_reset")[node.name]["fabric_manager"] == "stopped and started"


def test_a_run_after_a_crash_starts_the_fabric_manager_it_had_stopped(node):
    """The marker says a run of this request stopped the fabric manager and never got to
    start it: the next run resets and starts it."""
    set_nvml(node, {"nvswitch": True, "gpus": [{}, {}]})
    node.ssh(
        "cp /usr/bin/sleep /usr/local/bin/nv-fabricmanager && "
        "printf '[Service]\\nExecStart=/usr/local/bin/nv-fabricmanager infinity\\n' "
        "> /etc/systemd/system/nvidia-fabricmanager.service && systemctl daemon-reload && "
        "mkdir -p /var/lib/fleetmedic && echo '"
        + json.dumps(
            {
                "request_id": "crashed-1",
                "state": "started",
                "fabric_manager_stopped": True,
                "persistence_off": [0, 1],
                "services_stopped": [],
            }
        )
        + "' > /var/lib/fleetmedic/gpu-reset-request.json"
    )
    set_nvml(node, {"nvswitch": True, "gpus": [{"persistence_mode": 0}, {"persistence_mode": 0}]})
    r = run_reset(node.fleet, node, fleetmedic_request_id="crashed-1")
    assert r.rc == 0, failures(r)
    assert node.ssh("systemctl is-active nvidia-fabricmanager").stdout.strip() == "active"
    assert [g.get("persistence_mode") for g in nvml(node)["gpus"]] == [1, 1]


# ------------------------------------------------------------------------------ AMD
def amd(node) -> dict:
    return json.loads((node.state_dir / "amd.json").read_text())


def test_amd_reset_cures_a_hung_gpu_through_its_hive(node):
    (node.state_dir / "amd.json").write_text(json.dumps({"gpus": [{}, {"agent": False}]}))
    boots = node.boots
    r = run_reset(node.fleet, node, vendor="amd")
    assert r.rc == 0, failures(r)
    assert node.boots == boots
    assert [g.get("resets") for g in amd(node)["gpus"]] == [1, 1], "one reset, the whole hive"
    assert stats(r, "fleetmedic_check")[node.name]["status"] == "ok"


def test_amd_reset_failure_is_one_line_though_amd_smi_exits_0(node):
    (node.state_dir / "amd.json").write_text(
        json.dumps({"gpus": [{}, {"agent": False, "lost": True}]})
    )
    r = run_reset(node.fleet, node, vendor="amd")
    assert r.rc == 2
    line = failures(r)[-1]
    assert line == (
        f"{node.name}: amd-smi reset --gpureset -g 0 failed (rc 0): "
        "[AMDSMI_STATUS_IO] Unable to reset GPU (a reset covers the GPU's whole XGMI hive)"
    ), line


def test_without_a_vendor_the_play_says_what_to_set(node):
    r = run_reset(node.fleet, node, vendor="unknown")
    assert r.rc == 2
    assert "GPU vendor is 'unknown': label the node fleetmedic.io/gpu-vendor" in failures(r)[-1]
