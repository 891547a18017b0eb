"""The agent's Slurm settings: from the file, from the flags (which win), and bad values
refused as one ConfigError line at start."""

from __future__ import annotations

import pytest

from fleetmedic.agent.cli import _merge
from fleetmedic.agent.config import AgentConfig, SlurmAgentConfig
from fleetmedic.errors import ConfigError

FLAGS = dict.fromkeys(
    [
        "node_name",
        "interval",
        "strike_limit",
        "taints",
        "kubeconfig",
        "retry_cap",
        "alive_file",
        "metrics_port",
        "kernel_log",
        "kernel_poll",
        "boot_id_file",
        "min_mbps",
        "network_duration",
        "vendor",
        "expected_gpus",
        "timeout",
        "slurm_conf",
        "slurm_reason_prefix",
    ]
)


def flags(**given):
    return {**FLAGS, "peers": (), "no_events": False, **given}


def test_kubernetes_unless_slurm_is_named():
    assert AgentConfig().slurm is None
    assert _merge(AgentConfig(), flags()).slurm is None


def test_the_file_names_slurm_and_the_flags_win(tmp_path):
    path = tmp_path / "agent.yaml"
    path.write_text("slurm: {conf: /etc/slurm/slurm.conf, reason_prefix: 'fm-a:'}\n")
    cfg = AgentConfig.from_file(path)
    assert cfg.slurm == SlurmAgentConfig("/etc/slurm/slurm.conf", "fm-a:")
    merged = _merge(cfg, flags(slurm_conf="/other/slurm.conf"))
    assert merged.slurm == SlurmAgentConfig("/other/slurm.conf", "fm-a:")
    only_prefix = _merge(AgentConfig(), flags(slurm_reason_prefix="fm-b:"))
    assert only_prefix.slurm == SlurmAgentConfig(None, "fm-b:")


@pytest.mark.parametrize(
    "text, says",
    [
        ("slurm: {reason_prefix: ' fm:'}", "slurm.reason_prefix"),
        ("slurm: {reason_prefix: ''}", "slurm.reason_prefix"),
        ("slurm: {timeout: 0}", "slurm.timeout"),
        ("slurm: {conff: /x}", "conff"),
    ],
)
def test_bad_slurm_settings_are_one_line(tmp_path, text, says):
    path = tmp_path / "agent.yaml"
    path.write_text(text + "\n")
    with pytest.raises(ConfigError, match=says) as err:
        AgentConfig.from_file(path)
    assert "\n" not in str(err.value)
