"""playbooks/burnin.yml and roles/burnin against an nspawn fleet node with the GPU
stand-ins: the real `fleetmedic diag --level 2` (the fake dcgmi replays a published pass)
and `fleetmedic collective` running the fake all_reduce_perf (nccl-tests' output, the bus
bandwidth from the node's scenario), judged against a hardware profile the node's own check
config names by a label value. Real sshd and Ansible through ansible-runner."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.harness.fleet_ansible import failures, last_stdout, run_ansible

ROOT = Path(__file__).resolve().parents[2]
PLAYBOOK = ROOT / "playbooks" / "burnin.yml"
DCGM = ROOT / "tests" / "unit" / "checks" / "data" / "dcgm"
PROFILES = "/etc/fleetmedic/burnin-profiles.yaml"
LABEL = "node.kubernetes.io/instance-type=fleet-2gpu"
pytestmark = [pytest.mark.fleet, pytest.mark.slow]


@pytest.fixture
def node(fleet):
    """node-1 of the shared fleet with a 2-GPU profile that expects 300 GB/s, its check
    config and scenario files put back afterwards."""
    n = fleet.node(1)
    had = n.ssh("cat /etc/fleetmedic/check.yaml", check=False)
    old = had.stdout if had.returncode == 0 else None
    profile = "profiles:\n  fleet-2gpu:\n    match: [fleet-2gpu]\n    expected_busbw_gbps: 300\n"
    check = f"vendor: nvidia\nexpected_gpus: 2\nhardware:\n  profiles: {PROFILES}\n"
    n.ssh(
        f"mkdir -p /etc/fleetmedic && printf '%s' '{profile}' > {PROFILES}"
        f" && printf '%s' '{check}' > /etc/fleetmedic/check.yaml"
    )
    dcgmi = {"output": (DCGM / "pass-3.1.0.txt").read_text(), "exit": 0, "hang": 0}
    (n.state_dir / "dcgmi.json").write_text(json.dumps(dcgmi))
    yield n
    for name in ("nvml.json", "dcgmi.json"):
        (n.state_dir / name).unlink(missing_ok=True)
    n.ssh(f"rm -f {PROFILES}", check=False)
    if old is None:
        n.ssh("rm -f /etc/fleetmedic/check.yaml", check=False)
    else:
        n.ssh(f"printf '%s' '{old}' > /etc/fleetmedic/check.yaml", check=False)


def burn_in(fleet, node, busbw: float, evidence: Path):
    scenario = {"driver_version": "550.90.07", "gpus": [{}, {}], "busbw_gbps": busbw}
    (node.state_dir / "nvml.json").write_text(json.dumps(scenario))
    return run_ansible(
        fleet,
        playbook=PLAYBOOK,
        limit=node.name,
        extravars={
            "fleetmedic_vendor": "nvidia",
            "burnin_labels": [LABEL],
            "fleetmedic_request_id": "e1-reboot1-t",
        },
        envvars={"FLEETMEDIC_EVIDENCE_DIR": str(evidence)},
        timeout=300,
    )


def test_a_node_at_its_profile_passes(fleet, node, tmp_path):
    r = burn_in(fleet, node, 300, tmp_path)
    assert r.status == "successful", failures(r)
    said = last_stdout(r)
    assert said["result"] == "pass"
    assert said["diag"] == {"level": 2, "status": "ok", "summary": said["diag"]["summary"]}
    assert said["collective"]["summary"] == (
        "all_reduce bus bandwidth 290.9 GB/s at 1 GiB on 2 GPUs, expected 300 GB/s "
        "(at least 240.0, 20% below)"
    )
    assert said["collective"]["evidence"]["profile"] == "fleet-2gpu"
    kept = tmp_path / node.name / f"{node.name}-e1-reboot1-t-burnin.json"
    assert json.loads(kept.read_text()) == said


def test_a_node_40_percent_below_its_profile_fails_with_one_line(fleet, node, tmp_path):
    r = burn_in(fleet, node, 300 * 0.6, tmp_path)
    assert r.status == "failed"
    assert failures(r) == [
        "burn-in fail: all_reduce bus bandwidth 174.6 GB/s at 1 GiB on 2 GPUs, expected 300 "
        "GB/s (at least 240.0, 20% below)"
    ]
    said = last_stdout(r)  # the result line still printed, for the history and evidence
    assert said["result"] == "fail" and said["diag"]["status"] == "ok"
