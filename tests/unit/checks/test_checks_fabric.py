"""fabric.ports / fabric.rate on sysfs trees in the kernel's real formats.

This kernel has no RDMA class, so each test writes a tree under tmp_path. File contents
are as the kernel writes them (drivers/infiniband/core/sysfs.c), as captured in public
sources: prometheus/procfs's sysfs fixtures used by node_exporter
(fixtures/sys.ttar: ``state`` "4: ACTIVE", ``phys_state`` "5: LinkUp",
``rate`` "40 Gb/sec (4X QDR)", one integer per ``counters/*`` file), and published
``ibstatus`` captures showing a DOWN/Disabled port reporting the driver's placeholder
rate "40 Gb/sec (4X QDR)" and active ConnectX-7 ports at "400 Gb/sec (4X NDR)".
EFA's ``hw_counters`` names (rx_drops, tx_pkts, ...) are those of the efa driver
(drivers/infiniband/hw/efa/efa_verbs.c).
"""

from __future__ import annotations

from pathlib import Path

from fleetmedic.checks import fabric

ACTIVE = {
    "state": "4: ACTIVE\n",
    "phys_state": "5: LinkUp\n",
    "rate": "400 Gb/sec (4X NDR)\n",
    "link_layer": "InfiniBand\n",
}
COUNTERS = {
    "symbol_error": 0,
    "link_downed": 0,
    "port_rcv_errors": 0,
    "link_error_recovery": 0,
    "excessive_buffer_overrun_errors": 0,
    "port_xmit_data": 123456789,
}


def write_port(root: Path, dev: str, port: str, files=None, counters=None, hw=None) -> None:
    pdir = root / "class" / "infiniband" / dev / "ports" / port
    (pdir / "counters").mkdir(parents=True, exist_ok=True)
    for name, text in {**ACTIVE, **(files or {})}.items():
        (pdir / name).write_text(text)
    for name, value in {**COUNTERS, **(counters or {})}.items():
        (pdir / "counters" / name).write_text(f"{value}\n")
    if hw:
        (pdir / "hw_counters").mkdir(exist_ok=True)
        for name, value in hw.items():
            (pdir / "hw_counters" / name).write_text(f"{value}\n")


def eight_ports(root: Path) -> None:
    for i in range(8):
        write_port(root, f"mlx5_{i}", "1")


def test_parse_rate_real_strings() -> None:
    assert fabric.parse_rate("400 Gb/sec (4X NDR)") == 400
    assert fabric.parse_rate("25 Gb/sec (1X EDR)") == 25
    assert fabric.parse_rate("10 Gb/sec") == 10  # rxe writes no width
    assert fabric.parse_rate("") is None


def test_no_rdma_class_is_not_applicable(tmp_path: Path) -> None:
    ports = fabric.read_ports(tmp_path)
    assert ports == []
    assert not fabric.check_ports(ports).applicable


def test_healthy_fabric_passes(tmp_path: Path) -> None:
    eight_ports(tmp_path)
    ports = fabric.read_ports(tmp_path)
    assert [p.key for p in ports][:2] == ["mlx5_0/1", "mlx5_1/1"]
    assert ports[0].state == "ACTIVE" and ports[0].phys_state == "LinkUp"
    assert ports[0].counters["port_xmit_data"] == 123456789
    assert fabric.check_ports(ports).status == "ok"
    assert fabric.check_rate(ports, 400).status == "ok"


def test_down_port_is_a_problem_with_its_state(tmp_path: Path) -> None:
    eight_ports(tmp_path)
    write_port(
        tmp_path,
        "mlx5_3",
        "1",
        {"state": "1: DOWN\n", "phys_state": "3: Disabled\n", "rate": "40 Gb/sec (4X QDR)\n"},
    )
    ports = fabric.read_ports(tmp_path)
    r = fabric.check_ports(ports)
    assert r.status == "problem" and r.category == "network"
    assert r.evidence["down"] == ["mlx5_3/1 DOWN/Disabled"]
    # a down port's placeholder rate is not read as a degraded link
    assert fabric.check_rate(ports, 400).status == "ok"


def test_rdma_port_at_half_rate_gives_the_difference(tmp_path: Path) -> None:
    eight_ports(tmp_path)
    write_port(tmp_path, "mlx5_3", "1", {"rate": "200 Gb/sec (4X HDR)\n"})
    r = fabric.check_rate(fabric.read_ports(tmp_path), 400)
    assert r.status == "problem"
    assert r.summary == "mlx5_3/1 at 200 Gb/s, expected 400"


def test_flapping_port_counter_delta_over_threshold(tmp_path: Path) -> None:
    eight_ports(tmp_path)
    before = fabric.counter_snapshot(fabric.read_ports(tmp_path))
    write_port(tmp_path, "mlx5_5", "1", counters={"link_downed": 3, "symbol_error": 50})
    r = fabric.check_ports(fabric.read_ports(tmp_path), before)
    assert r.status == "problem"
    # symbol_error grew by 50, under its threshold of 100: not reported
    assert r.evidence["counters"] == ["mlx5_5/1 link_downed +3 (limit 0)"]
    # thresholds are data
    assert (
        fabric.check_ports(fabric.read_ports(tmp_path), before, {"link_downed": 5}).status == "ok"
    )


def test_efa_hw_counters_are_read(tmp_path: Path) -> None:
    efa = {"link_layer": "Unspecified\n", "rate": "100 Gb/sec (4X EDR)\n"}
    write_port(tmp_path, "rdmap16s27", "1", efa, hw={"rx_drops": 0, "tx_pkts": 10})
    before = fabric.counter_snapshot(fabric.read_ports(tmp_path))
    write_port(tmp_path, "rdmap16s27", "1", efa, hw={"rx_drops": 500, "tx_pkts": 99})
    ports = fabric.read_ports(tmp_path)
    assert ports[0].hw_counters == {"rx_drops": 500, "tx_pkts": 99}
    r = fabric.check_ports(ports, before, {"rx_drops": 100})
    assert r.evidence["counters"] == ["rdmap16s27/1 rx_drops +500 (limit 100)"]
