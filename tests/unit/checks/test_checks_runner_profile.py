"""run_checks with a hardware profile and the fabric probe: the wiring, over sysfs trees in
the kernel's formats (tests/harness/rdma_sysfs.py) and NVML readings as the reader prints
them. The same runs through the real agent and fake NVML in
tests/integration/test_agent_hwprofile.py."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from fleetmedic.checks import nvidia, runner
from fleetmedic.checks.config import CheckConfig, FabricConfig, HardwareConfig
from tests.harness.rdma_sysfs import DOWN, HDR, efa_node, infiniband_node, write_port

PROFILES = """
profiles:
  h100-ib:
    match: [h100-ib.8x]
    gpus: 8
    model: H100
    memory_gib: 80
    nvlink_links: 18
    pcie_gen: 5
    pcie_width: 16
    rdma: {count: 8, link_layer: InfiniBand, rate_gbps: 400}
"""


@pytest.fixture
def profiles(tmp_path: Path) -> Path:
    path = tmp_path / "profiles.yaml"
    path.write_text(PROFILES)
    return path


def cfg(root: Path, profiles: Path | None = None, profile: str | None = None, **fabric):
    return CheckConfig(
        vendor="none",
        timeout=2,
        hardware=HardwareConfig(profiles=str(profiles) if profiles else None, profile=profile),
        fabric=FabricConfig(sysfs_root=str(root), **fabric),
    )


def by_name(results):
    return {r.name: r for r in results}


def run(c: CheckConfig, memory: runner.Memory | None = None, categories=("gpu", "network")):
    """The agent's categories (the kernel log is its own thread there)."""
    return runner.run_checks(c, categories=categories, memory=memory)


def test_no_rdma_and_no_profile_says_nothing(tmp_path: Path) -> None:
    assert run(cfg(tmp_path), runner.Memory()) == []


def test_matching_fabric_passes_and_mismatch_gives_the_difference(tmp_path, profiles) -> None:
    infiniband_node(tmp_path)
    res = by_name(run(cfg(tmp_path, profiles, "h100-ib")))
    assert {n: r.status for n, r in res.items()} == {
        "fabric.ports": "ok",
        "profile.rdma_count": "ok",
        "profile.rdma_link_layer": "ok",
        "profile.rdma_rate": "ok",
    }
    write_port(tmp_path, "mlx5_3", rate=HDR)  # trained at HDR: half the rate
    res = by_name(run(cfg(tmp_path, profiles, "h100-ib")))
    r = res["profile.rdma_rate"]
    assert r.status == "problem" and r.category == "network"
    assert r.evidence == {
        "difference": ["mlx5_3/1 at 200 Gb/s, expected 400"],
        "profile": "h100-ib",
    }
    assert res["fabric.ports"].status == "ok"  # up, only slow


def test_down_flapping_and_vanished_ports_across_rounds(tmp_path: Path) -> None:
    infiniband_node(tmp_path, ports=4)
    memory = runner.Memory()
    assert by_name(run(cfg(tmp_path), memory))["fabric.ports"].status == "ok"
    write_port(tmp_path, "mlx5_1", counters={"link_downed": 2})  # went down twice meanwhile
    r = by_name(run(cfg(tmp_path), memory))["fabric.ports"]
    assert r.status == "problem" and r.evidence["counters"] == ["mlx5_1/1 link_downed +2 (limit 0)"]
    assert by_name(run(cfg(tmp_path), memory))["fabric.ports"].status == "ok"
    write_port(tmp_path, "mlx5_2", state=DOWN)
    r = by_name(run(cfg(tmp_path), memory))["fabric.ports"]
    assert r.summary == "mlx5_2/1 DOWN/Polling"
    write_port(tmp_path, "mlx5_2")
    shutil.rmtree(tmp_path / "class/infiniband/mlx5_3")  # fell off the bus
    for _ in range(2):  # gone stays gone, round after round, until it is back
        r = by_name(run(cfg(tmp_path), memory))["fabric.ports"]
        assert r.status == "problem" and r.evidence["down"] == ["mlx5_3/1 gone"]
    # without memory (fleetmedic check): state only, no deltas, nothing gone
    assert by_name(run(cfg(tmp_path)))["fabric.ports"].status == "ok"


