"""The GPUs' fault history in the controller's store: one key of the pause ConfigMap (the
file store's on a Slurm fleet), beside the breaker's, the domains' and the replacements'
records.

Why there and not only on the Node (model/gpus.py has the whole argument): a node that
is replaced or renamed takes its annotations with it, and a GPU moved to another node
must keep its past. Writes are read-modify-write guarded by the ConfigMap's
resourceVersion and idempotent (an incident is keyed by GPU, node, episode and family),
so a controller killed between the Node's write and this one only leaves the store one
write behind: the node's own record carries the incident, and the next diagnose of that
node writes it again.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from datetime import datetime, timedelta

from fleetmedic.adapters.cluster import Cluster
from fleetmedic.controller.switches import pause_configmap
from fleetmedic.errors import ConflictError, FleetmedicError, TemporaryError
from fleetmedic.model.config import Config
from fleetmedic.model.gpus import FleetHistory, Incident
from fleetmedic.policy.history import stamp

log = logging.getLogger(__name__)

RECORD_KEY = "gpu-history"
RETENTION = 400 * 86400.0
"""Incidents are kept this long (a year and a month: the longest default window is a
year), and at most model.gpus.FLEET_BYTES of them."""
TRIES = 5


def read(cluster: Cluster, cfg: Config) -> FleetHistory:
    """The store's history; empty when there is no store (a warning says so once)."""
    ref = pause_configmap(cfg)
    if ref is None:
        return FleetHistory()
    cm = cluster.get_config_map(*ref)
    return FleetHistory.decode(((cm or {}).get("data") or {}).get(RECORD_KEY))


def record(
    cluster: Cluster, cfg: Config, incidents: Iterable[Incident], now: datetime
) -> FleetHistory:
    """Add ``incidents`` (those already there are not added twice), forget what is past
    :data:`RETENTION`, and return the whole history. TemporaryError when the store cannot
    be read or written; with no store configured, only the incidents themselves."""
    new = list(incidents)
    ref = pause_configmap(cfg)
    if ref is None:
        return FleetHistory(new)
    since = stamp(now - timedelta(seconds=max(RETENTION, cfg.ladder.lemon.longest_window())))
    for _ in range(TRIES):
        cm = cluster.get_config_map(*ref)
        if cm is None:
            raise TemporaryError(
                f"ConfigMap {cfg.safety.pause_configmap} is missing: ship "
                "deploy/controller/configmap.yaml (the GPUs' history is kept there)",
                300,
            )
        raw = (cm.get("data") or {}).get(RECORD_KEY)
        before = FleetHistory.decode(raw)
        after = before.with_(new).pruned(since)
        text = after.encode()
        if text == raw or (not new and raw is None):
            return after
        try:
            cluster.patch_config_map_data(
                *ref,
                {RECORD_KEY: text},
                resource_version=(cm.get("metadata") or {}).get("resourceVersion"),
            )
            return FleetHistory.decode(text)
        except ConflictError:
            continue
        except FleetmedicError as exc:
            raise TemporaryError(f"cannot record the GPUs' history: {exc}", 60) from None
    raise TemporaryError("the GPUs' history kept changing; trying again later", 10)
