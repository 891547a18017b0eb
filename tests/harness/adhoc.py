"""The playbooks as an on-call engineer runs them by hand: ``ansible-playbook -i <k8s_nodes
inventory> playbooks/X.yml --limit NODE`` from this checkout (used by the playbook, reimage
and node Lease integration tests).

- :func:`cli_env`: the environment of such a run (venv first on PATH, the checkout's
  ansible.cfg, no kubeconfig inherited from the caller).
- :func:`make_inventory`: a k8s_nodes inventory source selecting Nodes by a label, with
  the fleet's SSH settings as group_vars next to it, as an operator's would be.
- :func:`playbook`: run one of playbooks/ with it; :func:`recap`: its PLAY RECAP counts.
- :data:`CHECK`, :data:`HEALTHY`, :data:`BROKEN`: the GPU check the roles run, and NVML
  scenarios that pass and fail it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]


def cli_env() -> dict[str, str]:
    """The environment of an ``ansible-playbook`` run typed in this checkout: the venv's bin
    first on PATH, the checkout's ansible.cfg, a failed inventory source is an error, no
    colour, and no kubeconfig from the caller's environment (the inventory file names the
    cluster)."""
    venv_bin = str(Path(sys.executable).parent)
    e = dict(
        os.environ,
        PATH=f"{venv_bin}:{os.environ.get('PATH', '/usr/bin:/bin')}",
        ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"),
        ANSIBLE_INVENTORY_UNPARSED_FAILED="1",
        ANSIBLE_NOCOLOR="1",
    )
    for var in ("KUBECONFIG", "FLEETMEDIC_KUBECONFIG", "K8S_AUTH_KUBECONFIG"):
        e.pop(var, None)
    return e


CHECK = [
    "fleetmedic",
    "check",
    "--json",
    "--vendor",
    "nvidia",
    "--expected-gpus",
    "2",
    "--category",
    "gpu",
]
HEALTHY = {"gpus": [{}, {}]}
BROKEN = {"gpus": [{}, {"ecc_volatile_uncorrected": 4}]}


def playbook(inv: Path, name: str, *args: str, extravars: dict | None = None, timeout: int = 300):
    cmd = ["ansible-playbook", "-i", str(inv), str(ROOT / "playbooks" / name), *args]
    if extravars:
        cmd += ["-e", json.dumps(extravars)]
    t0 = time.monotonic()
    p = subprocess.run(
        cmd, capture_output=True, text=True, env=cli_env(), cwd=ROOT, timeout=timeout
    )
    p.seconds = time.monotonic() - t0
    return p


def recap(output: str) -> dict[str, dict[str, int]]:
    """PLAY RECAP lines as {host: {ok: n, changed: n, unreachable: n, failed: n, ...}}."""
    out = {}
    for line in output.split("PLAY RECAP")[-1].splitlines():
        if ":" in line and "=" in line:
            host, counts = line.split(":", 1)
            out[host.strip()] = {k: int(v) for k, v in (c.split("=") for c in counts.split())}
    return out


def make_inventory(kube, fleet, directory: Path, selector_value: str, prefix: str) -> Path:
    kube.ensure_namespace("fleetmedic")  # reboot.yml and reimage.yml take node Leases there
    fleet_vars = yaml.safe_load(fleet.inventory.read_text())["all"]["vars"]
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "group_vars").mkdir(exist_ok=True)
    (directory / "group_vars" / "all.yml").write_text(yaml.safe_dump(fleet_vars))
    src = directory / "fleet.k8s_nodes.yml"
    src.write_text(
        yaml.safe_dump(
            {
                "plugin": "fleetmedic.fleet.k8s_nodes",
                "kubeconfig": str(kube.kubeconfig),
                "label_selector": f"fleetmedic-test/pb={selector_value}",
            }
        )
    )
    return src
