"""playbooks/restore.yml and roles/gpu_partition against nspawn fleet nodes with the GPU
stand-ins: a layout is recorded, lost as a reboot or a reset loses it, put back once per
request (mig-parted, nvidia-smi instance creation, or amd-smi with the driver reload a
memory-partition change needs) and read back; what cannot be put back fails the node with
one line. Real sshd and Ansible through ansible-runner; only the GPU tools are fakes."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

from tests.harness.fleet_ansible import failures, last_stdout, run_ansible

ROOT = Path(__file__).resolve().parents[2]
PLAYBOOK = ROOT / "playbooks" / "restore.yml"
pytestmark = [pytest.mark.fleet, pytest.mark.slow]


@pytest.fixture
def node(fleet):
    """node-1 of the shared fleet, with its scenario files and records put back afterwards."""
    n = fleet.node(1)
    yield n
    for name in ("nvml.json", "amd.json", "mig-parted-calls.jsonl"):
        (n.state_dir / name).unlink(missing_ok=True)
    n.ssh("rm -rf /var/lib/fleetmedic/partition", check=False)


def run(fleet, node, vendor: str, **extra):
    return run_ansible(
        fleet,
        playbook=PLAYBOOK,
        limit=node.name,
        extravars={"fleetmedic_vendor": vendor, **extra},
        timeout=180,
    )


def mig_scenario(node, gis: list[tuple[int, str, int]], name: str | None = None) -> None:
    """Two GPUs, GPU 0 in MIG mode with the GPU instances ``(id, profile, start)`` made in
    this boot of the node."""
    boot = node.boot_id()
    mig = {
        "current": 1,
        "pending": 1,
        "boot_id": boot,
        "gis": [
            {"id": i, "profile": p, "start": s, "cis": [{"id": 0, "profile": p}]} for i, p, s in gis
        ],
    }
    gpu0 = {"mig": mig, **({"name": name} if name else {})}
    (node.state_dir / "nvml.json").write_text(json.dumps({"gpus": [gpu0, {}]}))


def lose_mig(node) -> None:
    """What a reboot does to an H100: the state belongs to an earlier boot."""
    data = json.loads((node.state_dir / "nvml.json").read_text())
    data["gpus"][0]["mig"]["boot_id"] = "an-earlier-boot"
    (node.state_dir / "nvml.json").write_text(json.dumps(data))


def applies(node) -> list[bool]:
    calls = node.state_dir / "mig-parted-calls.jsonl"
    if not calls.exists():
        return []
    return [json.loads(line)["changed"] for line in calls.read_text().splitlines()]


@pytest.mark.parametrize("method", ["mig-parted", "nvidia-smi"])
def test_a_lost_mig_layout_is_put_back_once_per_request(fleet, node, method):
    mig_scenario(node, [(1, "3g.40gb", 0), (2, "2g.20gb", 4), (3, "1g.10gb", 6)])
    rid = f"t-{uuid.uuid4().hex[:8]}"
    r = run(fleet, node, "nvidia", gpu_partition_action="record", fleetmedic_request_id=rid)
    assert r.status == "successful", failures(r)
    rec = last_stdout(r)
    layout = rec["layout"]
    assert layout["partitioned"] is True
    assert layout["gpus"][0]["devices"] == {"3g.40gb": 1, "2g.20gb": 1, "1g.10gb": 1}
    assert rec["summary"].startswith(
        "GPU 0: MIG 1g.10gb x1, 2g.20gb x1, 3g.40gb x1; GPU 1: MIG off"
    )
    lose_mig(node)
    # a second record for the same request keeps the first one (the layout is gone now)
    again = run(fleet, node, "nvidia", gpu_partition_action="record", fleetmedic_request_id=rid)
    assert last_stdout(again)["layout"] == layout

    extra = {"fleetmedic_partition_layout": layout, "fleetmedic_request_id": rid,
             "gpu_partition_nvidia_method": method}  # fmt: skip
    r = run(fleet, node, "nvidia", **extra)
    assert r.status == "successful", failures(r)
    said = last_stdout(r)
    assert said["applied"] is True
    assert said["before"] == "GPU 0: MIG off; GPU 1: MIG off"
    assert said["after"].startswith("GPU 0: MIG 1g.10gb x1, 2g.20gb x1, 3g.40gb x1")
    listed = node.ssh("nvidia-smi -L").stdout
    assert listed.count("MIG-") == 3
    if method == "mig-parted":
        assert applies(node) == [True]
    # the same request again (a controller restarted after the apply): read back only
    r = run(fleet, node, "nvidia", **extra)
    assert r.status == "successful", failures(r)
    assert last_stdout(r)["applied"] is False
    assert applies(node) == ([True] if method == "mig-parted" else [])


def test_an_amd_layout_is_put_back_with_the_driver_reload(fleet, node):
    amd = {"gpus": [{}, {}]}
    (node.state_dir / "amd.json").write_text(json.dumps(amd))
    node.ssh(
        "amd-smi set -g all --compute-partition CPX && amd-smi set -g all --memory-partition NPS4"
        " && amd-smi reset --reload-driver"
    )
    r = run(fleet, node, "amd", gpu_partition_action="record")
    layout = last_stdout(r)["layout"]
    assert layout["partitioned"] and [(g["compute"], g["memory"]) for g in layout["gpus"]] == [
        ("CPX", "NPS4"),
        ("CPX", "NPS4"),
    ]
    node.ssh("amd-smi reset --gpureset -g 0")  # the whole hive: back to SPX/NPS1
    r = run(fleet, node, "amd", fleetmedic_partition_layout=layout, fleetmedic_request_id="a1")
    assert r.status == "successful", failures(r)
    said = last_stdout(r)
    assert said["before"] == "GPU 0: SPX/NPS1; GPU 1: SPX/NPS1"
    assert said["after"] == "GPU 0: CPX/NPS4; GPU 1: CPX/NPS4"
    gpus = json.loads((node.state_dir / "amd.json").read_text())["gpus"]
    assert [g["driver_reloads"] for g in gpus] == [2, 2]  # the setup's and the restore's


def test_a_layout_that_cannot_be_put_back_fails_with_one_line(fleet, node):
    mig_scenario(node, [(1, "3g.40gb", 0)])
    r = run(fleet, node, "nvidia", gpu_partition_action="record")
    layout = last_stdout(r)["layout"]
    lose_mig(node)
    r = run(fleet, node, "nvidia", gpu_partition_action="check", fleetmedic_partition_layout=layout)
    assert r.status == "failed"
    assert failures(r) == [
        "partition layout differs from the record: GPU 0: want MIG 3g.40gb x1, have MIG off"
    ]


def test_a_node_without_partitions_is_left_alone(fleet, node):
    (node.state_dir / "nvml.json").write_text(json.dumps({"gpus": [{}, {}]}))
    r = run(fleet, node, "nvidia", gpu_partition_action="record")
    layout = last_stdout(r)["layout"]
    assert layout["partitioned"] is False
    r = run(fleet, node, "nvidia", fleetmedic_partition_layout=layout)
    assert r.status == "successful", failures(r)
    assert last_stdout(r) == {
        "applied": False,
        "before": "not partitioned",
        "after": "not partitioned",
    }
    assert applies(node) == []
