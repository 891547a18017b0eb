"""The slurm_nodes inventory plugin against the real slurmctld (tests/harness/slurm.py).

``ansible-inventory`` runs as an operator would run it, with the checkout's ansible.cfg,
so the plugin is found as ``fleetmedic.fleet.slurm_nodes`` and calls fleetmedic's real
Slurm adapter."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]


def ansible_env(**extra: str) -> dict[str, str]:
    venv_bin = str(Path(sys.executable).parent)
    env = dict(
        os.environ,
        PATH=f"{venv_bin}:{os.environ.get('PATH', '/usr/bin:/bin')}",
        ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"),
        ANSIBLE_INVENTORY_UNPARSED_FAILED="1",
    )
    for var in ("SLURM_CONF", "FLEETMEDIC_SLURM_CONF"):
        env.pop(var, None)
    env.update(extra)
    return env


def inventory(source: Path, *args: str, env: dict | None = None, check: bool = True):
    p = subprocess.run(
        ["ansible-inventory", "-i", str(source), *args],
        capture_output=True,
        text=True,
        env=env or ansible_env(),
        cwd=ROOT,
        timeout=120,
    )
    if check and p.returncode != 0:
        raise AssertionError(f"ansible-inventory failed ({p.returncode}): {p.stderr[-2000:]}")
    return p


def plain(value):
    """ansible-inventory --list marks strings read from the cluster (never templated) as
    ``{"__ansible_unsafe": ...}``; unwrap them for comparison."""
    if isinstance(value, dict):
        if set(value) == {"__ansible_unsafe"}:
            return value["__ansible_unsafe"]
        return {plain(k): plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [plain(v) for v in value]
    return value


def source(tmp_path: Path, **options) -> Path:
    f = tmp_path / "test.slurm_nodes.yml"
    f.write_text(yaml.safe_dump({"plugin": "fleetmedic.fleet.slurm_nodes", **options}))
    return f


@pytest.fixture
def fenced(slurm):
    """n1 ours at reboot, n2 drained by NHC, n3 healthy."""
    from fleetmedic.adapters.slurm import Slurm

    Slurm(slurm.env["SLURM_CONF"]).fence("n1", "reboot", "xid 79", {"fleetmedic.io/a": "1"})
    slurm.run("scontrol", "update", "nodename=n2", "state=drain", "reason=NHC: check_hw_gpu")
    yield slurm
    slurm.reset_nodes()


def test_fenced_nodes_grouped_by_rung_and_foreign_by_owner(fenced, tmp_path):
    src = source(
        tmp_path,
        slurm_conf=fenced.env["SLURM_CONF"],
        states=["reboot", "reimage", "manual", "foreign"],
    )
    raw = json.loads(inventory(src, "--list").stdout)
    # a reason is someone's free text: it must never be evaluated as a template
    assert raw["_meta"]["hostvars"]["n2"]["slurm_reason"] == {
        "__ansible_unsafe": "NHC: check_hw_gpu"
    }
    data = plain(raw)
    assert data["repair_reboot"]["hosts"] == ["n1"]
    assert data["foreign_nhc"]["hosts"] == ["n2"]
    assert "repair_reboot" in data["in_repair"]["children"]
    assert "foreign_nhc" in data["foreign"]["children"]
    assert sorted(data["slurm_drained"]["hosts"]) == ["n1", "n2"]
    assert sorted(data["partition_gpu"]["hosts"]) == ["n1", "n2"]
    hv = data["_meta"]["hostvars"]
    assert "n3" not in hv  # healthy, left out by states
    assert hv["n1"]["ansible_host"] == fenced.node_address("n1")
    assert hv["n1"]["fleetmedic_state"] == "reboot"
    assert hv["n1"]["fleetmedic_owner"] == "ours"
    assert hv["n1"]["slurm_reason"] == "fleetmedic: reboot: xid 79"
    assert hv["n1"]["fleetmedic_record"] == {"fleetmedic.io/a": "1"}
    assert hv["n2"]["fleetmedic_owner"] == "foreign_nhc"
    assert hv["n2"]["slurm_reason_user"] == "root"


def test_slurm_conf_from_the_environment_and_every_node(fenced, tmp_path):
    env = ansible_env(SLURM_CONF=fenced.env["SLURM_CONF"])
    data = plain(json.loads(inventory(source(tmp_path), "--list", env=env).stdout))
    assert data["healthy"]["hosts"] == ["n3"]
    assert data["slurm_idle"]["hosts"] == ["n3"]


def test_an_unreachable_slurmctld_fails_the_inventory_in_one_line(slurm_factory, tmp_path):
    c = slurm_factory(nodes=1)
    c.stop_proc("slurmctld")
    p = inventory(
        source(tmp_path, slurm_conf=c.env["SLURM_CONF"], timeout=60), "--list", check=False
    )
    assert p.returncode != 0
    assert "slurm_nodes: cannot list nodes: " in p.stderr and c.list_command in p.stderr
    assert "Traceback" not in p.stderr
