"""Agent config: file, flags, errors in one line; the CLI's --help and failures."""

from __future__ import annotations

import re

import pytest
from click.testing import CliRunner

from fleetmedic.agent.cli import agent
from fleetmedic.agent.config import AgentConfig
from fleetmedic.agent.loop import check_config, summary_line
from fleetmedic.checks import CheckConfig
from fleetmedic.errors import ConfigError
from fleetmedic.model import keys


def test_defaults_have_reasons():
    import dataclasses

    cfg = AgentConfig()
    assert (cfg.interval, cfg.strike_limit, cfg.taints, cfg.kernel.source) == (
        60.0,
        3,
        "default",
        "kmsg",
    )
    assert {f.name for f in dataclasses.fields(AgentConfig)} >= {
        "interval",
        "strike_limit",
        "kernel",
        "checks",
    }


def test_from_file_with_nested_sections(tmp_path):
    path = tmp_path / "agent.yaml"
    path.write_text(
        "interval: 5\ntaints: ossci\nkernel: {source: /var/log/kern.log, poll: 0.2}\n"
        "checks: {vendor: nvidia, network: {peers: [10.0.0.1], min_mbps: 100}}\n"
    )
    cfg = AgentConfig.from_file(path)
    assert cfg.interval == 5 and cfg.vocabulary().reboot.key == "repair-reboot"
    assert cfg.kernel.source == "/var/log/kern.log" and cfg.checks.network.peers == ("10.0.0.1",)


@pytest.mark.parametrize(
    "text, fragment",
    [
        ("intervall: 5", "intervall"),
        ("interval: 0", "interval: must be positive"),
        ("taints: nope", "unknown taint preset"),
        ("kernel: {poll: -1}", "kernel.poll"),
        ("fabricmanager: {poll: 0}", "fabricmanager.poll"),
        ("fabricmanager: {sorce: journal}", "sorce"),
        # page faults are judged by context (issue 39): a count for them is refused
        (
            "kernel: {thresholds: {amdgpu.page-fault: {count: 10, action: reset}}}",
            "judged by context",
        ),
        ("checks: {vendor: intel}", "vendor"),
        ("[1, 2]", "mapping"),
        ("interval: [", "agent.yaml"),
    ],
)
def test_bad_config_is_one_line(tmp_path, text, fragment):
    path = tmp_path / "agent.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as err:
        AgentConfig.from_file(path)
    assert fragment in str(err.value) and "\n" not in str(err.value)


def test_node_labels_pick_vendor_and_count():
    node = {"metadata": {"labels": {keys.LABEL_VENDOR: "amd", keys.LABEL_EXPECTED_GPUS: "8"}}}
    cfg = check_config(CheckConfig(vendor="nvidia"), node)
    assert (cfg.vendor, cfg.expected_gpus) == ("amd", 8)
    odd = {"metadata": {"labels": {keys.LABEL_VENDOR: "intel", keys.LABEL_EXPECTED_GPUS: "eight"}}}
    assert check_config(CheckConfig(vendor="nvidia"), odd) == CheckConfig(vendor="nvidia")


def test_help_explains_every_option():
    out = CliRunner().invoke(agent, ["--help"]).output
    options = [p for p in agent.params if p.name != "help"]
    assert len(options) >= 19
    for p in options:
        assert p.help and len(p.help) > 20, p.name
        assert p.opts[0] in out


def test_missing_node_name_is_one_line_exit_2():
    res = CliRunner().invoke(agent, ["--config", "/dev/null"], env={"NODE_NAME": ""})
    assert res.exit_code == 2 and "no node name" in res.output


def test_bad_kubeconfig_is_one_line_exit_2(tmp_path):
    (tmp_path / "kc").write_text("not: [a kubeconfig")
    res = CliRunner().invoke(
        agent, ["--config", "/dev/null", "--node-name", "n1", "--kubeconfig", str(tmp_path / "kc")]
    )
    assert res.exit_code == 2 and len(res.output.strip().splitlines()) == 1


def test_flags_override_the_file(tmp_path):
    from fleetmedic.agent.cli import _merge

    path = tmp_path / "agent.yaml"
    path.write_text("interval: 5\nchecks: {timeout: 9, network: {peers: [a], min_mbps: 1}}\n")
    opts = dict(
        node_name="n1",
        interval=2.0,
        strike_limit=None,
        taints=None,
        kubeconfig=None,
        retry_cap=None,
        alive_file="/run/fleetmedic/alive",
        metrics_port=9400,
        no_events=True,
        kernel_log="none",
        kernel_poll=None,
        boot_id_file=None,
        peers=("b:5201",),
        min_mbps=None,
        network_duration=1.0,
        vendor="none",
        expected_gpus=None,
        timeout=None,
    )
    cfg = _merge(AgentConfig.from_file(path), opts)
    assert (cfg.interval, cfg.events, cfg.kernel.source) == (2.0, False, "none")
    assert cfg.checks.network.peers == ("b:5201",) and cfg.checks.network.min_mbps == 1
    assert cfg.checks.timeout == 9 and cfg.checks.vendor == "none"
    assert cfg.alive_file == "/run/fleetmedic/alive" and cfg.metrics_port == 9400


def test_summary_line_is_one_line():
    from fleetmedic.agent.writer import Outcome
    from fleetmedic.checks.base import CheckResult
    from fleetmedic.policy.strikes import Decision, Strikes

    out = Outcome(Decision(Strikes(2, 0)), {}, None, False)
    line = summary_line([CheckResult("nvidia.ecc", "problem", "x", {}, "gpu")], out, 3)
    assert line == "gpu problem (nvidia.ecc); strikes gpu 2/3, network 0/3"
    assert re.fullmatch(r"[^\n]+", line)
