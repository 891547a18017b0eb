"""The agent picks its hardware profile from its own Node each round and fences through the
strike path: a profile mismatch or a degraded RDMA rate is a finding with the difference in
last-results; a down port counts network strikes to slow-network. In-memory Node, sysfs
trees in the kernel's formats; the same through the real API server and fake NVML in
tests/integration/test_agent_hwprofile.py."""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path

import pytest
from agent_helpers import MemoryKube

from fleetmedic.agent.config import AgentConfig, KernelWatchConfig
from fleetmedic.agent.loop import Agent, pick_profile
from fleetmedic.checks import CheckConfig
from fleetmedic.checks.config import FabricConfig, HardwareConfig
from fleetmedic.errors import ConfigError
from fleetmedic.model import keys
from tests.harness.rdma_sysfs import DOWN, HDR, infiniband_node, write_port

TYPE = "node.kubernetes.io/instance-type"
PROFILES = "profiles:\n  ib8:\n    match: [h100-ib.8x]\n    rdma: {count: 8, rate_gbps: 400}\n"


def node(labels: dict[str, str]) -> dict:
    return {"metadata": {"name": "n1", "labels": labels}}


def test_pick_profile_by_label_pool_name_or_none(tmp_path: Path) -> None:
    base = CheckConfig()
    cfg, said = pick_profile(base, node({TYPE: "p5.48xlarge"}))
    assert cfg.hardware.profile == "p5" and said == f"hardware profile p5 ({TYPE}=p5.48xlarge)"
    cfg, said = pick_profile(base, node({TYPE: "m5.large"}))
    assert cfg.hardware.profile is None
    assert said == f"no hardware profile matches ({TYPE}=m5.large): no profile checks"
    pooled = dataclasses.replace(base, hardware=HardwareConfig(label="x/model", pool="mi300x"))
    cfg, said = pick_profile(pooled, node({}))
    assert cfg.hardware.profile == "mi300x-8" and "no x/model label, pool mi300x" in said
    named = dataclasses.replace(base, hardware=HardwareConfig(profile="generic-8gpu"))
    assert pick_profile(named, node({TYPE: "p5.48xlarge"}))[0].hardware.profile == "generic-8gpu"
    off = dataclasses.replace(base, hardware=HardwareConfig(enabled=False))
    assert pick_profile(off, node({TYPE: "p5.48xlarge"}))[0].hardware.profile is None


def agent_for(tmp_path: Path, **hardware) -> tuple[Agent, MemoryKube]:
    profiles = tmp_path / "profiles.yaml"
    profiles.write_text(PROFILES)
    cfg = AgentConfig(
        node_name="n1",
        strike_limit=3,
        kernel=KernelWatchConfig(source="none"),
        checks=CheckConfig(
            vendor="none",
            timeout=2,
            hardware=HardwareConfig(profiles=str(profiles), **hardware),
            fabric=FabricConfig(sysfs_root=str(tmp_path / "sys")),
        ),
    )
    kube = MemoryKube()
    kube.node["metadata"]["labels"] = {TYPE: "h100-ib.8x"}
    return Agent(cfg, kube), kube


def test_half_rate_port_is_a_finding_and_fences_slow_network_at_strike_three(
    tmp_path: Path, caplog
) -> None:
    caplog.set_level(logging.INFO, logger="fleetmedic.agent")
    infiniband_node(tmp_path / "sys")
    agent, kube = agent_for(tmp_path)
    agent.round()
    assert kube.ann(keys.ANN_LAST_RESULTS)["network"]["status"] == "ok"
    write_port(tmp_path / "sys", "mlx5_3", rate=HDR)
    for strike in (1, 2, 3):
        out = agent.round()
        assert out is not None
        net = kube.ann(keys.ANN_LAST_RESULTS)["network"]
        assert net["status"] == "problem"
        assert net["detail"] == "profile.rdma_rate: mlx5_3/1 at 200 Gb/s, expected 400"
        if strike < 3:
            assert kube.ann(keys.ANN_STRIKES)["network"] == strike
    assert "fleetmedic.io/slow-network=true" in kube.taints()
    said = [r.getMessage() for r in caplog.records if "hardware profile" in r.getMessage()]
    assert said == [f"node n1: hardware profile ib8 ({TYPE}=h100-ib.8x)"]  # once in 4 rounds


def test_a_down_port_and_a_flap_count_strikes_and_a_pass_clears_them(tmp_path: Path) -> None:
    infiniband_node(tmp_path / "sys")
    agent, kube = agent_for(tmp_path)
    agent.round()
    write_port(tmp_path / "sys", "mlx5_6", state=DOWN)
    agent.round()
    assert kube.ann(keys.ANN_LAST_RESULTS)["network"]["detail"] == (
        "fabric.ports: mlx5_6/1 DOWN/Polling"
    )
    write_port(tmp_path / "sys", "mlx5_6", counters={"link_downed": 1})  # back up: it flapped
    agent.round()
    assert kube.ann(keys.ANN_STRIKES)["network"] == 2
    assert (
        "mlx5_6/1 link_downed +1 (limit 0)" in kube.ann(keys.ANN_LAST_RESULTS)["network"]["detail"]
    )
    agent.round()  # steady again
    assert kube.ann(keys.ANN_STRIKES)["network"] == 0 and kube.taints() == {"example.com/team=a"}


def test_no_matching_profile_means_no_profile_checks_said_once(tmp_path: Path, caplog) -> None:
    caplog.set_level(logging.INFO, logger="fleetmedic.agent")
    infiniband_node(tmp_path / "sys", ports=2)
    agent, kube = agent_for(tmp_path)
    kube.node["metadata"]["labels"] = {TYPE: "m5.large"}
    agent.round()
    agent.round()
    assert kube.ann(keys.ANN_LAST_RESULTS)["network"]["status"] == "ok"  # 2 ports, no count
    said = [r.getMessage() for r in caplog.records if "hardware profile" in r.getMessage()]
    assert said == [f"node n1: no hardware profile matches ({TYPE}=m5.large): no profile checks"]


def test_a_bad_profile_file_or_name_stops_the_agent_at_start(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no hardware profile named 'p55'"):
        agent_for(tmp_path, profile="p55")
    bad = tmp_path / "bad.yaml"
    bad.write_text("profiles:\n  x: {gpus: 8, colour: blue}\n")
    cfg = AgentConfig(checks=CheckConfig(hardware=HardwareConfig(profiles=str(bad))))
    with pytest.raises(ConfigError, match="unknown"):
        Agent(cfg, MemoryKube())
