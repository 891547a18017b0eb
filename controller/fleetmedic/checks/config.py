"""What the checks need to know, with the reason for every default.

Plain frozen dataclasses: the agent builds one from its own config and the
Node's labels (``fleetmedic.io/gpu-vendor``, ``fleetmedic.io/expected-gpus``),
``fleetmedic check`` builds one from its flags. ``from_mapping`` accepts the
same keys from YAML/JSON and turns mistakes into one-line ConfigErrors.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, Literal

from fleetmedic.errors import ConfigError

Vendor = Literal["auto", "nvidia", "amd", "none"]


@dataclasses.dataclass(frozen=True)
class NvidiaConfig:
    require_persistence_mode: bool = True
    """Persistence mode off means the driver tears down and re-initialises GPU state
    between jobs (slow starts, lost ECC/XID state); GPU fleets run it on."""
    allow_idle_pcie_downshift: bool = True
    """GPUs lower the PCIe link *generation* when idle to save power; that is not a
    fault. While NVML reports GpuIdle, only a narrower link *width* is a problem."""
    retired_pages_limit: int = 60
    """Retired pages (single + double bit) at which a GPU counts as worn out even with
    nothing pending; a common RMA threshold. Set to your vendor agreement."""


@dataclasses.dataclass(frozen=True)
class AmdConfig:
    bad_pages_limit: int = 0
    """Retired (reserved) bad pages at which a GPU is a problem; 0 disables. Pending
    and unreservable pages are always a problem: they need a reset or hands."""


@dataclasses.dataclass(frozen=True)
class NetworkConfig:
    peers: tuple[str, ...] = ()
    """iperf3 servers (host or host:port) to measure against, tried in order; the
    first that answers decides. Empty: no network check."""
    min_mbps: float = 1000.0
    """Below this many Mbit/s the link is a problem. Set it to a fraction (say 50%)
    of what a healthy node measures to the same peer, not to the NIC's line rate."""
    duration: float = 3.0
    """Seconds of traffic per measurement; long enough for TCP to leave slow start."""
    reverse: bool = False
    """Measure peer -> node (iperf3 -R) instead of node -> peer."""
    parallel: int = 1
    """TCP streams (iperf3 -P); raise it for links faster than one stream can fill."""
    port: int = 5201
    """Default iperf3 port when a peer is given without one."""


@dataclasses.dataclass(frozen=True)
class KernelConfig:
    path: str | None = None
    """Kernel log to scan. None: the node's own log (/dev/kmsg through the scanner's
    default source)."""


@dataclasses.dataclass(frozen=True)
class CheckConfig:
    vendor: Vendor = "auto"
    """Which GPU checks to run. `auto` uses whatever vendor library or tool is present
    and reports `unknown` if none is (a broken driver install must not look like a
    CPU node): pass the Node's `fleetmedic.io/gpu-vendor` label when there is one."""
    expected_gpus: int | None = None
    """GPUs this node should have (label `fleetmedic.io/expected-gpus`). None: at
    least one."""
    timeout: float = 15.0
    """Hard limit per probe in seconds; a probe still running then is killed and its
    checks are `unknown`. NVML answers in well under a second on a healthy 8-GPU node;
    amd-smi, a Python tool, needs a few seconds."""
    nvidia: NvidiaConfig = NvidiaConfig()
    amd: AmdConfig = AmdConfig()
    network: NetworkConfig = NetworkConfig()
    kernel: KernelConfig = KernelConfig()

    def __post_init__(self) -> None:
        if self.vendor not in ("auto", "nvidia", "amd", "none"):
            raise ConfigError(f"vendor: must be auto, nvidia, amd or none, got {self.vendor!r}")
        if self.expected_gpus is not None and self.expected_gpus < 0:
            raise ConfigError(f"expected_gpus: must be >= 0, got {self.expected_gpus}")
        if self.timeout <= 0:
            raise ConfigError(f"timeout: must be > 0, got {self.timeout}")

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> CheckConfig:
        """Build from plain data (YAML/JSON), e.g. the agent config's `checks:` section."""
        try:
            kwargs = dict(data)
            sections = {
                "nvidia": NvidiaConfig,
                "amd": AmdConfig,
                "network": NetworkConfig,
                "kernel": KernelConfig,
            }
            for key, section in sections.items():
                if key in kwargs:
                    sub = dict(kwargs[key] or {})
                    if "peers" in sub:
                        sub["peers"] = tuple(sub["peers"] or ())
                    kwargs[key] = section(**sub)
            return cls(**kwargs)
        except TypeError as exc:
            raise ConfigError(f"checks: {exc}") from None
