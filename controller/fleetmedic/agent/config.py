"""The agent's settings, with the reason for every default.

Built from a YAML file (``--config``, e.g. a ConfigMap mounted by the DaemonSet)
and then the command-line flags, which win. Unknown keys and bad values are
one-line :class:`~fleetmedic.errors.ConfigError` s, so a typo in the ConfigMap
stops the agent at start instead of silently running with defaults.

Example file (every key optional)::

    interval: 60
    strike_limit: 3
    taints: default            # or ossci (data/vocabulary.yaml)
    events: true
    fabricmanager:             # NVIDIA Fabric Manager's log (NVSwitch systems)
      source: auto             # auto (the file if it exists) | journal | a file path | none
    kernel:
      source: kmsg             # kmsg | journal | a file path | none
      poll: 0.1
      dedup_window: 60
      thresholds:              # override the catalog's (count 0 turns one off)
        nvrm.unclassified: {count: 5, window: 3600, action: diagnose}
    checks:                    # fleetmedic.checks.CheckConfig
      vendor: auto
      timeout: 15
      network: {peers: ["10.0.0.1:5201"], min_mbps: 5000, duration: 3}
      hardware:                # the profile: picked by this label's value (or pool)
        label: node.kubernetes.io/instance-type
        profiles: /etc/fleetmedic/hardware_profiles.yaml   # yours, over the shipped ones
      fabric:                  # RDMA ports under <sysfs_root>/class/infiniband
        thresholds: {symbol_error: 1000}                   # growth per round, over defaults
        ignore: ["mlx5_*/2"]   # ports never cabled
    slurm:                     # a Slurm node: fence through scontrol, no Kubernetes
      conf: /etc/slurm/slurm.conf
      reason_prefix: "fleetmedic:"
      read_every: 5m           # ask slurmctld about the node at least this often
      cache_dir: /run/fleetmedic   # share that view with the health check and prolog
      node_read: auto          # auto: through the Slurm library when found | sinfo
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from fleetmedic.checks.config import FORBID, CheckConfig
from fleetmedic.errors import ConfigError
from fleetmedic.model.duration import Duration
from fleetmedic.model.settings import read_yaml, validate_dataclass
from fleetmedic.model.slurmreason import DEFAULT_PREFIX, check_prefix
from fleetmedic.model.vocabulary import Vocabulary, preset
from fleetmedic.scan.catalog import parse_threshold
from fleetmedic.scan.xidcontext import load_workflows

BOOT_ID_FILE = "/proc/sys/kernel/random/boot_id"
NODE_READS = ("auto", "sinfo")


@dataclasses.dataclass(frozen=True)
class KernelWatchConfig:
    __pydantic_config__ = FORBID

    source: str = "kmsg"
    """Where the kernel log is followed: ``kmsg`` (``/dev/kmsg``: this boot only, wakes
    on every record), ``journal`` (``journalctl -k -b -f``), a file path such as
    ``/var/log/kern.log`` (followed like ``tail -F``, across rotation), or ``none``."""
    poll: Duration = 0.1
    """Longest wait of an idle *file* follower. It wakes on the write itself (inotify on
    the file's directory), so this only matters where no inotify event comes (a file
    changed over NFS, no inotify watches left): there a Xid 79 must still become a
    taint in well under a second, and a stat() and read() ten times a second costs
    nothing measurable. ``/dev/kmsg`` and the journal wake up on new data as well."""
    dedup_window: float = 60.0
    """Seconds within which the same fault on the same GPU (an Xid storm: thousands of
    identical lines) is one finding. Short enough that a fault coming back after a
    human released the node without a reboot fences again a minute later."""
    boot_id_file: str = BOOT_ID_FILE
    """The kernel's boot id; part of the watermark, so findings of an earlier boot are
    never mistaken for this boot's. Tests point it elsewhere."""
    thresholds: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    """Per catalog rule id (or fnmatch pattern: ``sxid.*``), ``{count, window, action,
    burst}``: counts of your own, past which findings that only monitor (non-fatal SXids,
    amdgpu ring timeouts, unclassified driver errors) fence the node at ``action``. The
    catalog ships none: no published source gives such a count, and a made-up one fenced
    healthy nodes (issue 39); a finding's own words decide instead. ``count: 0`` turns
    one off. Xid 13, 31 and 45 and the amdgpu page faults are judged
    by context (the catalogs' ``workflows:``), never counted: a key for them is refused,
    not silently ignored."""

    def __post_init__(self) -> None:
        if not isinstance(self.thresholds, Mapping):
            raise ConfigError("kernel.thresholds: expected a mapping of rule id -> threshold")
        judged = load_workflows()
        for key, raw in self.thresholds.items():
            if str(key) in judged:
                raise ConfigError(
                    f"kernel.thresholds.{key}: {key} is judged by context (NVIDIA's workflow, "
                    "the catalog's `workflows:`), not counted: remove this key"
                )
            parse_threshold("kernel.thresholds", str(key), raw)
        if self.poll <= 0:
            raise ConfigError(f"kernel.poll: must be > 0, got {self.poll}")
        if self.dedup_window < 0:
            raise ConfigError(f"kernel.dedup_window: must be >= 0, got {self.dedup_window}")


