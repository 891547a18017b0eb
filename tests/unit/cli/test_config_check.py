"""``fleetmedic config check`` (issue 33 part 4): everything ``run`` checks at start-up,
touching neither the cluster nor the nodes; "ok", or every problem on its own line and
exit 2. ``run --dry-run`` runs the same start-up checks (it used to skip them)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import yaml

from tests.harness import loadscale
from tests.unit.cli.test_bad_input import closed_port

ROOT = Path(__file__).resolve().parents[3]


def fleetmedic(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "FLEETMEDIC_DEBUG": "1"}
    env.pop("KUBERNETES_SERVICE_HOST", None)
    env.pop("LOG_ENDPOINT", None)
    return subprocess.run(
        [sys.executable, "-m", "fleetmedic", *args],
        capture_output=True,
        text=True,
        timeout=loadscale.guard(120),
        env=env,
    )


def write(tmp_path: Path, data: dict) -> Path:
    path = tmp_path / "controller.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def good(tmp_path: Path) -> dict:
    kc = tmp_path / "kubeconfig"
    kc.write_text(  # a server nobody listens on: the check must not need one
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        f"clusters: [{{name: c, cluster: {{server: 'https://127.0.0.1:{closed_port()}'}}}}]\n"
        "contexts: [{name: c, context: {cluster: c, user: u}}]\n"
        "users: [{name: u, user: {token: t}}]\n"
    )
    key = tmp_path / "id_ed25519"
    key.write_text("key\n")
    return {
        "kube": {"kubeconfig": str(kc), "label_selector": "nvidia.com/gpu.present=true"},
        "ansible": {
            "playbook_dir": str(ROOT / "playbooks"),
            "ssh_key_file": str(key),
            "run_dir": str(tmp_path / "runs"),
            "evidence_dir": str(tmp_path / "evidence"),
        },
    }


def test_a_good_config_is_ok_and_nothing_is_created(tmp_path):
    r = fleetmedic("config", "check", "--config", str(write(tmp_path, good(tmp_path))))
    assert (r.returncode, r.stdout, r.stderr) == (0, "ok\n", "")
    assert not (tmp_path / "runs").exists() and not (tmp_path / "evidence").exists()


def test_every_problem_is_one_line(tmp_path):
    data = good(tmp_path)
    data["ansible"]["playbook_dir"] = str(tmp_path / "no-playbooks")
    data["ansible"]["ssh_key_file"] = str(tmp_path / "no-key")
    (tmp_path / "a-file").write_text("")
    data["ansible"]["run_dir"] = str(tmp_path / "a-file" / "runs")  # (cannot be made)
    data["smtp"] = {
        "host": "smtp.example.com",
        "from": "a@example.com",
        "to": ["b@example.com"],
        "password_file": str(tmp_path / "no-password"),
    }
    data["sources"] = {"loki": {}}  # (and no LOG_ENDPOINT: no endpoint at all)
    r = fleetmedic("config", "check", "--config", str(write(tmp_path, data)))
    assert r.returncode == 2 and r.stdout == ""
    lines = r.stderr.splitlines()
    assert all(ln.startswith("fleetmedic: error: ") for ln in lines), lines
    text = "\n".join(lines)
    for fragment in (
        "ladder.playbooks.reboot",
        "ladder.playbooks.verify",
        "ansible.ssh_key",
        "smtp.password",
        "a-file/runs",
        "sources.loki",
    ):
        assert fragment in text, (fragment, text)
    assert "Traceback" not in r.stderr


def test_a_config_that_does_not_parse_is_one_line(tmp_path):
    r = fleetmedic("config", "check", "--config", str(write(tmp_path, {"saftey": {}})))
    assert r.returncode == 2 and "did you mean 'safety'" in r.stderr
    assert len(r.stderr.splitlines()) == 1


def test_run_dry_run_runs_the_start_up_checks(tmp_path):
    data = good(tmp_path)
    data["ansible"]["ssh_key_file"] = str(tmp_path / "no-key")
    r = fleetmedic("run", "--once", "--dry-run", "--config", str(write(tmp_path, data)))
    assert r.returncode == 2 and "missing files: ansible.ssh_key" in r.stderr, r.stderr
    assert len(r.stderr.splitlines()) == 1