def test_thresholds_and_ignored_ports_are_config(tmp_path: Path) -> None:
    infiniband_node(tmp_path, ports=2)
    write_port(tmp_path, "mlx5_1", "2", state=DOWN)  # the card's second port, never cabled
    memory = runner.Memory()
    quiet = {"ignore": ("mlx5_*/2",), "thresholds": {"symbol_error": 1000}}
    assert by_name(run(cfg(tmp_path, **quiet), memory))["fabric.ports"].evidence == {
        "ports": 2,
        "down": [],
        "counters": [],
    }
    write_port(tmp_path, "mlx5_0", counters={"symbol_error": 500})
    assert by_name(run(cfg(tmp_path, **quiet), memory))["fabric.ports"].status == "ok"
    assert run(cfg(tmp_path, enabled=False)) == []


def test_efa_ports_match_the_shipped_p5_profile(tmp_path: Path) -> None:
    # EFA's sysfs link_layer is "Unknown"; the shipped profile says "Unspecified" (verbs)
    efa_node(tmp_path, devices=32)
    res = by_name(run(cfg(tmp_path, profile="p5"), categories=["network"]))
    assert {r.status for r in res.values()} == {"ok"}, res
    (tmp_path / "class/infiniband/rdmap110s0/ports/1/state").write_text("1: DOWN\n")
    res = by_name(run(cfg(tmp_path, profile="p5"), categories=["network"]))
    assert res["fabric.ports"].status == "problem"
    assert res["profile.rdma_count"].status == "ok"  # still 32 devices, one of them down


def test_only_network_under_repair_keeps_the_rdma_part(tmp_path, profiles) -> None:
    infiniband_node(tmp_path, ports=7)
    res = run(cfg(tmp_path, profiles, "h100-ib"), categories=["network"])
    assert {r.category for r in res} == {"network"}
    assert by_name(res)["profile.rdma_count"].summary == "7 of 8 RDMA ports"


def test_an_unusable_profile_is_unknown_not_ok(tmp_path, profiles) -> None:
    (res,) = run(cfg(tmp_path, profiles, "nope"), categories=["gpu"])
    assert res.name == "profile.select" and res.status == "unknown"
    profiles.write_text("profiles: [oops]\n")
    (res,) = run(cfg(tmp_path, profiles, "h100-ib"), categories=["gpu"])
    assert res.status == "unknown" and "needs a 'profiles:' mapping" in res.summary


def nvml_lines(gpus: list[dict]) -> str:
    lines = [{"op": "init", "value": True}, {"op": "count", "value": len(gpus)}]
    for i, g in enumerate(gpus):
        lines += [{"op": op, "gpu": i, "value": v} for op, v in g.items()]
    return "\n".join(json.dumps(x) for x in [*lines, {"op": "done"}])


def test_the_gpu_part_compares_what_nvml_read(tmp_path, profiles, monkeypatch) -> None:
    gpu = {
        "name": "NVIDIA H100 80GB HBM3",
        "memory_total": 81559 << 20,
        "pcie_gen": 5,
        "pcie_max_gen": 5,
        "pcie_width": 16,
        "nvlink": {str(k): 1 for k in range(18)},
        "clocks_event_reasons": 0,
    }
    gpus = [dict(gpu) for _ in range(7)]
    gpus[3].update(pcie_gen=4, pcie_max_gen=4)
    gpus[5].update(memory_total=40960 << 20)
    monkeypatch.setattr(nvidia, "collect", lambda timeout, env=None: nvidia.parse(nvml_lines(gpus)))
    c = cfg(tmp_path, profiles, "h100-ib")
    res = by_name(
        runner.gpu(
            CheckConfig(vendor="nvidia", hardware=c.hardware),
            None,
            (
                "h100-ib",
                {
                    "gpus": 8,
                    "model": "H100",
                    "memory_gib": 80,
                    "nvlink_links": 18,
                    "pcie_gen": 5,
                    "pcie_width": 16,
                },
            ),
        )
    )
    assert res["profile.gpus"].summary == "7 of 8 GPUs"
    assert res["profile.pcie"].evidence["difference"] == ["GPU 3 PCIe Gen4 x16, expected Gen5 x16"]
    assert res["profile.memory"].evidence["difference"] == ["GPU 5 has 40 GiB, expected 80"]
    assert res["profile.links"].status == res["profile.model"].status == "ok"
    assert {r.category for n, r in res.items() if n.startswith("profile.")} == {"gpu"}
    # NVML not enumerated: the profile cannot say "0 of 8"
    monkeypatch.setattr(
        nvidia, "collect", lambda timeout, env=None: nvidia.parse('{"op":"init","error":"X"}')
    )
    res = by_name(runner.gpu(CheckConfig(vendor="nvidia"), None, ("h100-ib", {"gpus": 8})))
    assert res["profile.gpus"].status == "unknown"