@dataclasses.dataclass(frozen=True)
class FabricManagerConfig:
    """Where NVIDIA Fabric Manager logs on this node (agent/fabricwatch.py)."""

    __pydantic_config__ = FORBID

    source: str = "auto"
    """``auto``: ``path`` when that file exists (Fabric Manager runs on NVSwitch systems
    only, and logs there by default), else nothing; a file path; ``journal`` (its systemd
    unit, ``unit``); or ``none``."""
    path: str = "/var/log/fabricmanager.log"
    """Fabric Manager's log file (its fabricmanager.cfg ``LOG_FILE_NAME``)."""
    unit: str = "nvidia-fabricmanager"
    """The systemd unit whose journal ``source: journal`` follows."""
    poll: Duration = 1.0
    """Longest wait of the idle file follower (it wakes on the write itself)."""
    dedup_window: float = 60.0
    """Seconds within which the same fault on the same device is one finding."""
    stat_file: str = "/proc/stat"
    """Where this boot's start time (``btime``) is read: lines older than the boot were
    handled by the reboot. Tests point it elsewhere."""

    def __post_init__(self) -> None:
        if not self.source:
            raise ConfigError("fabricmanager.source: must be auto, journal, none or a path")
        if self.poll <= 0:
            raise ConfigError(f"fabricmanager.poll: must be > 0, got {self.poll}")
        if self.dedup_window < 0:
            raise ConfigError(f"fabricmanager.dedup_window: must be >= 0, got {self.dedup_window}")


@dataclasses.dataclass(frozen=True)
class SlurmAgentConfig:
    """The node is a Slurm node: the agent reads and fences it through the Slurm client
    tools (``sinfo``, ``scontrol``) instead of the Kubernetes API
    (:mod:`fleetmedic.adapters.slurmdoc`)."""

    __pydantic_config__ = FORBID

    conf: str | None = None
    """The cluster's slurm.conf (``SLURM_CONF`` for the tools). None: the environment's
    ``SLURM_CONF``, else Slurm's built-in default. A path that does not exist stops the
    agent at start (scontrol itself would retry it for a minute)."""
    reason_prefix: str = DEFAULT_PREFIX
    """The drain reason prefix we own (``fleetmedic: <rung>: <finding>``). Must match the
    controller's: a drain whose reason does not start with it is someone else's and the
    agent never writes to that node."""
    timeout: Duration = 30.0
    """Longest wait for one Slurm tool. slurmctld answers in milliseconds; an unreachable
    one makes ``sinfo`` give up by itself after about 9 s (measured), so this only bounds
    a hung tool."""
    read_every: Duration = 300.0
    """Read the node from slurmctld at least this often (one single-node read); in
    between, a round that has nothing to write asks nothing, and any write is decided on a
    fresh read (adapters/slurmdoc.py). 300 s at the default 60 s interval: two RPCs every
    fifth round, 0.4 per round on average, where every round used to read the whole
    cluster twice. The price: a drain someone else sets is seen up to this late, so GPU
    checks may run that long on a node someone fenced. 0: read every round."""
    cache_dir: Path | None = None
    """Keep the last view of the node in a file here too, so the node's agent processes
    (the daemon, slurmd's health check and prolog) share it; ``fleetmedic-slurm-check``
    passes ``/run/fleetmedic`` (tmpfs: a reboot forgets it). None: in memory only."""
    node_read: str = "auto"
    """How the agent reads its node before a write. ``auto``: through the Slurm library
    the client tools link, in a child process, checked against ``sinfo -n`` first and
    falling back to it (adapters/slurmlib.py; a fence about 3 ms sooner, one RPC instead
    of two); ``sinfo -n`` where no library is found, and always in ``--once`` runs, where
    starting the child would cost more than it saves. ``sinfo``: always ``sinfo -n``."""

    def __post_init__(self) -> None:
        try:
            check_prefix(self.reason_prefix)
        except ValueError as exc:
            raise ConfigError(f"slurm.reason_prefix: {exc}") from None
        if self.timeout <= 0:
            raise ConfigError(f"slurm.timeout: must be > 0, got {self.timeout}")
        if self.read_every < 0:
            raise ConfigError(f"slurm.read_every: must be >= 0, got {self.read_every}")
        if self.node_read not in NODE_READS:
            raise ConfigError(
                f"slurm.node_read: must be {' or '.join(NODE_READS)}, got {self.node_read!r}"
            )


