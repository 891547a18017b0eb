"""One acting controller per Slurm cluster, across bastions: what a Slurm cluster's
controller does at start, and the guard it runs while it leads.

The design (docs/slurm.md, "One acting controller"): the leader Lease, the node Leases,
the pause switch, the breaker, domain incidents and ledgers all live in the cluster's file
store (adapters/filestore.py) under ``slurm.state_dir``, a directory every bastion of the
cluster shares, as Slurm's own HA shares its StateSaveLocation. Leases there are judged by
each controller's own clock (adapters/lease.py's Observer), so bastions whose clocks
differ cannot both lead. The acting controller also claims the cluster on slurmctld
(model/controllerclaim.py), so a controller whose store is another directory refuses to
start, in one line, instead of acting beside the leader.

:func:`prepare` is the start-up step (called once per Slurm cluster by the daemon):
the store's filesystem is checked, its identity made, the pause ConfigMap made (nobody
ships it here), and the claims on slurmctld read. It returns what the loop's Leadership
needs: observed Lease expiry and the :class:`ClaimGuard`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from fleetmedic.adapters.cluster import Cluster
from fleetmedic.adapters.filestore import FileStore, shared_problem
from fleetmedic.adapters.slurm import SlurmNode
from fleetmedic.adapters.slurmclaim import read_claims, write_claim
from fleetmedic.adapters.slurmcluster import SlurmCluster
from fleetmedic.errors import ConfigError, FleetmedicError, TemporaryError
from fleetmedic.model.config import Config
from fleetmedic.model.controllerclaim import RENEW_EVERY, Claim, conflict

log = logging.getLogger(__name__)
RETRY_FAILED_WRITE = 60.0  # seconds before a claim that could not be written is tried again


class ClaimGuard:
    """Run by Leadership after each take or renewal of the leader Lease: every
    RENEW_EVERY seconds, read the claims on slurmctld; refuse (ConfigError, one line)
    when another controller acts through another store, else write ours."""

    def __init__(
        self,
        cluster: SlurmCluster,
        store_id: str,
        identity: str,
        elected: bool,
        *,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.cluster, self.store_id = cluster, store_id
        self.identity, self.elected = identity, elected
        self.clock, self.monotonic = clock, monotonic
        self._due = 0.0
        self.written_on: str | None = None  # the node our claim is on, once written

    def _refusal(self, nodes: list[SlurmNode]) -> str | None:
        return conflict(
            read_claims(nodes),
            store=self.store_id,
            holder=self.identity,
            elected=self.elected,
            now=self.clock(),
        )

    def check(self) -> None:
        """ConfigError when another controller's fresh claim forbids acting."""
        why = self._refusal(self.cluster.slurm.nodes(self.cluster.partitions or None))
        if why:
            raise ConfigError(why)

    def __call__(self) -> None:
        if self.monotonic() < self._due:
            return
        nodes = self.cluster.slurm.nodes(self.cluster.partitions or None)
        why = self._refusal(nodes)
        if why:
            raise ConfigError(f"stopped acting: {why}")
        claim = Claim(self.store_id, self.identity, self.elected, self.clock())
        try:
            node = write_claim(self.cluster.slurm, nodes, claim)
        except FleetmedicError as exc:
            # only another controller's claim stops this one; a write that failed (an Extra
            # someone changed meanwhile, slurmctld busy) is tried again in a minute
            log.warning("could not write the controller claim on slurmctld: %s", exc)
            self._due = self.monotonic() + RETRY_FAILED_WRITE
            return
        if node != self.written_on:
            log.info("claimed this Slurm cluster for store %s on node %s", self.store_id[:8], node)
            self.written_on = node
        self._due = self.monotonic() + RENEW_EVERY


def prepare(cfg: Config, cluster: Cluster, identity: str) -> dict[str, Any]:
    """The start-up step of a Slurm cluster's controller (see the module doc); returns
    the Controller's Leadership options (``observe_leases``, ``leader_guard``). A store
    two bastions cannot share, or another controller acting through another store: one
    ConfigError line. slurmctld unreachable: the claims are read before the first action
    instead (the guard runs before a new leader acts)."""
    if not isinstance(cluster, SlurmCluster) or not isinstance(cluster.store, FileStore):
        return {}
    store = cluster.store
    problem = shared_problem(store.root)
    if problem:
        raise ConfigError(f"slurm.state_dir: {problem}")
    ref = cfg.safety.pause_ref()
    if ref:
        # nobody ships the pause ConfigMap here, and the breaker, domains and the
        # replacements ledger patch it with a resourceVersion: made empty at start
        store.ensure_config_map(*ref)
    guard = ClaimGuard(cluster, store.store_id(), identity, cfg.leader_election.enabled)
    try:
        guard.check()
    except TemporaryError as exc:
        log.warning(
            "could not read the controller claims on slurmctld (%s): read again "
            "before the first action",
            exc,
        )
    except ConfigError as exc:
        raise ConfigError(f"refusing to start: {exc}") from None
    return {"observe_leases": True, "leader_guard": guard}
