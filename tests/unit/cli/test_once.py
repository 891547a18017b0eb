"""``--once`` returns (issue 33 part 3): with the API server unreachable (a closed port on
loopback: real sockets, connections refused) ``run --once`` and ``agent --once`` give up
after ``--once-timeout`` with exit 3 and one line naming the server; the daemon keeps
waiting, with one log line for the outage, not one per retry."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from tests.harness import loadscale
from tests.harness.loadscale import Deadline
from tests.unit.cli.test_bad_input import closed_port

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture
def setup(tmp_path):
    port = closed_port()
    kc = tmp_path / "kubeconfig"
    kc.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "current-context": "c",
                "clusters": [{"name": "c", "cluster": {"server": f"https://127.0.0.1:{port}"}}],
                "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
                "users": [{"name": "u", "user": {"token": "t"}}],
            }
        )
    )
    key = tmp_path / "id_ed25519"
    key.write_text("(a key file: the preflight only checks that it exists)\n")
    cfg = tmp_path / "controller.yaml"
    cfg.write_text(
        yaml.safe_dump(
            {
                "kube": {"kubeconfig": str(kc)},
                "ansible": {
                    "playbook_dir": str(ROOT / "playbooks"),
                    "config_file": str(ROOT / "ansible.cfg"),
                    "ssh_key_file": str(key),
                    "run_dir": str(tmp_path / "runs"),
                    "evidence_dir": str(tmp_path / "evidence"),
                },
                "metrics": {"address": "127.0.0.1", "port": closed_port()},
            }
        )
    )
    return cfg, kc, port


def fleetmedic(*args: str, **kw) -> subprocess.Popen:
    env = {**os.environ, "FLEETMEDIC_DEBUG": "1"}
    env.pop("KUBERNETES_SERVICE_HOST", None)
    return subprocess.Popen(
        [sys.executable, "-m", "fleetmedic", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        **kw,
    )


@pytest.mark.parametrize("command", ["run", "agent"])
def test_once_gives_up_after_the_timeout_with_exit_3(setup, command):
    cfg, kc, port = setup
    args = (
        ["run", "--once", "--config", str(cfg)]
        if command == "run"
        else ["agent", "--once", "--node-name", "n1", "--kubeconfig", str(kc)]
    )
    started = time.monotonic()
    p = fleetmedic(*args, "--once-timeout", "3s")
    _, err = p.communicate(timeout=loadscale.guard(120))
    took = time.monotonic() - started
    assert p.returncode == 3, err
    lines = [ln for ln in err.splitlines() if "error:" in ln]
    assert len(lines) == 1 and f"127.0.0.1:{port}" in lines[0], err
    assert "gave up after 3s" in lines[0]
    assert "Traceback" not in err
    # 3 s of waiting plus the interpreter's start and imports (slow on a busy machine)
    assert 3 <= took < 60, took


def test_the_daemon_keeps_waiting_with_one_line_per_outage(setup, tmp_path, monkeypatch):
    """Each failed attempt is seen as it happens, not guessed from a sleep: before each
    wait the daemon asks systemd for more start time (sd_notify ``EXTEND_TIMEOUT_USEC``)
    on the notify socket, which the test holds."""
    cfg, _, port = setup
    path = str(tmp_path / "notify.sock")
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind(path)
        monkeypatch.setenv("NOTIFY_SOCKET", path)
        p = fleetmedic("run", "--dry-run", "--config", str(cfg), start_new_session=True)
        try:
            attempts, deadline = 0, Deadline(60)  # the interpreter's start, then 0.5+1+2 s
            while attempts < 4:
                sock.settimeout(max(0.1, deadline.remaining()))
                try:
                    message = sock.recv(4096).decode()
                except TimeoutError:
                    pytest.fail(f"{attempts} failed attempts seen after {deadline}")
                attempts += message.startswith("EXTEND_TIMEOUT_USEC=")
            assert p.poll() is None, p.stderr.read() if p.stderr else ""
        finally:
            os.killpg(p.pid, signal.SIGKILL)
    _, err = p.communicate(timeout=loadscale.guard(30))
    down = [ln for ln in err.splitlines() if f"127.0.0.1:{port}" in ln]
    assert len(down) == 1 and "retrying with back-off" in down[0], err
