"""reimage.yml by hand on two fleet nodes, one labelled NVIDIA and one AMD: each gets its own
stack reinstalled from a local file:// apt repository of small test packages (real apt and
dpkg; tests/molecule/_shared/build_test_repo.py), is rebooted and verified. Running it again
with the same request id (a controller restarting after a crash) changes nothing."""

from __future__ import annotations

import json
import subprocess
import uuid
from pathlib import Path

import pytest

from tests.harness.adhoc import (
    CHECK,
    HEALTHY,
    cli_env,
    make_inventory,
    playbook,
    recap,
)

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.fleet, pytest.mark.kube, pytest.mark.slow]

STACKS = {
    "nvidia_driver_packages": ["fm-nvidia-kernel", "fm-nvidia-utils"],
    "nvidia_driver_version": "550.1-1",
    "nvidia_driver_repo_uris": ["file:///srv/fm-test-repo"],
    "nvidia_driver_repo_suites": ["./"],
    "nvidia_driver_repo_trusted": True,
    "rocm_install_method": "packages",
    "rocm_repos": [
        {
            "name": "fm-test-rocm",
            "uris": ["file:///srv/fm-test-repo"],
            "suites": ["./"],
            "trusted": True,
        }
    ],
    "rocm_packages": ["fm-rocm", "fm-rocm-core"],
}


def test_reimage_reinstalls_the_vendors_stack_reboots_and_verifies(kube, fleet_factory, tmp_path):
    lone = fleet_factory(2)
    prep = tmp_path / "prepare.yml"
    prep.write_text(
        json.dumps(
            [
                {
                    "hosts": "all",
                    "gather_facts": False,
                    "tasks": [
                        {
                            "name": "Test repository",
                            "ansible.builtin.import_tasks": str(
                                ROOT / "tests/molecule/_shared/prepare_apt_repo.yml"
                            ),
                        }
                    ],
                }
            ]
        )
    )
    p = subprocess.run(
        ["ansible-playbook", "-i", str(lone.inventory), str(prep)],
        capture_output=True,
        text=True,
        env={**cli_env(), "MOLECULE_PROJECT_DIRECTORY": str(ROOT)},
        cwd=ROOT,
        timeout=600,
    )
    assert p.returncode == 0, p.stdout[-3000:]
    for n in lone:
        (n.state_dir / "nvml.json").write_text(json.dumps(HEALTHY))

    run = uuid.uuid4().hex[:6]
    names = {1: f"pb-{run}-nv", 2: f"pb-{run}-amd"}
    for i, vendor in ((1, "nvidia"), (2, "amd")):
        kube.make_nodes(
            [names[i]],
            labels={"fleetmedic-test/pb": run, "fleetmedic.io/gpu-vendor": vendor},
            addresses=[lone.node(i).address],
            taints=[{"key": "fleetmedic.io/repair", "value": "reimage", "effect": "NoSchedule"}],
        )
    try:
        inv = make_inventory(kube, lone, tmp_path / "inv", run, f"pb-{run}")
        extravars = {
            **STACKS,
            "fleetmedic_request_id": f"e1-reimage1-{run}",
            "diagnostics_fetch_dir": str(tmp_path / "evidence"),
            "diagnostics_check_command": CHECK,
            "diagnostics_nvidia_bug_report": False,
            "gpu_health_command": CHECK,
            "reboot_timeout": 120,
            "reboot_verify_delay": 2,
        }
        before = {i: lone.node(i).boot_id() for i in (1, 2)}
        p = playbook(
            inv,
            "reimage.yml",
            "--limit",
            ",".join(names.values()),
            extravars=extravars,
            timeout=900,
        )
        assert p.returncode == 0, p.stdout[-5000:]
        assert all(lone.node(i).boot_id() != before[i] for i in (1, 2)), "both nodes reboot"
        pkgs = {
            i: lone.node(i)
            .ssh(
                "dpkg-query -W -f='${Package} ${Version} ${Status}\\n' 'fm-*' 2>/dev/null",
                check=False,
            )
            .stdout
            for i in (1, 2)
        }
        assert "fm-nvidia-kernel 550.1-1 hold ok installed" in pkgs[1] and "fm-rocm" not in pkgs[1]
        assert "fm-rocm-core 6.2.0-1 hold ok installed" in pkgs[2] and "fm-nvidia" not in pkgs[2]
        assert f"{names[1]} is healthy" in p.stdout and f"{names[2]} is healthy" in p.stdout
        print(f"reimage.yml (evidence, reinstall, reboot, verify) on 2 nodes: {p.seconds:.0f} s")

        # the same request again: nothing to do, no second reboot or reinstall
        booted = {i: lone.node(i).boot_id() for i in (1, 2)}
        again = playbook(
            inv,
            "reimage.yml",
            "--limit",
            ",".join(names.values()),
            extravars={**extravars, "fleetmedic_collect_evidence": False},
            timeout=600,
        )
        assert again.returncode == 0, again.stdout[-3000:]
        assert {i: lone.node(i).boot_id() for i in (1, 2)} == booted
        assert all(c["changed"] == 0 for c in recap(again.stdout).values()), again.stdout[-3000:]
    finally:
        kube.delete_nodes(names.values())
