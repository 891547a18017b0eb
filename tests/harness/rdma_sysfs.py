"""RDMA ports as sysfs trees in the kernel's own formats (this machine's kernel has no RDMA
class at all, so the fabric checks read trees written here; ``fabric.sysfs_root`` points
at them).

Where each format comes from:

- file names and meanings: the kernel's Documentation/ABI/stable/sysfs-class-infiniband
  (``ports/<n>/{state,phys_state,rate,link_layer}``, ``counters/<name>``, the optional
  ``hw_counters/``);
- the text of each file: drivers/infiniband/core/sysfs.c, as published captures show it:
  ``state`` "4: ACTIVE" / "1: DOWN" and ``phys_state`` "5: LinkUp" / "2: Polling" /
  "3: Disabled" (``"%d: %s\\n"``; prometheus/procfs's fixtures/sys.ttar, the tree
  node_exporter's tests read, and a published ConnectX-3 capture of a Polling port);
  ``rate`` ``"%d%s Gb/sec (%dX%s)\\n"``: "400 Gb/sec (4X NDR)" on a ConnectX-7 port, "200
  Gb/sec (4X HDR)" when the same port trains at HDR, "100 Gb/sec (4X EDR)" on EFA, whose
  driver reports EDR 4X (drivers/infiniband/hw/efa/efa_verbs.c efa_query_port);
  ``link_layer`` "InfiniBand", "Ethernet" (RoCE), or "Unknown" for EFA (link_layer_show's
  default branch);
- one integer per ``counters/*`` file; EFA's ``hw_counters`` names (``rx_drops``,
  ``tx_pkts``, ...) from efa_verbs.c's EFA_DEFINE_STATS.
"""

from __future__ import annotations

from pathlib import Path

ACTIVE = {"state": "4: ACTIVE", "phys_state": "5: LinkUp"}
DOWN = {"state": "1: DOWN", "phys_state": "2: Polling"}
NDR = "400 Gb/sec (4X NDR)"
HDR = "200 Gb/sec (4X HDR)"
ERROR_COUNTERS = (
    "symbol_error",
    "link_downed",
    "port_rcv_errors",
    "link_error_recovery",
    "excessive_buffer_overrun_errors",
)


def write_port(
    root: Path,
    dev: str,
    port: str = "1",
    *,
    rate: str = NDR,
    link_layer: str = "InfiniBand",
    state: dict[str, str] | None = None,
    counters: dict[str, int] | None = None,
    hw_counters: dict[str, int] | None = None,
) -> Path:
    """One port under ``<root>/class/infiniband/<dev>/ports/<port>`` (rewritten in place,
    as the kernel's files change under a reader)."""
    pdir = root / "class" / "infiniband" / dev / "ports" / port
    (pdir / "counters").mkdir(parents=True, exist_ok=True)
    files = {**ACTIVE, **(state or {}), "rate": rate, "link_layer": link_layer}
    for name, text in files.items():
        (pdir / name).write_text(text + "\n")
    values = {c: 0 for c in ERROR_COUNTERS} | {"port_xmit_data": 0} | (counters or {})
    for name, value in values.items():
        (pdir / "counters" / name).write_text(f"{value}\n")
    if hw_counters is not None:
        (pdir / "hw_counters").mkdir(exist_ok=True)
        for name, value in hw_counters.items():
            (pdir / "hw_counters" / name).write_text(f"{value}\n")
    return pdir


def infiniband_node(root: Path, ports: int = 8, rate: str = NDR) -> Path:
    """``ports`` ConnectX-7 InfiniBand ports mlx5_0..N-1, all ACTIVE at ``rate``."""
    for i in range(ports):
        write_port(root, f"mlx5_{i}", rate=rate)
    return root


def efa_node(root: Path, devices: int = 32) -> Path:
    """``devices`` EFA devices as a p5.48xlarge shows them (rdmap<bus>s0, one port each)."""
    for i in range(devices):
        write_port(
            root,
            f"rdmap{79 + i}s0",
            rate="100 Gb/sec (4X EDR)",
            link_layer="Unknown",
            hw_counters={"rx_drops": 0, "tx_pkts": 0, "rx_pkts": 0},
        )
    return root
