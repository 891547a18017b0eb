"""The replace rung's day on the pause ConfigMap: reserve a replacement before the hand-off.

The policy (what counts, when a slot frees up) is :mod:`fleetmedic.policy.replacements`;
this is its I/O: read the record, reserve, write it back guarded by the ConfigMap's
resourceVersion (two hand-offs at once cannot both take the last slot), all before the
node is handed to the cloud, so a restart mid-way never hands over more than the day
allows.
"""

from __future__ import annotations

import threading
from datetime import datetime

from fleetmedic.adapters.cluster import Cluster
from fleetmedic.controller.switches import pause_configmap
from fleetmedic.errors import ConflictError, FleetmedicError, TemporaryError
from fleetmedic.model.config import Config
from fleetmedic.policy import replacements
from fleetmedic.policy.replacements import Reservation

_lock = threading.Lock()  # this process's hand-offs reserve one at a time
TRIES = 5


def reserve(
    cluster: Cluster, cfg: Config, profile: str, node: str, ep: int, now: datetime
) -> Reservation:
    """Reserve ``node``'s replacement in ``profile``'s day (``cfg``: that profile's
    config). Raises TemporaryError when the record cannot be read or written: without it
    the limit cannot be kept, so nothing is handed over."""
    ref = pause_configmap(cfg)
    if ref is None:
        raise TemporaryError(
            "safety.pause_configmap is off: the day's replacements have nowhere to be kept", 300
        )
    key = replacements.record_key(profile)
    limit = cfg.safety.max_replacements_per_day
    with _lock:
        for _ in range(TRIES):
            cm = cluster.get_config_map(*ref)
            if cm is None:
                raise TemporaryError(
                    f"ConfigMap {cfg.safety.pause_configmap} is missing: ship "
                    "deploy/controller/configmap.yaml (the replace rung keeps its day there)",
                    300,
                )
            try:
                entries = replacements.decode((cm.get("data") or {}).get(key))
            except ValueError as exc:
                where = cfg.safety.pause_configmap
                raise TemporaryError(f"ConfigMap {where}: {exc}", 300) from None
            got = replacements.reserve(entries, node, ep, limit, now)
            if not got.changed:
                return got
            try:
                cluster.patch_config_map_data(
                    *ref,
                    {key: replacements.encode(got.entries)},
                    resource_version=(cm.get("metadata") or {}).get("resourceVersion"),
                )
                return got
            except ConflictError:
                continue
            except FleetmedicError as exc:
                raise TemporaryError(f"cannot record the replacement: {exc}", 60) from None
    raise TemporaryError("the replacements record kept changing; trying again later", 10)