@dataclasses.dataclass(frozen=True)
class AgentConfig:
    __pydantic_config__ = FORBID

    node_name: str = ""
    """This node's Kubernetes name (the DaemonSet passes ``spec.nodeName``), or its Slurm
    node name with ``slurm``. The agent reads and writes only this node."""
    interval: Duration = 60.0
    """Seconds from the start of one check round to the next. NVML reads are cheap, but
    each round also sends ``network.duration`` seconds of iperf3 traffic; a minute
    fences a bad GPU within about three minutes (3 strikes) at negligible cost."""
    strike_limit: int = 3
    """Consecutive failed rounds before fencing (GPU: repair=reboot; network:
    slow-network). Three rides out a single flaky reading without waiting long."""
    taints: str = "default"
    """Taint name preset (data/vocabulary.yaml): ``default`` (fleetmedic.io/repair=<step>)
    or ``ossci`` (repair-reboot, ...). Must match the controller's."""
    events: bool = True
    """Post a core/v1 Event on the Node when the agent fences it or sets/removes
    slow-network, so ``kubectl describe node`` shows why."""
    kubeconfig: str | None = None
    """Kubeconfig file. None: in-cluster credentials when running in a Pod (the bound,
    node-scoped ServiceAccount token), else ``$KUBECONFIG`` / ``~/.kube/config``."""
    retry_cap: Duration = 30.0
    """Longest wait between attempts while the API server is unreachable or refuses;
    the agent never gives up and never drops a pending fencing action."""
    alive_file: str | None = None
    """A file whose modification time the agent sets at every round and at every attempt
    while it waits out an API outage (waiting is not hanging). The DaemonSet's liveness
    probe restarts an agent that stopped touching it. None: no heartbeat."""
    metrics_port: int | None = None
    """Serve Prometheus metrics on this port (the DaemonSet uses 9400). None: no server."""
    metrics_address: str = "0.0.0.0"
    """Where the metrics server listens (in a Pod, its own IP; on a host, choose)."""
    kernel: KernelWatchConfig = KernelWatchConfig()
    fabricmanager: FabricManagerConfig = FabricManagerConfig()
    checks: CheckConfig = dataclasses.field(default_factory=CheckConfig)
    slurm: SlurmAgentConfig | None = None
    """None: the node is a Kubernetes Node. Set: it is a Slurm node, fenced by a drain with
    our reason and its record kept in the node's Extra; ``kubeconfig`` and ``events`` are
    then unused."""

    def __post_init__(self) -> None:
        if self.interval <= 0:
            raise ConfigError(f"interval: must be > 0 seconds, got {self.interval}")
        if self.strike_limit < 1:
            raise ConfigError(f"strike_limit: must be >= 1, got {self.strike_limit}")
        if self.metrics_port is not None and not 1 <= self.metrics_port <= 65535:
            raise ConfigError(f"metrics_port: must be 1..65535, got {self.metrics_port}")
        if self.retry_cap <= 0:
            raise ConfigError(f"retry_cap: must be > 0, got {self.retry_cap}")
        self.vocabulary()  # unknown preset -> ConfigError now, not at the first fence

    def vocabulary(self) -> Vocabulary:
        try:
            return preset(self.taints)
        except ValueError as exc:
            raise ConfigError(f"taints: {exc}") from None

    @classmethod
    def of_flags(
        cls, kubeconfig: str | None, slurm_conf: str | None, slurm_reason_prefix: str
    ) -> AgentConfig:
        """Where the nodes live, from the flags of a process without a config file
        (``fleetmedic watch loki``): ``--slurm-conf`` names a Slurm cluster."""
        slurm = None
        if slurm_conf is not None:
            slurm = SlurmAgentConfig(conf=slurm_conf, reason_prefix=slurm_reason_prefix)
        return cls(kubeconfig=kubeconfig, slurm=slurm)

    def replace(self, **changes: Any) -> AgentConfig:
        """A copy with top-level fields changed; ``None`` values are ignored (unset flags)."""
        return dataclasses.replace(self, **{k: v for k, v in changes.items() if v is not None})

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any], source: str = "agent config") -> AgentConfig:
        """Validated with pydantic, as the controller's config: a wrong type, an unknown
        key (with "did you mean") or a bad value is one ConfigError line naming the key."""
        return validate_dataclass(cls, data, source)

    @classmethod
    def from_file(cls, path: str | Path) -> AgentConfig:
        return cls.from_mapping(read_yaml(Path(path), "agent config"), f"agent config {path}")
