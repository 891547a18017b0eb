"""Hardware profiles (issue 20 part 1): a node that differs from its profile is a
finding whose evidence is the difference; a matching node passes."""

from __future__ import annotations

from pathlib import Path

import pytest

from fleetmedic.checks import fabric, hwprofile
from fleetmedic.checks.hwprofile import Gpu, Inventory


def port(i: int, rate: float = 100.0) -> fabric.Port:
    return fabric.Port(f"rdmap{i}s0", "1", "ACTIVE", "LinkUp", rate, "Unspecified", {}, {})


def p5_node() -> Inventory:
    gpus = [
        Gpu(i, "NVIDIA H100 80GB HBM3", 81559, pcie_gen=5, pcie_width=16, links_up=18)
        for i in range(8)
    ]
    return Inventory(gpus=gpus, ports=[port(i) for i in range(32)])


@pytest.fixture(scope="module")
def p5() -> dict:
    name, body = hwprofile.select(
        hwprofile.load(), {"node.kubernetes.io/instance-type": "p5.48xlarge"}
    ) or (None, None)
    assert name == "p5"
    return dict(body or {})


def problems(results):
    return {r.name: r for r in results if r.status == "problem"}


def test_shipped_profiles_load_and_name_the_issue_types() -> None:
    profiles = hwprofile.load()
    assert {"p4d", "p5", "p5en", "p6-b200", "mi300x-8", "generic-8gpu"} <= set(profiles)


def test_matching_node_passes(p5: dict) -> None:
    results = hwprofile.compare(p5, p5_node())
    assert problems(results) == {}
    assert {r.name for r in results} >= {"profile.gpus", "profile.pcie", "profile.rdma_rate"}


def test_seven_of_eight_gpus(p5: dict) -> None:
    inv = p5_node()
    inv = Inventory(gpus=inv.gpus[:7], ports=inv.ports)
    r = problems(hwprofile.compare(p5, inv))["profile.gpus"]
    assert r.summary == "7 of 8 GPUs"
    assert r.evidence == {"found": 7, "expected": 8, "difference": ["7 of 8 GPUs"]}


def test_downgraded_pcie_link(p5: dict) -> None:
    inv = p5_node()
    gpus = list(inv.gpus)
    gpus[3] = Gpu(3, "NVIDIA H100 80GB HBM3", 81559, pcie_gen=4, pcie_width=8, links_up=18)
    r = problems(hwprofile.compare(p5, Inventory(gpus, inv.ports)))["profile.pcie"]
    assert r.evidence["difference"] == ["GPU 3 PCIe Gen4 x8, expected Gen5 x16"]


def test_rdma_port_at_half_rate(p5: dict) -> None:
    inv = p5_node()
    ports = list(inv.ports)
    ports[3] = port(3, rate=50.0)
    found = problems(hwprofile.compare(p5, Inventory(inv.gpus, ports)))
    assert set(found) == {"profile.rdma_rate"}
    assert found["profile.rdma_rate"].summary == "rdmap3s0/1 at 50 Gb/s, expected 100"
    assert found["profile.rdma_rate"].category == "network"


def test_missing_rdma_port_and_nvlink_down(p5: dict) -> None:
    inv = p5_node()
    gpus = list(inv.gpus)
    gpus[5] = Gpu(5, "NVIDIA H100 80GB HBM3", 81559, pcie_gen=5, pcie_width=16, links_up=16)
    found = problems(hwprofile.compare(p5, Inventory(gpus, inv.ports[:31])))
    assert found["profile.rdma_count"].summary == "31 of 32 RDMA ports"
    assert found["profile.links"].summary == "GPU 5 has 16 of 18 NVLink links up"


def test_operator_file_extends_and_selects_by_pool(tmp_path: Path) -> None:
    extra = tmp_path / "profiles.yaml"
    extra.write_text("profiles:\n  lab-a100:\n    match: [lab]\n    gpus: 4\n")
    profiles = hwprofile.load(extra)
    assert "p5" in profiles
    assert hwprofile.select(profiles, {}, pool="lab")[0] == "lab-a100"
    assert hwprofile.select(profiles, {"team": "x"}) is None


def test_bad_operator_file_is_one_clear_error(tmp_path: Path) -> None:
    extra = tmp_path / "profiles.yaml"
    extra.write_text("profiles:\n  x:\n    gpu: 4\n")
    with pytest.raises(hwprofile.ProfileError, match=r"profile 'x': unknown \['gpu'\]"):
        hwprofile.load(extra)


def test_expected_bus_bandwidth_with_its_tolerance(tmp_path: Path) -> None:
    profiles = hwprofile.load()
    assert hwprofile.expected_busbw(profiles["p5"]) == (460.0, hwprofile.BUSBW_TOLERANCE)
    assert hwprofile.expected_busbw(profiles["mi300x-8"]) == (300.0, 0.2)
    assert hwprofile.expected_busbw(profiles["generic-8gpu"]) is None
    extra = tmp_path / "profiles.yaml"
    extra.write_text("profiles:\n  lab:\n    expected_busbw_gbps: 100\n    busbw_tolerance: 0.1\n")
    assert hwprofile.expected_busbw(hwprofile.load(extra)["lab"]) == (100.0, 0.1)


@pytest.mark.parametrize(
    ("body", "said"),
    [
        ("expected_busbw_gbps: -5", "expected_busbw_gbps -5 out of range"),
        ("expected_busbw_gbps: fast", "expected_busbw_gbps 'fast' out of range"),
        ("busbw_tolerance: 20", "busbw_tolerance 20 out of range"),
    ],
)
def test_a_bad_bandwidth_figure_is_one_clear_error(tmp_path: Path, body: str, said: str) -> None:
    extra = tmp_path / "profiles.yaml"
    extra.write_text(f"profiles:\n  x:\n    {body}\n")
    with pytest.raises(hwprofile.ProfileError, match=rf"profile 'x': {said}$"):
        hwprofile.load(extra)
