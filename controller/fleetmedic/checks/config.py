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

from pydantic import ConfigDict

from fleetmedic.checks.fabric import DEFAULT_THRESHOLDS as DEFAULT_FABRIC_THRESHOLDS
from fleetmedic.checks.hwprofile import DEFAULT_LABEL as DEFAULT_PROFILE_LABEL
from fleetmedic.errors import ConfigError
from fleetmedic.model.duration import Duration

Vendor = Literal["auto", "nvidia", "amd", "none"]
FORBID = ConfigDict(extra="forbid")  # (unknown keys are errors: model/settings validate_dataclass)


@dataclasses.dataclass(frozen=True)
class NvidiaConfig:
    __pydantic_config__ = FORBID

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
    __pydantic_config__ = FORBID

    bad_pages_limit: int = 0
    """Retired (reserved) bad pages at which a GPU is a problem; 0 disables. Pending
    and unreservable pages are always a problem: they need a reset or hands."""


@dataclasses.dataclass(frozen=True)
class NetworkConfig:
    __pydantic_config__ = FORBID

    peers: tuple[str, ...] = ()
    """iperf3 servers (host or host:port) to measure against, tried in order; the
    first that answers decides. Empty: no network check."""
    min_mbps: float = 1000.0
    """Below this many Mbit/s the link is a problem. Set it to a fraction (say 50%)
    of what a healthy node measures to the same peer, not to the NIC's line rate."""
    duration: Duration = 3.0
    """Seconds of traffic per measurement; long enough for TCP to leave slow start."""
    reverse: bool = False
    """Measure peer -> node (iperf3 -R) instead of node -> peer."""
    parallel: int = 1
    """TCP streams (iperf3 -P); raise it for links faster than one stream can fill."""
    port: int = 5201
    """Default iperf3 port when a peer is given without one."""


@dataclasses.dataclass(frozen=True)
class KernelConfig:
    __pydantic_config__ = FORBID

    path: str | None = None
    """Kernel log to scan. None: the node's own log (/dev/kmsg through the scanner's
    default source)."""


@dataclasses.dataclass(frozen=True)
class HardwareConfig:
    __pydantic_config__ = FORBID

    profiles: str | None = None
    """An operator's file of hardware profiles, the shape of the shipped
    ``fleetmedic/data/hardware_profiles.yaml``; a profile of the same name replaces the
    shipped one. None: the shipped profiles only."""
    label: str = DEFAULT_PROFILE_LABEL
    """The Node label whose value picks the profile (a profile's ``match`` list). The
    instance type is what a cloud sets on every node; on premises, name a label your
    provisioning sets (say ``example.com/server-model``)."""
    pool: str | None = None
    """Tried after the label: a pool name listed in a profile's ``match``, for fleets
    whose nodes carry no telling label (one agent ConfigMap per pool)."""
    profile: str | None = None
    """Compare with this profile by name, whatever the labels say (``fleetmedic check
    --profile``). The agent sets it each round from the label or pool; None and no
    match: no profile checks."""
    enabled: bool = True
    """False: no profile comparison at all, whatever matches."""


@dataclasses.dataclass(frozen=True)
class FabricConfig:
    __pydantic_config__ = FORBID

    enabled: bool = True
    """Read the RDMA ports (InfiniBand, RoCE, EFA) under ``sysfs_root``. A node without
    any reports nothing, so this is safe to leave on for CPU and Ethernet-only nodes."""
    sysfs_root: str = "/sys"
    """Where sysfs is mounted; ports are read from ``<root>/class/infiniband``. Tests
    point it at a captured tree."""
    thresholds: Mapping[str, int] = dataclasses.field(
        default_factory=lambda: dict(DEFAULT_FABRIC_THRESHOLDS)
    )
    """Counter -> the largest growth between two rounds that is still healthy; merged
    over the defaults (``link_downed`` 0: any growth is a flap; ``symbol_error`` and
    ``port_rcv_errors`` 100: a few bit errors a minute are normal on long copper).
    EFA's ``hw_counters`` (``rx_drops``...) can be added by name."""
    ignore: tuple[str, ...] = ()
    """Ports never to judge, as fnmatch patterns of ``device/port`` or ``device``
    (``mlx5_4/2``, ``mlx5_bond_*``). A port that is never cabled (the second port of a
    dual-port card, a management port) reads DOWN forever: list it here, or every
    such node collects network strikes until it is tainted slow-network."""

    def __post_init__(self) -> None:
        if not isinstance(self.thresholds, Mapping):
            raise ConfigError("fabric.thresholds: expected a mapping of counter -> growth")
        merged = dict(DEFAULT_FABRIC_THRESHOLDS)
        for key, value in self.thresholds.items():
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ConfigError(f"fabric.thresholds.{key}: must be an integer >= 0")
            merged[str(key)] = value
        object.__setattr__(self, "thresholds", merged)
        object.__setattr__(self, "ignore", tuple(str(p) for p in self.ignore))


@dataclasses.dataclass(frozen=True)
class CheckConfig:
    __pydantic_config__ = FORBID

    vendor: Vendor = "auto"
    """Which GPU checks to run. `auto` uses whatever vendor library or tool is present
    and reports `unknown` if none is (a broken driver install must not look like a
    CPU node): pass the Node's `fleetmedic.io/gpu-vendor` label when there is one."""
    expected_gpus: int | None = None
    """GPUs this node should have (label `fleetmedic.io/expected-gpus`). None: at
    least one."""
    timeout: Duration = 15.0
    """Hard limit per probe in seconds; a probe still running then is killed and its
    checks are `unknown`. NVML answers in well under a second on a healthy 8-GPU node;
    amd-smi, a Python tool, needs a few seconds."""
    nvidia: NvidiaConfig = NvidiaConfig()
    amd: AmdConfig = AmdConfig()
    network: NetworkConfig = NetworkConfig()
    kernel: KernelConfig = KernelConfig()
    hardware: HardwareConfig = HardwareConfig()
    fabric: FabricConfig = dataclasses.field(default_factory=FabricConfig)

    def __post_init__(self) -> None:
        if self.vendor not in ("auto", "nvidia", "amd", "none"):
            raise ConfigError(f"vendor: must be auto, nvidia, amd or none, got {self.vendor!r}")
        if self.expected_gpus is not None and self.expected_gpus < 0:
            raise ConfigError(f"expected_gpus: must be >= 0, got {self.expected_gpus}")
        if self.timeout <= 0:
            raise ConfigError(f"timeout: must be > 0, got {self.timeout}")

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any], source: str = "checks") -> CheckConfig:
        """Build from plain data (YAML/JSON), e.g. the agent config's `checks:` section:
        validated with pydantic, mistakes are one-line ConfigErrors naming the key."""
        from fleetmedic.model.settings import validate_dataclass

        return validate_dataclass(cls, data, source)
