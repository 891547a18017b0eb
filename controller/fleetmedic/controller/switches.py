"""The pause ConfigMap (``safety.pause_configmap``): the pause switch and the breaker's record.

One small read serves both: the pause switch (``data.pause: "true"`` or the
``fleetmedic.io/pause`` annotation; ``safety.pause`` in config also pauses) and the
circuit breaker's :class:`~fleetmedic.policy.breaker.Record` (``data.breaker``). The
controller may get and patch this one ConfigMap, never create it: deploy/controller
ships it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from fleetmedic.adapters.cluster import Cluster
from fleetmedic.errors import FleetmedicError
from fleetmedic.model import keys
from fleetmedic.model.config import Config
from fleetmedic.policy import breaker

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Switches:
    paused: str | None = None  # why all action is paused, or None
    breakers: Mapping[str, breaker.Record] = field(default_factory=dict)  # data key -> record

    def breaker_of(self, profile: str = "default") -> breaker.Record | None:
        """``profile``'s breaker record, if there is one."""
        return self.breakers.get(breaker.record_key(profile))


def pause_configmap(cfg: Config) -> tuple[str, str] | None:
    """(namespace, name) of the pause ConfigMap, or None when config turned it off."""
    return cfg.safety.pause_ref()


def read_switches(cluster: Cluster, cfg: Config) -> Switches:
    config_pause = "paused by config (safety.pause)" if cfg.safety.pause else None
    ref = pause_configmap(cfg)
    cm = cluster.get_config_map(*ref) if ref else None
    if cm is None:
        return Switches(config_pause)
    ann = (cm.get("metadata") or {}).get("annotations") or {}
    data = cm.get("data") or {}
    paused = config_pause
    if not paused and (
        ann.get(keys.ANN_PAUSE) == "true" or str(data.get("pause", "")).lower() == "true"
    ):
        paused = f"paused by ConfigMap {cfg.safety.pause_configmap}"
    records = {
        key: breaker.Record.decode(value)
        for key, value in data.items()
        if key == breaker.RECORD_KEY or key.startswith(breaker.RECORD_KEY + ".")
    }
    return Switches(paused, {k: r for k, r in records.items() if r is not None})


class SwitchReader:
    """The pause ConfigMap, read at most every ``every`` seconds, and only when asked (the
    loop asks when there is something to admit, so an idle fleet costs no API call).
    Unreadable means paused: acting blind on a switch a human may have thrown is worse."""

    def __init__(
        self,
        cluster: Cluster,
        cfg: Config,
        every: float = 5.0,
        on_read: Callable[[Switches], None] = lambda s: None,
    ) -> None:
        self.cluster, self.cfg, self.every, self.on_read = cluster, cfg, every, on_read
        self._read: tuple[float, Switches] = (0.0, Switches())  # (monotonic time, what)

    def get(self) -> Switches:
        at, switches = self._read
        if at and time.monotonic() - at < self.every:
            return switches
        try:
            switches = read_switches(self.cluster, self.cfg)
        except FleetmedicError as exc:
            log.warning("cannot read the pause switch (%s); holding all action", exc)
            switches = Switches(f"pause switch unreadable: {exc}")
        self._read = (time.monotonic(), switches)
        self.on_read(switches)
        return switches
