"""The ``kind`` of a cluster and, for ``kind: slurm``, how the controller reaches it.

    kind: slurm
    slurm:
      conf: /etc/slurm/slurm.conf        # SLURM_CONF for sinfo/scontrol/squeue on the bastion
      partitions: [gpu]                  # which nodes the controller manages; [] = all
      reason_prefix: "fleetmedic:"       # the drain reasons we own (the agents' must match)
      poll_interval: 30s                 # one `sinfo --json` per interval
      state_dir: /var/lib/fleetmedic/slurm

On Slurm the repair taint is a drain with our reason and the node's repair record is its
Extra field (adapters/slurm.py says why Extra). What the loop keeps in ConfigMaps and
Leases on Kubernetes (the pause switch, breakers, the leader and node Leases) goes to a
file store under ``state_dir`` (adapters/filestore.py). Controllers of one cluster on
several bastions share that directory (NFS, as Slurm's HA shares StateSaveLocation): one
acts, a standby takes over with the same Leases, pause switch and breaker; one with a
directory of its own refuses to start (docs/slurm.md, "One acting controller").
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator

from fleetmedic.model.config.types import ConfigPath, Duration, Section
from fleetmedic.model.slurmreason import DEFAULT_PREFIX, check_prefix

ClusterKind = Literal["kubernetes", "slurm"]

DEFAULT_POLL = 30.0
"""One `sinfo --json` every 30 s: a read is two slurmctld RPCs (node info and partition
info) at any node count, so an idle controller adds 4 RPCs a minute, inside the issue's
budget of 6 with room for the reads a repair makes (bench/slurm_idle_rpc.py measured 6.00
a minute at a 20 s poll, at 2,000 nodes as at 200). A drain by an agent is acted on within
the poll; repairs take minutes."""


class SlurmConfig(Section):
    conf: ConfigPath | None = None
    """The cluster's slurm.conf, as ``SLURM_CONF`` for the Slurm client tools on this
    bastion. Unset: the environment's SLURM_CONF, else Slurm's built-in default."""
    partitions: tuple[str, ...] = ()
    """The nodes the controller manages: those in any of these partitions. Empty: every
    node slurmctld knows (the base of every percentage, as `kube.label_selector`)."""
    reason_prefix: str = DEFAULT_PREFIX
    """The drain reasons we own. A drain whose reason does not start with it is someone
    else's (NHC, HyperPod, soperator, Slinky, a person): never touched, never resumed."""
    poll_interval: Duration = Field(DEFAULT_POLL, gt=0)
    """How often the node list is read (Slurm has no watch). Lower reacts sooner to an
    agent's drain and costs slurmctld two RPCs per read."""
    timeout: Duration = Field(30.0, gt=0)
    """Longest wait for one Slurm tool (an unreachable slurmctld makes sinfo give up by
    itself after about 9 s)."""
    state_save_location: Path | None = None
    """Where slurmctld saves its state (its StateSaveLocation, as this bastion mounts it).
    A disruptive phase (reset, reboot, power cycle, reinstall) starts only once the node's
    record saying it began is in the node_state file there, so a slurmctld crash cannot
    lose that record and make us repeat the phase. Unset: ask slurmctld (``scontrol show
    config``). Where the file cannot be read (another host, not root or SlurmUser), the
    phase waits 6 s after its record instead, Slurm's save interval (adapters/slurmsave.py)."""
    state_dir: Path = Path("/var/lib/fleetmedic/slurm")
    """The file store for what Kubernetes keeps in ConfigMaps and Leases (see the module
    doc): the same shared directory on every bastion of the cluster. With `clusters:`,
    each Slurm cluster gets `<state_dir>/<cluster>`."""

    @field_validator("reason_prefix")
    @classmethod
    def _prefix(cls, v: str) -> str:
        return check_prefix(v)

    @field_validator("partitions")
    @classmethod
    def _names(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        bad = [p for p in v if not p or any(c in p for c in ", \t\n")]
        if bad:
            raise ValueError(f"partition names are single words, got {bad[0]!r}")
        return v
