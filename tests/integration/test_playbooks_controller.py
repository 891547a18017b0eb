"""install_controller.yml on a test-fleet node acting as the bastion (a real systemd), with
the real API server: the hardened Type=notify service really starts (READY=1 only comes
after the controller has listed the nodes), keeps feeding its watchdog, and reads its
kubeconfig through LoadCredential."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
WHEELHOUSE = ROOT / ".cache" / "molecule" / "wheelhouse"
pytestmark = [pytest.mark.fleet, pytest.mark.kube, pytest.mark.slow]


def run(cmd: list[str], timeout: int = 900) -> subprocess.CompletedProcess:
    venv_bin = str(Path(sys.executable).parent)
    env = dict(
        os.environ,
        PATH=f"{venv_bin}:{os.environ.get('PATH', '/usr/bin:/bin')}",
        ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"),
        ANSIBLE_NOCOLOR="1",
    )
    return subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT, timeout=timeout)


def test_install_controller_runs_the_hardened_service(kube, fleet_factory, tmp_path):
    built = run(
        [sys.executable, str(ROOT / "tests/molecule/_shared/build_wheelhouse.py"), str(WHEELHOUSE)]
    )
    assert built.returncode == 0, built.stderr
    # a snapshot: a concurrent molecule run may rebuild the shared wheelhouse mid-test
    wheelhouse = tmp_path / "wheelhouse"
    shutil.copytree(WHEELHOUSE, wheelhouse)
    bastion = fleet_factory(1)
    kube.ensure_namespace("kube-system")
    # the admin kubeconfig, with the API address as the bastion sees it
    kc = yaml.safe_load(Path(kube.kubeconfig).read_text())
    for cluster in kc["clusters"]:
        cluster["cluster"]["server"] = kube.server_url(bastion.host_address)
    (tmp_path / "kubeconfig").write_text(yaml.safe_dump(kc))
    lease = f"fm-install-{uuid.uuid4().hex[:6]}"
    extravars = {
        "controller_wheelhouse": str(wheelhouse),
        # the test nodes already carry a venv at the default path (the fleet harness's own)
        "controller_venv": "/opt/fleetmedic-controller/venv",
        "controller_kubeconfig_src": str(tmp_path / "kubeconfig"),
        "controller_watchdog_sec": 10,
        "controller_config": {
            "kube": {
                "kubeconfig_credential": "kubeconfig",
                "label_selector": f"fleetmedic-test/none={lease}",
            },
            "leader_election": {"namespace": "kube-system", "lease_name": lease},
        },
    }
    t0 = time.monotonic()
    p = run(
        [
            "ansible-playbook",
            "-i",
            str(bastion.inventory),
            str(ROOT / "playbooks/install_controller.yml"),
            "-e",
            json.dumps(extravars),
        ]
    )
    installed = time.monotonic() - t0
    node = bastion.node(1)
    if p.returncode != 0:
        journal = node.ssh(
            "journalctl -u fleetmedic-controller --no-pager -n 40", check=False
        ).stdout
        raise AssertionError(p.stdout[-3000:] + "\n--- journal ---\n" + journal)

    def show() -> dict[str, str]:
        out = node.ssh(
            "systemctl show fleetmedic-controller --property=ActiveState,SubState,NRestarts,"
            "WatchdogUSec,Type,User"
        ).stdout
        return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)

    deadline = time.monotonic() + 60
    while show()["ActiveState"] != "active" and time.monotonic() < deadline:
        time.sleep(1)
    state = show()
    logs = node.ssh("journalctl -u fleetmedic-controller --no-pager -n 30", check=False).stdout
    assert state["ActiveState"] == "active", f"{state}\n{logs}"
    assert (
        state["Type"] == "notify"
        and state["User"] == "fleetmedic"
        and state["WatchdogUSec"] == "10s"
    )
    # three watchdog periods later it is still the same process: the main loop feeds it
    time.sleep(25)
    state = show()
    assert state["ActiveState"] == "active" and state["NRestarts"] == "0", f"{state}\n{logs}"
    print(f"install_controller.yml: {installed:.0f} s; service active with watchdog 10 s")

    again = run(
        [
            "ansible-playbook",
            "-i",
            str(bastion.inventory),
            str(ROOT / "playbooks/install_controller.yml"),
            "-e",
            json.dumps(extravars),
        ]
    )
    assert again.returncode == 0
    assert "changed=0" in again.stdout.split("PLAY RECAP")[-1], again.stdout[-3000:]
