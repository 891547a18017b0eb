"""The domain incidents' record: data key ``domains`` of the pause ConfigMap (the
breaker's ConfigMap, so no new object and no new RBAC), a JSON list of the open incidents
and the last few closed (policy/domains.py encodes it).

The one reader of it (:func:`read`: the controller, ``fleetmedic plan``; :func:`require`:
``fleetmedic domain``, which wants a one-line error when there is no record to act on),
and the controller's writer (:class:`IncidentStore`), which merges what a human wrote
there meanwhile: a release by hand always wins and is never overwritten.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Sequence

from fleetmedic.adapters.cluster import Store
from fleetmedic.controller.switches import pause_configmap
from fleetmedic.errors import ConfigError, ConflictError, FleetmedicError, NotFoundError
from fleetmedic.model.config import Config
from fleetmedic.policy import domains
from fleetmedic.policy.domains import Incident

log = logging.getLogger(__name__)

CLOSED_KEPT = 20  # closed incidents kept on the record (for `domain status`)
SAVE_TRIES = 5  # writes lost to a concurrent one (409) before giving up


@dataclasses.dataclass(frozen=True)
class Record:
    ref: tuple[str, str] | None  # (namespace, name) of the pause ConfigMap; None: turned off
    incidents: tuple[Incident, ...] = ()
    version: str | None = None  # the ConfigMap's resourceVersion, for a guarded write
    found: bool = False  # the ConfigMap exists

    @property
    def open(self) -> tuple[Incident, ...]:
        return tuple(i for i in self.incidents if i.open)

    @property
    def closed(self) -> tuple[Incident, ...]:
        return tuple(i for i in self.incidents if not i.open)


def read(store: Store, cfg: Config) -> Record:
    """The record as it is (empty when the ConfigMap is off or missing)."""
    ref = pause_configmap(cfg)
    cm = store.get_config_map(*ref) if ref else None
    if cm is None:
        return Record(ref)
    raw = (cm.get("data") or {}).get(domains.RECORD_KEY)
    version = (cm.get("metadata") or {}).get("resourceVersion")
    return Record(ref, domains.decode(raw), version, True)


def require(store: Store, cfg: Config) -> Record:
    """:func:`read`, for a command that acts on the record: one-line errors when the
    pause ConfigMap is turned off (ConfigError) or missing (NotFoundError)."""
    record = read(store, cfg)
    if record.ref is None:
        raise ConfigError(
            "safety.pause_configmap is empty, so domain incidents live only in the "
            "controller's memory"
        )
    if not record.found:
        raise NotFoundError(
            f"ConfigMap {cfg.safety.pause_configmap} not found (ship "
            "deploy/controller/configmap.yaml)"
        )
    return record


class IncidentStore:
    """The controller's side of the record: read at start, on becoming leader and while
    incidents are open (for releases by hand); written when one opens, closes or its
    playbook moves on."""

    def __init__(self, cfg: Config, store: Store, *, dry_run: bool) -> None:
        self.cfg, self.store, self.dry_run = cfg, store, dry_run

    def read(self) -> Record:
        return read(self.store, self.cfg)

    def save(self, mine: Sequence[Incident], still_open: str | None = None) -> bool:
        """``mine`` (the last closed ones, then the open ones) on the record, merged with
        what a human wrote there meanwhile (a release wins: it is never overwritten).
        True when written, and (``still_open``: an incident's id) that incident was not
        released by hand meanwhile: what a domain playbook needs before it starts."""
        ref = pause_configmap(self.cfg)
        if ref is None or self.dry_run:
            return False
        for _ in range(SAVE_TRIES):
            try:
                there = self.read()
                by_hand = {i.id: i for i in there.closed}
                merged = [by_hand.get(i.id, i) for i in mine]
                raw = domains.encode(merged)
                self.store.patch_config_map_data(*ref, {domains.RECORD_KEY: raw}, there.version)
                return still_open not in by_hand
            except ConflictError:
                continue
            except FleetmedicError as exc:
                log.warning(
                    "domain incidents kept in memory only, a restart forgets them (%s); ship "
                    "the ConfigMap of deploy/controller/configmap.yaml",
                    exc,
                )
                return False
        return False
