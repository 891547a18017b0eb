"""No tracebacks, ever (issue 33 part 2): every command, run as an operator runs it (a
process of its own, FLEETMEDIC_DEBUG=1 so the last-resort handler in fleetmedic/cli.py
cannot hide a bug), with malformed input ends with one error line and a documented exit
code: non-UTF-8 and binary configs, wrong types in every config section of the agent,
the checks and the controller, unknown keys, missing files, bad URLs, an unreachable
server, odd node names, negative numbers."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.harness import loadscale

BINARY = "/bin/ls"


def closed_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # (nothing listens there now: connections are refused at once)
    return port


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, str]:
    d = tmp_path_factory.mktemp("bad")
    kc = d / "kubeconfig"
    kc.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        f"clusters: [{{name: c, cluster: {{server: 'https://127.0.0.1:{closed_port()}'}}}}]\n"
        "contexts: [{name: c, context: {cluster: c, user: u}}]\n"
        "users: [{name: u, user: {token: t}}]\n"
    )
    texts = {
        "nonutf8": b"interval: \xff\n",
        "empty_ok": b"",
        "yaml": b"interval: [\n",
        "list": b"- 1\n- 2\n",
        # the agent's sections
        "agent_unknown": b"kube: {}\n",
        "agent_typo": b"intervall: 5\n",
        "agent_interval": b"interval: soon\n",
        "agent_strikes": b"strike_limit: many\n",
        "agent_kernel": b"kernel: {poll: -1}\n",
        "agent_kernel_type": b"kernel: [1]\n",
        "agent_thresholds": b"kernel: {thresholds: {xid.69: {count: x}}}\n",
        "agent_threshold_workflow": b"kernel: {thresholds: {xid.13: {count: 5}}}\n",
        "agent_checks": b"checks: {network: {peers: 5}}\n",
        "agent_hardware": b"checks: {hardware: []}\n",
        "agent_fabric": b"checks: {fabric: {thresholds: {symbol_error: -1}}}\n",
        "agent_port": b"metrics_port: 99999\n",
        # the checks' sections
        "checks_timeout": b"checks: {timeout: '<=5'}\n",
        "checks_vendor": b"vendor: intel\n",
        "checks_network": b"network: {duration: forever}\n",
        "checks_nvidia": b"nvidia: {retired_pages_limit: lots}\n",
        "checks_typo": b"netwrok: {}\n",
        # the controller's sections
        "ctl_kube": b"kube: 5\n",
        "ctl_selector": b"kube: {label_selector: '!!a'}\n",
        "ctl_ladder": b"ladder: {order: [reboot, nope]}\n",
        "ctl_safety": b"safety: {max_concurrent: x}\n",
        "ctl_metrics": b"metrics: {port: -1}\n",
        "ctl_smtp": b"smtp: []\n",
        "ctl_profiles": b"profiles: [{name: a, selector: '!!'}]\n",
        "ctl_typo": b"saftey: {}\n",
        "ctl_loki_url": (
            f"kube: {{kubeconfig: {kc}}}\nsources: {{loki: {{endpoint: not-a-url}}}}\n"
        ).encode(),
        "ctl_missing_kc": b"kube: {kubeconfig: /nonexistent/kubeconfig}\n",
        "ctl_unreachable": f"kube: {{kubeconfig: {kc}}}\n".encode(),
    }
    out = {name: str(d / f"{name}.yaml") for name in texts}
    for name, data in texts.items():
        Path(out[name]).write_bytes(data)
    out["kubeconfig"] = str(kc)
    out["dir"] = str(d)
    out["missing"] = str(d / "nope.yaml")
    return out


USAGE, UNREACHABLE = 2, 3
CONFIG_CASES = [
    "nonutf8",
    "yaml",
    "list",
    "missing",
    "dir",
    "binary",
]
AGENT = [f"agent_{n}" for n in ("unknown", "typo", "interval", "strikes", "kernel")] + [
    f"agent_{n}" for n in ("kernel_type", "thresholds", "checks", "hardware", "fabric", "port")
]
CHECKS = ["checks_timeout", "checks_vendor", "checks_network", "checks_nvidia", "checks_typo"]
CONTROLLER = ["ctl_kube", "ctl_selector", "ctl_ladder", "ctl_safety", "ctl_metrics"]
CONTROLLER += ["ctl_smtp", "ctl_profiles", "ctl_typo"]


def path_of(files: dict[str, str], name: str) -> str:
    return BINARY if name == "binary" else files[name]


def run(args: list[str], timeout: float = 60) -> subprocess.CompletedProcess:
    env = {**os.environ, "FLEETMEDIC_DEBUG": "1", "KUBECONFIG": "/nonexistent-kubeconfig"}
    env.pop("KUBERNETES_SERVICE_HOST", None)
    return subprocess.run(
        [sys.executable, "-m", "fleetmedic", *args],
        capture_output=True,
        text=True,
        timeout=loadscale.guard(timeout),
        env=env,
    )


def one_error(r: subprocess.CompletedProcess, code: int, fragment: str = "") -> str:
    """No traceback, one line on stderr (click's usage errors too: fleetmedic/cli.py
    main), the documented exit code; returns the line."""
    assert "Traceback" not in r.stderr, r.stderr
    errors = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(errors) == 1 and "error:" in errors[0], r.stderr
    assert r.returncode == code, (r.returncode, r.stderr)
    assert fragment.lower() in errors[0].lower(), errors[0]
    return errors[0]


@pytest.mark.parametrize("name", CONFIG_CASES + AGENT + CHECKS)
def test_agent_configs(files, name):
    r = run(["agent", "--config", path_of(files, name), "--node-name", "n1", "--once"])
    line = one_error(r, USAGE)
    if name == "agent_typo":
        assert "did you mean 'interval'" in line


@pytest.mark.parametrize("name", CONFIG_CASES + CHECKS + ["agent_checks", "agent_fabric"])
def test_check_configs(files, name):
    # (an agent file's `checks:` section is read as the check config too)
    r = run(["check", "--config", path_of(files, name), "--category", "network"])
    one_error(r, USAGE)


@pytest.mark.parametrize("name", [*CONFIG_CASES, "checks_typo"])
def test_diag_fabric_configs(files, name):
    one_error(run(["diag", "--fabric", "--config", path_of(files, name)]), USAGE)


@pytest.mark.parametrize("name", CONFIG_CASES + CONTROLLER)
@pytest.mark.parametrize("command", [["status"], ["run", "--once", "--dry-run"]])
def test_controller_configs(files, name, command):
    line = one_error(run([*command, "--config", path_of(files, name)]), USAGE)
    if name == "missing":
        assert "not found" in line
    if name == "ctl_typo":
        assert "did you mean 'safety'" in line


def test_config_check_lists_problems(files):
    r = run(["config", "check", "--config", files["ctl_loki_url"]])
    assert "Traceback" not in r.stderr and r.returncode == USAGE
    assert "sources.loki" in r.stderr and all(
        ln.startswith("fleetmedic: error: ") for ln in r.stderr.splitlines()
    )


def test_a_missing_kubeconfig_is_not_found_and_names_the_flag(files):
    line = one_error(
        run(["status", "--config", files["empty_ok"], "--kubeconfig", "/nonexistent"]), USAGE
    )
    assert "not found" in line and "--kubeconfig" in line
    line = one_error(run(["history", "n1", "--config", files["ctl_missing_kc"]]), USAGE)
    assert "not found" in line and "kube.kubeconfig" in line


def test_an_unreachable_server_is_one_line_exit_3(files):
    line = one_error(run(["status", "--config", files["ctl_unreachable"]]), UNREACHABLE)
    assert "127.0.0.1" in line


@pytest.mark.parametrize(
    "args",
    [
        ["history", "n1;rm -rf /"],
        ["release", "a" * 300],
        ["quarantine", "Node_1", "--dry-run"],
        ["history", "$(id)"],
        ["agent", "--node-name", "n1 n2", "--once"],
    ],
)
def test_odd_node_names_are_refused_before_any_request(files, args):
    r = run([*args, "--config", files["ctl_unreachable"]] if args[0] != "agent" else args)
    line = one_error(r, USAGE)
    assert "127.0.0.1" not in r.stderr and ("name" in line.lower() or "node" in line.lower())


@pytest.mark.parametrize(
    "args, fragment",
    [
        (["history", "n1", "--limit", "-1"], "--limit"),
        (["watch", "loki", "--endpoint", "http://x:3100", "--lookback", "-5"], "--lookback"),
        (["watch", "loki", "--endpoint", "http://x:3100", "--poll-interval", "-1"], "poll"),
        (["watch", "loki", "--endpoint", "http://x:3100", "--log-level", "loud"], "loud"),
        (["watch", "loki", "--endpoint", "http://x:3100", "--mode", "push"], "--mode"),
        (["agent", "--node-name", "n1", "--interval", "-1m"], "--interval"),
        (["run", "--once", "--once-timeout", "never"], "--once-timeout"),
        (["check", "--network-duration", "0"], "--network-duration"),
    ],
)
def test_negative_and_unknown_values_are_usage_errors(args, fragment):
    one_error(run(args), USAGE, fragment)


def test_watch_loki_checks_the_endpoint_first_and_creates_no_directory(files, tmp_path):
    cursor = tmp_path / "made" / "cursor.json"
    r = run(
        [
            "watch",
            "loki",
            "--endpoint",
            "not-a-url",
            "--kubeconfig",
            "/nonexistent",
            "--cursor-file",
            str(cursor),
        ]
    )
    assert "not-a-url" in one_error(r, USAGE)
    r = run(["watch", "loki", "--endpoint", "http://localhost:3100", "--cursor-file", str(cursor)])
    assert "not found" in one_error(r, USAGE)
    assert not cursor.parent.exists()
    # Loki unreachable: exit 3, and still no directory (it is made at the first save)
    port = closed_port()
    args = ["--kubeconfig", files["kubeconfig"], "--cursor-file", str(cursor), "--once"]
    r = run(["watch", "loki", "--endpoint", f"http://127.0.0.1:{port}", *args])
    line = one_error(r, UNREACHABLE)
    assert "loki" in line and "127.0.0.1" in line and str(port) in line
    assert not cursor.parent.exists()
