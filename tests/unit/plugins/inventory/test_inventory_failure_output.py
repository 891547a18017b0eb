"""ansible.cfg enables only the inventory plugins the repo uses (issue 33 part 5): host
lists (``-i h1,h2,``), YAML/JSON files (the test fleets' inventory.yml, ansible-runner's
hosts.json) and fleetmedic.fleet.k8s_nodes, last. Ansible tries every enabled plugin on
a source and, when all fail, prints each failure in that order and then its own
"Completely failed to parse" line: with k8s_nodes last, its cause is the block right
above that line, not line 1 of 37 (ini and auto repeated or buried it)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

from tests.harness import loadscale

ROOT = Path(__file__).resolve().parents[4]


def env(**extra: str) -> dict[str, str]:
    out = dict(
        os.environ,
        PATH=f"{Path(sys.executable).parent}:{os.environ.get('PATH', '/usr/bin:/bin')}",
        ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"),
        ANSIBLE_NOCOLOR="1",
    )
    for var in ("KUBECONFIG", "FLEETMEDIC_KUBECONFIG", "K8S_AUTH_KUBECONFIG", "K8S_AUTH_CONTEXT"):
        out.pop(var, None)
    out.update(extra)
    return out


def inventory(*args: str, **extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["ansible-inventory", *args],
        capture_output=True,
        text=True,
        env=env(**extra),
        cwd=ROOT,
        timeout=loadscale.guard(120),
    )


def test_an_unreachable_cluster_is_named_next_to_the_last_line(tmp_path):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # (refused from now on)
    kc = tmp_path / "kubeconfig"
    kc.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        f"clusters: [{{name: c, cluster: {{server: 'https://127.0.0.1:{port}'}}}}]\n"
        "contexts: [{name: c, context: {cluster: c, user: u}}]\n"
        "users: [{name: u, user: {token: t}}]\n"
    )
    p = inventory("-i", "inventory/tainted.k8s_nodes.yml", "--graph", KUBECONFIG=str(kc))
    assert p.returncode != 0
    lines = [ln for ln in (p.stdout + p.stderr).splitlines() if ln.strip()]
    assert "Traceback" not in p.stderr
    assert lines[-1].startswith("[ERROR]: Completely failed to parse inventory source")
    cause = f"API server https://127.0.0.1:{port} unreachable"
    assert any(cause in ln for ln in lines[-3:]), lines[-4:]
    assert len(lines) <= 16, "\n".join(lines)  # (was 37: four plugins, the cause on line 1)
    assert "'ini' plugin" not in p.stderr and "'auto' plugin" not in p.stderr


def test_the_inventories_the_repo_uses_still_parse(tmp_path):
    yml = tmp_path / "inventory.yml"
    yml.write_text("all:\n  hosts:\n    n1: {ansible_host: 10.0.0.1}\n")
    hosts_json = tmp_path / "hosts.json"  # what ansible-runner writes for a dict inventory
    hosts_json.write_text(json.dumps({"all": {"hosts": {"n2": {"ansible_host": "10.0.0.2"}}}}))
    for source, host in ((yml, "n1"), (hosts_json, "n2"), ("n3,n4,", "n3")):
        p = inventory("-i", str(source), "--list")
        assert p.returncode == 0, p.stderr
        assert host in json.dumps(json.loads(p.stdout))
